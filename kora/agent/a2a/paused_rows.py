"""Paused turns in the shared task store's database (``TASK_STORE_TYPE=postgres``): the approval journal
(:class:`~kora.agent.approvals.ApprovalJournal`) of every replica of an agent.

Table ``kora_a2a.paused_turns`` (:data:`~kora.agent.a2a.shared.PAUSED_TABLE`): one row per paused turn (``id``: its
first call's approval id), with the agent's name, the session, and the turn as JSON
(:func:`~kora.agent.approval_records.paused_record`). A turn is written when it pauses and after each decision
that leaves calls waiting; it is deleted by the process that resumes it (the ``DELETE`` that finds the row wins,
so a turn resumes once however many replicas hold it) or when its session or user is erased.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, TypeVar

import psycopg

from kora.core.errors import JournalUnavailable

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow

    from kora.agent.a2a.shared import SharedTasks

_T = TypeVar("_T")


class PausedTurnRows:
    """The approval journal of agent ``agent`` in the shared task store ``shared``."""

    def __init__(self, shared: SharedTasks, agent: str) -> None:
        self._shared = shared
        self._agent = agent

    async def _run(self, work: Callable[[AsyncConnection[TupleRow]], Awaitable[_T]]) -> _T:
        """``work`` on one of the store's connections (:meth:`SharedTasks.run`, its retries); a database that stays
        unreachable (the pool's timeout, a lost connection, the store closed) raises :class:`JournalUnavailable`."""
        try:
            return await self._shared.run(work)
        except psycopg.OperationalError as error:  # psycopg_pool's PoolTimeout and PoolClosed among them
            raise JournalUnavailable(f"the shared task store's database is unreachable: {error}") from error

    async def put(self, key: str, session_id: str, record: bytes) -> None:
        """Write a paused turn's ``record`` (insert, or replace it with the decisions made so far)."""

        async def write(connection: AsyncConnection[TupleRow]) -> None:
            await connection.execute(
                "INSERT INTO paused_turns (id, agent, session_id, record) VALUES (%s, %s, %s, %s::jsonb) "
                "ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                (key, self._agent, session_id, record.decode()),
            )

        await self._run(write)

    async def update(self, key: str, record: bytes) -> bool:
        """Replace a paused turn's ``record`` when its row is still there (an ``UPDATE``, never an insert: a turn
        another process took meanwhile is not brought back); True when it was."""

        async def write(connection: AsyncConnection[TupleRow]) -> bool:
            cursor = await connection.execute(
                "UPDATE paused_turns SET record = %s::jsonb WHERE id = %s AND agent = %s",
                (record.decode(), key, self._agent),
            )
            return cursor.rowcount == 1

        return await self._run(write)

    async def take(self, key: str) -> bool:
        """Delete a paused turn's row; True when this call deleted it."""

        async def delete(connection: AsyncConnection[TupleRow]) -> bool:
            cursor = await connection.execute(
                "DELETE FROM paused_turns WHERE id = %s AND agent = %s RETURNING id", (key, self._agent)
            )
            return await cursor.fetchone() is not None

        return await self._run(delete)

    async def load(self, skip: Collection[str] = ()) -> list[bytes]:
        """The agent's paused turns' records, oldest first, but those whose id is in ``skip``."""

        async def read(connection: AsyncConnection[TupleRow]) -> list[bytes]:
            cursor = await connection.execute(
                "SELECT record::text FROM paused_turns WHERE agent = %s AND NOT (id = ANY(%s)) ORDER BY paused_at, id",
                (self._agent, list(skip)),
            )
            return [str(row[0]).encode() for row in await cursor.fetchall()]

        return await self._run(read)

    async def keys(self) -> set[str]:
        """The ids of the agent's paused turns."""

        async def read(connection: AsyncConnection[TupleRow]) -> set[str]:
            cursor = await connection.execute("SELECT id FROM paused_turns WHERE agent = %s", (self._agent,))
            return {str(row[0]) for row in await cursor.fetchall()}

        return await self._run(read)

    async def waiting_in(self, session_id: str) -> bytes | None:
        """The record of a paused turn of ``session_id`` (None: none), found by the ``(agent, session_id)`` index."""

        async def read(connection: AsyncConnection[TupleRow]) -> bytes | None:
            cursor = await connection.execute(
                "SELECT record::text FROM paused_turns WHERE agent = %s AND session_id = %s LIMIT 1",
                (self._agent, session_id),
            )
            row = await cursor.fetchone()
            return None if row is None else str(row[0]).encode()

        return await self._run(read)

    async def erase(self, *, session_id: str | None = None, user_id: str | None = None) -> int:
        """Delete every paused turn of ``session_id`` or of ``user_id`` (its record's ``turn.user_id``), whichever
        replica paused it; how many rows were deleted."""

        async def delete(connection: AsyncConnection[TupleRow]) -> int:
            cursor = await connection.execute(
                "DELETE FROM paused_turns WHERE agent = %s AND (session_id = %s OR record->'turn'->>'user_id' = %s)",
                (self._agent, session_id, user_id),
            )
            return cursor.rowcount

        return await self._run(delete)
