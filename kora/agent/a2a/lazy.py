"""A2A's routes on the agent server (the card and ``POST /``) before the a2a-sdk has loaded.

Importing the SDK (its request handlers, the 0.3 compatibility types, protobuf) takes ~0.3-0.6 s and holds ~5 MB,
which an agent nobody asks over A2A never uses. So the app adds the card routes and ``POST /`` from here, and
:meth:`LazyA2A.load` imports :mod:`kora.agent.a2a.routes` in a thread, then builds the
:class:`~kora.agent.a2a.routes.A2AServer`: on the first A2A request (:meth:`LazyA2A.wait` starts it; that request
and those that come meanwhile wait for it, up to :data:`~kora.core.serving.STARTUP_WAIT_SECONDS`, then 503 as any
request that needs the runtime), or before ``/ready`` for an agent whose A2A server has background work (the shared
task store: the app awaits :meth:`LazyA2A.load` at start-up). The HTTP+JSON binding's routes are the SDK's: they
join the route table once it has loaded; a request to one of its paths before then starts the load, waits for it in
:class:`WaitingRestRoute` and is then routed again. This module imports nothing of the SDK.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from fastapi import APIRouter
from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from kora.agent.a2a.paths import CARD_PATHS, JSONRPC_PATH, is_rest_path
from kora.core.errors import KoraError, Unavailable
from kora.core.imports import import_without, modules_absent
from kora.core.limits import openai_refusal
from kora.core.serving import STARTUP_WAIT_SECONDS
from kora.core.telemetry.routing import NamedRoute

if TYPE_CHECKING:
    from kora.agent.a2a.routes import A2AServer

log = logging.getLogger("kora.agent")

#: The module that brings the SDK.
ROUTES_MODULE = "kora.agent.a2a.routes"


def a2a_refusal(path: str, error: KoraError) -> tuple[int, object]:
    """How the agent refuses a request the limits stop: :func:`kora.agent.a2a.routes.a2a_refusal` on ``POST /``
    and the HTTP+JSON binding's paths (a JSON-RPC error object, or the binding's error body; the SDK is imported
    for it if it has not loaded yet), OpenAI's error body elsewhere."""
    if path != JSONRPC_PATH and not is_rest_path(path):
        return openai_refusal(path, error)
    module = importlib.import_module(ROUTES_MODULE)
    refusal: tuple[int, object] = module.a2a_refusal(path, error)
    return refusal


class LazyA2A:
    """The agent's :class:`~kora.agent.a2a.routes.A2AServer`, built by ``build(module)`` (``module`` being
    :mod:`kora.agent.a2a.routes`) once :meth:`load` has imported it; ``server`` is ``None`` until then (and
    again when it failed to start). The SDK is imported and the server built without the packages ``unused``
    (:func:`~kora.core.imports.modules_absent`, e.g. :func:`kora.agent.unused.unused_packages`)."""

    def __init__(self, build: Callable[[ModuleType], A2AServer], unused: tuple[str, ...] = ()) -> None:
        self._build = build
        self._unused = unused
        self.server: A2AServer | None = None
        # The server as built, kept for close() even when its start failed (``server`` is then None, so no
        # request reaches it): it may hold the shared task store's pool and engine, which only its close() ends.
        self._built: A2AServer | None = None
        self._done = asyncio.Event()
        self._error: str | None = None
        #: The load, once :meth:`load` or :meth:`start_loading` has started it.
        self._loading: asyncio.Task[None] | None = None

    def load_now(self) -> None:
        """Import the SDK and build the server at once, before the server answers anything: for an agent whose A2A
        server checks its settings as it is built (the shared task store's database). Raises what the build raises
        (:class:`~kora.core.settings_errors.SettingsError` naming the setting)."""
        module = import_without(ROUTES_MODULE, self._unused)
        with modules_absent(self._unused):
            self.server = self._built = self._build(module)

    async def load(self) -> None:
        """Import the SDK (in a thread, so the server keeps answering) and build the server, unless
        :meth:`load_now` did; then start its background work (the shared task store's). Only the first call (or
        :meth:`start_loading`) loads; a later one waits for that load. Raises what the import, the build or the
        start raised, after recording it for the requests that wait."""
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load(), name="a2a-sdk load")
        # Shielded: a caller cancelled while it waits (a start-up cut short) leaves the load to close().
        await asyncio.shield(self._loading)

    def start_loading(self) -> None:
        """Start :meth:`load` in the background unless it has started: the first A2A request's. A failure is
        logged here and answered to the requests that wait (:meth:`wait`); a load that failed before the server was
        built (the SDK's import, the build) is started again by the next request, since no start-up check (``/ready``)
        covers it."""
        if self._loading is not None and self._loading.done() and self._built is None:
            self._loading, self._error = None, None
            self._done = asyncio.Event()
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load(), name="a2a-sdk load")
            self._loading.add_done_callback(_log_failure)

    async def _load(self) -> None:
        try:
            if self.server is None:
                module = await asyncio.to_thread(import_without, ROUTES_MODULE, self._unused)
                with modules_absent(self._unused):
                    self.server = self._built = self._build(module)
                # What the import brought (~250 modules' objects) lives as long as the process: frozen, as what
                # start-up built is (kora.agent.state), so full collections under load do not walk it. Collected
                # first, as there: garbage cycles of the turns served so far would be kept for good.
                gc.collect()
                gc.freeze()
            await self.server.start()
        except Exception as error:
            self._error = f"{type(error).__name__}: {error}"
            self.server = None
            raise
        finally:
            self._done.set()

    async def wait(self) -> A2AServer:
        """The server, starting :meth:`load` if nothing has (:meth:`start_loading`) and waiting for it;
        :class:`~kora.core.errors.Unavailable` (503) when it has not loaded in time (``starting``) or failed to
        (``startup_failed``)."""
        if self.server is not None:
            return self.server
        self.start_loading()
        try:
            await asyncio.wait_for(self._done.wait(), STARTUP_WAIT_SECONDS)
        except TimeoutError:
            raise Unavailable("The agent is still starting.", code="starting") from None
        if self.server is None:
            raise Unavailable(f"The agent's A2A endpoint failed to start: {self._error}", code="startup_failed")
        return self.server

    def add_routes(self, router: APIRouter) -> None:
        """Add the card routes and ``POST /`` to ``router``, outside the OpenAPI document (they are A2A's), and
        last the :class:`WaitingRestRoute` that holds the HTTP+JSON binding's requests until the SDK has loaded."""
        for path in CARD_PATHS:
            router.routes.append(NamedRoute(path, self._card, methods=["GET"], include_in_schema=False))
        router.routes.append(NamedRoute(JSONRPC_PATH, self._rpc, methods=["POST"], include_in_schema=False))
        router.routes.append(WaitingRestRoute(self))

    async def _card(self, request: Request) -> Response:
        return await (await self.wait()).card_endpoint(request)

    async def _rpc(self, request: Request) -> Response:
        return await (await self.wait()).rpc_endpoint(request)

    async def close(self) -> None:
        """Cancel tasks still running and close what the server holds (server shutdown), if it was built, whether
        or not it started; a load still running is cancelled first."""
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
            await asyncio.gather(self._loading, return_exceptions=True)
        if self._built is not None:
            await self._built.close()


def _log_failure(load: asyncio.Task[None]) -> None:
    """Log why a load no caller awaits (:meth:`LazyA2A.start_loading`) failed."""
    if not load.cancelled() and (error := load.exception()) is not None:
        log.error("the A2A server failed to start: %s", error, exc_info=error)


class WaitingRestRoute(BaseRoute):
    """Matches every path of the HTTP+JSON binding (:func:`~kora.agent.a2a.paths.is_rest_path`) while the SDK has
    not loaded, waits for :meth:`LazyA2A.wait`, then hands the request back to the app's router, where the SDK's
    routes now answer it (they are added by the build, before this route stops matching). Raises
    :class:`~kora.core.errors.Unavailable` (503, in the binding's error shape) when the load fails or takes longer
    than :data:`~kora.core.serving.STARTUP_WAIT_SECONDS`. Once loaded it matches nothing, so it costs a request one
    attribute check."""

    def __init__(self, a2a: LazyA2A) -> None:
        self._a2a = a2a

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """A full match for an HTTP request to a binding path before the SDK has loaded; no match otherwise."""
        if self._a2a.server is None and scope["type"] == "http" and is_rest_path(scope["path"]):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: object) -> URLPath:
        """No URL is built for this route: :class:`~starlette.routing.NoMatchFound` for every name."""
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wait for the SDK, then route the request again through the app's router."""
        await self._a2a.wait()
        await scope["app"].router(scope, receive, send)
