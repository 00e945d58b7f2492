"""The local gateway: the cluster gateway's path scheme in front of the workloads ``kora up`` runs.

``/{namespace}/{agent|modelapi|mcp|memorystore}/{name}/<rest>`` goes to ``<upstream>/<rest>`` (the prefix is
stripped, the query string kept), with the route's timeout (:mod:`kora.proxy.forward` explains the timeout,
streaming and the 502/504 bodies). A path of that shape in a namespace the gateway routes that names no workload
(a mistyped name) answers 404 JSON listing the known prefixes, in OpenAI's error shape, as a client of that
workload expects; any other path goes to the web console when ``kora up`` runs one (``kora console``, the
gateway's root), else answers the same 404.

A workload that is not Ready gets nothing: as a Kubernetes Service with no ready endpoint, the route answers
503 (code ``not_ready``, the workload's phase and reason in the message) without contacting it, so an agent
whose tool server failed is not asked to answer without its tools. The answer is in the workload's error shape
(below), with ``Retry-After``.

A request body larger than the gateway's limit (:func:`gateway_body_limit`: the largest any workload accepts) is
refused with 413 before it is read or sent on (:class:`kora.core.limits.RequestLimits`, size only: each workload
checks JSON itself, in its own error shape), as a JSON-RPC error for ``kora mcp`` and an agent's ``POST /``, else
in OpenAI's shape, as the workload itself would answer.

:func:`match_route` (pure, the path rewriting) and :func:`create_gateway_app` (the Starlette app) are the
public surface; routes come from the workload plans via :func:`routes_from_plans`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from pydantic import JsonValue
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from kora.core import env as names
from kora.core.errors import KoraError, Unavailable
from kora.core.limits import RequestLimits, jsonrpc_refusal, openai_refusal
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import openai_error_body
from kora.proxy.forward import HTTP_ERROR_HANDLERS, error_response, forward, raw_path
from kora.resources import RESOURCE_CLASSES, WorkloadPlan, route_path

__all__ = ["GatewayRoute", "create_gateway_app", "gateway_body_limit", "match_route", "routes_from_plans"]

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
#: The second segment of every route prefix: one per resource kind (``agent``, ``modelapi``, ``mcp``, ...).
_ROUTE_SEGMENTS = frozenset(resource.ROUTE_SEGMENT for resource in RESOURCE_CLASSES.values())
#: ``Retry-After`` (seconds) of a route whose workload is not Ready.
NOT_READY_RETRY_SECONDS = 1

#: The workloads' body-limit variables (each defaults to at most ``DEFAULT_MAX_LARGE_REQUEST_BYTES``).
_BODY_LIMIT_VARIABLES = (
    names.AGENT_MAX_REQUEST_BYTES,
    names.MCP_MAX_REQUEST_BYTES,
    names.MEMORY_SERVICE_MAX_REQUEST_BYTES,
    names.MODEL_PROXY_MAX_REQUEST_BYTES,
    names.MODEL_HOSTED_MAX_REQUEST_BYTES,
)


@dataclass(frozen=True)
class GatewayRoute:
    """One route: requests under ``prefix`` (``/default/agent/assistant``, no trailing slash) go to
    ``upstream`` (``http://127.0.0.1:41234``, no trailing slash) within ``timeout_seconds``."""

    prefix: str
    upstream: str
    timeout_seconds: float


def routes_from_plans(plans: Iterable[WorkloadPlan]) -> dict[str, GatewayRoute]:
    """``{prefix: route}`` for every plan that has a gateway route (``plan.gateway_route``: a MemoryStore only
    when its ``spec.gatewayRoute.enabled``): prefix from :func:`route_path`, upstream ``direct_url``, timeout
    ``route_timeout_seconds``."""
    routes: dict[str, GatewayRoute] = {}
    for plan in plans:
        if not plan.gateway_route:
            continue
        prefix = route_path(plan.kind, plan.namespace, plan.name)
        routes[prefix] = GatewayRoute(prefix, plan.direct_url.rstrip("/"), plan.route_timeout_seconds)
    return routes


def gateway_body_limit(plans: Iterable[WorkloadPlan]) -> int:
    """The gateway's request body limit in bytes: the largest a workload of ``plans`` accepts, i.e. the largest
    default (``DEFAULT_MAX_LARGE_REQUEST_BYTES``, 16 MiB) or any larger ``*_MAX_REQUEST_BYTES`` a plan sets as a
    literal, so the gateway never refuses what the workload behind it would take (the workload still applies
    its own, possibly smaller, limit)."""
    limits = [names.DEFAULT_MAX_LARGE_REQUEST_BYTES]
    for plan in plans:
        for variable in _BODY_LIMIT_VARIABLES:
            value = (plan.env_value(variable) or "").strip()
            if value.isdigit():
                limits.append(int(value))
    return max(limits)


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


def names_a_workload(routes: Mapping[str, GatewayRoute], path: str) -> bool:
    """Whether ``path`` has the shape of a route, ``/{namespace}/{kind segment}/{name}...``, in a namespace some
    route of ``routes`` is in (whether or not a workload of that name exists)."""
    parts = path.split("/", 4)
    if len(parts) < 4 or parts[0] != "" or not parts[3] or parts[2] not in _ROUTE_SEGMENTS:
        return False
    return any(prefix.split("/", 2)[1] == parts[1] for prefix in routes)


def create_gateway_app(
    routes: Mapping[str, GatewayRoute],
    *,
    max_connections: int = 200,
    max_body_bytes: int = names.DEFAULT_MAX_LARGE_REQUEST_BYTES,
    not_ready: Callable[[str], str | None] = lambda prefix: None,
    fallback: str | None = None,
) -> Starlette:
    """A Starlette app proxying by :func:`match_route`. ``routes`` is read on every request, so a caller may
    update the mapping in place. One pooled httpx client (keep-alive to the upstreams) lives with the app's
    lifespan, so serve it with lifespan on. A body over ``max_body_bytes`` is refused with 413 (see the module
    docstring); the app's own 404/405 answers are JSON in OpenAI's shape. ``not_ready(prefix)`` says why the
    workload behind a route prefix is not Ready (None: it is); such a route answers 503 without forwarding.
    ``fallback`` (an upstream URL, the web console's) serves every path no route matches, path and query as
    they are, but a path that names a workload no route has (:func:`names_a_workload`); without it such a path
    answers 404."""
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
        if (
            matched is None
            and fallback is not None
            and "client" in state
            and not names_a_workload(routes, raw_path(request))
        ):
            return await forward(state["client"], request, fallback + raw_path(request), timeout_seconds=60.0)
        if matched is None:
            body = openai_error_body(
                f"no route for {request.url.path}", "not_found", "not_found", routes=list[JsonValue](sorted(routes))
            )
            return JSONResponse(body, status_code=404)
        route, rest = matched
        if "client" not in state:
            return error_response(503, "unavailable", "the gateway is starting")
        reason = not_ready(route.prefix)
        if reason is not None:
            status, refusal = refuse(raw_path(request), Unavailable(reason, code="not_ready"))
            return JSONResponse(refusal, status_code=status, headers={"Retry-After": str(NOT_READY_RETRY_SECONDS)})
        return await forward(state["client"], request, route.upstream + rest, timeout_seconds=route.timeout_seconds)

    def refuse(path: str, error: KoraError) -> tuple[int, object]:
        matched = match_route(routes, path)
        segment = matched[0].prefix.split("/")[2] if matched is not None else ""
        if segment == "mcp" or (segment == "agent" and matched is not None and matched[1] == "/"):
            return jsonrpc_refusal(path, error)
        return openai_refusal(path, error)

    return Starlette(
        routes=[StarletteRoute("/{path:path}", proxy, methods=_METHODS)],
        lifespan=lifespan,
        exception_handlers=HTTP_ERROR_HANDLERS,
        middleware=[Middleware(RequestLimits, max_body_bytes=max_body_bytes, refuse=refuse, check_json=False)],
    )
