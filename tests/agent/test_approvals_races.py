"""Races between replicas of an agent over the shared approval journal (``TASK_STORE_TYPE=postgres``), forced
deterministically: in-process agent runtimes, each with its own connections to one real Postgres, an inline-tool
MCP server and the scripted model, whose journal (:class:`~kora.agent.a2a.paused_rows.PausedTurnRows`) is hooked so
a test holds a query at a point it chooses and lets it go on when the other side of the race has happened."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import psycopg
import pytest

from kora.agent.a2a.paused_rows import PausedTurnRows
from kora.agent.a2a.shared import SharedTasks
from kora.agent.approval_calls import Decision
from kora.agent.approvals import PausedTurn, TaskRef
from kora.agent.runtime import AgentRuntime
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.scripted import ToolCall, ToolCallReply
from tests.support.agent import agent_runtime, mcp_app
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

#: The arguments of every call the ``add`` tool ran, in order.
RAN: list[dict[str, int]] = []


def add(a: int, b: int) -> int:
    """Add two integers."""
    RAN.append({"a": a, "b": b})
    return a + b


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    RAN.clear()


@pytest.fixture
async def calc() -> AsyncIterator[str]:
    """The ``calc`` MCP server (its ``add`` tool records each call in :data:`RAN`); its URL."""
    async with ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as server:
        yield server.root_url


@dataclass
class Gate:
    """A point a hooked query stops at: ``reached`` is set when it gets there, and it goes on once ``opened``."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    async def stop(self) -> None:
        self.reached.set()
        await self.opened.wait()


class HookedRows(PausedTurnRows):
    """The journal, with gates a test may set: ``after_keys`` holds the next ``keys()`` query's answer (the query
    ran) back from its caller; ``before_update`` holds the next ``update()`` before its statement;
    ``before_take`` holds every ``take()`` before its statement. ``log`` lists the statements run, in order."""

    def __init__(self, shared: SharedTasks, agent: str) -> None:
        super().__init__(shared, agent)
        self.after_keys: Gate | None = None
        self.before_update: Gate | None = None
        self.before_take: Gate | None = None
        self.log: list[str] = []
        self.taken: list[bool] = []

    async def keys(self) -> set[str]:
        found = await super().keys()
        gate, self.after_keys = self.after_keys, None
        if gate is not None:
            await gate.stop()
        return found

    async def update(self, key: str, record: bytes) -> bool:
        gate, self.before_update = self.before_update, None
        if gate is not None:
            await gate.stop()
        self.log.append("update")
        return await super().update(key, record)

    async def take(self, key: str) -> bool:
        self.log.append("take requested")
        if self.before_take is not None:
            await self.before_take.stop()
        taken = await super().take(key)
        self.log.append("taken" if taken else "lost")
        self.taken.append(taken)
        return taken


@asynccontextmanager
async def replica(model: ScriptedModelServer, database: str, tools: str, **env: str) -> AsyncIterator[AgentRuntime]:
    """A started runtime of agent ``a`` whose ``calc/add`` calls wait for approval, its journal a :class:`HookedRows`
    in ``database`` over connections of its own (as another replica's process would have)."""
    shared = await asyncio.to_thread(SharedTasks.open, database, 30.0, 3600.0)
    runtime = agent_runtime(
        model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=tools, TOOL_APPROVAL_REQUIRED="calc/add", **env
    )
    runtime.approvals.journal = HookedRows(shared, "a")
    try:
        await runtime.start()
        yield runtime
    finally:
        await runtime.close()
        await shared.close()


def rows_of(runtime: AgentRuntime) -> HookedRows:
    journal = runtime.approvals.journal
    assert isinstance(journal, HookedRows)
    return journal


def rows_kept(database: str) -> int:
    with psycopg.connect(database) as connection:
        found = connection.execute("SELECT count(*) FROM kora_a2a.paused_turns WHERE agent = 'a'").fetchone()
    assert found is not None
    return int(found[0])


async def test_a_turn_pausing_while_the_journal_is_read_is_kept(model, memory_db, calc):
    """A sync reads the journal's keys before a turn of this process pauses, and goes on after it paused: the turn
    was not in what the sync read, yet it is no other process's to resume; it stays listed and resumes here."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with replica(model, memory_db, calc) as runtime:
        gate = Gate()
        rows_of(runtime).after_keys = gate
        sync = asyncio.create_task(runtime.sync_paused())
        await gate.reached.wait()  # the journal answered: nothing is kept
        answer = await runtime.run(TurnRequest("s", "add them"))
        assert answer.finish_reason == "tool_calls"
        assert rows_kept(memory_db) == 1
        # As A2A does: the turn waits in its task, and resumes there.
        paused = runtime.approvals.in_session("s")
        assert paused is not None
        await runtime.held_in(paused, TaskRef("task-1", "s", "owner"))
        resumed_in: list[str] = []

        async def in_its_task(turn: PausedTurn) -> TurnOutcome:
            assert turn.task is not None
            resumed_in.append(turn.task.task_id)
            return await runtime.run(turn.turn, resume=turn)

        paused.resumer = in_its_task
        gate.opened.set()
        await sync

        assert runtime.approvals.in_session("s") is paused
        [approval] = runtime.approvals.pending("s")
        assert approval.tool_name == "add"
        decided = runtime.decide(approval.id, Decision(True), None)
        outcome = await runtime.resume(decided)
        assert outcome is not None
        assert outcome.text == "The sum is 3."
        assert resumed_in == ["task-1"]
    assert RAN == [{"a": 1, "b": 2}]
    assert rows_kept(memory_db) == 0
