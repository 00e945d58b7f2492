"""Load on one ``kora agent`` process: 500 sessions at once,
10 turns each, alternating the chat endpoint and A2A ``message/send`` within each session, against ``kora
model`` (the scripted model echoes each prompt as ``You said: <prompt>``). Every session's stored events are
exactly its own prompts, each followed by its own answer, in order; every A2A task completed; the process's
resident memory stays bounded, and so do LocalMemory's sessions when more arrive than it keeps.

How many turns per second this reaches is printed, not asserted (speed is measured in bench/).

All 500 sessions are in flight at once, their turns interleaved; at most :data:`CONNECTIONS` requests are on the
wire at a time, over pooled connections idle at most :data:`IDLE_SECONDS`. With a connection per session (500
requests in the server at once) the run failed now and then on a loaded machine (2 cores shared with other suites)
with ``httpx.ReadError``: the server closed a kept-alive connection whose next request had already been sent. On
uvloop a loop iteration runs its due timers before it reads the sockets, so an iteration that outlasts uvicorn's
5 s keep-alive closes such a connection; fewer requests in flight keep each iteration short.
"""

import asyncio
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import httpx
import pytest

from kora.core.net import free_port
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import OPERATOR, OPERATOR_TOKEN
from tests.support.processes import kora_process, rss_bytes

pytestmark = pytest.mark.integration

T = TypeVar("T")

SESSIONS, TURNS = 500, 10
#: LocalMemory bounds for the run: every load session fits; the wave after it must evict.
MAX_SESSIONS, MAX_SESSION_EVENTS = 600, 2 * TURNS
EXTRA_SESSIONS = 200
#: Generous: the run's own data (5000 turns' events and tasks) is a few MB; a leak per turn would pass it.
RSS_GROWTH_LIMIT = 150 * 1024 * 1024
#: Requests on the wire at once (the agent serves them concurrently; the other sessions' turns wait their turn).
CONNECTIONS = 16
#: Seconds a pooled connection may idle before the client drops it: far below the server's 5 s keep-alive, so a
#: stalled client loop cannot hand a request to a connection the server is closing.
IDLE_SECONDS = 0.5


def prompt(session: int, turn: int) -> str:
    return f"session {session} turn {turn}"


async def chat_turn(http: httpx.AsyncClient, session: str, text: str) -> str:
    body = {"model": "load", "messages": [{"role": "user", "content": text}]}
    response = await http.post("/v1/chat/completions", json=body, headers={"X-Session-ID": session})
    assert response.status_code == 200, response.text
    assert response.headers["x-session-id"] == session
    return str(response.json()["choices"][0]["message"]["content"])


async def a2a_turn(http: httpx.AsyncClient, session: str, text: str) -> str:
    response = await http.post("/", json=rpc_body("message/send", message_params(text, context_id=session)))
    assert response.status_code == 200, response.text
    task = response.json()["result"]
    assert task["status"]["state"] == "completed", task["status"]
    assert task["contextId"] == session
    assert [part["text"] for m in task["history"] if m["role"] == "user" for part in m["parts"]] == [text]
    return "".join(part["text"] for artifact in task["artifacts"] for part in artifact["parts"])


async def run_session(http: httpx.AsyncClient, index: int, turns: int) -> None:
    """``turns`` turns of session ``load-<index>``, one after the other, even ones over chat, odd over A2A."""
    session = f"load-{index}"
    for turn in range(turns):
        text = prompt(index, turn)
        answer = await (chat_turn if turn % 2 == 0 else a2a_turn)(http, session, text)
        assert answer == f"You said: {text}"


async def all_of(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``coroutines`` concurrently in a task group; their results in order. A failure cancels the others and
    waits for them (``asyncio.gather`` left them running past the test, and their half-open connects were reported
    as coroutines never awaited)."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(coroutine) for coroutine in coroutines]
    return [task.result() for task in tasks]


async def all_events(http: httpx.AsyncClient, session: str) -> list[dict]:
    response = await http.get("/memory/events", params={"session_id": session, "limit": 1000})
    assert response.status_code == 200
    return list(response.json()["events"])


@pytest.mark.slow
async def test_500_sessions_of_10_turns_over_chat_and_a2a_keep_every_event_and_bounded_memory():
    model_port, agent_port = free_port(), free_port()
    model_url, agent_url = f"http://127.0.0.1:{model_port}", f"http://127.0.0.1:{agent_port}"
    env = {
        "AGENT_NAME": "load",
        "AGENT_HOST": "127.0.0.1",
        "AGENT_PORT": str(agent_port),
        "MODEL_API_URL": f"{model_url}/v1",
        "MODEL_NAME": "scripted",
        "MODEL_MAX_RETRIES": "0",
        "MEMORY_MAX_SESSIONS": str(MAX_SESSIONS),
        "MEMORY_MAX_SESSION_EVENTS": str(MAX_SESSION_EVENTS),
        "AGENT_ADMIN_TOKEN": OPERATOR_TOKEN,
    }
    # --max-recorded 1: the scripted model need not keep 5000 request bodies.
    model_args = ["model", "--port", str(model_port), "--max-recorded", "1"]
    with (
        kora_process(model_args, {}, f"{model_url}/health"),
        kora_process(["agent"], env, f"{agent_url}/ready") as agent,
    ):
        # Idle connections expire long before the agent's uvicorn closes them (5 s).
        limits = httpx.Limits(
            max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS, keepalive_expiry=IDLE_SECONDS
        )
        async with httpx.AsyncClient(base_url=agent_url, timeout=300, limits=limits) as http:
            # Warm up (imports, first-request paths) before the first reading, in sessions of their own.
            await all_of(run_session(http, -1 - i, 2) for i in range(20))
            before = rss_bytes(agent.pid)
            started = time.monotonic()
            await all_of(run_session(http, i, TURNS) for i in range(SESSIONS))
            elapsed = time.monotonic() - started
            after = rss_bytes(agent.pid)
            print(
                f"\n{SESSIONS * TURNS} turns in {elapsed:.1f} s ({SESSIONS * TURNS / elapsed:.0f} turns/s); "
                f"agent RSS {before / 2**20:.1f} MB before, {after / 2**20:.1f} MB after"
            )

            # Every session: its own prompts, each followed by its own answer, in order; nothing else.
            histories = await all_of(all_events(http, f"load-{i}") for i in range(SESSIONS))
            for index, events in enumerate(histories):
                expected = []
                for turn in range(TURNS):
                    text = prompt(index, turn)
                    expected += [("user_message", text), ("agent_response", f"You said: {text}")]
                assert [(e["event_type"], e["content"]) for e in events] == expected, f"session load-{index}"
            assert after - before < RSS_GROWTH_LIMIT

            # More sessions than LocalMemory keeps: the least recently active are evicted, the count stays bounded.
            await all_of(run_session(http, SESSIONS + i, 1) for i in range(EXTRA_SESSIONS))
            sessions = (await http.get("/memory/sessions", headers=OPERATOR)).json()
            assert sessions["total"] <= MAX_SESSIONS
            kept = {s["session_id"] for s in sessions["sessions"]}
            assert {f"load-{SESSIONS + i}" for i in range(EXTRA_SESSIONS)} <= kept
            assert all(s["event_count"] <= MAX_SESSION_EVENTS for s in sessions["sessions"])
            assert rss_bytes(agent.pid) - before < RSS_GROWTH_LIMIT
