"""A2A's routes on the agent server (spec: "Endpoints / Agent server": ``GET /.well-known/agent.json`` and
``POST /`` JSON-RPC 2.0).

* ``GET /.well-known/agent.json``, ``/.well-known/agent-card.json`` and ``/.well-known/agent``: the card
  (:mod:`.card`).
* ``POST /``: the official SDK's JSON-RPC dispatcher (A2A 1.0, and 0.3 in its compatibility mode:
  ``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``), behind
  Kora's envelope/legacy layer (:mod:`.legacy`). Errors are JSON-RPC error objects with HTTP 200.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message

from kora.agent.a2a import legacy
from kora.agent.a2a.card import AgentCardSource, public_base_url
from kora.agent.a2a.executor import KoraAgentExecutor
from kora.agent.a2a.store import DEFAULT_MAX_TASKS, build_task_store
from kora.agent.settings import AgentSettings
from kora.core.errors import InvalidJSON, InvalidRPCRequest, RequestError

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime

#: Paths the card is served at: the spec's, the SDK's default, and the one the gateway example uses.
CARD_PATHS = ("/.well-known/agent.json", "/.well-known/agent-card.json", "/.well-known/agent")


class A2AServer:
    """The A2A pieces of one agent: card source, task store, SDK request handler and the ``POST /`` endpoint.

    ``runtime`` awaits the agent runtime (raising when it cannot start); ``tools`` returns the runtime's tool
    definitions without waiting (empty while it loads). ``max_tasks`` bounds the ``local`` task store.
    """

    def __init__(
        self,
        settings: AgentSettings,
        runtime: Callable[[], Awaitable[AgentRuntime]],
        tools: Callable[[], list[dict[str, Any]]],
        max_tasks: int = DEFAULT_MAX_TASKS,
    ) -> None:
        self.settings = settings
        self.cards = AgentCardSource(settings, tools)
        self.store = build_task_store(settings.task_store_type, max_tasks)
        self.handler = DefaultRequestHandler(
            agent_executor=KoraAgentExecutor(runtime, settings.agent_name),
            task_store=self.store,
            # The handler reads only capabilities and modes from its card; the served card carries the URL.
            agent_card=self.cards.card(settings.agent_public_url or "/"),
            request_context_builder=SimpleRequestContextBuilder(task_id_generator=legacy.RequestedTaskIdGenerator()),
        )
        self.dispatcher = JsonRpcDispatcher(self.handler, enable_v0_3_compat=True)

    def add_routes(self, router: APIRouter) -> None:
        """Add the card routes and ``POST /`` to ``router``, outside the OpenAPI document (they are A2A's)."""
        for path in CARD_PATHS:
            router.add_route(path, self.card_endpoint, methods=["GET"], include_in_schema=False)
        router.add_route("/", self.rpc_endpoint, methods=["POST"], include_in_schema=False)

    async def close(self) -> None:
        """Cancel tasks still running (server shutdown)."""
        await self.handler.aclose()

    async def card_endpoint(self, request: Request) -> Response:
        """``GET`` the agent card, with the URL this client reached the agent at."""
        return JSONResponse(self.cards.card_dict(public_base_url(self.settings, request)))

    async def rpc_endpoint(self, request: Request) -> Response:
        """``POST /``: one JSON-RPC request or a batch (see :mod:`.legacy` for the rules)."""
        try:
            payload = legacy.parse_body(await request.body())
        except InvalidJSON as error:
            return JSONResponse(legacy.error_response(None, error))
        if isinstance(payload, list):
            if not payload:
                return JSONResponse(legacy.error_response(None, InvalidRPCRequest("Invalid request: empty batch")))
            answers = await asyncio.gather(*(self._batch_entry(request, entry) for entry in payload))
            present = [answer for answer in answers if answer is not None]
            return JSONResponse(present) if present else Response(status_code=204)
        response = await self._single(request, payload)
        return response if response is not None else Response(status_code=204)

    async def _single(self, request: Request, payload: object) -> Response | None:
        notification = legacy.is_notification(payload)
        try:
            prepared = legacy.prepare(payload)
            await self._check_free_task_id(prepared, request)
        except RequestError as error:
            if notification:
                return None
            return JSONResponse(legacy.error_response(legacy.request_id_of(payload), error))
        response = await self._dispatch(request, prepared)
        if notification:
            return None
        if prepared.legacy and isinstance(response, JSONResponse):
            answer = json.loads(bytes(response.body))
            return JSONResponse(legacy.legacy_result(answer))
        return response

    async def _batch_entry(self, request: Request, entry: object) -> dict[str, Any] | None:
        if isinstance(entry, dict) and entry.get("method") in legacy.STREAMING_METHODS:
            if legacy.is_notification(entry):
                return None
            message = "Invalid request: streaming methods cannot be sent in a batch"
            return legacy.error_response(legacy.request_id_of(entry), InvalidRPCRequest(message))
        response = await self._single(request, entry)
        if response is None:
            return None
        assert isinstance(response, JSONResponse)  # non-streaming methods answer with JSON
        answer: dict[str, Any] = json.loads(bytes(response.body))
        return answer

    async def _check_free_task_id(self, prepared: legacy.Prepared, request: Request) -> None:
        if prepared.task_id is None:
            return
        context = ServerCallContext(state={"headers": dict(request.headers)})
        if await self.store.get(prepared.task_id, context) is not None:
            raise RequestError(f"Invalid params: task id {prepared.task_id!r} is in use")

    async def _dispatch(self, request: Request, prepared: legacy.Prepared) -> Response:
        """Run ``prepared`` through the SDK dispatcher as if it were the request's body."""
        body = json.dumps(prepared.body).encode()
        sent = False

        async def receive() -> Message:
            # The rewritten body first; afterwards the real channel, so SSE responses still see disconnects.
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await request.receive()

        token = legacy.requested_task_id.set(prepared.task_id)
        try:
            return await self.dispatcher.handle_requests(Request(request.scope, receive))
        finally:
            legacy.requested_task_id.reset(token)
