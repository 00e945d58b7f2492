"""The memory service's HTTP API: ``create_app(settings)`` (docs/memory.md "HTTP API"; the bodies are
:mod:`kora.memory.wire`).

Routes (all JSON; the OpenAPI document is at ``/openapi.json``):

====================================  ================================================================
``POST /v1/sessions``                 get or create a session
``GET /v1/sessions``                  list sessions (``app_name``, ``user_id``, ``limit``)
``GET|DELETE /v1/sessions/{id}``      one session of ``app_name`` (404 when unknown) / remove it
``/v1/sessions/{id}/metadata``         ``GET`` a session's metadata (a conversation's); ``PUT`` replaces it (creating
                                      the session)
``POST /v1/sessions/{id}/events``     append events (idempotent per event id); queues extraction and folds
``GET /v1/sessions/{id}/events``      the session's events (``event_type`` repeated, ``limit``)
``POST /v1/sessions/{id}/context``    summary + window + recalled facts for a turn, in one round trip
``GET /v1/events``                    events across sessions (``app_name``, ``user_id``, ``limit``)
``POST /v1/recall``                   facts (and events) matching a query within a scope
``POST /v1/facts``                    store a fact now (``save_memory``), deduplicated
``GET /v1/facts``                     list facts of a scope (``store``: all; ``include_invalid``)
``GET /v1/facts/{id}/history``        what happened to a fact: ``created``, ``superseded`` (old/new text, why)
``POST /v1/forget``                   erase a user or a session across every tier (and log it for the agents)
``GET /v1/erasures``                  the erasure log after ``after`` (every response names its newest, see
                                      :mod:`kora.memory_service.erasures`)
``GET /v1/jobs``                      background jobs (``status=failed``: what extraction could not do); admin
``GET /health``, ``GET /ready``       the probes (:mod:`kora.core.serving.probes`; 503 while the database is unusable)
====================================  ================================================================

Every ``/v1`` route needs a bearer credential (:mod:`kora.memory_service.auth`): the agent credential
(``MEMORY_SERVICE_AGENT_TOKEN``) for one agent's sessions (routes naming an ``app_name``), recall, fact writes,
``forget`` (an erasure the agent forwards) and the erasure log; the admin credential
(``MEMORY_SERVICE_ADMIN_TOKEN``) for everything, including what spans agents or users: listing sessions or events
without ``app_name``, facts at ``store`` scope, a fact's history, ``jobs``. 401 without a valid credential, 403
``admin_only`` for the agent credential on an admin request. Only ``/health`` and ``/ready`` are open.

Sessions belong to the verified user who started them (:func:`kora.memory.base.check_owner`): the routes that
carry the caller's ``user_id`` (``POST /v1/sessions``, ``PUT`` of a session's ``metadata``, the session's ``events``
write and ``context``, ``recall`` and ``facts`` naming a ``session_id``) answer 403 ``session_forbidden`` for a
session of another user, to another verified user and to a request without ``user_id`` alike, and read or change
nothing. The routes without a user (listing, ``GET`` of a session, its metadata or its events, ``DELETE``,
``forget``) see every session of the agent they name; the agent filters them for its own callers (``/memory/*`` on
the agent).

Errors follow the chassis's policy (:mod:`kora.core.serving.errors`): under ``/v1``
``{"error": {"message", "type", "code"}}`` with the status of :mod:`kora.core.errors`: 400 for a
malformed body or parameter (never FastAPI's 422), for JSON beyond the limits of :mod:`kora.core.limits` and for
a value the database refuses, 401 for a missing or unknown credential, 403 for the agent credential on an admin
request, a scope above the store's ceiling or another user's session, 404 for an unknown session or fact, 413 for
a body over ``MEMORY_SERVICE_MAX_REQUEST_BYTES``, 503 while the database is unusable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import Response
from psycopg import DataError, OperationalError
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout
from pydantic import BaseModel

from kora.core.errors import NotFound, RequestError, Unavailable
from kora.core.events import EventType
from kora.core.limits import RequestLimits
from kora.core.serving import add_probe_routes
from kora.core.serving.errors import error_response, install_error_handlers
from kora.memory.base import SessionInfo
from kora.memory.wire import (
    MAX_LIMIT,
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
    Identifier,
    Mark,
    MemoryContext,
    RecallHit,
    RecallRequest,
    RecallResult,
    Scope,
    SessionCreate,
    SessionList,
    SessionMetadata,
    SessionMetadataWrite,
)
from kora.memory_service import erasures, facts, jobs, recall, store
from kora.memory_service.auth import Role, require
from kora.memory_service.database import Conn
from kora.memory_service.service import MemoryService
from kora.memory_service.settings import MemoryServiceSettings

log = logging.getLogger("kora.memory")

AppName = Annotated[Identifier, Query(description="The agent whose session it is.")]
OptionalLimit = Annotated[int | None, Query(ge=0, le=MAX_LIMIT)]
#: Longest field path quoted in a validation error (a value nested 200 deep has a path of ~1 400 characters).


class Deleted(BaseModel):
    """Whether a delete removed something."""

    deleted: bool


class JobInfo(BaseModel):
    """A background job as ``GET /v1/jobs`` lists it; ``session_id`` and ``app_name`` are None for a job about no
    session (``embed``)."""

    id: int
    kind: str
    session_id: str | None
    app_name: str | None
    status: str
    attempts: int
    last_error: str | None


class JobList(BaseModel):
    """Background jobs, oldest first."""

    jobs: list[JobInfo]


class FactHistory(BaseModel):
    """``GET /v1/facts/{id}/history``: what happened to one fact, oldest first."""

    history: list[facts.HistoryEntry]


def create_app(settings: MemoryServiceSettings) -> FastAPI:
    """The memory service's ASGI app; its lifespan starts the service in the background and closes it."""
    service = MemoryService(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.lifecycle.begin()
        try:
            yield
        finally:
            await service.close()

    app = FastAPI(title="Kora memory service", version="v1", lifespan=lifespan)
    app.state.service = service
    install_error_handlers(
        app, handlers={OperationalError: _database_error, DataError: _database_error, PoolTimeout: _database_error}
    )
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_request_bytes)
    app.add_middleware(erasures.MarkHeader, mark=lambda: service.mark)
    add_probe_routes(app.router, service.readiness)

    def agent_access(request: Request) -> Role:
        return require(request, settings, Role.AGENT)

    def admin_access(request: Request) -> Role:
        return require(request, settings, Role.ADMIN)

    # Every /v1 route needs a credential; those spanning users or agents the admin one (module docstring).
    guarded = APIRouter(dependencies=[Depends(agent_access)])
    _add_session_routes(guarded, service)
    _add_recall_routes(guarded, service)
    app.include_router(guarded)
    admin = APIRouter(dependencies=[Depends(admin_access)])
    _add_admin_routes(admin, service)
    app.include_router(admin)
    return app


@asynccontextmanager
async def _connection(service: MemoryService) -> AsyncIterator[Conn]:
    db = await service.ready()
    assert db.pool is not None
    async with db.pool.connection() as conn:
        yield conn


def _add_session_routes(router: APIRouter, service: MemoryService) -> None:
    settings = service.settings

    @router.post("/v1/sessions")
    async def create_session(body: SessionCreate) -> SessionInfo:
        from kora.memory.base import new_session_id

        async with _connection(service) as conn:
            session = await store.get_or_create_session(
                conn, body.session_id or new_session_id(), body.app_name, body.user_id
            )
        return session.info()

    @router.get("/v1/sessions")
    async def list_sessions(
        request: Request,
        app_name: Annotated[Identifier | None, Query()] = None,
        user_id: Annotated[Identifier | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> SessionList:
        if app_name is None:  # every agent's sessions
            require(request, settings, Role.ADMIN)
        async with _connection(service) as conn:
            return SessionList(sessions=await store.list_sessions(conn, app_name, user_id, limit))

    @router.get("/v1/sessions/{session_id}")
    async def get_session(session_id: Identifier, app_name: AppName) -> SessionInfo:
        async with _connection(service) as conn:
            return (await store.require_session(conn, session_id, app_name)).info()

    @router.get("/v1/sessions/{session_id}/metadata")
    async def get_session_metadata(session_id: Identifier, app_name: AppName) -> SessionMetadata:
        async with _connection(service) as conn:
            return SessionMetadata(metadata=await store.session_metadata(conn, session_id, app_name))

    @router.put("/v1/sessions/{session_id}/metadata")
    async def set_session_metadata(session_id: Identifier, body: SessionMetadataWrite) -> SessionMetadata:
        async with _connection(service) as conn, conn.transaction():
            await store.set_session_metadata(conn, session_id, body.app_name, body.user_id, body.metadata)
        return SessionMetadata(metadata=body.metadata)

    @router.delete("/v1/sessions/{session_id}")
    async def delete_session(session_id: Identifier, app_name: AppName) -> Deleted:
        async with _connection(service) as conn:
            return Deleted(deleted=await store.delete_session(conn, session_id, app_name))

    @router.post("/v1/sessions/{session_id}/events")
    async def add_events(session_id: Identifier, body: EventsWrite) -> EventsWritten:
        queued = False
        async with _connection(service) as conn, conn.transaction():
            if body.events and await erasures.predates_erasure(
                conn,
                service.mark.store_id if service.mark is not None else "",
                Mark.parse(body.erasures_seen),
                session_id,
                body.user_id,
                min(event.timestamp for event in body.events),
            ):
                # Queued before an erasure of this session or user that the client had not seen: never stored.
                log.info("dropped %d events of session %s: they predate its erasure", len(body.events), session_id)
                return EventsWritten(session_id=session_id, added=0)
            session = await store.get_or_create_session(
                conn,
                session_id,
                body.app_name,
                body.user_id,
                body.rolling_summary,
                (body.window_events, body.window_tokens),
            )
            written = await store.add_events(conn, session, body.events)
            if written.added and written.conversation and settings.long_term_enabled and service.summary:
                await jobs.enqueue(
                    conn, "extract", session.sid, {"first_seq": written.first_seq, "last_seq": written.last_seq}
                )
                queued = True
            folds = settings.medium_term_enabled and service.summary is not None and session.rolling_summary
            if written.added and folds and await store.needs_fold(conn, session, settings):
                await jobs.enqueue(conn, "fold", session.sid)
                queued = True
        if queued:
            service.wake_workers()
        return EventsWritten(session_id=session_id, added=written.added)

    @router.get("/v1/sessions/{session_id}/events")
    async def session_events(
        session_id: Identifier,
        app_name: AppName,
        event_type: Annotated[list[EventType] | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> EventList:
        async with _connection(service) as conn:
            session = await store.find_session(conn, session_id, app_name)
            if session is None:
                return EventList(events=[], total=0)
            return await store.session_events(conn, session, event_type, limit)

    @router.get("/v1/events")
    async def all_events(
        request: Request,
        app_name: Annotated[Identifier | None, Query()] = None,
        user_id: Annotated[Identifier | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> EventList:
        if app_name is None:  # every agent's events
            require(request, settings, Role.ADMIN)
        async with _connection(service) as conn:
            return await store.app_events(conn, app_name, limit, user_id)

    @router.post("/v1/sessions/{session_id}/context", response_model=MemoryContext)
    async def context(session_id: Identifier, body: ContextRequest) -> Response:
        recall_query = body.query is not None and settings.long_term_enabled
        where = (
            recall.scope_filter(body.scope, body.app_name, body.user_id, session_id, settings.max_read_scope)
            if recall_query
            else None
        )
        embedding = await service.embed_one(body.query) if body.query is not None and where is not None else None
        facts_found: list[RecallHit] = []
        async with _connection(service) as conn:
            # The window first: it refuses another user's session before any fact is read.
            turn = await store.turn_window(
                conn, body.app_name, session_id, settings, body.max_events, body.token_budget, body.user_id
            )
            if body.query is not None and where is not None:
                top_k = body.top_k or settings.default_top_k
                facts_found = await recall.recall_facts(
                    conn, where, body.query, embedding, top_k, settings.score_threshold
                )
        # Serialised here, once: this is on every turn's path, and FastAPI would validate the model again first.
        answer = MemoryContext(summary=turn.summary, window=turn.events, facts=facts_found)
        return Response(answer.model_dump_json(), media_type="application/json")


def _add_recall_routes(router: APIRouter, service: MemoryService) -> None:
    settings = service.settings

    @router.post("/v1/recall")
    async def recall_route(body: RecallRequest) -> RecallResult:
        where = recall.scope_filter(body.scope, body.app_name, body.user_id, body.session_id, settings.max_read_scope)
        top_k = body.top_k or settings.default_top_k
        embedding = await service.embed_one(body.query)
        async with _connection(service) as conn:
            if body.session_id is not None:
                await store.check_access(conn, body.session_id, body.app_name, body.user_id)
            hits = await recall.recall_facts(conn, where, body.query, embedding, top_k, settings.score_threshold)
            if body.include_events:
                found = await recall.recall_events(conn, where, body.query, top_k, settings.score_threshold)
                hits = recall.merge(hits, found, top_k)
        return RecallResult(hits=hits)

    @router.post("/v1/facts")
    async def save_fact(body: FactCreate) -> FactWritten:
        embedding = await service.embed_one(body.content)
        owner = facts.Owner(body.app_name, body.user_id, body.session_id)
        async with _connection(service) as conn, conn.transaction():
            if body.session_id is not None:
                await store.check_access(conn, body.session_id, body.app_name, body.user_id)
            written = await facts.write_fact(
                conn,
                body.content,
                owner,
                "saved",
                embedding,
                body.attribution,
                supersede_corrections=service.summary is None,
            )
            if written.status == "stored" and service.summary is not None:
                # Every stored fact gets its conflict check, with a session or without one.
                sid = None
                if body.session_id is not None:
                    session = await store.get_or_create_session(conn, body.session_id, body.app_name, body.user_id)
                    sid = session.sid
                await jobs.enqueue(conn, "reconcile", sid, {"fact_id": written.fact_id})
            if written.status == "stored" and embedding is None and service.embedder is not None:
                await jobs.queue_embedding(conn)  # the model could not be reached: embed it once it can
        service.wake_workers()
        return FactWritten(fact_id=written.fact_id, status=written.status)

    @router.get("/v1/facts")
    async def list_facts(
        request: Request,
        app_name: Annotated[Identifier | None, Query()] = None,
        scope: Scope = "store",
        user_id: Annotated[Identifier | None, Query()] = None,
        session_id: Annotated[Identifier | None, Query()] = None,
        include_invalid: bool = False,
        limit: Annotated[int, Query(ge=0, le=MAX_LIMIT)] = 100,
    ) -> FactList:
        if scope == "store":
            require(request, settings, Role.ADMIN)
            condition, params = "true", dict[str, object]()
        else:
            if app_name is None and scope != "user":
                raise RequestError(f"scope {scope!r} needs app_name")
            where = recall.scope_filter(scope, app_name or "", user_id, session_id, "user")
            condition, params = where.sql("f")
        async with _connection(service) as conn:
            return FactList(facts=await facts.list_facts(conn, condition, params, include_invalid, limit))

    # An agent forwards the erasures its operator or the user asked of it (kora.memory_service.auth).
    @router.post("/v1/forget")
    async def forget(body: ForgetRequest) -> ForgetResult:
        async with _connection(service) as conn, conn.transaction():
            removed = await store.forget(conn, body.user_id, body.session_id)
            seq = await erasures.record(conn, body.user_id, body.session_id)
        service.advance_mark(seq)
        return ForgetResult(removed=removed)

    @router.get("/v1/erasures")
    async def erasure_log(
        after: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 1000
    ) -> ErasureList:
        async with _connection(service) as conn:
            mark = await erasures.load_mark(conn)
            found = await erasures.since(conn, after, limit)
        return ErasureList(store_id=mark.store_id, seq=mark.seq, erasures=found)

    @router.get("/v1/facts/{fact_id}/history")
    async def fact_history(request: Request, fact_id: Identifier) -> FactHistory:
        require(request, settings, Role.ADMIN)  # a fact id names no agent or user: any fact of the store
        async with _connection(service) as conn:
            entries = await facts.history(conn, fact_id)
        if not entries:
            raise NotFound(f"no fact {fact_id!r}")
        return FactHistory(history=entries)


def _add_admin_routes(router: APIRouter, service: MemoryService) -> None:
    @router.get("/v1/jobs")
    async def list_jobs(
        status: Annotated[str | None, Query(pattern="^(queued|failed)$")] = None,
        limit: Annotated[int, Query(ge=0, le=MAX_LIMIT)] = 100,
    ) -> JobList:
        async with _connection(service) as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT j.id, j.kind, s.session_id, s.app_name, j.status, j.attempts, j.last_error "
                "FROM jobs j LEFT JOIN sessions s USING (sid) WHERE %(status)s::text IS NULL OR j.status = %(status)s "
                "ORDER BY j.id LIMIT %(limit)s",
                {"status": status, "limit": limit},
            )
            return JobList(jobs=[JobInfo.model_validate(row) for row in await cur.fetchall()])


async def _database_error(request: Request, error: Exception) -> Response:
    """A database error: 400 for a value of this request the database refused, else 503 (unusable)."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    # 22 (data exception) and 54 (program limit exceeded): the database refused a value of this request, which
    # the boundary checks should have caught; the request is at fault, not the database.
    if sqlstate[:2] in {"22", "54"}:
        log.warning("database refused a value on %s: %s", request.url.path, error)
        return error_response(
            RequestError(f"The memory database refused a value of this request: {type(error).__name__}")
        )
    log.warning("database unusable on %s: %s", request.url.path, error)
    return error_response(Unavailable(f"The memory database is unusable: {type(error).__name__}", code="database"))
