"""The agent as its users run it: `kora agent` processes, inline `kora mcp` tools end to end, memory endpoints."""

import subprocess

import httpx
import pytest

from kora.core.net import free_port
from kora.mcp.app import create_app as create_mcp_app
from kora.mcp.settings import load_mcp_settings
from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.agent import running_agent
from tests.support.processes import KORA, kora_environ, kora_process
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


def run_kora_agent(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KORA, "agent"], env=kora_environ(env), capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, ["AGENT_NAME", "MODEL_API_URL", "MODEL_NAME"]),
        (
            {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m", "AGENT_PORT": "abc"},
            ["AGENT_PORT"],
        ),
        (
            {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m", "AGENT_SUB_AGENTS": "helper"},
            ["AGENT_SUB_AGENTS"],
        ),
        (
            {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m", "MEMORY_STORE_ENDPOINT": "s:80"},
            ["MEMORY_STORE_ENDPOINT"],
        ),
        (
            {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m", "MEMORY_MAX_READ_SCOPE": "user"},
            ["MEMORY_MAX_READ_SCOPE"],
        ),
        (
            # Checked by the telemetry's set-up, which runs as the app is built: read before the server listens.
            {"AGENT_NAME": "a", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m", "OTEL_EXPORTER_OTLP_ENDPOINT": "c"},
            ["OTEL_EXPORTER_OTLP_ENDPOINT"],
        ),
    ],
)
def test_bad_configuration_stops_start_up_with_one_message_and_no_traceback(env, named):
    # At INFO uvicorn says when it listens: a bad setting stops the agent before it serves anything, /health too.
    done = run_kora_agent({"AGENT_LOG_LEVEL": "INFO", "AGENT_PORT": str(free_port())} | env)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "Uvicorn running" not in done.stderr
    for variable in named:
        assert variable in done.stderr


def test_blank_variables_count_as_unset_and_the_defaults_apply():
    # docs/configuration.md: a variable set but empty or blank counts as not set (a manifest's `value: ""`).
    # Each of these, blank, was refused (exit 2) or kept as given instead of its default.
    port = free_port()
    env = {
        "AGENT_NAME": "blanks",
        "MODEL_API_URL": "http://127.0.0.1:9/v1",
        "MODEL_NAME": "m",
        "AGENT_HOST": "127.0.0.1",
        "AGENT_PORT": str(port),
        "MEMORY_TOOLS": "",
        "AGENT_LOG_LEVEL": "",
        "TOOL_APPROVAL_TIMEOUT_SECONDS": " ",
        "AGENT_DESCRIPTION": " \t ",
    }
    with kora_process(["agent"], env, f"http://127.0.0.1:{port}/health"):
        card = httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=30).json()
    assert card["name"] == "blanks"
    assert card["description"] == "AI Agent"


@pytest.mark.slow
def test_kora_agent_process_serves_health_and_chats():
    # How fast /health answers is measured by bench/bench_agent.py; here only that it answers at all.
    model_port, port = free_port(), free_port()
    env = {
        "AGENT_NAME": "proc",
        "MODEL_API_URL": f"http://127.0.0.1:{model_port}/v1",
        "MODEL_NAME": "scripted",
        "AGENT_PORT": str(port),
        "AGENT_HOST": "127.0.0.1",
    }
    with (
        kora_process(["model", "--port", str(model_port)], {}, f"http://127.0.0.1:{model_port}/health"),
        kora_process(["agent"], env, f"http://127.0.0.1:{port}/health"),
    ):
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "proc", "messages": [{"role": "user", "content": "ping"}]},
            timeout=30,
        )
        assert answer.json()["choices"][0]["message"]["content"] == "You said: ping"


TOOLS = '''
import math

def hypotenuse(a: float, b: float) -> float:
    """Length of the hypotenuse of a right triangle with legs a and b."""
    return math.hypot(a, b)
'''


async def test_an_agent_calls_an_inline_kora_mcp_tool_end_to_end(model):
    model.enqueue(ToolCallReply([ToolCall("hypotenuse", {"a": 3, "b": 4})]), TextReply("It is 5."))
    mcp_settings = load_mcp_settings({"MCP_TOOLS_STRING": TOOLS})
    async with (
        ThreadedServer(create_mcp_app(mcp_settings), name="kora-mcp", lifespan="on") as tools,
        running_agent(model, MCP_SERVERS="geometry", MCP_SERVER_GEOMETRY_URL=tools.root_url) as agent,
    ):
        listed = agent.get("/tools").json()["tools"]
        assert [(t["name"], t["description"]) for t in listed] == [
            ("hypotenuse", "Length of the hypotenuse of a right triangle with legs a and b.")
        ]
        answer = agent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "3,4?"}])
        assert answer.choices[0].message.content == "It is 5."
        (result,) = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
        assert result["content"] == "5.0"


async def test_memory_endpoints_list_events_newest_last_with_limit_and_sessions(model):
    async with running_agent(model) as agent:
        client = agent.openai()
        for session, text in [("s1", "a"), ("s2", "b"), ("s1", "c")]:
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": text}], extra_headers={"X-Session-ID": session}
            )
        body = agent.get("/memory/events", session_id="s1", limit=3).json()
        assert body["agent"] == "agent"
        assert body["total"] == 4
        assert [e["content"] for e in body["events"]] == ["You said: a", "c", "You said: c"]
        assert all({"event_id", "timestamp", "event_type", "content", "metadata"} <= set(e) for e in body["events"])
        everything = agent.get("/memory/events").json()
        assert everything["total"] == 6
        assert everything["events"][-1]["content"] == "You said: c"
        sessions = agent.get("/memory/sessions").json()
        assert sessions["total"] == 2
        assert {s["session_id"]: s["event_count"] for s in sessions["sessions"]} == {"s1": 4, "s2": 2}
        bad = agent.get("/memory/events", limit="many")
        assert bad.status_code == 400
        assert "limit" in bad.json()["detail"]


async def test_memory_disabled_answers_with_empty_results_not_errors(model):
    async with running_agent(model, MEMORY_ENABLED="false") as agent:
        client = agent.openai()
        for text in ("one", "two"):
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": text}], extra_headers={"X-Session-ID": "x"}
            )
        # No history is replayed when memory is off.
        assert [m["content"] for m in model.requests[-1]["messages"] if m["role"] != "system"] == ["two"]
        assert agent.get("/memory/events", session_id="x").json()["events"] == []
        assert agent.get("/memory/sessions").json() == {"agent": "agent", "sessions": [], "total": 0}


async def test_local_memory_bounds_apply_to_the_agent(model):
    async with running_agent(model, MEMORY_MAX_SESSIONS="10", MEMORY_MAX_SESSION_EVENTS="4") as agent:
        client = agent.openai()
        for i in range(3):
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": f"t{i}"}], extra_headers={"X-Session-ID": "long"}
            )
        assert [e["content"] for e in agent.events("long")] == ["t1", "You said: t1", "t2", "You said: t2"]
        for i in range(10):
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": "x"}], extra_headers={"X-Session-ID": f"n{i}"}
            )
        ids = {s["session_id"] for s in agent.get("/memory/sessions").json()["sessions"]}
        # The 11th session evicted the oldest 10 % (1 session): "long", the least recently active.
        assert len(ids) == 10
        assert "long" not in ids
