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

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kora.core import env as names
from kora.core.limits import RequestLimits
from kora.core.net import POOL_KEEPALIVE_SECONDS, is_http_url
from kora.core.openai_wire import model_list_body
from kora.core.serving import Readiness, Status, load_settings, probe_routes, request_limit_field
from kora.proxy.forward import HTTP_ERROR_HANDLERS, forward, raw_path

__all__ = ["COMPONENT", "ENV_PREFIX", "ProxySettings", "create_proxy_app", "load_proxy_settings"]

#: Seconds a backend may take to send response headers, and between two streamed chunks.
BACKEND_TIMEOUT_SECONDS = 300.0
#: What start-up errors name; every variable is this prefix + a field's name in upper case.
COMPONENT = "kora model-proxy"
ENV_PREFIX = "MODEL_PROXY_"


class ProxySettings(BaseModel):
    """The ``MODEL_PROXY_*`` settings (docs/configuration.md lists them from these fields). ``api_base`` is kept
    without a trailing slash."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    api_base: str = Field(
        description="The backend's OpenAI-compatible base URL, including `/v1` (e.g. `https://api.openai.com/v1`): "
        "`/v1/<rest>` is forwarded to `<base>/<rest>`.",
        json_schema_extra={"format": "uri"},
    )
    api_key: str | None = Field(
        default=None,
        repr=False,
        description="Sent to the backend as `Authorization: Bearer <key>`, replacing whatever the client sent (so "
        "agents never hold the backend's key); unset: no `Authorization` at all.",
    )
    models: str = Field(
        default="",
        description="Comma-separated model names: `GET /v1/models` lists exactly these; empty: the backend is asked.",
    )
    max_request_bytes: int = request_limit_field(names.DEFAULT_MAX_LARGE_REQUEST_BYTES)

    @field_validator("api_base")
    @classmethod
    def _api_base_is_http(cls, value: str) -> str:
        if not is_http_url(value):
            raise ValueError("must be an http(s) URL such as https://api.openai.com/v1")
        return value.rstrip("/")

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names of ``models``, blanks dropped."""
        return tuple(name.strip() for name in self.models.split(",") if name.strip())


def load_proxy_settings(environ: Mapping[str, str] | None = None) -> ProxySettings:
    """The settings from ``environ`` (default: the process environment).

    Raises :class:`~kora.core.settings_errors.SettingsError` listing every bad or missing ``MODEL_PROXY_*``
    variable.
    """
    return load_settings(ProxySettings, COMPONENT, environ, env_prefix=ENV_PREFIX)


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
        if not settings.model_names:
            return await v1(request)
        return JSONResponse(model_list_body(list(settings.model_names), "kora-proxy", int(time.time())))

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
