"""The local gateway: the spec's path scheme in front of the workloads ``kora up`` runs.

``/{namespace}/{agent|modelapi|mcp|memorystore}/{name}/<rest>`` goes to ``<upstream>/<rest>`` (the prefix is
stripped, the query string kept), with the route's timeout (:mod:`kora.proxy.forward` explains the timeout,
streaming and the 502/504 bodies). Any other path answers 404 JSON listing the known prefixes.

:func:`match_route` (pure, the path rewriting) and :func:`create_gateway_app` (the Starlette app) are the
public surface; routes come from the workload plans via :func:`routes_from_plans`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from pydantic import JsonValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import openai_error_body
from kora.proxy.forward import error_response, forward, raw_path
from kora.resources import WorkloadPlan
from kora.resources.urls import route_path

__all__ = ["GatewayRoute", "create_gateway_app", "match_route", "routes_from_plans"]

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@dataclass(frozen=True)
class GatewayRoute:
    """One route: requests under ``prefix`` (``/default/agent/assistant``, no trailing slash) go to
    ``upstream`` (``http://127.0.0.1:41234``, no trailing slash) within ``timeout_seconds``."""

    prefix: str
    upstream: str
    timeout_seconds: float


def routes_from_plans(plans: Iterable[WorkloadPlan]) -> dict[str, GatewayRoute]:
    """``{prefix: route}`` for every plan: prefix from :func:`route_path`, upstream ``direct_url``, timeout
    ``route_timeout_seconds``."""
    routes: dict[str, GatewayRoute] = {}
    for plan in plans:
        prefix = route_path(plan.kind, plan.namespace, plan.name)
        routes[prefix] = GatewayRoute(prefix, plan.direct_url.rstrip("/"), plan.route_timeout_seconds)
    return routes


def match_route(routes: Mapping[str, GatewayRoute], path: str) -> tuple[GatewayRoute, str] | None:
    """The route serving ``path`` and the path the upstream gets, or None.

    ``path`` is the request path without the query string. A route matches when ``path`` equals its prefix
    or continues it with ``/`` (``/default/agent/a`` does not match ``/default/agent/ab``). The upstream path
    is the rest, always starting with ``/``: ``/default/agent/a/v1/models`` -> ``/v1/models``,
    ``/default/agent/a`` -> ``/``. Every route prefix has exactly three segments, so the lookup is one dict
    access on the path's first three segments.
    """
    parts = path.split("/", 4)  # ["", namespace, segment, name, rest?]
    if len(parts) < 4 or parts[0] != "":
        return None
    route = routes.get("/".join(parts[:4]))
    if route is None:
        return None
    rest = "/" + parts[4] if len(parts) == 5 else "/"
    return route, rest


def create_gateway_app(routes: Mapping[str, GatewayRoute], *, max_connections: int = 200) -> Starlette:
    """A Starlette app proxying by :func:`match_route`. ``routes`` is read on every request, so a caller may
    update the mapping in place. One pooled httpx client (keep-alive to the upstreams) lives with the app's
    lifespan, so serve it with lifespan on."""
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=POOL_KEEPALIVE_SECONDS,
        )
        # trust_env=False: a user's HTTP(S)_PROXY must not capture loopback traffic.
        async with httpx.AsyncClient(limits=limits, trust_env=False, follow_redirects=False) as client:
            state["client"] = client
            yield

    async def proxy(request: Request) -> Response:
        matched = match_route(routes, raw_path(request))
        if matched is None:
            body = openai_error_body(
                f"no route for {request.url.path}", "not_found", "not_found", routes=list[JsonValue](sorted(routes))
            )
            return JSONResponse(body, status_code=404)
        route, rest = matched
        if "client" not in state:
            return error_response(503, "unavailable", "the gateway is starting")
        return await forward(state["client"], request, route.upstream + rest, timeout_seconds=route.timeout_seconds)

    return Starlette(routes=[StarletteRoute("/{path:path}", proxy, methods=_METHODS)], lifespan=lifespan)
