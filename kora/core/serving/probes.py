"""``GET /health`` and ``GET /ready``, the probes a supervisor (kubelet, ``kora up``) polls, alike in every workload.

- ``/health``: 200 ``{"status": "ok"}`` from the moment the process serves HTTP (it never waits for the
  start-up), plus the workload's fixed ``identity`` fields (the agent adds ``"agent": <name>``).
- ``/ready``: ``{"status", "reasons", "details"}`` (:class:`~kora.core.serving.lifecycle.Readiness`): 200 with
  ``status`` ``ready``; 503 with ``starting``, ``failed`` or ``not_ready`` and the ``reasons`` (a list of
  strings). ``details`` (an object) say what is degraded without making the workload unready. ``reasons`` and
  ``details`` are left out when empty.

:func:`probe_routes` gives them as Starlette routes (also served by FastAPI apps, where they stay out of the
OpenAPI document); :func:`add_probe_routes` adds them to a FastAPI router as API routes (operation ids
``health_health_get`` and ``ready_ready_get``). :func:`is_probe_endpoint` tells a route served here.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kora.core.serving.lifecycle import Readiness

if TYPE_CHECKING:
    from fastapi import APIRouter

#: What a workload's ``/ready`` asks: its readiness now (a coroutine function when finding out awaits I/O).
ReadinessCheck = Callable[[], Readiness] | Callable[[], Awaitable[Readiness]]

#: Marks the probe endpoints made here (the check that every ``/ready`` is the chassis's reads it).
_PROBE_MARK = "__kora_probe__"


def _endpoints(
    readiness: ReadinessCheck, identity: Mapping[str, str | bool]
) -> tuple[Callable[[Request], Awaitable[Response]], Callable[[Request], Awaitable[Response]]]:
    health_body = {"status": "ok", **identity}

    async def health(request: Request) -> Response:
        return JSONResponse(health_body)

    async def ready(request: Request) -> Response:
        answer = readiness()
        now = await answer if inspect.isawaitable(answer) else answer
        assert isinstance(now, Readiness)
        return JSONResponse(now.body(), status_code=now.http_status)

    for endpoint in (health, ready):
        setattr(endpoint, _PROBE_MARK, True)
    return health, ready


def probe_routes(readiness: ReadinessCheck, identity: Mapping[str, str | bool] | None = None) -> list[Route]:
    """``GET /health`` and ``GET /ready`` as Starlette routes; ``readiness`` is asked on every ``/ready``."""
    health, ready = _endpoints(readiness, identity or {})
    return [Route("/health", health, methods=["GET"]), Route("/ready", ready, methods=["GET"])]


def add_probe_routes(
    router: APIRouter, readiness: ReadinessCheck, identity: Mapping[str, str | bool] | None = None
) -> None:
    """Add ``GET /health`` and ``GET /ready`` to a FastAPI ``router`` as API routes (in its OpenAPI document)."""
    health, ready = _endpoints(readiness, identity or {})
    router.add_api_route("/health", health, methods=["GET"], response_class=JSONResponse)
    router.add_api_route("/ready", ready, methods=["GET"], response_class=JSONResponse)


def is_probe_endpoint(endpoint: object) -> bool:
    """True for an endpoint made by this module (a route serving the chassis's ``/health`` or ``/ready``)."""
    return getattr(endpoint, _PROBE_MARK, False) is True
