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

A route parses, authorizes, calls one operation of :class:`~kora.memory_service.service.MemoryService` (which
decides what to store, queue and embed) and maps its answer or error; it holds no SQL and no decision of its own.

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
from psycopg_pool import PoolTimeout
from pydantic import BaseModel

from kora.core.errors import RequestError, Unavailable
from kora.core.events import EventType
from kora.core.limits import RequestLimits
from kora.core.serving import add_probe_routes, error_response, install_error_handlers
from kora.memory import SessionInfo
from kora.memory.wire import (
    MAX_LIMIT,
    ContextRequest,
    Deleted,
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
    MemoryContext,
    RecallRequest,
    RecallResult,
    Scope,
    SessionCreate,
    SessionList,
    SessionMetadata,
    SessionMetadataWrite,
)
from kora.memory_service import erasures, facts
from kora.memory_service.auth import Role, require
from kora.memory_service.jobs import JobInfo
from kora.memory_service.service import MemoryService
from kora.memory_service.settings import MemoryServiceSettings

log = logging.getLogger("kora.memory")

AppName = Annotated[Identifier, Query(description="The agent whose session it is.")]
OptionalLimit = Annotated[int | None, Query(ge=0, le=MAX_LIMIT)]


class JobList(BaseModel):
    """Background jobs, oldest first."""

    jobs: list[JobInfo]


class FactHistory(BaseModel):
    """``GET /v1/facts/{id}/history``: what happened to one fact, oldest first."""

    history: list[facts.HistoryEntry]


def create_app(settings: MemoryServiceSettings) -> FastAPI:
    """The memory service's ASGI app; its lifespan starts the service in the background and closes it."""
    service = MemoryService(settings)
    runtime = service.runtime

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runtime.lifecycle.begin()
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(title="Kora memory service", version="v1", lifespan=lifespan)
    app.state.service = service
    install_error_handlers(
        app, handlers={OperationalError: _database_error, DataError: _database_error, PoolTimeout: _database_error}
    )
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_request_bytes)
    app.add_middleware(erasures.MarkHeader, mark=lambda: runtime.mark)
    add_probe_routes(app.router, runtime.readiness)

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


def _add_session_routes(router: APIRouter, service: MemoryService) -> None:
    settings = service.settings

    @router.post("/v1/sessions")
    async def create_session(body: SessionCreate) -> SessionInfo:
        return await service.create_session(body)

    @router.get("/v1/sessions")
    async def list_sessions(
        request: Request,
        app_name: Annotated[Identifier | None, Query()] = None,
        user_id: Annotated[Identifier | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> SessionList:
        if app_name is None:  # every agent's sessions
            require(request, settings, Role.ADMIN)
        return SessionList(sessions=await service.list_sessions(app_name, user_id, limit))

    @router.get("/v1/sessions/{session_id}")
    async def get_session(session_id: Identifier, app_name: AppName) -> SessionInfo:
        return await service.get_session(session_id, app_name)

    @router.get("/v1/sessions/{session_id}/metadata")
    async def get_session_metadata(session_id: Identifier, app_name: AppName) -> SessionMetadata:
        return SessionMetadata(metadata=await service.session_metadata(session_id, app_name))

    @router.put("/v1/sessions/{session_id}/metadata")
    async def set_session_metadata(session_id: Identifier, body: SessionMetadataWrite) -> SessionMetadata:
        return SessionMetadata(metadata=await service.set_session_metadata(session_id, body))

    @router.delete("/v1/sessions/{session_id}")
    async def delete_session(session_id: Identifier, app_name: AppName) -> Deleted:
        return Deleted(deleted=await service.delete_session(session_id, app_name))

    @router.post("/v1/sessions/{session_id}/events")
    async def add_events(session_id: Identifier, body: EventsWrite) -> EventsWritten:
        return await service.add_events(session_id, body)

    @router.get("/v1/sessions/{session_id}/events")
    async def session_events(
        session_id: Identifier,
        app_name: AppName,
        event_type: Annotated[list[EventType] | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> EventList:
        return await service.session_events(session_id, app_name, event_type, limit)

    @router.get("/v1/events")
    async def all_events(
        request: Request,
        app_name: Annotated[Identifier | None, Query()] = None,
        user_id: Annotated[Identifier | None, Query()] = None,
        limit: OptionalLimit = None,
    ) -> EventList:
        if app_name is None:  # every agent's events
            require(request, settings, Role.ADMIN)
        return await service.events(app_name, user_id, limit)

    @router.post("/v1/sessions/{session_id}/context", response_model=MemoryContext)
    async def context(session_id: Identifier, body: ContextRequest) -> Response:
        answer = await service.context(session_id, body)
        # Serialised here, once: this is on every turn's path, and FastAPI would validate the model again first.
        return Response(answer.model_dump_json(), media_type="application/json")


def _add_recall_routes(router: APIRouter, service: MemoryService) -> None:
    settings = service.settings

    @router.post("/v1/recall")
    async def recall_route(body: RecallRequest) -> RecallResult:
        return await service.recall(body)

    @router.post("/v1/facts")
    async def save_fact(body: FactCreate) -> FactWritten:
        return await service.save_fact(body)

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
        if scope == "store":  # every fact of the store
            require(request, settings, Role.ADMIN)
        return await service.list_facts(scope, app_name, user_id, session_id, include_invalid, limit)

    # An agent forwards the erasures its operator or the user asked of it (kora.memory_service.auth).
    @router.post("/v1/forget")
    async def forget(body: ForgetRequest) -> ForgetResult:
        return await service.forget(body)

    @router.get("/v1/erasures")
    async def erasure_log(
        after: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 1000
    ) -> ErasureList:
        return await service.erasure_log(after, limit)

    @router.get("/v1/facts/{fact_id}/history")
    async def fact_history(request: Request, fact_id: Identifier) -> FactHistory:
        require(request, settings, Role.ADMIN)  # a fact id names no agent or user: any fact of the store
        return FactHistory(history=await service.fact_history(fact_id))


def _add_admin_routes(router: APIRouter, service: MemoryService) -> None:
    @router.get("/v1/jobs")
    async def list_jobs(
        status: Annotated[str | None, Query(pattern="^(queued|failed)$")] = None,
        limit: Annotated[int, Query(ge=0, le=MAX_LIMIT)] = 100,
    ) -> JobList:
        return JobList(jobs=await service.list_jobs(status, limit))


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
