"""Races between replicas of an agent over the shared approval journal (``TASK_STORE_TYPE=postgres``), forced
deterministically: in-process agent runtimes, each with its own connections to one real Postgres, an inline-tool
MCP server and the scripted model, whose journal (:class:`~kora.agent.a2a.paused_rows.PausedTurnRows`) is hooked so
a test holds a query at a point it chooses and lets it go on when the other side of the race has happened."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from kora.agent.a2a.paused_rows import PausedTurnRows
from kora.agent.a2a.shared import SharedTasks
from kora.agent.approval_calls import Decision
from kora.agent.approvals import PausedTurn, TaskRef
from kora.agent.runtime import AgentRuntime
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.events import EventType
from kora.memory import LocalMemory
from kora.scripted import ToolCall, ToolCallReply
from tests.support.agent import agent_settings, mcp_app
from tests.support.calc import RAN, add
from tests.support.eventually import eventually_async
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


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
    ran) back from its caller; ``after_put`` holds the next ``put()`` after its statement; ``before_update`` holds
    the next ``update()`` before its statement; ``before_take`` holds every ``take()`` before its statement. ``log``
    lists the statements run, in order."""

    def __init__(self, shared: SharedTasks, agent: str) -> None:
        super().__init__(shared, agent)
        self.after_keys: Gate | None = None
        self.after_put: Gate | None = None
        self.before_update: Gate | None = None
        self.before_take: Gate | None = None
        self.log: list[str] = []
        #: What each ``take()`` answered, in order; ``took`` is set once one answered.
        self.taken: list[bool] = []
        self.took = asyncio.Event()

    async def keys(self) -> set[str]:
        found = await super().keys()
        gate, self.after_keys = self.after_keys, None
        if gate is not None:
            await gate.stop()
        return found

    async def put(self, key: str, session_id: str, record: bytes) -> None:
        await super().put(key, session_id, record)
        gate, self.after_put = self.after_put, None
        if gate is not None:
            await gate.stop()

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
        self.took.set()
        return taken


@asynccontextmanager
async def replica(
    model: ScriptedModelServer, database: str, tools: str, memory: LocalMemory | None = None, **env: str
) -> AsyncIterator[AgentRuntime]:
    """A started runtime of agent ``a`` whose ``calc/add`` calls wait for approval, its journal a :class:`HookedRows`
    in ``database`` over connections of its own (as another replica's process would have); ``memory``: the one
    its replicas share (else its own)."""
    shared = await asyncio.to_thread(SharedTasks.open, database, 30.0, 3600.0)
    env = {"MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": tools, "TOOL_APPROVAL_REQUIRED": "calc/add", **env}
    runtime = AgentRuntime(agent_settings(model, "a", **env), memory or LocalMemory())
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


async def test_a_load_while_a_turn_of_this_process_is_being_written_leaves_it_to_this_process(model, memory_db, calc):
    """A load (a restart's, or a sync's second query) that reads the row of a turn pausing here, written but not yet
    held, takes up nothing: the turn is this process's, and it is held once, with its resumer, when its write ends."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with replica(model, memory_db, calc) as runtime:
        gate = Gate()
        rows_of(runtime).after_put = gate
        turn = asyncio.create_task(runtime.run(TurnRequest("s", "add them")))
        await gate.reached.wait()  # the row is in the journal, the turn not yet held here
        assert rows_kept(memory_db) == 1
        assert await runtime.load_paused() == 0
        assert runtime.approvals.in_session("s") is None
        gate.opened.set()
        answer = await turn
        assert answer.finish_reason == "tool_calls"
        paused = runtime.approvals.in_session("s")
        assert paused is not None
        assert [p.key for p in runtime.approvals.paused_turns()] == [paused.key]
        [approval] = runtime.approvals.pending("s")
        outcome = await runtime.resume(runtime.decide(approval.id, Decision(True), None))
        assert outcome is not None
        assert outcome.text == "The sum is 3."
    assert RAN == [{"a": 1, "b": 2}]
    assert rows_kept(memory_db) == 0


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def answered(memory: LocalMemory, session_id: str) -> None:
    """Wait until the session stores an answer after a tool result: the resumed turn ended."""

    async def ended() -> bool:
        kinds = [e.event_type for e in await memory.get_session_events(session_id)]
        return EventType.TOOL_RESULT in kinds and kinds[-1] == EventType.AGENT_RESPONSE

    await eventually_async(ended, f"the resumed turn of {session_id} ended")


async def test_a_decisions_write_lands_before_the_turn_is_taken(model, memory_db, calc):
    """The first call's decision is written in the background, and that write is held before its statement while
    the second call's decision resumes the turn: the take waits for the write, so the row goes after it and no
    replica finds the turn again. Both calls run once."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})]), "Both added.")
    async with replica(model, memory_db, calc) as runtime:
        assert (await runtime.run(TurnRequest("s", "add twice"))).finish_reason == "tool_calls"
        first, second = runtime.approvals.pending("s")
        rows = rows_of(runtime)
        write = Gate()
        rows.before_update = write
        runtime.decide(first.id, Decision(True), None)
        await write.reached.wait()  # the first decision's write, held before its statement

        entered = asyncio.Event()
        take = runtime.take

        async def entering(paused: PausedTurn) -> None:
            entered.set()
            await take(paused)

        runtime.take = entering  # type: ignore[method-assign]
        paused = runtime.decide(second.id, Decision(True), None)
        assert paused.decided
        resumed = asyncio.create_task(runtime.resume(paused))
        await entered.wait()  # the resumed turn takes itself from the journal: waiting for the write, or not
        if "take requested" in rows.log:
            await rows.took.wait()  # it did not wait: the held write lands after the take
        write.opened.set()
        outcome = await resumed
        assert outcome is not None
        assert outcome.text == "Both added."
        assert rows.log == ["update", "take requested", "taken"]
    assert rows_kept(memory_db) == 0
    async with replica(model, memory_db, calc) as other:
        assert other.approvals.pending() == []
    assert RAN == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert len(model.requests) == 2


async def test_two_replicas_expiring_the_same_turn_together_resume_it_once(model, memory_db, calc):
    """A turn of two calls pauses on one replica, the first call approved there; the other replica loads it. The
    second call expires on both, and both takes are held until both replicas are at them, then let go together:
    one takes the turn, the other loses it; the turn resumes once and the approved call runs once."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})]), "One added.")
    memory = LocalMemory()
    async with (
        replica(model, memory_db, calc, memory, TOOL_APPROVAL_TIMEOUT_SECONDS="1") as one,
        replica(model, memory_db, calc, memory, TOOL_APPROVAL_TIMEOUT_SECONDS="1") as two,
    ):
        gates = [Gate(), Gate()]
        rows_of(one).before_take, rows_of(two).before_take = gates
        assert (await one.run(TurnRequest("s", "add twice"))).finish_reason == "tool_calls"
        paused = one.approvals.in_session("s")
        assert paused is not None
        one.decide(paused.approvals[0].id, Decision(True), None)  # no await since the pause: before its expiry
        assert paused.written is not None
        await paused.written  # the decision is in the journal
        await two.sync_paused()
        # Each replica expires the second call and holds at its take (the row stays until one is let go).
        await gates[0].reached.wait()
        await gates[1].reached.wait()
        for gate in gates:
            gate.opened.set()
        await rows_of(one).took.wait()
        await rows_of(two).took.wait()
        assert sorted(rows_of(one).taken + rows_of(two).taken) == [False, True]
        await answered(memory, "s")
    assert rows_kept(memory_db) == 0
    assert RAN == [{"a": 1, "b": 2}]
    assert len(model.requests) == 2
    assert tool_messages(model.requests[1]) == [
        "3",
        "Error: the call was rejected: nobody approved the call within 1 seconds",
    ]


async def test_paused_turns_of_no_running_agent_are_deleted_after_the_retention(memory_db):
    """Paused turns of an agent that no longer runs (its Agent deleted): any agent process on the database deletes
    those whose calls expired longer than the retention (an hour at least) ago, and keeps the others."""
    shared = await asyncio.to_thread(SharedTasks.open, memory_db, 1.5, 1.0)
    now = time.time()
    with psycopg.connect(memory_db) as connection:
        for key, expires in (("appr_old", now - 5400), ("appr_waiting", now - 1800)):
            record = json.dumps({"approvals": [{"id": key, "expires_at": now - 7200}, {"expires_at": expires}]})
            connection.execute(
                "INSERT INTO kora_a2a.paused_turns (id, agent, session_id, record) VALUES (%s, 'gone', 's', %s)",
                (key, record),
            )
    await shared.start()
    try:
        # The deletion runs every third of the lease (0.5 s here).
        await eventually_async(lambda: kept_ids(memory_db) == ["appr_waiting"], "only the waiting turn kept", every=0.1)
    finally:
        await shared.close()


def kept_ids(database: str) -> list[str]:
    with psycopg.connect(database) as connection:
        return [str(row[0]) for row in connection.execute("SELECT id FROM kora_a2a.paused_turns ORDER BY id")]
