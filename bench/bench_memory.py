"""Benchmark of LocalMemory on the agent's hot path, against a plain-dict baseline measured in the same run.

Run: ``python bench/bench_memory.py`` (about 10 s). Prints:

* per-operation rates and the cost of one agent turn (get_or_create_session + the last 6 events + add 3 events),
  with sessions revisited (no eviction) and with always-new sessions (eviction at the 1000-session bound);
* RSS growth after 10k sessions x 20 events, each measured in a fresh subprocess: LocalMemory sized to keep
  everything, LocalMemory with its default bounds, and the unbounded plain dict.

The baseline does the same work with a ``dict`` of ``list`` behind the same async method shape, so the
difference is LocalMemory's bookkeeping (recency order, bounds, counters), not coroutine overhead.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from kora.core.events import EventType, MemoryEvent
from kora.memory import LocalMemory


class PlainDictMemory:
    """The baseline: unbounded, no recency, no counters."""

    def __init__(self) -> None:
        self.sessions: dict[str, list[MemoryEvent]] = {}

    async def get_or_create_session(self, session_id: str | None, app_name: str, user_id: str = "default") -> str:
        assert session_id is not None
        self.sessions.setdefault(session_id, [])
        return session_id

    async def get_session_events(self, session_id: str, event_types=None, limit: int | None = None):
        events = self.sessions.get(session_id, [])
        return events[-limit:] if limit else list(events)

    async def add_events(self, session_id: str, events: Sequence[MemoryEvent]) -> None:
        self.sessions.setdefault(session_id, []).extend(events)


def turn_events() -> list[MemoryEvent]:
    return [
        MemoryEvent(event_type=EventType.USER_MESSAGE, content="What is the weather in Oslo?"),
        MemoryEvent(
            event_type=EventType.TOOL_CALL,
            content={"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "call_1"},
        ),
        MemoryEvent(event_type=EventType.AGENT_RESPONSE, content="It is cold in Oslo: -3 degrees."),
    ]


async def time_loop(n: int, step: Callable[[int], Awaitable[object]]) -> float:
    """Seconds for ``n`` awaited steps (best of 3, after a warm-up)."""
    for i in range(min(n, 1000)):
        await step(i)
    best = float("inf")
    for _ in range(3):
        gc.collect()
        start = time.perf_counter()
        for i in range(n):
            await step(i)
        best = min(best, time.perf_counter() - start)
    return best


async def hot_path() -> None:
    events = turn_events()  # frozen models: storing the same three again is fine for timing
    n = 50_000
    session_ids = [f"ses_{i:06d}" for i in range(1000)]
    fresh_ids = [f"new_{i:07d}" for i in range(5 * n)]
    print(f"Hot path, {n:,} iterations per measurement, best of 3 (1000 sessions, bounds 1000 x 500)\n")
    header = f"{'operation':<46}{'LocalMemory':>16}{'plain dict':>16}{'ratio':>8}"
    print(header)
    print("-" * len(header))

    def row(label: str, local_s: float, plain_s: float, ops: int) -> None:
        local_us, plain_us = local_s / ops * 1e6, plain_s / ops * 1e6
        print(f"{label:<46}{local_us:>10.2f} µs/op{plain_us:>10.2f} µs/op{local_us / plain_us:>7.2f}x")

    local, plain = LocalMemory(), PlainDictMemory()
    for sid in session_ids:  # sessions with some history, as in steady state
        await local.add_events(sid, events * 4)
        await plain.add_events(sid, events * 4)

    async def local_goc(i: int) -> str:
        return await local.get_or_create_session(session_ids[i % 1000], "bench")

    async def plain_goc(i: int) -> str:
        return await plain.get_or_create_session(session_ids[i % 1000], "bench")

    row("get_or_create_session (existing)", await time_loop(n, local_goc), await time_loop(n, plain_goc), n)

    async def local_read(i: int) -> object:
        return await local.get_session_events(session_ids[i % 1000], limit=6)

    async def plain_read(i: int) -> object:
        return await plain.get_session_events(session_ids[i % 1000], limit=6)

    row("get_session_events(limit=6)", await time_loop(n, local_read), await time_loop(n, plain_read), n)

    async def local_add(i: int) -> None:
        await local.add_events(session_ids[i % 1000], events)

    async def plain_add(i: int) -> None:
        await plain.add_events(session_ids[i % 1000], events)

    row("add_events(3 events)", await time_loop(n, local_add), await time_loop(n, plain_add), n)

    async def local_turn(i: int) -> None:
        sid = await local.get_or_create_session(session_ids[i % 1000], "bench")
        await local.get_session_events(sid, limit=6)
        await local.add_events(sid, events)

    async def plain_turn(i: int) -> None:
        sid = await plain.get_or_create_session(session_ids[i % 1000], "bench")
        await plain.get_session_events(sid, limit=6)
        await plain.add_events(sid, events)

    local_s, plain_s = await time_loop(n, local_turn), await time_loop(n, plain_turn)
    row("agent turn (existing session)", local_s, plain_s, n)

    counter = iter(range(10**9))

    async def local_new_turn(i: int) -> None:
        sid = await local.get_or_create_session(fresh_ids[next(counter)], "bench")
        await local.get_session_events(sid, limit=6)
        await local.add_events(sid, events)

    plain_counter = iter(range(10**9))

    async def plain_new_turn(i: int) -> None:
        sid = await plain.get_or_create_session(fresh_ids[next(plain_counter)], "bench")
        await plain.get_session_events(sid, limit=6)
        await plain.add_events(sid, events)

    new_local_s, new_plain_s = await time_loop(n, local_new_turn), await time_loop(n, plain_new_turn)
    row("agent turn (new session each time, evicting)", new_local_s, new_plain_s, n)
    print(
        f"\nLocalMemory agent turns per second: {n / local_s:,.0f} (existing session), "
        f"{n / new_local_s:,.0f} (new session); sessions held after: {len(await local.list_sessions())} "
        f"(bound 1000), evicted: {local.evicted_sessions:,}; plain dict holds {len(plain.sessions):,}"
    )


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def rss_child(kind: str) -> None:
    """In a subprocess: RSS growth (KiB) from storing 10k sessions x 20 freshly built events."""
    sessions, per_session = 10_000, 20
    store: object
    if kind == "plain":
        plain: dict[str, list[MemoryEvent]] = {}
        store = plain
    elif kind == "local-all":
        store = LocalMemory(max_sessions=sessions, max_session_events=500)
    else:
        store = LocalMemory()  # defaults: 1000 sessions x 500 events
    gc.collect()
    before = rss_kib()

    async def fill() -> None:
        for s in range(sessions):
            sid = f"ses_{s:06d}"
            events = [
                MemoryEvent(event_type=EventType.USER_MESSAGE, content=f"message {i} of session {s}")
                for i in range(per_session)
            ]
            if isinstance(store, LocalMemory):
                await store.add_events(sid, events)
            else:
                plain.setdefault(sid, []).extend(events)

    asyncio.run(fill())
    gc.collect()
    held = asyncio.run(store.count_events()) if isinstance(store, LocalMemory) else sum(map(len, plain.values()))
    print(rss_kib() - before, held)


def rss_report() -> None:
    print("\nRSS growth after 10k sessions x 20 events (each in a fresh process)\n")
    results: dict[str, tuple[int, int]] = {}
    for kind in ("plain", "local-all", "local-default"):
        out = subprocess.run(
            [sys.executable, __file__, "--rss", kind], check=True, capture_output=True, text=True
        ).stdout.split()
        results[kind] = (int(out[0]), int(out[1]))
    labels = {
        "plain": "plain dict of lists (unbounded)",
        "local-all": "LocalMemory(max_sessions=10000)",
        "local-default": "LocalMemory() default bounds 1000 x 500",
    }
    for kind, (kib, held) in results.items():
        per_event = kib * 1024 / held if held else 0.0
        print(f"{labels[kind]:<42}{kib / 1024:>8.1f} MiB   {held:>7,} events held   {per_event:>6.0f} B/event")
    overhead = (results["local-all"][0] - results["plain"][0]) / 1024
    print(f"LocalMemory container overhead vs plain dict at 10k sessions: {overhead:+.1f} MiB")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--rss":
        rss_child(sys.argv[2])
        return
    start = time.perf_counter()
    asyncio.run(hot_path())
    rss_report()
    print(f"\n(total benchmark time {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
