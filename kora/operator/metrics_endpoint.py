"""The operator's ``GET /metrics``: plain HTTP on its own port (``kora operator --metrics-port``, 8080 by
default), in the event loop kopf runs in (docs/telemetry.md: Prometheus text at
``/metrics`` on each workload).

The operator has no web app of its own (kopf serves the liveness probe and the HTTPS admission webhook), so
this is a one-route aiohttp app (aiohttp is what kopf serves with). It answers what every other workload's
``/metrics`` answers: the Prometheus registry :func:`kora.core.telemetry.setup_telemetry` installed, exposed by
prometheus_client's own aiohttp handler (text format 0.0.4, or OpenMetrics when the scraper's ``Accept`` asks
for it; gzip when it accepts it). Any other path or method is a 404 / 405 with a JSON body
(``{"detail": "Not Found"}``), as the FastAPI workloads answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from kora.core.telemetry import METRICS_PATH

if TYPE_CHECKING:
    import socket

    from aiohttp.typedefs import Handler
    from prometheus_client import CollectorRegistry

__all__ = ["metrics_app", "serving_metrics"]

log = logging.getLogger(__name__)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        # The Allow header of a 405 is kept; aiohttp's own body would be plain text.
        headers = {key: value for key, value in error.headers.items() if key.lower() == "allow"}
        return web.json_response({"detail": error.reason}, status=error.status, headers=headers)


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """An aiohttp app answering ``GET`` (and ``HEAD``) ``/metrics`` with the exposition of ``registry``."""
    app = web.Application(middlewares=[_json_errors])
    app.router.add_get(METRICS_PATH, make_aiohttp_handler(registry))
    return app


@asynccontextmanager
async def serving_metrics(sock: socket.socket, registry: CollectorRegistry) -> AsyncIterator[None]:
    """Serve :func:`metrics_app` on the bound, listening ``sock`` for the duration of the block (in the running
    event loop), then stop and close it. No access log: a scraper every few seconds would fill the operator's."""
    runner = web.AppRunner(metrics_app(registry), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        host, port = sock.getsockname()[:2]
        log.info("serving %s on http://%s:%d (Prometheus text)", METRICS_PATH, host, port)
        yield
    finally:
        await runner.cleanup()
