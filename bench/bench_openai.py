"""CPU per turn of the agent's OpenAI surfaces, measured in one run against one agent (``MEMORY_TOOLS=all``):

* a Chat Completions text turn and a Responses text turn (the Responses path translates its request to the chat
  one and renders its answer with the ``openai`` package's types: the two should cost about the same), the same
  two streamed (the Responses stream is its typed events, each an SDK object), and a Responses turn that continues its
  conversation with ``previous_response_id`` (8 conversations growing to the session bound, whose stored events
  are read to check it is their latest response);
* a streamed Chat Completions text turn against an AG-UI text run (both streamed through the runtime), and an
  AG-UI run in which the model calls ``save_memory`` (its call and result streamed as events);
* a client-tool round trip: two chat requests, the first ending with the client's ``get_weather`` call, the second
  carrying its result (two model requests, both through pydantic-ai's Agent), against a server-tool turn (one
  request: the model calls ``save_memory``, the agent runs it and the model answers; two model requests).

Run: ``python bench/bench_openai.py [--turns N] [--rounds R] [--phases chat,responses,...]`` (about 1 minute on 2
cores; ``--phases`` runs the phases whose names contain one of the given words). The phases run in
``R`` interleaved rounds so that a busy neighbour slows them alike; each figure is the median over the rounds of
the agent process's CPU time per turn: the run time its threads were scheduled for
(``/proc/<pid>/task/*/schedstat``, nanoseconds, where ``utime+stime`` counts 10 ms ticks). The load comes from this
process (httpx, 8 concurrent requests), whose CPU is not counted. Each ratio is given twice: of the medians, and
the median of the rounds' ratios (the two phases of a round run one after the other, so a busy neighbour slows
both alike: on a loaded machine the steadier figure).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from bench_agent import HERE, HOST, Server, agent_env

from kora.core.net import free_port

TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CONCURRENCY = 8


async def chat_text(client: httpx.AsyncClient, n: int) -> None:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": f"hello number {n}"}],
        "session_id": f"c-{n % 200}",
    }
    answer = (await client.post("/v1/chat/completions", json=body)).json()
    assert answer["choices"][0]["message"]["content"].startswith("You said"), answer


async def responses_text(client: httpx.AsyncClient, n: int) -> None:
    body = {"model": "bench", "input": f"hello number {n}", "session_id": f"r-{n % 200}"}
    answer = (await client.post("/v1/responses", json=body)).json()
    assert answer["output"][0]["content"][0]["text"].startswith("You said"), answer


#: The latest response of each chained conversation, and per event loop (one per round) a lock per conversation
#: so that one turn at a time continues it.
_latest: dict[int, str] = {}
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Lock]] = weakref.WeakKeyDictionary()


async def responses_chained(client: httpx.AsyncClient, n: int) -> None:
    """A Responses turn continuing one of ``CONCURRENCY`` conversations with ``previous_response_id`` (the agent
    reads the conversation's stored events to check it names its latest response)."""
    chain = n % CONCURRENCY
    lock = _locks.setdefault(asyncio.get_running_loop(), {}).setdefault(chain, asyncio.Lock())
    async with lock:
        body = {"model": "bench", "input": f"hello number {n}", "previous_response_id": _latest.get(chain)}
        answer = (await client.post("/v1/responses", json=body)).json()
        assert "output" in answer, answer
        assert answer["output"][0]["content"][0]["text"].startswith("You said"), answer
        _latest[chain] = answer["id"]


async def client_tool_round_trip(client: httpx.AsyncClient, n: int) -> None:
    messages: list[object] = [{"role": "user", "content": f"client-bench {n}"}]
    first = (await client.post("/v1/chat/completions", json={"messages": messages, "tools": [TOOL]})).json()
    message = first["choices"][0]["message"]
    call = message["tool_calls"][0]
    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    second = (await client.post("/v1/chat/completions", json={"messages": messages, "tools": [TOOL]})).json()
    assert second["choices"][0]["message"]["content"] == "Tool result: sunny", second


async def server_tool_turn(client: httpx.AsyncClient, n: int) -> None:
    body = {"messages": [{"role": "user", "content": f"tool-bench {n}"}], "session_id": f"t-{n % 200}"}
    answer = (await client.post("/v1/chat/completions", json=body)).json()
    assert answer["choices"][0]["message"]["content"] == "Saved.", answer


async def chat_stream(client: httpx.AsyncClient, n: int) -> None:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": f"hello number {n}"}],
        "session_id": f"s-{n % 200}",
        "stream": True,
    }
    answer = (await client.post("/v1/chat/completions", json=body)).text
    assert answer.endswith("data: [DONE]\n\n"), answer


async def responses_stream(client: httpx.AsyncClient, n: int) -> None:
    body = {"model": "bench", "input": f"hello number {n}", "session_id": f"rs-{n % 200}", "stream": True}
    answer = (await client.post("/v1/responses", json=body)).text
    assert "event: response.completed" in answer, answer


def _run_input(prompt: str, thread: str) -> dict[str, object]:
    return {"threadId": thread, "runId": "r", "messages": [{"id": "u", "role": "user", "content": prompt}]}


async def ag_ui_text(client: httpx.AsyncClient, n: int) -> None:
    answer = (await client.post("/ag-ui", json=_run_input(f"hello number {n}", f"a-{n % 200}"))).text
    assert "TEXT_MESSAGE_CONTENT" in answer, answer
    assert "RUN_FINISHED" in answer, answer


async def ag_ui_server_tool(client: httpx.AsyncClient, n: int) -> None:
    answer = (await client.post("/ag-ui", json=_run_input(f"tool-bench {n}", f"at-{n % 200}"))).text
    assert "TOOL_CALL_RESULT" in answer, answer
    assert "RUN_FINISHED" in answer, answer


PHASES: dict[str, Callable[[httpx.AsyncClient, int], Awaitable[None]]] = {
    "chat text turn": chat_text,
    "chat text turn, streamed": chat_stream,
    "AG-UI text run": ag_ui_text,
    "responses text turn": responses_text,
    "responses text turn, streamed": responses_stream,
    "responses turn with previous_response_id": responses_chained,
    "client-tool round trip (2 requests)": client_tool_round_trip,
    "server-tool turn (1 request)": server_tool_turn,
    "AG-UI server-tool run": ag_ui_server_tool,
}


def cpu_seconds(pid: int) -> float:
    """CPU time of the process's threads, from the scheduler's per-thread run time (``schedstat``, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total / 1e9


async def drive(port: int, phase: Callable[[httpx.AsyncClient, int], Awaitable[None]], turns: int, pid: int) -> float:
    """ms of agent CPU per turn of ``phase`` over ``turns`` turns."""
    numbers = iter(range(turns))
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=60) as client:

        async def worker() -> None:
            for n in numbers:
                await phase(client, n)

        before = cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return 1000 * (cpu_seconds(pid) - before) / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phases", help="comma-separated words: run only the phases whose names contain one")
    args = parser.parse_args()
    words = args.phases.split(",") if args.phases else [""]
    phases = {name: phase for name, phase in PHASES.items() if any(word in name for word in words)}
    py = sys.executable
    model_port, agent_port = free_port(), free_port()
    model = Server(
        [py, str(HERE / "stamping_model.py")], os.environ | {"MODEL_PORT": str(model_port)}, model_port, None
    )
    env = agent_env(model_port, agent_port) | {"MEMORY_TOOLS": "all"}
    agent = Server([py, "-m", "kora.cli", "agent"], env, agent_port, "/ready")
    try:
        model.start()
        agent.start()
        figures: dict[str, list[float]] = {name: [] for name in phases}
        for phase in phases.values():  # warm-up
            asyncio.run(drive(agent_port, phase, 50, agent.pid))
        for _ in range(args.rounds):
            for name, phase in phases.items():
                figures[name].append(asyncio.run(drive(agent_port, phase, args.turns, agent.pid)))
    finally:
        agent.stop()
        model.stop()
    print(f"\nAgent CPU per turn, ms (median of {args.rounds} interleaved rounds of {args.turns} turns; all rounds)")
    for name, values in figures.items():
        print(f"  {name:40s} {statistics.median(values):6.2f}   {' '.join(f'{v:.2f}' for v in values)}")
    for label, base, other in (
        ("responses / chat", "chat text turn", "responses text turn"),
        ("streamed responses / streamed chat", "chat text turn, streamed", "responses text turn, streamed"),
        ("AG-UI / streamed chat", "chat text turn, streamed", "AG-UI text run"),
    ):
        if base in figures and other in figures:
            of_medians = statistics.median(figures[other]) / statistics.median(figures[base])
            by_round = statistics.median(o / b for o, b in zip(figures[other], figures[base], strict=True))
            print(f"  {label}: {of_medians:.2f} (median of the rounds' ratios: {by_round:.2f})")


if __name__ == "__main__":
    main()
