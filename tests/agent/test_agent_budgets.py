"""Turn budgets (``BUDGET_MAX_*``): each kind ends a real agent's turn before the step it would exceed, over chat
(``finish_reason: "length"``) and A2A (task ``failed``), with the steps that ran stored and the error event naming
the budget; a budget given by a delegating agent (``kora.budget``) binds the peer; and a loop of delegations across
three agents ends within the first agent's budget."""

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from kora.agent.app import create_app
from kora.core.net import free_port
from kora.scripted import TextReply, ToolCall, ToolCallReply
from kora.scripted.model import ScriptedModel
from kora.scripted.model import create_app as create_model_app
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import RunningAgent, agent_settings, mcp_app, running_agent
from tests.support.eventually import eventually
from tests.support.processes import clean_env, kora_process, prometheus
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def chat(agent: RunningAgent, session: str) -> Any:
    return agent.openai().chat.completions.create(
        model="a", messages=[{"role": "user", "content": "loop"}], extra_headers={"X-Session-ID": session}
    )


def a2a_task(agent: RunningAgent, context: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    params = message_params("loop", context)
    if metadata is not None:
        params["message"]["metadata"] = metadata
    body = httpx.post(agent.url, json=rpc_body("message/send", params), timeout=60).json()
    assert "result" in body, body
    return body["result"]


def tool_loop(count: int) -> list[ToolCallReply]:
    return [ToolCallReply([ToolCall("add", {"a": 1, "b": i})]) for i in range(count)]


@asynccontextmanager
async def calc_agent(model: ScriptedModelServer, **env: str) -> AsyncIterator[RunningAgent]:
    """An agent on ``model`` with the ``calc`` tool server (its ``add`` tool) and the settings ``env``."""
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url, **env) as agent,
    ):
        yield agent


@pytest.mark.parametrize(
    ("budget", "env", "requests", "events"),
    [
        # One tool call ran; the second answer's call is stored (the model made it) but never ran.
        ("tool_calls", {"BUDGET_MAX_TOOL_CALLS": "1"}, 2, ["tool_call", "tool_result", "tool_call"]),
        ("model_requests", {"BUDGET_MAX_MODEL_REQUESTS": "2"}, 2, ["tool_call", "tool_result"] * 2),
        # The scripted model reports tokens (it counts words): after the first answer, the 1 token is spent, so
        # its tool call does not run either (every budget is checked before each model request and tool call).
        ("tokens", {"BUDGET_MAX_TOKENS": "1"}, 1, ["tool_call"]),
        # A dollar a token: the first request spends more than half a dollar.
        (
            "cost_usd",
            {
                "BUDGET_MAX_COST_USD": "0.5",
                "MODEL_PRICE_INPUT_PER_MILLION": "1000000",
                "MODEL_PRICE_OUTPUT_PER_MILLION": "1000000",
            },
            1,
            ["tool_call"],
        ),
    ],
)
async def test_each_budget_ends_the_turn_before_the_step_it_would_exceed(model, budget, env, requests, events):
    model.enqueue(*tool_loop(4), *tool_loop(4))
    async with calc_agent(model, **env) as agent:
        answer = chat(agent, "c")
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content.startswith(f"budget_exhausted: {budget}")
        assert len(model.requests) == requests
        # The usage is what the requests that ran really cost.
        assert answer.usage.prompt_tokens > 0
        stored = agent.events("c")
        assert [e["event_type"] for e in stored] == ["user_message", *events, "error"]
        assert stored[-1]["content"]["error_type"] == "budget_exhausted"
        assert stored[-1]["content"]["message"].startswith(f"budget_exhausted: {budget}")

        task = a2a_task(agent, "t")
        assert task["status"]["state"] == "failed"
        assert task["status"]["message"]["parts"][0]["text"].startswith(f"budget_exhausted: {budget}")
        spent = task["status"]["message"]["metadata"]["kora.spent"]
        assert spent["model_requests"] == requests
        assert not task.get("artifacts")
        assert agent.event_types("t") == ["user_message", *events, "error"]


async def nap(seconds: float) -> str:
    """Sleep ``seconds``, then answer."""
    await asyncio.sleep(seconds)
    return "rested"


def streamed_chat(agent: RunningAgent, session: str) -> tuple[str, str | None]:
    """A streamed chat turn: its text and last finish_reason."""
    text, finish = "", None
    stream = agent.openai().chat.completions.create(
        model="a", messages=[{"role": "user", "content": "go"}], stream=True, extra_headers={"X-Session-ID": session}
    )
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


async def test_the_seconds_budget_cuts_a_model_request_still_running_at_the_deadline(model):
    """A model answer that takes far longer than the turn's seconds (20 s against 3): the request is cut at the
    deadline, the turn ends as a spent budget (chat streamed and not, A2A), and the late answer never arrives; so is
    a streamed answer whose next chunk comes too late."""
    late = TextReply("finally done", delay_seconds=20)
    slow = TextReply("begun and never finished", chunks=["begun", " and never finished"], chunk_delay_seconds=20)
    model.enqueue(late, late, slow, late)
    async with running_agent(model, BUDGET_MAX_SECONDS="3") as agent:
        answer = chat(agent, "m")
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content.startswith("budget_exhausted: seconds")
        stored = agent.events("m")
        assert [e["event_type"] for e in stored] == ["user_message", "error"]
        assert stored[-1]["content"]["error_type"] == "budget_exhausted"

        text, finish = streamed_chat(agent, "s")
        assert finish == "length"
        assert text.startswith("budget_exhausted: seconds")
        assert "finally" not in text
        assert agent.event_types("s") == ["user_message", "error"]

        # Cut mid-answer: what was streamed stays with the client, the cut answer is not stored.
        text, finish = streamed_chat(agent, "cut")
        assert finish == "length"
        assert text.startswith("begun")
        assert "budget_exhausted: seconds" in text
        assert "never finished" not in text
        assert agent.event_types("cut") == ["user_message", "error"]

        task = a2a_task(agent, "t")
        assert task["status"]["state"] == "failed"
        assert task["status"]["message"]["parts"][0]["text"].startswith("budget_exhausted: seconds")
        assert agent.event_types("t") == ["user_message", "error"]


async def test_the_seconds_budget_cuts_a_tool_call_still_running_at_the_deadline(model):
    """A tool call that takes far longer than the turn's seconds (20 s against 3): the call is cut at the
    deadline, the turn ends as a spent budget, and the call is stored without a result (it never returned)."""
    model.enqueue(ToolCallReply([ToolCall("nap", {"seconds": 20})]), TextReply("rested well"))
    async with (
        ThreadedServer(mcp_app("sleepy", [nap]), name="sleepy", lifespan="on") as sleepy,
        running_agent(
            model, MCP_SERVERS="sleepy", MCP_SERVER_SLEEPY_URL=sleepy.root_url, BUDGET_MAX_SECONDS="3"
        ) as agent,
    ):
        answer = chat(agent, "c")
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content.startswith("budget_exhausted: seconds")
        assert len(model.requests) == 1
        assert answer.usage.prompt_tokens > 0  # the request that ran
        assert agent.event_types("c") == ["user_message", "tool_call", "error"]


async def test_a_budget_given_in_a2a_metadata_binds_the_peer(model):
    """A deadline already past ends the task before any model request; a count given is the smaller one."""
    model.enqueue(*tool_loop(4))
    async with calc_agent(model, BUDGET_MAX_MODEL_REQUESTS="3") as agent:
        past = a2a_task(agent, "late", {"kora.budget": {"deadline": "2000-01-01T00:00:00Z"}})
        assert past["status"]["state"] == "failed"
        assert past["status"]["message"]["parts"][0]["text"].startswith("budget_exhausted: seconds")
        assert model.requests == []
        assert agent.event_types("late") == ["user_message", "error"]

        given = a2a_task(agent, "given", {"kora.budget": {"model_requests": 1, "tool_calls": 5}})
        assert given["status"]["message"]["parts"][0]["text"].startswith("budget_exhausted: model_requests")
        assert len(model.requests) == 1


@pytest.mark.parametrize(
    "budget",
    [
        "not an object",
        {"model_requests": -1},
        {"model_requests": 1.5},
        {"tool_calls": True},
        {"cost_usd": "cheap"},
        {"deadline": "tomorrow"},
        {"deadline": "2030-01-01T00:00:00"},  # no time zone
        {"steps": 3},
    ],
)
async def test_an_unreadable_budget_is_refused_before_the_task_exists(model, budget):
    async with running_agent(model) as agent:
        params = message_params("hi", "bad")
        params["message"]["metadata"] = {"kora.budget": budget}
        body = httpx.post(agent.url, json=rpc_body("message/send", params), timeout=30).json()
        assert body["error"]["code"] == -32602
        assert "kora.budget" in body["error"]["message"]
        assert model.requests == []
        assert agent.event_types("bad") == []


@pytest.mark.parametrize(
    ("budget", "env", "requests"),
    [
        # a delegates (1 of its 2 tool calls), b gets 1 and delegates, c gets none and fails; b's and then a's
        # next calls find the loop's 2 spent.
        ("tool_calls", {"BUDGET_MAX_TOOL_CALLS": "2"}, 7),
        # The scripted model counts words: 40 tokens last a's, b's and c's first requests.
        ("tokens", {"BUDGET_MAX_TOKENS": "40"}, 5),
        # c's answer takes 8 s of a's 5: c's call, then b's and a's next requests find the time spent (fewer
        # requests on a machine so loaded that the time runs out before c is asked).
        ("seconds", {"BUDGET_MAX_SECONDS": "5"}, 3),
        (
            "cost_usd",
            {
                "BUDGET_MAX_COST_USD": "40",
                "MODEL_PRICE_INPUT_PER_MILLION": "1000000",
                "MODEL_PRICE_OUTPUT_PER_MILLION": "1000000",
            },
            5,
        ),
    ],
)
async def test_each_budget_kind_ends_a_delegation_loop_across_three_agents(model, budget, env, requests):
    """a -> b -> c -> a -> ...: the first agent's budget of each kind, passed on with every delegation and charged
    back, ends the loop across the agents: b was delegated to, the loop stopped long before the script ran out,
    and the first agent's answer names the budget. (``model_requests``: the test below, step by step.)"""
    servers: dict[str, ThreadedServer] = {}
    for name in "abc":
        servers[name] = ThreadedServer(None, name=f"agent-{name}", lifespan="on")  # type: ignore[arg-type]
        servers[name].port = free_port()
    after = {"a": "b", "b": "c", "c": "a"}
    for name, server in servers.items():
        peer = after[name]
        settings = {"AGENT_SUB_AGENTS": f"{peer}:http://127.0.0.1:{servers[peer].port}"}
        if name == "a":
            settings |= env
        elif budget == "cost_usd":  # the peers price their own tokens the same
            settings |= {k: v for k, v in env.items() if k.startswith("MODEL_PRICE_")}
        server.app = create_app(agent_settings(model, name, **settings))
    replies = [ToolCallReply([ToolCall(f"delegate_to_{after[n]}", {"task": "go on"})]) for n in "abc" * 6]
    if budget == "seconds":
        replies[2] = ToolCallReply(replies[2].calls, delay_seconds=8)
    model.enqueue(*replies)
    async with servers["a"] as sa, servers["b"] as sb, servers["c"] as sc:
        a, b = RunningAgent(sa, "a"), RunningAgent(sb, "b")
        for agent in (a, b, RunningAgent(sc, "c")):
            eventually(lambda agent=agent: agent.get("/ready").status_code == 200, f"{agent.name} ready")
        answer = chat(a, "loop")
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content.startswith(f"budget_exhausted: {budget}")
        assert b.event_types("loop.a")[0] == "task_delegation_received"
        # Of the 18 the script holds.
        assert len(model.requests) == requests if budget != "seconds" else len(model.requests) <= requests


async def test_a_delegation_loop_across_three_agents_ends_within_the_first_agents_budget(model):
    """a -> b -> c -> a -> ...: each model answer delegates to the next agent. Without budgets the loop would go
    on while the script lasts; with three model requests for ``a``'s turn, the whole loop makes three."""
    servers: dict[str, ThreadedServer] = {}
    for name in "abc":  # the ports first: the loop's URLs are known before any agent starts
        servers[name] = ThreadedServer(None, name=f"agent-{name}", lifespan="on")  # type: ignore[arg-type]
        servers[name].port = free_port()
    after = {"a": "b", "b": "c", "c": "a"}
    for name, server in servers.items():
        peer = after[name]
        env = {"AGENT_SUB_AGENTS": f"{peer}:http://127.0.0.1:{servers[peer].port}"}
        if name == "a":
            env["BUDGET_MAX_MODEL_REQUESTS"] = "3"
        server.app = create_app(agent_settings(model, name, **env))
    model.enqueue(*[ToolCallReply([ToolCall(f"delegate_to_{after[n]}", {"task": "go on"})]) for n in "abcabcabc"])
    async with servers["a"] as sa, servers["b"] as sb, servers["c"] as sc:
        a, b, c = RunningAgent(sa, "a"), RunningAgent(sb, "b"), RunningAgent(sc, "c")
        for agent in (a, b, c):
            eventually(lambda agent=agent: agent.get("/ready").status_code == 200, f"{agent.name} ready")
        answer = chat(a, "loop")
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content.startswith("budget_exhausted: model_requests")
        assert len(model.requests) == 3
        # a's one delegation came back with b's failure on the budget a gave it; a's own next request was refused.
        assert a.event_types("loop") == ["user_message", "delegation_request", "delegation_response", "error"]
        assert "budget_exhausted: model_requests" in a.events("loop")[2]["content"]["response"]
        # b and c each made one request and delegated once; a's second task (from c) had nothing left.
        delegated = ["task_delegation_received", "delegation_request", "delegation_response", "error"]
        assert b.event_types("loop.a") == delegated
        assert c.event_types("loop.a.b") == delegated
        assert a.event_types("loop.a.b.c") == ["task_delegation_received", "error"]
        assert a.events("loop.a.b.c")[-1]["content"]["message"].startswith("budget_exhausted: model_requests")


def test_metrics_count_exhaustions_by_budget_and_the_agents_spend(turn_path):
    """A real ``kora agent`` process (``/metrics`` is served by the process's telemetry set-up)."""
    scripted = ScriptedModel()
    scripted.enqueue(*[ToolCallReply([ToolCall("save_memory", {"content": f"fact {i}"})]) for i in range(4)])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ThreadedServer(create_model_app(scripted), name="scripted-model", lifespan="off") as model_server:
        env = clean_env(
            AGENT_NAME="spender",
            AGENT_HOST="127.0.0.1",
            AGENT_PORT=str(port),
            MODEL_API_URL=model_server.root_url + "/v1",
            MODEL_NAME="scripted",
            MEMORY_TOOLS="all",
            AGENT_DIRECT_FIRST_REQUEST=str(turn_path == "direct"),
            BUDGET_MAX_MODEL_REQUESTS="1",
            BUDGET_MAX_COST_USD="100",
            MODEL_PRICE_INPUT_PER_MILLION="1000000",
            MODEL_PRICE_OUTPUT_PER_MILLION="2000000",
        )
        with kora_process(["agent"], env, url + "/ready"):
            for session in ("m1", "m2"):
                body = {"model": "a", "messages": [{"role": "user", "content": "remember"}]}
                answer = httpx.post(
                    f"{url}/v1/chat/completions", json=body, headers={"X-Session-ID": session}, timeout=60
                )
                assert answer.json()["choices"][0]["finish_reason"] == "length"
            samples = prometheus(url + "/metrics")
    ((labels, count),) = samples["kora_agent_budget_exhausted_total"]
    assert (labels["gen_ai_agent_name"], labels["kora_budget"], count) == ("spender", "model_requests", 2)
    tokens = {labels["gen_ai_token_type"]: value for labels, value in samples["kora_agent_spend_tokens_total"]}
    usage = answer.json()["usage"]
    assert tokens == {"input": 2 * usage["prompt_tokens"], "output": 2 * usage["completion_tokens"]}
    ((labels, cost),) = [
        (k, v) for name, rows in samples.items() if name.startswith("kora_agent_spend_cost") for k, v in rows
    ]
    assert labels["gen_ai_agent_name"] == "spender"
    assert cost == pytest.approx(tokens["input"] * 1.0 + tokens["output"] * 2.0)


async def test_over_the_responses_api_a_spent_budget_is_an_incomplete_response(model):
    model.enqueue(*tool_loop(4))
    async with calc_agent(model, BUDGET_MAX_MODEL_REQUESTS="2") as agent:
        response = agent.openai().responses.create(model="a", input="loop")
        assert response.status == "incomplete"
        assert response.output_text.startswith("budget_exhausted: model_requests")
        assert len(model.requests) == 2
        # Stored as answered: the retrieved response is as incomplete, with the usage really spent.
        stored = agent.openai().responses.retrieve(response.id)
        assert (stored.status, stored.output_text) == (response.status, response.output_text)
        assert stored.usage is not None
        assert response.usage is not None
        assert stored.usage.total_tokens == response.usage.total_tokens > 0


async def test_over_ag_ui_a_spent_budget_finishes_the_run_with_finish_reason_length(model):
    model.enqueue(*tool_loop(4))
    async with calc_agent(model, BUDGET_MAX_MODEL_REQUESTS="2") as agent:
        run = {"threadId": "budget-run", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "loop"}]}
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(f"{agent.url}/ag-ui", json=run)
    assert answer.status_code == 200, answer.text
    # Server-sent events: lines end at CR, LF or CRLF.
    lines = re.split(r"\r\n|\r|\n", answer.text)
    events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("budget_exhausted: model_requests")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == {"finishReason": "length"}
    assert len(model.requests) == 2
