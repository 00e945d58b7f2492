"""Serve ``/health`` while the app is still being built: :class:`BuildingApp`, the ASGI app a server runs first.

Importing and building a workload's app (its web framework, routes, telemetry) takes longer than starting the
HTTP server. :class:`BuildingApp` is what the server runs instead: its lifespan starts the build in a thread and
completes at once, so the server listens while the app is made; meanwhile ``GET /health`` answers 200 (503 once
the build failed, or ran longer than it may: a liveness probe restarts a process whose build hangs, as it did when
nothing listened) and ``GET /ready`` 503 ``starting`` (``failed`` after a failure), and every other request waits
for the app. Once built, the app's own lifespan
runs (its start-up, then, when the server stops, its shutdown) and every request, the probes included, is the
app's. A build or start-up that fails stops the server (:meth:`BuildingApp.on_failure`), and the error is kept
(:attr:`BuildingApp.error`) for the command to report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from kora.core.errors import AppStartupFailed, Unavailable
from kora.core.serving.errors import error_response
from kora.core.serving.lifecycle import STARTUP_WAIT_SECONDS, Readiness, StartupText, Status

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("kora.serving")


class BuildingApp:
    """An ASGI app that answers the probes while ``build`` (run once, in a thread, by the lifespan's start-up)
    makes the app it then hands every request to.

    Until the app is built and its lifespan start-up has completed: ``GET /health`` answers 200
    ``{"status": "ok", **identity}``, but 503 (``"status"`` ``failed``, or ``hung`` once the start-up has run longer
    than ``wait_seconds``); ``GET /ready`` 503 ``{"status": "starting", "reasons": [text.starting]}`` (``failed``
    with ``text.failed`` and the error after a failure); any other request waits for the app, up to
    ``wait_seconds``, and is then the app's (503 ``text.codes[0]`` in OpenAI's error body if it is still not
    started, ``text.codes[1]`` if it failed). Afterwards every request goes straight to the app; the app's lifespan
    state (``scope["state"]``) is the server's, as if the server ran it.

    ``build`` may raise: its error (for the command to report; not logged here), or
    :class:`~kora.core.errors.AppStartupFailed` (logged) when the app's own start-up fails, is kept in
    :attr:`error`, and the callback set by :meth:`on_failure` stops the server. A stop during the build waits for
    it; the app is then not started, unless a request already waits for it (the server lets open requests finish
    before it stops its lifespan: the app starts, answers it, and shuts down). A stop after it runs the app's
    shutdown; one that fails is logged once and reported to the server as failed.
    """

    def __init__(
        self,
        build: Callable[[], ASGIApp],
        text: StartupText,
        *,
        identity: Mapping[str, str | bool] | None = None,
        wait_seconds: float = STARTUP_WAIT_SECONDS,
    ) -> None:
        self._build = build
        self.text = text
        self.wait_seconds = wait_seconds
        self._health = {"status": "ok", **(identity or {})}
        self.error: BaseException | None = None
        #: The built app once its start-up has completed (every request is then its own).
        self.app: ASGIApp | None = None
        self._stop: Callable[[], None] = lambda: None
        self._ended = asyncio.Event()  # started, failed or stopped before it started: nobody waits any longer
        self._stopping = asyncio.Event()
        self._state: dict[str, Any] = {}
        #: When the build began (the event loop's clock), for :attr:`build_deadline_seconds`.
        self._began: float | None = None
        #: Set when the app's lifespan already reported its shutdown's failure (it is then not logged again).
        self._shutdown_failed = False

    def on_failure(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` (stop the server) when the build or the app's start-up fails."""
        self._stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if app is not None:
            if self._state and "state" in scope and len(scope["state"]) < len(self._state):
                # Parsed by the server a moment before the app's start-up filled the lifespan state.
                scope["state"] = {**self._state, **scope["state"]}
            await app(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
        elif scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/health":
            await self._liveness()(scope, receive, send)
        elif scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/ready":
            if self.error is not None:
                readiness = Readiness(Status.FAILED, [f"{self.text.failed}: {type(self.error).__name__}: {self.error}"])
            else:
                readiness = Readiness(Status.STARTING, [self.text.starting])
            await JSONResponse(readiness.body(), status_code=readiness.http_status)(scope, receive, send)
        else:
            await self._when_started(scope, receive, send)

    def _liveness(self) -> JSONResponse:
        """``/health`` before the app answers it: 200 while the build runs, 503 once it failed or has run longer
        than :attr:`wait_seconds` (hung: a liveness probe then restarts the process, as when nothing listened)."""
        if self.error is not None:
            return JSONResponse({**self._health, "status": "failed"}, status_code=503)
        began = self._began
        if began is not None and asyncio.get_running_loop().time() - began > self.wait_seconds:
            return JSONResponse({**self._health, "status": "hung"}, status_code=503)
        return JSONResponse(self._health)

    async def _when_started(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the request to the app once it has started; 503 after ``wait_seconds`` or a failure."""
        with contextlib.suppress(TimeoutError):  # still starting: answered below
            await asyncio.wait_for(self._ended.wait(), self.wait_seconds)
        app = self.app
        if app is None:
            if scope["type"] != "http":
                await send({"type": "websocket.close", "code": 1013})  # "try again later"
                return
            failed = self.error is not None
            message = f"{self.text.subject} {'failed to start' if failed else 'is still starting'}."
            error = Unavailable(message, code=self.text.codes[1 if failed else 0])
            await error_response(error)(scope, receive, send)
            return
        if "state" in scope:  # copied from the server's before the app's start-up filled it
            scope["state"] = {**self._state, **scope["state"]}
        await app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._state = scope.setdefault("state", {})
        self._began = asyncio.get_running_loop().time()
        running = asyncio.get_running_loop().create_task(self._build_and_run(scope), name="kora-build")
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        self._stopping.set()
        if self.app is None and self.error is None:
            log.info("%s stops before its start-up has ended: waiting for it", self.text.subject)
        await running
        if self._shutdown_failed:
            await send({"type": "lifespan.shutdown.failed", "message": f"{self.text.subject} failed to shut down"})
        else:
            await send({"type": "lifespan.shutdown.complete"})

    def _fail(self, error: BaseException) -> None:
        self.error = error
        if isinstance(error, AppStartupFailed):
            log.error("%s failed to start: %s", self.text.subject, error)
        self._ended.set()
        self._stop()

    async def _build_and_run(self, scope: Scope) -> None:
        """Build the app, run its lifespan start-up, then (when the server stops) its shutdown."""
        try:
            app = await asyncio.to_thread(self._build)
        except Exception as error:
            self._fail(error)
            return
        if self._stopping.is_set():  # stopped while building: the app never starts, nothing to shut down
            self._ended.set()
            return
        began = False

        async def app_receive() -> Message:
            nonlocal began
            if not began:
                began = True
                return {"type": "lifespan.startup"}
            await self._stopping.wait()
            return {"type": "lifespan.shutdown"}

        async def app_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self.app = app
                self._ended.set()
            elif message["type"] == "lifespan.startup.failed":
                self._fail(AppStartupFailed(message.get("message", "")))
            elif message["type"] == "lifespan.shutdown.failed":
                self._shutdown_failed = True
                log.error("%s failed to shut down: %s", self.text.subject, message.get("message", ""))

        try:
            await app(scope, app_receive, app_send)
        except Exception as error:  # the app's lifespan raised (having said it failed, or not)
            if self.app is not None:
                if not self._shutdown_failed:  # else its lifespan said so, with the traceback
                    self._shutdown_failed = True
                    log.error("%s failed to shut down", self.text.subject, exc_info=error)
            elif self.error is None:
                self._fail(AppStartupFailed(f"{type(error).__name__}: {error}"))
