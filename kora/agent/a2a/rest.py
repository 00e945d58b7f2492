"""A2A's HTTP+JSON (REST) binding on the agent server (A2A 1.0 "HTTP+JSON/REST protocol binding"), next to JSON-RPC on
``POST /`` and advertised on the card (``supportedInterfaces``, binding ``HTTP+JSON``, version 1.0).

The routes and their work are the SDK's (:func:`a2a.server.routes.create_rest_routes` over the same request handler,
task store and call context builder as JSON-RPC): ``POST /message:send``, ``POST /message:stream`` (SSE), ``GET
/tasks/{id}`` (``?historyLength=``), ``GET /tasks`` (``ListTasks``' filters and paging as query parameters), ``POST
/tasks/{id}:cancel``, ``GET``/``POST /tasks/{id}:subscribe`` (SSE), ``GET /extendedAgentCard`` and the push
notification routes (served with the shared ``postgres`` task store, answered "not supported" otherwise, as the card
says). Not served: the SDK's ``/{tenant}/...`` copies (Kora has no tenants, and that catch-all mount would answer
every other path of the agent) and 0.3's REST paths (``/v1/...``: 0.3 clients use JSON-RPC).

Before the SDK sees a request, :func:`rest_routes`' ``guard`` applies the rules JSON-RPC has (see
:meth:`kora.agent.a2a.routes.A2AServer.rest_guard`): the caller's identity (a credential that fails is refused with
its HTTP status), the version (1.x only: the binding is 1.0's; no version means 0.3, refused), a send's body checked
as ``SendMessage`` params are (parts, storable text, schema, another user's context), ``ListTasks``' ``status``, the
extended card's verified user, and a strict-mode memory that cannot be read (a send is refused, no task made). A
refusal is the binding's error body, ``{"error": {"code": <HTTP status>, "status": <google.rpc code name>,
"message", "details": [google.rpc.ErrorInfo]}}``, built by the SDK's own
:func:`~a2a.utils.error_handlers.build_rest_error_payload`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidRequestError,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kora.agent.a2a.executor import REFUSALS
from kora.agent.a2a.negotiation import a2a_error
from kora.core.errors import InvalidJSON, KoraError

#: REST path of a send -> the A2A 1.0 method whose params its body is.
SEND_PATHS = {"/message:send": "SendMessage", "/message:stream": "SendStreamingMessage"}
LIST_TASKS_PATH = "/tasks"
EXTENDED_CARD_PATH = "/extendedAgentCard"
_INTERNAL_CODE = -32603
#: google.rpc code names of the HTTP statuses Kora's own refusals carry.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    503: "UNAVAILABLE",
}

#: ``guard(request, path)``: raises a :class:`~kora.core.errors.KoraError` to refuse the request to ``path``
#: (the SDK route's path template) before the SDK sees it.
Guard = Callable[[Request, str], Awaitable[None]]
Endpoint = Callable[[Request], Awaitable[Response]]


def rest_error_body(error: KoraError) -> tuple[int, dict[str, object]]:
    """``error`` as the binding's error body and its HTTP status. The A2A error of the same JSON-RPC code gives the
    reason and status (a body that is not JSON is ``INVALID_REQUEST``, as the SDK answers one); Kora's own HTTP
    status wins when it says more than 400 or 500 (401, 403, 413, 503). An internal error says only "Internal
    error"."""
    a2a: A2AError
    if isinstance(error, InvalidJSON):
        a2a = InvalidRequestError(error.message, data={"type": error.code})
    elif error.jsonrpc_code == _INTERNAL_CODE and error.status != 503:  # a fault; its message may hold internals
        a2a = InternalError("Internal error", data={"type": error.code})
    else:
        a2a = a2a_error(error)
    payload = build_rest_error_payload(a2a)
    body = payload["error"]
    if type(a2a) not in A2A_ERROR_MAPPING or error.status not in (400, 500):
        body["code"] = error.status
        body["status"] = _STATUS_NAMES.get(error.status, "INTERNAL")
    elif isinstance(a2a, ContentTypeNotSupportedError):
        body["code"] = 415  # A2A 1.0's error code mappings (5.4); the SDK's table says 400

    return int(body["code"]), payload


def rest_error(error: KoraError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The binding's error response for ``error`` (:func:`rest_error_body`), with ``headers``."""
    status, payload = rest_error_body(error)
    return JSONResponse(payload, status_code=status, headers=headers)


def rest_routes(
    handler: RequestHandler,
    context_builder: ServerCallContextBuilder,
    guard: Guard,
    refuse: Callable[[KoraError], Response],
) -> list[Route]:
    """The SDK's REST routes for ``handler`` (see the module docstring), each behind ``guard``; a request
    ``guard`` refuses is answered ``refuse(error)``."""
    routes: list[Route] = []
    for route in create_rest_routes(handler, context_builder=context_builder):
        if isinstance(route, Route):  # not the tenants' catch-all Mount
            endpoint: Endpoint = route.endpoint
            guarded = _guarded(route.path, endpoint, guard, refuse)
            routes.append(Route(route.path, guarded, methods=sorted(route.methods or ()), include_in_schema=False))
    return routes


def _guarded(path: str, endpoint: Endpoint, guard: Guard, refuse: Callable[[KoraError], Response]) -> Endpoint:
    async def guarded(request: Request) -> Response:
        try:
            await guard(request, path)
        except KoraError as error:
            return refuse(error)
        refusals: list[KoraError] = []
        token = REFUSALS.set(refusals)
        try:
            # The same Request: a body the guard read is cached on it for the SDK.
            response = await endpoint(request)
        finally:
            REFUSALS.reset(token)
        # The executor refused the turn before publishing a task (strict-mode memory unreachable): the client gets
        # that error, as on JSON-RPC, not the SDK's answer to it.
        return refuse(refusals[0]) if refusals else response

    return guarded
