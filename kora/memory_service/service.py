"""The memory service's operations: :class:`MemoryService`, one method per operation of the HTTP API.

A method takes the parsed request (the bodies of :mod:`kora.memory.wire`, or typed arguments), decides what to read
and write, which background jobs to queue (:mod:`kora.memory_service.jobs`) and when to embed, and returns the
answer as a typed value. The routes (:mod:`kora.memory_service.app`) only parse, authorize, call and map errors;
the process state the operations run on (database, model clients, workers) is :mod:`kora.memory_service.runtime`'s.

Errors raised (the routes map them with the chassis's policy): :class:`~kora.core.errors.Unavailable` while the
database is not open yet or failed to open, :class:`~kora.core.errors.NotFound` for an unknown session or fact,
:class:`~kora.core.errors.Forbidden` for another user's session or a scope above the store's ceiling,
:class:`~kora.core.errors.RequestError` for a scope that lacks what it needs; psycopg's errors for a database that
refuses a value or goes away.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from kora.core.errors import NotFound, RequestError
from kora.core.events import EventType
from kora.memory import SessionInfo, new_session_id
from kora.memory.wire import (
    ContextRequest,
    ErasureList,
    EventList,
    EventsWrite,
    EventsWritten,
    FactCreate,
    FactList,
    FactWritten,
    ForgetRequest,
    ForgetResult,
    Mark,
    MemoryContext,
    RecallHit,
    RecallRequest,
    RecallResult,
    Scope,
    SessionCreate,
    SessionMetadataWrite,
)
from kora.memory_service import erasures, facts, jobs, recall, store
from kora.memory_service.database import Conn
from kora.memory_service.jobs import JobInfo
from kora.memory_service.runtime import MemoryRuntime
from kora.memory_service.settings import MemoryServiceSettings

log = logging.getLogger("kora.memory")


class MemoryService:
    """The operations of the memory service over its :class:`~kora.memory_service.runtime.MemoryRuntime`.

    Create, ``runtime.lifecycle.begin()`` (the start-up, in the background), call the operations,
    ``await runtime.close()``. Every operation waits for the database up to
    :data:`~kora.core.serving.STARTUP_WAIT_SECONDS` while the service starts.
    """

    def __init__(self, settings: MemoryServiceSettings) -> None:
        self.settings = settings
        self.runtime = MemoryRuntime(settings)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        db = await self.runtime.ready()
        assert db.pool is not None
        async with db.pool.connection() as conn:
            yield conn

    # Sessions and events (the short-term tier).

    async def create_session(self, request: SessionCreate) -> SessionInfo:
        """Get the session ``request.session_id`` (a new id when None) of ``request.app_name``, creating it for
        ``request.user_id``; :class:`~kora.core.errors.Forbidden` when it is another user's."""
        async with self._connection() as conn:
            session = await store.get_or_create_session(
                conn, request.session_id or new_session_id(), request.app_name, request.user_id
            )
        return session.info()

    async def list_sessions(self, app_name: str | None, user_id: str | None, limit: int | None) -> list[SessionInfo]:
        """Sessions of ``app_name`` (every agent's when None), of ``user_id`` when given, newest first, at most
        ``limit`` (all when None)."""
        async with self._connection() as conn:
            return await store.list_sessions(conn, app_name, user_id, limit)

    async def get_session(self, session_id: str, app_name: str) -> SessionInfo:
        """One session of ``app_name``; :class:`~kora.core.errors.NotFound` when unknown."""
        async with self._connection() as conn:
            return (await store.require_session(conn, session_id, app_name)).info()

    async def session_metadata(self, session_id: str, app_name: str) -> dict[str, str]:
        """A session's metadata (a conversation's); :class:`~kora.core.errors.NotFound` when unknown."""
        async with self._connection() as conn:
            return await store.session_metadata(conn, session_id, app_name)

    async def set_session_metadata(self, session_id: str, request: SessionMetadataWrite) -> dict[str, str]:
        """Replace a session's metadata, creating the session for ``request.user_id``; returns the metadata
        stored. :class:`~kora.core.errors.Forbidden` when the session is another user's."""
        async with self._connection() as conn, conn.transaction():
            await store.set_session_metadata(conn, session_id, request.app_name, request.user_id, request.metadata)
        return request.metadata

    async def delete_session(self, session_id: str, app_name: str) -> bool:
        """Remove a session with its events, summaries and jobs; whether there was one."""
        async with self._connection() as conn:
            return await store.delete_session(conn, session_id, app_name)

    async def add_events(self, session_id: str, request: EventsWrite) -> EventsWritten:
        """Append events to a session (created when new; idempotent per event id) and queue what they call for:
        fact extraction of a conversation's new events (long-term tier and a summary model) and a fold when the
        events that left the window are due for the rolling summary (medium tier). Events queued by a client
        before an erasure of their session or user that it had not seen (``erasures_seen``) are never stored
        (``added`` 0). :class:`~kora.core.errors.Forbidden` when the session is another user's."""
        settings, runtime = self.settings, self.runtime
        queued = False
        async with self._connection() as conn, conn.transaction():
            if request.events and await erasures.predates_erasure(
                conn,
                runtime.mark.store_id if runtime.mark is not None else "",
                Mark.parse(request.erasures_seen),
                session_id,
                request.user_id,
                min(event.timestamp for event in request.events),
            ):
                log.info("dropped %d events of session %s: they predate its erasure", len(request.events), session_id)
                return EventsWritten(session_id=session_id, added=0)
            session = await store.get_or_create_session(
                conn,
                session_id,
                request.app_name,
                request.user_id,
                request.rolling_summary,
                (request.window_events, request.window_tokens),
            )
            written = await store.add_events(conn, session, request.events)
            if written.added and written.conversation and settings.long_term_enabled and runtime.summary:
                await jobs.enqueue(
                    conn, "extract", session.sid, {"first_seq": written.first_seq, "last_seq": written.last_seq}
                )
                queued = True
            folds = settings.medium_term_enabled and runtime.summary is not None and session.rolling_summary
            if written.added and folds and await store.needs_fold(conn, session, settings):
                await jobs.enqueue(conn, "fold", session.sid)
                queued = True
        if queued:
            runtime.wake_workers()
        return EventsWritten(session_id=session_id, added=written.added)

    async def session_events(
        self, session_id: str, app_name: str, event_types: Sequence[EventType] | None, limit: int | None
    ) -> EventList:
        """A session's events of ``event_types`` (all when None), the newest ``limit`` (all when None), oldest
        first; none for an unknown session."""
        async with self._connection() as conn:
            session = await store.find_session(conn, session_id, app_name)
            if session is None:
                return EventList(events=[], total=0)
            return await store.session_events(conn, session, event_types, limit)

    async def events(self, app_name: str | None, user_id: str | None, limit: int | None) -> EventList:
        """Events across the sessions of ``app_name`` (every agent's when None), of ``user_id`` when given."""
        async with self._connection() as conn:
            return await store.app_events(conn, app_name, limit, user_id)

    async def context(self, session_id: str, request: ContextRequest) -> MemoryContext:
        """What a turn needs, in one round trip: the rolling summary, the window of recent events within
        ``max_events`` and ``token_budget``, and the facts recalled for ``query`` (long-term tier) within
        ``scope``. :class:`~kora.core.errors.Forbidden` for another user's session (before any fact is read) or a
        scope above the store's ceiling."""
        settings = self.settings
        recall_query = request.query is not None and settings.long_term_enabled
        where = (
            recall.scope_filter(request.scope, request.app_name, request.user_id, session_id, settings.max_read_scope)
            if recall_query
            else None
        )
        embedding = (
            await self.runtime.embed_one(request.query) if request.query is not None and where is not None else None
        )
        facts_found: list[RecallHit] = []
        async with self._connection() as conn:
            # The window first: it refuses another user's session before any fact is read.
            turn = await store.turn_window(
                conn, request.app_name, session_id, settings, request.max_events, request.token_budget, request.user_id
            )
            if request.query is not None and where is not None:
                top_k = request.top_k or settings.default_top_k
                facts_found = await recall.recall_facts(
                    conn, where, request.query, embedding, top_k, settings.score_threshold
                )
        return MemoryContext(summary=turn.summary, window=turn.events, facts=facts_found)

    # Facts (the long-term tier) and erasure.

    async def recall(self, request: RecallRequest) -> RecallResult:
        """The facts (and, with ``include_events``, events) best matching ``query`` within ``scope``, at most
        ``top_k``. :class:`~kora.core.errors.Forbidden` for another user's session or a scope above the ceiling."""
        settings = self.settings
        where = recall.scope_filter(
            request.scope, request.app_name, request.user_id, request.session_id, settings.max_read_scope
        )
        top_k = request.top_k or settings.default_top_k
        embedding = await self.runtime.embed_one(request.query)
        async with self._connection() as conn:
            if request.session_id is not None:
                await store.check_access(conn, request.session_id, request.app_name, request.user_id)
            hits = await recall.recall_facts(conn, where, request.query, embedding, top_k, settings.score_threshold)
            if request.include_events:
                found = await recall.recall_events(conn, where, request.query, top_k, settings.score_threshold)
                hits = recall.merge(hits, found, top_k)
        return RecallResult(hits=hits)

    async def save_fact(self, request: FactCreate) -> FactWritten:
        """Store a fact now (``save_memory``), deduplicated against the owner's facts; a stored fact gets its
        conflict check (with a summary model) and its contextual embedding later (in the background ``embed``
        job, batched), with its own embedding when the model could not be reached now.
        :class:`~kora.core.errors.Forbidden` for another user's session."""
        runtime = self.runtime
        embedding = await runtime.embed_one(request.content)
        owner = facts.Owner(request.app_name, request.user_id, request.session_id)
        async with self._connection() as conn, conn.transaction():
            if request.session_id is not None:
                await store.check_access(conn, request.session_id, request.app_name, request.user_id)
            written = await facts.write_fact(
                conn,
                request.content,
                owner,
                "saved",
                embedding,
                request.attribution,
                supersede_corrections=runtime.summary is None,
            )
            if written.status == "stored" and runtime.summary is not None:
                # Every stored fact gets its conflict check, with a session or without one.
                sid = None
                if request.session_id is not None:
                    session = await store.get_or_create_session(
                        conn, request.session_id, request.app_name, request.user_id
                    )
                    sid = session.sid
                await jobs.enqueue(conn, "reconcile", sid, {"fact_id": written.fact_id})
            if written.status == "stored" and runtime.embedder is not None:
                # Its contextual embedding, and its own if the model could not be reached.
                await jobs.queue_embedding(conn)
        runtime.wake_workers()
        return FactWritten(fact_id=written.fact_id, status=written.status)

    async def list_facts(
        self,
        scope: Scope,
        app_name: str | None,
        user_id: str | None,
        session_id: str | None,
        include_invalid: bool,
        limit: int,
    ) -> FactList:
        """Facts within ``scope`` (``store``: every fact of the store), newest first, superseded ones too with
        ``include_invalid``. :class:`~kora.core.errors.RequestError` for a scope other than ``user`` or ``store``
        without ``app_name``."""
        if scope == "store":
            condition, params = "true", dict[str, object]()
        else:
            if app_name is None and scope != "user":
                raise RequestError(f"scope {scope!r} needs app_name")
            where = recall.scope_filter(scope, app_name or "", user_id, session_id, "user")
            condition, params = where.sql("f")
        async with self._connection() as conn:
            return FactList(facts=await facts.list_facts(conn, condition, params, include_invalid, limit))

    async def fact_history(self, fact_id: str) -> list[facts.HistoryEntry]:
        """What happened to one fact, oldest first; :class:`~kora.core.errors.NotFound` for an unknown fact."""
        async with self._connection() as conn:
            entries = await facts.history(conn, fact_id)
        if not entries:
            raise NotFound(f"no fact {fact_id!r}")
        return entries

    async def forget(self, request: ForgetRequest) -> ForgetResult:
        """Erase a user or a session across every tier and log the erasure (the mark every answer carries names
        it from now on); what was removed."""
        async with self._connection() as conn, conn.transaction():
            removed = await store.forget(conn, request.user_id, request.session_id)
            seq = await erasures.record(conn, request.user_id, request.session_id)
        self.runtime.advance_mark(seq)
        return ForgetResult(removed=removed)

    async def erasure_log(self, after: int, limit: int) -> ErasureList:
        """The erasure log after ``after``, at most ``limit`` entries, with the store's newest mark."""
        async with self._connection() as conn:
            mark = await erasures.load_mark(conn)
            found = await erasures.since(conn, after, limit)
        return ErasureList(store_id=mark.store_id, seq=mark.seq, erasures=found)

    async def list_jobs(self, status: str | None, limit: int) -> list[JobInfo]:
        """Background jobs of ``status`` (``queued`` or ``failed``; all when None), oldest first, at most
        ``limit``."""
        async with self._connection() as conn:
            return await jobs.list_jobs(conn, status, limit)
