"""The tool server's FastAPI app (docs/mcp.md "Endpoints").

| Method | Path | Purpose |
|---|---|---|
| GET | ``/health`` | liveness (:mod:`kora.core.serving.probes`): ``200`` while the process serves HTTP |
| GET | ``/ready`` | readiness: ``200`` ``ready`` once the workers run, else ``503`` ``starting`` |
| GET | ``/mcp/tools`` | ``200 {"tools": [{"name", "description", "input_schema", "output_schema"}]}`` |
| MCP (Streamable HTTP) | ``/mcp`` | the tool protocol, served by the official SDK |

``/mcp`` answers under any ``Host`` header: the SDK's DNS-rebinding protection (which rejects non-local
hosts with 421) is off, because the server is reached through a Kubernetes Service name or the gateway.
A request that sends ``Origin`` (a browser) must come from an allowed origin (:mod:`kora.mcp.origin`,
``MCP_ALLOWED_ORIGINS``), else 403. By default MCP is served without sessions
(``MCP_STATELESS_HTTP=true``), so requests may land on any replica. Every request passes
:class:`kora.core.limits.RequestLimits` first: a body over ``MCP_MAX_REQUEST_BYTES`` is a 413, JSON beyond the
depth and number limits a 400, both with a JSON-RPC error object as MCP's own errors are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from kora.core.errors import ToolSourceError
from kora.core.limits import RequestLimits, jsonrpc_refusal
from kora.core.serving import Readiness, Status, probe_routes
from kora.mcp.origin import OriginCheck, parse_allowed_origins
from kora.mcp.package import load_package_server
from kora.mcp.pool import WorkerPool
from kora.mcp.redact import RecordingEnviron, Redactor
from kora.mcp.settings import McpSettings, parse_tool_timeouts
from kora.mcp.source import LoadedTools, load_tools
from kora.mcp.tools import build_inline_server

logger = logging.getLogger(__name__)


def _load_redacted(source: str, filename: str, redactor: Redactor) -> LoadedTools:
    """Load the tools noting the variables their top level reads; redact the error if loading fails."""
    real = os.environ
    # Swapped, not cleared: the stand-in reads and writes the real environment (hence noqa B003).
    os.environ = RecordingEnviron(real, redactor)  # type: ignore[assignment]  # noqa: B003
    try:
        return load_tools(source, filename)
    except ToolSourceError as exc:
        raise ToolSourceError(redactor.redact(exc.message), exc.line) from None
    finally:
        os.environ = real  # noqa: B003


def _inline_server(settings: McpSettings) -> tuple[MCPServer[Any], WorkerPool]:
    source, filename = settings.tools_source()
    redactor = Redactor(os.environ)
    loaded = _load_redacted(source, filename, redactor)
    pool = WorkerPool(source, filename, settings.mcp_tool_workers)
    server = build_inline_server(
        loaded.tools,
        pool,
        name=settings.mcp_server_name,
        timeout_for=parse_tool_timeouts(settings.mcp_tool_timeouts),
        default_timeout=settings.mcp_tool_timeout_seconds,
        redactor=redactor,
    )
    logger.info("serving %d inline tool(s): %s", len(loaded.tools), ", ".join(loaded.tools))
    return server, pool


async def tool_listing(server: MCPServer[Any]) -> list[dict[str, Any]]:
    """The ``/mcp/tools`` entries: name, description, input schema (and output schema or ``None``)."""
    return [
        {
            "name": tool.name,
            "description": tool.description or "",
            "input_schema": tool.input_schema,
            "output_schema": tool.output_schema,
        }
        for tool in await server.list_tools()
    ]


def create_app(settings: McpSettings) -> FastAPI:
    """Build the tool server for ``settings``: inline tools, or the package named by ``mcp_package``.

    Loads and checks the tools now, so every start-up problem surfaces here. Raises ``ToolSourceError``
    (bad inline source), ``kora.mcp.package.PackageError`` (package missing or without a server) or
    ``kora.core.settings_errors.SettingsError`` (tools file unreadable). Worker processes start with the
    app's lifespan and stop with it.
    """
    pool: WorkerPool | None = None
    if settings.mcp_package:
        server = load_package_server(settings.mcp_package)
        logger.info("serving the MCP server of package %r", settings.mcp_package)
    else:
        server, pool = _inline_server(settings)
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=settings.mcp_stateless_http,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    ready = False

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal ready
        if pool is not None:
            pool.start()  # in the background: /health answers while the workers load the tools
        try:
            # Mounted apps' lifespans do not run, so the SDK's session manager is started here.
            async with server.session_manager.run():
                ready = True
                yield
        finally:
            ready = False
            if pool is not None:
                await pool.close()

    app = FastAPI(title="Kora MCP tool server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def readiness() -> Readiness:
        if ready and (pool is None or pool.started):
            return Readiness(Status.READY)
        return Readiness(Status.STARTING, ["the tool workers are starting"])

    app.router.routes.extend(probe_routes(readiness))

    @app.get("/mcp/tools")
    async def tools() -> dict[str, list[dict[str, Any]]]:
        return {"tools": await tool_listing(server)}

    # Mounted at "/" with the endpoint at "/mcp": mounting at "/mcp" answers POST /mcp with a 307 redirect.
    app.mount("/", mcp_app)
    app.add_middleware(RequestLimits, max_body_bytes=settings.mcp_max_request_bytes, refuse=jsonrpc_refusal)
    # Outermost: a forbidden origin is refused before its body is read.
    app.add_middleware(OriginCheck, allowed=parse_allowed_origins(settings.mcp_allowed_origins))
    return app
