"""A ModelAPI in Proxy mode (``kora model-proxy``, :mod:`kora.proxy.cli`): forwards ``/v1/*`` to an
OpenAI-compatible backend.

Environment: ``MODEL_PROXY_API_BASE`` (required; the backend's base URL including ``/v1``, e.g.
``https://api.openai.com/v1``; ``/v1/<rest>`` goes to ``<base>/<rest>``), ``MODEL_PROXY_API_KEY``
(optional; sent as ``Authorization: Bearer <key>``, replacing whatever the client sent, so agents never hold
the backend's key), ``MODEL_PROXY_MODELS`` (optional, comma-separated; when set ``GET /v1/models`` lists
exactly these instead of asking the backend). Responses, streaming ones included, go through chunk by chunk.

``/health``: the process is up. ``/ready``: configured (the backend is not called, so a slow or rate-limited
backend does not take every agent out of rotation).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Self

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kora.core import env as names
from kora.core.limits import RequestLimits
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import model_list_body
from kora.core.serving import Readiness, Status, probe_routes
from kora.proxy.forward import HTTP_ERROR_HANDLERS, forward, raw_path

__all__ = ["VARIABLES", "ProxySettings", "create_proxy_app"]

#: Seconds a backend may take to send response headers, and between two streamed chunks.
BACKEND_TIMEOUT_SECONDS = 300.0


#: The variables :meth:`ProxySettings.from_env` reads, as docs/configuration.md lists them.
VARIABLES = (
    names.VariableDoc(
        names.MODEL_PROXY_API_BASE,
        "URL",
        "The backend's OpenAI-compatible base URL, including `/v1` (e.g. `https://api.openai.com/v1`): "
        "`/v1/<rest>` is forwarded to `<base>/<rest>`.",
        required="yes",
    ),
    names.VariableDoc(
        names.MODEL_PROXY_API_KEY,
        "string",
        "Sent to the backend as `Authorization: Bearer <key>`, replacing whatever the client sent (so agents "
        "never hold the backend's key); unset: no `Authorization` at all.",
        default="unset",
    ),
    names.VariableDoc(
        names.MODEL_PROXY_MODELS,
        "string",
        "Comma-separated model names: `GET /v1/models` lists exactly these; empty: the backend is asked.",
        default="empty",
    ),
    names.VariableDoc(
        names.MODEL_PROXY_MAX_REQUEST_BYTES,
        f"int >= {names.MIN_MAX_REQUEST_BYTES}",
        "Largest request body accepted, in bytes; a larger one is refused with 413 before it is read "
        "(see Request limits).",
        default=f"`{names.DEFAULT_MAX_LARGE_REQUEST_BYTES}`",
    ),
)


@dataclass(frozen=True)
class ProxySettings:
    """``api_base`` without a trailing slash; ``api_key`` or None; ``models`` (empty: ask the backend);
    ``max_request_bytes``: the largest request body accepted (413 beyond it)."""

    api_base: str
    api_key: str | None = None
    models: tuple[str, ...] = ()
    max_request_bytes: int = names.DEFAULT_MAX_LARGE_REQUEST_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """Read the ``MODEL_PROXY_*`` variables; ``ValueError`` naming the variable when the base is missing
        or not http(s), or the body limit is not a whole number of at least 1024 bytes."""
        base = environ.get(names.MODEL_PROXY_API_BASE, "").strip()
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"{names.MODEL_PROXY_API_BASE} must be an http(s) URL, got {base!r}")
        models = tuple(m.strip() for m in environ.get(names.MODEL_PROXY_MODELS, "").split(",") if m.strip())
        limit = names.byte_limit(environ, names.MODEL_PROXY_MAX_REQUEST_BYTES, names.DEFAULT_MAX_LARGE_REQUEST_BYTES)
        return cls(base.rstrip("/"), environ.get(names.MODEL_PROXY_API_KEY) or None, models, limit)


def create_proxy_app(settings: ProxySettings) -> Starlette:
    """The proxy's ASGI app (serve with lifespan on: it owns one pooled httpx client)."""
    state: dict[str, httpx.AsyncClient] = {}
    auth = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(keepalive_expiry=POOL_KEEPALIVE_SECONDS)
        async with httpx.AsyncClient(follow_redirects=False, limits=limits) as client:
            state["client"] = client
            yield

    async def models(request: Request) -> Response:
        if not settings.models:
            return await v1(request)
        return JSONResponse(model_list_body(list(settings.models), "kora-proxy", int(time.time())))

    async def v1(request: Request) -> Response:
        rest = raw_path(request).removeprefix("/v1")
        # The client's own credentials are dropped even without a configured key: they were meant for Kora.
        return await forward(
            state["client"],
            request,
            settings.api_base + rest,
            timeout_seconds=BACKEND_TIMEOUT_SECONDS,
            extra_headers=auth,
            drop_headers=frozenset({"authorization"}),
        )

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            # Ready as soon as it serves: a backend that is away is the client's 502, not a reason to stop routing.
            *probe_routes(lambda: Readiness(Status.READY)),
            Route("/v1/models", models),
            Route("/v1/{rest:path}", v1, methods=methods),
        ],
        lifespan=lifespan,
        exception_handlers=HTTP_ERROR_HANDLERS,
        middleware=[Middleware(RequestLimits, max_body_bytes=settings.max_request_bytes)],
    )
