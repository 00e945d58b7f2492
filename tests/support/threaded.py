"""Serving any ASGI app over real HTTP from a background thread, for tests.

:class:`ThreadedServer` runs uvicorn on ``127.0.0.1`` and a free port in a thread with its own event loop,
so neither sync nor async tests block it. Use it as ``with`` or ``async with``; :attr:`root_url` is
``http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from kora.core.net import bind_socket
from tests.support.eventually import eventually

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp


class ThreadedServer:
    """``app`` served by uvicorn from a background thread (sync and async context manager).

    ``lifespan`` is uvicorn's lifespan mode (``"on"`` runs the app's start-up and shut-down). :meth:`start`
    raises ``RuntimeError`` if the server does not come up within ``startup_timeout`` seconds.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        name: str = "asgi-server",
        host: str = "127.0.0.1",
        lifespan: Literal["on", "off", "auto"] = "auto",
        startup_timeout: float = 10.0,
    ) -> None:
        self.app = app
        self.name = name
        self.host = host
        self.port = 0
        self.lifespan = lifespan
        self.startup_timeout = startup_timeout
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def root_url(self) -> str:
        """``http://host:port`` of the running server; raises ``RuntimeError`` when not running."""
        if self._server is None:
            raise RuntimeError(f"the {self.name} server is not running")
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Start serving (blocks until the server accepts connections)."""
        import uvicorn

        if self._server is not None:
            raise RuntimeError(f"the {self.name} server is already running")
        # Started again after a stop, it listens where it did: a client configured with its URL finds it back.
        sock = bind_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        # log_config=None: leave the test process's logging alone.
        config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan=self.lifespan,
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=self.name, daemon=True)
        self._thread.start()
        thread = self._thread

        def started() -> bool:
            if not thread.is_alive():
                raise RuntimeError(f"the {self.name} server stopped before it started")
            return server.started

        try:
            eventually(started, f"the {self.name} server started", within=self.startup_timeout, every=0.005)
        except (RuntimeError, AssertionError):
            self._server = None
            sock.close()
            raise
        # uvicorn owns ``sock`` now and closes it on shutdown.

    def stop(self) -> None:
        """Stop serving; in-flight requests get up to 1 s to finish. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        # Starting and stopping block on a thread, not on the caller's event loop.
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
