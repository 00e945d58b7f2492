"""A2A's routes on the agent server: ``GET /.well-known/agent.json`` and ``POST /`` JSON-RPC 2.0 (docs/a2a.md).

* ``GET /.well-known/agent.json``, ``/.well-known/agent-card.json`` and ``/.well-known/agent``: the card
  (:mod:`.card`).
* ``POST /``: the official SDK's JSON-RPC dispatcher (A2A 1.0, and 0.3 in its compatibility mode:
  ``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``), behind
  Kora's envelope/legacy layer (:mod:`.legacy`). The version is negotiated per request (:mod:`.negotiation`:
  ``A2A-Version`` header or query parameter, none is 0.3). Errors are JSON-RPC error objects with HTTP 200, except a
  credential that fails (:mod:`kora.agent.identity`): 401 (or 400, 503) with the JSON-RPC error object.
  A verified user owns the tasks they create: other users' ``tasks/get`` and ``tasks/cancel`` do not find them.
  A message whose ``contextId`` (the memory session) belongs to another user (:func:`kora.memory.base.check_owner`)
  is refused before the SDK makes a task of it: JSON-RPC error -32602, ``data.type`` ``session_forbidden``.
* The HTTP+JSON (REST) binding of A2A 1.0 (:mod:`.rest`): the SDK's REST routes over the same handler, with
  the same identity, ownership and parameter rules (:meth:`A2AServer.rest_guard`).
* ``GetExtendedAgentCard`` (0.3: ``agent/getAuthenticatedExtendedCard``): served by the SDK's handler when the
  agent verifies users (:attr:`.card.AgentCardSource.extended`), to a verified user only (an anonymous caller gets
  -32000, ``data.type`` ``authentication_required``); otherwise the SDK's -32007 (extended card not configured).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from a2a.auth.user import User
from a2a.server.agent_execution import AgentExecutor, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import AgentCard
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from kora.agent.a2a import legacy, rest
from kora.agent.a2a.card import AgentCardSource, card_response, public_base_url
from kora.agent.a2a.executor import IDENTITY_STATE, REFUSALS, RESUME_METADATA, KoraAgentExecutor, decision_in
from kora.agent.a2a.negotiation import (
    V03,
    V1,
    VERSION_NAME,
    asked_version,
    error_info_entries,
    negotiate,
)
from kora.agent.a2a.paths import is_rest_path
from kora.agent.a2a.requested import requested_task_id
from kora.agent.a2a.shared_handler import SharedRequestHandler
from kora.agent.a2a.store import DEFAULT_MAX_TASKS, KoraTaskStore, build_task_store
from kora.agent.identity import ANONYMOUS, Identity, IdentityResolver
from kora.agent.settings import AgentSettings
from kora.core.errors import (
    ApprovalConflict,
    AuthenticationRequired,
    Forbidden,
    InvalidJSON,
    InvalidRPCRequest,
    KoraError,
    MethodNotFound,
    PayloadTooLarge,
    RequestError,
    VersionNotSupported,
)
from kora.core.limits import openai_refusal, replay_body
from kora.core.serving import challenge

if TYPE_CHECKING:
    from kora.agent.a2a.shared import SharedTasks, SharedTaskStore
    from kora.agent.runtime import AgentRuntime


log = logging.getLogger("kora.agent.a2a")

#: Key of the base URL the request reached the agent at (the card's URL) in the SDK call context's ``state``: a
#: function of no arguments returning it.
BASE_URL_STATE = "kora.base_url"
#: The extended card's method names (A2A 1.0 and 0.3).
EXTENDED_CARD_METHODS = frozenset({"GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"})

#: JSON-RPC codes whose message the SDK fills with internals (exception text): the client reads a fixed one.
_INTERNAL_CODES = frozenset({-32603})
#: Methods that start a turn (0.3 names, as :func:`legacy.prepare` leaves them, and 1.0's).
TURN_METHODS = legacy.MESSAGE_METHODS | legacy.V1_SEND_METHODS


def a2a_refusal(path: str, error: KoraError) -> tuple[int, object]:
    """How the agent refuses a request the limits stop (:class:`kora.core.limits.RequestLimits`): on ``POST /``
    a JSON-RPC error object (HTTP 200 as every JSON-RPC error, 413 for a body over the size limit); on the REST
    binding's paths its error body (:func:`.rest.rest_error_body`); elsewhere OpenAI's error body."""
    if path == "/":
        return (error.status if isinstance(error, PayloadTooLarge) else 200), legacy.error_response(None, error)
    if is_rest_path(path):
        return rest.rest_error_body(error)
    return openai_refusal(path, error)


def client_error(error: dict[str, Any], version: str = V03) -> dict[str, Any]:
    """An SDK JSON-RPC error object as a client of A2A ``version`` may read it: ``code`` and ``message`` kept,
    except that an internal error says only "Internal error" (the SDK puts exception text there) and an SDK
    -32600 becomes -32602 (the envelope was checked before the SDK saw it, so only params can be wrong). In 0.3,
    ``data`` is dropped unless it is Kora's own ``{"type": code}`` (the SDK puts validation dumps there); in 1.0
    it keeps the ``google.rpc.ErrorInfo`` entries 1.0 requires (and only those)."""
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    if code in _INTERNAL_CODES or not isinstance(message, str):
        log.error("A2A internal error answered: %r", error)
        message = "Internal error"
    elif code == InvalidRPCRequest.jsonrpc_code:
        code, message = RequestError.jsonrpc_code, "Invalid params"
    kept: object
    if version == V1:
        kept = error_info_entries(data)
    else:
        kept = data if isinstance(data, dict) and set(data) == {"type"} and isinstance(data["type"], str) else None
    return {"code": code, "message": message[:300], "data": kept}


class IdSwappingResponse(Response):
    """A streamed (SSE) SDK response whose events carry ``placeholder`` as their id: sent with ``null`` instead,
    the id the client asked with."""

    def __init__(self, inner: Response, placeholder: str) -> None:
        super().__init__(status_code=inner.status_code)
        self.inner = inner
        self.needle = json.dumps(placeholder).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the inner response, with the placeholder id replaced in every body chunk."""

        async def swapped(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": message.get("body", b"").replace(self.needle, b"null")}
            await send(message)

        await self.inner(scope, receive, swapped)


class IdentityContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the request's :class:`~kora.agent.identity.Identity` (resolved by
    :meth:`A2AServer.rpc_endpoint`) in ``state[IDENTITY_STATE]`` for the executor, and as the context's
    ``user``, which the SDK's task store uses as the task's owner: a user sees and cancels only their own tasks
    (anonymous requests share the anonymous owner, as before). ``state[BASE_URL_STATE]()`` is the URL the client
    reached the agent at (:func:`.card.public_base_url` for ``settings``), for the extended card."""

    def __init__(self, settings: AgentSettings) -> None:
        super().__init__()
        self._settings = settings

    def build(self, request: Request) -> ServerCallContext:
        """The call context of ``request`` (see the class docstring)."""
        context = super().build(request)
        headers = context.state.get("headers")
        asked = request.query_params.get(VERSION_NAME)
        # The version may come as a query parameter (A2A 1.0 "Versioning"); the SDK reads only the header.
        if asked and isinstance(headers, dict) and not headers.get(VERSION_NAME.lower()):
            headers[VERSION_NAME.lower()] = asked
        identity = getattr(request.state, "kora_identity", ANONYMOUS)
        context.state[IDENTITY_STATE] = identity
        # Computed only if asked for (the extended card): deriving it costs tens of microseconds.
        context.state[BASE_URL_STATE] = functools.partial(public_base_url, self._settings, request)
        if identity.user_id is not None:
            context.user = VerifiedUser(identity.user_id)
        return context


class VerifiedUser(User):
    """A user whose identity the agent verified, as the SDK's ``User``."""

    def __init__(self, user_id: str) -> None:
        self._user_id = user_id

    @property
    def is_authenticated(self) -> bool:
        """Always True."""
        return True

    @property
    def user_name(self) -> str:
        """The verified user id."""
        return self._user_id


def shared_tasks(settings: AgentSettings) -> SharedTasks | None:
    """The shared task store when ``TASK_STORE_TYPE=postgres`` (its tables made ready; raises
    :class:`~kora.core.settings_errors.SettingsError` naming ``TASK_STORE_URL`` when the database cannot be used),
    else None."""
    if settings.task_store_type != "postgres":
        return None
    from kora.agent.a2a.shared import SharedTasks

    return SharedTasks.open(settings.task_store_url, settings.task_lease_seconds, settings.task_retention_seconds)


class A2AServer:
    """The A2A pieces of one agent: card source, task store, SDK request handler and the ``POST /`` endpoint.

    ``runtime`` awaits the agent runtime (raising when it cannot start); ``tools`` returns the runtime's tool
    definitions without waiting (empty while it loads); ``identity`` resolves each request's user;
    ``check_session(session_id, user_id)`` raises :class:`~kora.core.errors.Forbidden` for a session of another
    user (the memory's ``check_access``; by default nothing is refused). ``check_memory()`` raises the error that
    refuses every message (a strict-mode memory store known to be unreachable): the request's JSON-RPC error,
    before any task exists, streamed or not; a store found unreachable by the turn itself refuses a
    ``message/send`` the same way (:data:`~kora.agent.a2a.executor.REFUSALS`), while a stream already open ends
    with the task ``failed``. ``max_tasks`` bounds the ``local`` task store.
    """

    def __init__(
        self,
        settings: AgentSettings,
        runtime: Callable[[], Awaitable[AgentRuntime]],
        tools: Callable[[], list[dict[str, Any]]],
        identity: IdentityResolver,
        max_tasks: int = DEFAULT_MAX_TASKS,
        check_session: Callable[[str, str | None], None] | None = None,
        check_memory: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self._check_session = check_session
        self._check_memory = check_memory
        self.cards = AgentCardSource(settings, tools)
        self.executor = kora_executor = KoraAgentExecutor(runtime, settings.agent_name)
        executor: AgentExecutor = kora_executor
        self.shared = shared_tasks(settings)
        self.store: KoraTaskStore | SharedTaskStore = (
            self.shared.store if self.shared else build_task_store(settings.task_store_type, max_tasks)
        )
        card = self.cards.card(settings.agent_public_url or "/")
        context_builder = SimpleRequestContextBuilder(
            task_id_generator=legacy.RequestedTaskIdGenerator(self.shared.store.new_id if self.shared else None)
        )
        # The handler reads only capabilities and modes from its card; the served card carries the URL. It serves
        # an extended card only when it has one; the modifier gives the caller's URL.
        extended = card if self.cards.extended else None
        self.handler: DefaultRequestHandler = (
            SharedRequestHandler(
                self.shared,
                agent_executor=self.shared.wrap(executor),
                agent_card=card,
                request_context_builder=context_builder,
                extended_agent_card=extended,
                extended_card_modifier=self._extended_card,
            )
            if self.shared
            else DefaultRequestHandler(
                agent_executor=executor,
                task_store=self.store,
                agent_card=card,
                request_context_builder=context_builder,
                extended_agent_card=extended,
                extended_card_modifier=self._extended_card,
            )
        )
        kora_executor.handler = self.handler
        self.context_builder = IdentityContextBuilder(settings)
        self.dispatcher = JsonRpcDispatcher(self.handler, context_builder=self.context_builder, enable_v0_3_compat=True)

    def add_rest_routes(self, router: APIRouter) -> None:
        """Add the HTTP+JSON binding's routes (:mod:`.rest`) to ``router``, outside the OpenAPI document. Added
        after the agent's other routes, so matching a chat request does not first try a dozen REST patterns."""
        router.routes.extend(rest.rest_routes(self.handler, self.context_builder, self.rest_guard, self._rest_refused))

    async def rest_guard(self, request: Request, path: str) -> None:
        """What the REST binding checks before the SDK serves ``path`` (its route's template), as JSON-RPC does:
        the caller's identity (kept on the request for the call context), the version (1.x only), a send's body
        as ``SendMessage`` params (:func:`.legacy.prepare`), its context's owner and a strict-mode memory that
        cannot be read, ``ListTasks``' ``status`` and the extended card's verified user. Raises the
        :class:`~kora.core.errors.KoraError` to answer."""
        request.state.kora_identity = await self.identity.resolve(request.headers)
        if negotiate(asked_version(request.headers, request.query_params)) != V1:
            raise VersionNotSupported("The HTTP+JSON binding is served in A2A 1.0: send the header A2A-Version: 1.0")
        method = rest.SEND_PATHS.get(path)
        if method is not None:
            params = legacy.parse_body(await request.body())
            prepared = legacy.prepare({"jsonrpc": "2.0", "id": 0, "method": method, "params": params}, V1)
            self._check_context(request, prepared)
            self._check_decision(request, prepared)
            if self._check_memory is not None:
                self._check_memory()
        elif path == rest.LIST_TASKS_PATH:
            status = request.query_params.get("status")
            legacy.check_task_state(int(status) if status is not None and status.isdigit() else status)
        elif path == rest.EXTENDED_CARD_PATH:
            self.check_extended_card(request, "GetExtendedAgentCard")

    @staticmethod
    def _rest_refused(error: KoraError) -> Response:
        return rest.rest_error(error, headers=challenge(error))

    async def _extended_card(self, _card: AgentCard, context: ServerCallContext) -> AgentCard:
        """The extended card for the caller: the card with the URL it reached the agent at (the verified user was
        checked before the SDK saw the request, :meth:`check_extended_card`)."""
        base_url = context.state.get(BASE_URL_STATE)
        return self.cards.card(base_url() if callable(base_url) else self.settings.agent_public_url or "/")

    def check_extended_card(self, request: Request, method: object) -> None:
        """Refuse the extended card (``method``, by either version's name) to an anonymous caller when the agent
        serves one: :class:`~kora.core.errors.AuthenticationRequired`. Without an extended card the SDK answers."""
        if method not in EXTENDED_CARD_METHODS or not self.cards.extended:
            return
        identity: Identity = getattr(request.state, "kora_identity", ANONYMOUS)
        if identity.user_id is None:
            raise AuthenticationRequired("The extended agent card is served to verified users only")

    def attach(self, runtime: AgentRuntime) -> None:
        """Before ``runtime`` starts: with the shared task store, keep its paused turns in the store's database (the
        approval journal, :mod:`.paused_rows`), and resume those of A2A tasks in their tasks (the executor's)."""
        if self.shared:
            from kora.agent.a2a.paused_rows import PausedTurnRows

            runtime.approvals.journal = PausedTurnRows(self.shared, self.settings.agent_name)
        self.executor.attach(runtime)

    async def start(self) -> None:
        """Start the shared task store's background work, if any (server start-up)."""
        if self.shared:
            await self.shared.start()

    async def close(self) -> None:
        """Cancel tasks still running (server shutdown), then close the shared task store."""
        await self.handler.aclose()
        if self.shared:
            await self.shared.close()

    async def card_endpoint(self, request: Request) -> Response:
        """``GET`` the agent card, with the URL this client reached the agent at (cacheable: ``ETag``, 304)."""
        wire = self.cards.card_dict(public_base_url(self.settings, request))
        return card_response(wire, request, self.cards.changed_at, from_request=not self.settings.agent_public_url)

    async def rpc_endpoint(self, request: Request) -> Response:
        """``POST /``: one JSON-RPC request or a batch (see :mod:`.legacy` for the rules).

        The request's identity is resolved first: a credential that fails answers its HTTP status (401 for a
        bearer token, 400 for a trusted header, 503 when the keys cannot be fetched) with a JSON-RPC error
        object, echoing the request's ``id`` when the body is a single request.
        """
        try:
            identity = await self.identity.resolve(request.headers)
        except KoraError as error:
            return await self._refused(request, error)
        request.state.kora_identity = identity
        refusal: VersionNotSupported | None = None
        try:
            version = negotiate(asked_version(request.headers, request.query_params))
        except VersionNotSupported as error:
            version, refusal = V1, error  # -32009 is a 1.0 error: its client reads 1.0's shape
        try:
            payload = legacy.parse_body(await request.body())
        except InvalidJSON as error:
            return JSONResponse(legacy.error_response(None, error, version))
        if isinstance(payload, list):
            if not payload:
                empty = InvalidRPCRequest("Invalid request: empty batch")
                return JSONResponse(legacy.error_response(None, empty, version))
            answers = await asyncio.gather(*(self._batch_entry(request, entry, version, refusal) for entry in payload))
            present = [answer for answer in answers if answer is not None]
            return JSONResponse(present) if present else Response(status_code=204)
        response = await self._single(request, payload, version, refusal)
        return response if response is not None else Response(status_code=204)

    async def _refused(self, request: Request, error: KoraError) -> JSONResponse:
        try:
            request_id = legacy.request_id_of(legacy.parse_body(await request.body()))
        except InvalidJSON:
            request_id = None
        return JSONResponse(
            legacy.error_response(request_id, error), status_code=error.status, headers=challenge(error)
        )

    async def _single(
        self, request: Request, payload: object, version: str, refusal: KoraError | None = None
    ) -> Response | None:
        """One request's answer (``None`` for a valid notification), in A2A ``version``; ``refusal`` answers every
        valid request (an unsupported version). Whatever goes wrong is this request's JSON-RPC error: in a batch,
        the other entries keep their answers. An invalid Request (-32600) is answered even without ``id``."""
        notification = legacy.is_notification(payload)
        try:
            try:
                prepared = legacy.prepare(payload, version)
            except MethodNotFound:
                # Under an unsupported version the request is read as 1.0 only to check it: that a method is no
                # 1.0 method says nothing then, and the version's refusal is the answer.
                if refusal is None:
                    raise
                raise refusal from None
            if refusal is not None:
                raise refusal
            await self._check_free_task_id(prepared)
            self._check_context(request, prepared)
            self._check_decision(request, prepared)
            self.check_extended_card(request, prepared.body.get("method"))
        except InvalidRPCRequest as error:
            return JSONResponse(legacy.error_response(legacy.request_id_of(payload), error, version))
        except KoraError as error:  # a refusal of this request (bad params, another user's context, ...)
            if notification:
                return None
            return JSONResponse(legacy.error_response(legacy.request_id_of(payload), error, version))
        if prepared.skip:
            return None
        if self._check_memory is not None and prepared.body.get("method") in TURN_METHODS:
            try:
                self._check_memory()
            except KoraError as error:
                return (
                    None
                    if notification
                    else JSONResponse(legacy.error_response(legacy.request_id_of(payload), error, version))
                )
        refusals: list[KoraError] = []
        token = REFUSALS.set(refusals)
        try:
            response = await self._dispatch(request, prepared)
        except Exception:  # the SDK raised instead of answering: an internal error of this request only
            if not refusals:
                log.exception("A2A request %r failed", prepared.body.get("method"))
            response = JSONResponse(legacy.error_response(None, KoraError("Internal error"), version))
        finally:
            REFUSALS.reset(token)
        if notification:
            return None
        if refusals:
            # The executor refused the turn before publishing a task (strict-mode memory unreachable); the SDK's
            # answer to that is an internal error: the client gets Kora's error instead.
            return JSONResponse(legacy.error_response(legacy.request_id_of(payload), refusals[0], version))
        if isinstance(response, JSONResponse):
            return JSONResponse(self._answer(json.loads(bytes(response.body)), prepared, version))
        if prepared.placeholder is not None:
            return IdSwappingResponse(response, prepared.placeholder)
        return response

    def _answer(self, answer: dict[str, Any], prepared: legacy.Prepared, version: str) -> dict[str, Any]:
        """The SDK's answer as the client gets it: its own id back, errors cleaned, legacy names added."""
        if prepared.placeholder is not None:
            answer["id"] = prepared.answer_id
        if isinstance(answer.get("error"), dict):
            answer["error"] = client_error(answer["error"], version)
        elif prepared.legacy:
            answer = legacy.legacy_result(answer)
        return answer

    async def _batch_entry(
        self, request: Request, entry: object, version: str, refusal: KoraError | None
    ) -> dict[str, Any] | None:
        method = entry.get("method") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and isinstance(method, str) and method in legacy.STREAMING_METHODS and "id" in entry:
            message = "Invalid request: streaming methods cannot be sent in a batch"
            return legacy.error_response(legacy.request_id_of(entry), InvalidRPCRequest(message), version)
        response = await self._single(request, entry, version, refusal)
        if response is None:
            return None
        assert isinstance(response, JSONResponse)  # non-streaming methods answer with JSON
        answer: dict[str, Any] = json.loads(bytes(response.body))
        return answer

    async def _check_free_task_id(self, prepared: legacy.Prepared) -> None:
        # Every user's tasks count: a task id names one running task in the SDK, whoever owns it.
        if prepared.task_id is None:
            return
        store, task_id = self.store, prepared.task_id
        if store.holds(task_id) if isinstance(store, KoraTaskStore) else await store.holds(task_id):
            raise RequestError(f"Invalid params: task id {task_id!r} is in use")

    def _check_context(self, request: Request, prepared: legacy.Prepared) -> None:
        """Refuse a message naming a context (a memory session) of another user before it becomes a task."""
        if self._check_session is None:
            return
        params = prepared.body.get("params")
        message = params.get("message") if isinstance(params, dict) else None
        if not isinstance(message, dict):
            return
        # 0.3 and 1.0's JSON name, and the protobuf field name 1.0's parser also accepts.
        for key in ("contextId", "context_id"):
            context_id = message.get(key)
            if isinstance(context_id, str) and context_id:
                identity: Identity = getattr(request.state, "kora_identity", ANONYMOUS)
                self._check_session(context_id, identity.user_id)

    def _check_decision(self, request: Request, prepared: legacy.Prepared) -> None:
        """Refuse, before the SDK sees it, a message on a task waiting for decisions (:mod:`.executor`) that
        decides nothing it may: no decision data part or a bad one (-32602), the agent's own resume metadata, no
        call waiting now (409: decided or expired meanwhile), or another user's call (403). Other messages (new
        tasks, unknown or finished ones) are the SDK's to answer."""
        params = prepared.body.get("params")
        message = params.get("message") if isinstance(params, dict) else None
        if not isinstance(message, dict):
            return
        task_id = message.get("taskId", message.get("task_id"))
        paused = self.executor.paused(task_id) if isinstance(task_id, str) and task_id else None
        if paused is None:
            return
        metadata = message.get("metadata")
        if isinstance(metadata, dict) and RESUME_METADATA in metadata:
            raise RequestError(f"Invalid params: '{RESUME_METADATA}' is the agent's own.", code="invalid_decision")
        parts = message.get("parts")
        parts = parts if isinstance(parts, list) else []
        data = [part["data"] for part in parts if isinstance(part, dict) and "data" in part]
        decision_in(data)
        waiting = [a for a in paused.approvals if a.decision is None]
        if not waiting:
            raise ApprovalConflict(f"Invalid params: task {task_id!r} waits for no decision now.")
        identity: Identity = getattr(request.state, "kora_identity", ANONYMOUS)
        if waiting[0].user_id is not None and waiting[0].user_id != identity.user_id:
            raise Forbidden("The approval belongs to another user's turn.", code="approval_forbidden")

    async def _dispatch(self, request: Request, prepared: legacy.Prepared) -> Response:
        """Run ``prepared`` through the SDK dispatcher as if it were the request's body."""
        # The rewritten body first; afterwards the real channel, so SSE responses still see disconnects.
        receive = replay_body(json.dumps(prepared.body).encode(), request.receive)
        token = requested_task_id.set(prepared.task_id)
        try:
            return await self.dispatcher.handle_requests(Request(request.scope, receive))
        finally:
            requested_task_id.reset(token)
