"""RemoteMemory's typed client of the memory service's HTTP API (the bodies are :mod:`kora.memory.wire`).

One method per endpoint an agent uses, each returning the answer's model. Every request reports whether the store
answered (``on_reachable`` / ``on_unreachable``, RemoteMemory's degraded state) and hands the answer's erasure mark
to ``on_mark`` before the answer is used. Raises :class:`~kora.core.errors.StoreUnreachable` when the store cannot
be reached, answers 5xx or 401 (a credential it refuses: as if it were down, ``/ready`` says why) or answers
something that is not the expected body, and :class:`~kora.core.errors.StoreRefused` (with the store's message,
code and status) for any other 4xx.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import httpx2
from httpx_aiohttp.httpx2 import Httpx2AiohttpClient
from pydantic import BaseModel, ValidationError

from kora.core.errors import StoreRefused, StoreUnreachable
from kora.core.events import EventType
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import parse_error_body
from kora.core.telemetry import instrument_http_client
from kora.core.tokens import bearer_header
from kora.memory.base import SessionInfo
from kora.memory.wire import (
    ERASURE_HEADER,
    ContextRequest,
    Deleted,
    ErasureList,
    EventList,
    EventsWrite,
    EventsWritten,
    FactCreate,
    FactWritten,
    ForgetRequest,
    ForgetResult,
    MemoryContext,
    RecallRequest,
    RecallResult,
    SessionList,
    SessionMetadata,
    SessionMetadataWrite,
)

log = logging.getLogger("kora.memory")

BodyT = TypeVar("BodyT", bound=BaseModel)
Params = dict[str, str | int | list[str]]

#: Seconds to wait for the memory service on a read (a turn's context) before treating it as unreachable.
READ_TIMEOUT_SECONDS = 5.0


class _Health(BaseModel):
    status: str


class MemoryStoreClient:
    """The memory service at ``endpoint``, as agent ``app_name`` (bearer ``token``, ``MEMORY_STORE_TOKEN``)."""

    def __init__(
        self,
        endpoint: str,
        app_name: str,
        *,
        token: str,
        on_reachable: Callable[[], None],
        on_unreachable: Callable[[str], None],
        on_mark: Callable[[str | None], Awaitable[None]],
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.app_name = app_name
        self._on_reachable = on_reachable
        self._on_unreachable = on_unreachable
        self._on_mark = on_mark
        # httpx2 over aiohttp, the agent's model transport: a request costs the agent ~0.2 ms of CPU against ~0.6 ms
        # over httpx's own transport, and a remote turn makes two (its context, then its write).
        self._client: httpx2.AsyncClient = Httpx2AiohttpClient(
            base_url=self.endpoint,
            timeout=httpx2.Timeout(READ_TIMEOUT_SECONDS),
            transport=transport,
            headers=bearer_header(token),
            # Idle connections expire before the memory service's server closes them (see POOL_KEEPALIVE_SECONDS).
            limits=httpx2.Limits(keepalive_expiry=POOL_KEEPALIVE_SECONDS),
        )
        instrument_http_client(self._client)  # client spans and trace context on memory calls, when tracing

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()

    async def _call(
        self, method: str, path: str, answer: type[BodyT], body: BaseModel | None = None, params: Params | None = None
    ) -> BodyT:
        """One request to the store (module docstring for what it reports and raises)."""
        content = None if body is None else body.model_dump_json(exclude_none=True)
        try:
            response = await self._client.request(
                method, path, content=content, params=params, headers={"content-type": "application/json"}
            )
        except httpx2.HTTPError as error:
            raise self._unreachable(
                f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            ) from error
        if response.status_code >= 500:
            raise self._unreachable(f"the memory service answered {response.status_code}")
        if response.status_code == 401:  # a store this agent cannot use, as if it were down; /ready says why
            raise self._unreachable("the memory service refused this agent's credential (MEMORY_STORE_TOKEN)")
        self._on_reachable()
        await self._on_mark(response.headers.get(ERASURE_HEADER))
        if response.status_code >= 400:
            raise StoreRefused(*_error_message(response), status=response.status_code)
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as error:
            raise StoreUnreachable(f"unexpected answer from the memory service: {error}") from error

    def _unreachable(self, reason: str) -> StoreUnreachable:
        self._on_unreachable(reason)
        return StoreUnreachable(reason)

    # Sessions.

    async def session(self, session_id: str) -> SessionInfo:
        """``GET /v1/sessions/{id}``: the session as the store has it (its ``user_id`` None for an anonymous one);
        :class:`~kora.core.errors.StoreRefused` (404) when it has none."""
        return await self._call("GET", f"/v1/sessions/{session_id}", SessionInfo, params={"app_name": self.app_name})

    async def sessions(self, user_id: str | None) -> SessionList:
        """``GET /v1/sessions``: this agent's sessions (with ``user_id``, that user's)."""
        params: Params = {"app_name": self.app_name}
        if user_id is not None:
            params["user_id"] = user_id
        return await self._call("GET", "/v1/sessions", SessionList, params=params)

    async def session_metadata(self, session_id: str) -> SessionMetadata:
        """``GET /v1/sessions/{id}/metadata``."""
        return await self._call(
            "GET", f"/v1/sessions/{session_id}/metadata", SessionMetadata, params={"app_name": self.app_name}
        )

    async def set_session_metadata(self, session_id: str, user_id: str | None, metadata: dict[str, str]) -> None:
        """``PUT /v1/sessions/{id}/metadata``: replace it (the store creates the session for ``user_id``)."""
        body = SessionMetadataWrite(app_name=self.app_name, user_id=user_id, metadata=metadata)
        await self._call("PUT", f"/v1/sessions/{session_id}/metadata", SessionMetadata, body=body)

    async def delete_session(self, session_id: str) -> bool:
        """``DELETE /v1/sessions/{id}``: whether the store had it."""
        answer = await self._call("DELETE", f"/v1/sessions/{session_id}", Deleted, params={"app_name": self.app_name})
        return answer.deleted

    # Events.

    async def write_events(self, session_id: str, write: EventsWrite) -> EventsWritten:
        """``POST /v1/sessions/{id}/events``: append a batch (idempotent per event id)."""
        return await self._call("POST", f"/v1/sessions/{session_id}/events", EventsWritten, write)

    async def session_events(
        self, session_id: str, event_types: Sequence[EventType | str] | None, limit: int | None
    ) -> EventList:
        """``GET /v1/sessions/{id}/events``: the session's events of ``event_types`` (all when None or empty),
        the newest ``limit`` (all when None; with 0 only the ``total``)."""
        params: Params = {"app_name": self.app_name}
        if event_types:
            params["event_type"] = [str(t) for t in event_types]
        if limit is not None:
            params["limit"] = limit
        return await self._call("GET", f"/v1/sessions/{session_id}/events", EventList, params=params)

    async def events(self, limit: int | None, user_id: str | None) -> EventList:
        """``GET /v1/events``: events of all this agent's sessions (with ``user_id``, that user's)."""
        params: Params = {"app_name": self.app_name}
        if limit is not None:
            params["limit"] = limit
        if user_id is not None:
            params["user_id"] = user_id
        return await self._call("GET", "/v1/events", EventList, params=params)

    async def context(self, session_id: str, request: ContextRequest) -> MemoryContext:
        """``POST /v1/sessions/{id}/context``: summary, window and recalled facts for a turn."""
        return await self._call("POST", f"/v1/sessions/{session_id}/context", MemoryContext, request)

    # Facts, erasure, health.

    async def recall(self, request: RecallRequest) -> RecallResult:
        """``POST /v1/recall``."""
        return await self._call("POST", "/v1/recall", RecallResult, request)

    async def save_fact(self, fact: FactCreate) -> FactWritten:
        """``POST /v1/facts``."""
        return await self._call("POST", "/v1/facts", FactWritten, fact)

    async def forget(self, request: ForgetRequest) -> ForgetResult:
        """``POST /v1/forget``: erase a user or a session in the store; what it removed per tier."""
        return await self._call("POST", "/v1/forget", ForgetResult, request)

    async def health(self) -> None:
        """``GET /health``: a probe that only says whether the store answers."""
        await self._call("GET", "/health", _Health)

    async def erasure_page(self, after: int, limit: int) -> ErasureList:
        """``GET /v1/erasures``: the store's erasure log after ``after``. Read while an answer is being handled,
        so it reports nothing and applies no mark; raises :class:`~kora.core.errors.StoreUnreachable` when the log
        cannot be read now."""
        try:
            response = await self._client.get("/v1/erasures", params={"after": after, "limit": limit})
            if response.status_code != 200:
                raise StoreUnreachable(f"its erasure log answered {response.status_code}")
            return ErasureList.model_validate_json(response.content)
        except (httpx2.HTTPError, ValidationError) as error:
            raise StoreUnreachable(str(error)) from error


def _error_message(response: httpx2.Response) -> tuple[str, str]:
    """The error body's ``message`` and ``code`` (a generic message and ``""`` when it has none)."""
    error = parse_error_body(response.content)
    if error is None:
        return f"the memory service answered {response.status_code}", ""
    return error.message, error.code or ""
