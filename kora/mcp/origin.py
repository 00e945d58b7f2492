"""``Origin`` validation on the tool server (MCP Streamable HTTP transport, "Security warning": servers MUST
validate the ``Origin`` header, against DNS rebinding).

A request that sends ``Origin`` must name an allowed origin (``MCP_ALLOWED_ORIGINS``), else it is refused with
HTTP 403 and a JSON-RPC error object (-32600, ``data.type`` ``forbidden_origin``) before the MCP SDK sees it. A
request without ``Origin`` (in-cluster callers, the agent, CLI clients: anything that is not a browser) is not
affected. The ``Host`` check of the SDK's own DNS-rebinding protection stays off: the server is reached under
Service names and gateway hosts that cannot be listed in advance.

Allowed entries are origins (``scheme://host[:port]``); ``scheme://host:*`` allows that host on any port (and
without one), ``*`` allows every origin. The default allows ``localhost``, ``127.0.0.1`` and ``[::1]`` over
http and https on any port.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kora.core.errors import ForbiddenOrigin
from kora.core.limits import jsonrpc_refusal

#: ``MCP_ALLOWED_ORIGINS``' default: the local host under its three names, http or https, any port.
DEFAULT_ALLOWED_ORIGINS = ",".join(
    f"{scheme}://{host}:*" for scheme in ("http", "https") for host in ("localhost", "127.0.0.1", "[::1]")
)


def parse_allowed_origins(value: str) -> list[str]:
    """``MCP_ALLOWED_ORIGINS`` (comma-separated) -> its entries; raises ``ValueError`` naming an entry that is
    neither ``*`` nor ``scheme://host[:port|:*]`` (http or https, nothing after the authority)."""
    entries = [entry.strip().rstrip("/") for entry in value.split(",") if entry.strip()]
    bad = []
    for entry in entries:
        scheme, sep, authority = entry.partition("://")
        if entry != "*" and (not sep or scheme not in {"http", "https"} or not authority or "/" in authority):
            bad.append(entry)
    if bad:
        raise ValueError(f"entries must be '*' or 'http(s)://host[:port|:*]', got {', '.join(map(repr, bad))}")
    return entries


def origin_allowed(origin: str, allowed: Sequence[str]) -> bool:
    """True when ``origin`` matches an entry of ``allowed`` (see the module docstring)."""
    for entry in allowed:
        if entry in {"*", origin}:
            return True
        if entry.endswith(":*"):
            base = entry[:-2]
            port = origin.removeprefix(base + ":") if origin.startswith(base + ":") else None
            if origin == base or (port is not None and port.isdigit()):
                return True
    return False


class OriginCheck:
    """ASGI middleware refusing HTTP requests whose ``Origin`` is not in ``allowed`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, allowed: Sequence[str]) -> None:
        self.app = app
        self.allowed = list(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 403 when it sends an ``Origin`` that is not allowed."""
        if scope["type"] == "http":
            origin = Headers(scope=scope).get("origin")
            if origin is not None and not origin_allowed(origin, self.allowed):
                error = ForbiddenOrigin(f"Forbidden: Origin {origin[:200]!r} is not allowed (MCP_ALLOWED_ORIGINS)")
                status, body = jsonrpc_refusal(scope.get("path", ""), error)
                await JSONResponse(body, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)
