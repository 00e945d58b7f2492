"""The A2A agent card (docs/a2a.md "Agent card").

:class:`AgentCardSource` builds an A2A 1.0 card, with the 0.3 fields, using the SDK's types and serialiser: name,
description, version, ``protocolVersion`` ``"0.3.0"``, the ``url`` clients reach the JSON-RPC endpoint at,
capabilities (streaming; push notifications with the shared ``postgres`` task store only; nothing else is claimed:
tasks keep no state transition history), default input modes (``text/plain`` and ``application/json``: data parts
reach the model as JSON text; file parts are refused) and output modes (``text/plain``), and one skill per tool the
model can call (tool-server tools, delegation targets, memory tools). ``supportedInterfaces`` lists JSON-RPC at A2A
1.0 first, then the HTTP+JSON (REST) binding at 1.0 (its URL without the trailing slash, as clients append the
binding's paths to it), then JSON-RPC at 0.3 (the SDK fills the 0.3 fields ``url``, ``protocolVersion`` and
``preferredTransport`` from the 0.3 one, so 0.3 clients read the card as before).

When the agent verifies users (``AUTH_JWT_JWKS_URL`` or ``AUTH_TRUSTED_USER_HEADER``), the card says it serves the
authenticated extended card (1.0 ``capabilities.extendedAgentCard``, 0.3 ``supportsAuthenticatedExtendedCard``) and,
with tokens, names the bearer scheme in ``securitySchemes`` (no ``securityRequirements``: anonymous callers are
served too). The extended card is the same card, answered only to a verified user (Kora keeps nothing on the card
that anonymous callers may not read). Each served card has an ``ETag`` (a hash of its bytes), so clients revalidate
with ``If-None-Match`` (:func:`card_response`). The SDK's own card route does the same for one fixed card; Kora's
card carries the URL each request reached the agent at, which its per-card modifier (given the card, not the
request) cannot know, hence this route.

The card is rebuilt only when its inputs (public URL or tool list) change; the tool list comes from the runtime's
cached definitions, so serving the card never opens a tool server.

The ``url`` is ``AGENT_PUBLIC_URL`` when set. Otherwise it is derived from the request: the ``X-Forwarded-
Proto``/``X-Forwarded-Host``/``X-Forwarded-Prefix`` headers a gateway sets win over the request's own scheme, host
and root path, so the card stays right behind the gateway's path prefix (``/{namespace}/agent/{name}/``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from email.utils import formatdate
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityScheme,
)
from a2a.utils import constants
from starlette.requests import Request
from starlette.responses import Response

import kora
from kora.agent.settings import AgentSettings

#: A2A protocol version of the card's 0.3 fields.
PROTOCOL_VERSION = "0.3.0"
#: The A2A 1.0 interface's version (the SDK's).
PROTOCOL_VERSION_1 = constants.PROTOCOL_VERSION_1_0
#: The bindings' names in ``supportedInterfaces`` (A2A 1.0 "Protocol bindings").
JSONRPC_BINDING = "JSONRPC"
REST_BINDING = "HTTP+JSON"
#: The card's name for the bearer token scheme (``securitySchemes``), when the agent verifies tokens.
BEARER_SCHEME = "bearer"
INPUT_MODES = ["text/plain", "application/json"]
OUTPUT_MODES = ["text/plain"]
#: How long clients and caches may keep a card without revalidating (seconds): tools change rarely.
CARD_MAX_AGE_SECONDS = 300
#: Distinct base URLs whose cards are kept at once.
MAX_CACHED_URLS = 16

ToolDefinitions = Callable[[], Sequence[Mapping[str, Any]]]
#: The request headers a card's URL is derived from when ``AGENT_PUBLIC_URL`` is not set (:func:`public_base_url`),
#: as a ``Vary`` header's value.
URL_HEADERS = "Host, X-Forwarded-Proto, X-Forwarded-Host, X-Forwarded-Prefix"


def public_base_url(settings: AgentSettings, request: Request) -> str:
    """The base URL (with trailing ``/``) clients reach this agent at, for the card's ``url``.

    ``AGENT_PUBLIC_URL`` when set; else from ``X-Forwarded-*`` headers (first value of each, as proxies
    append), falling back to the request's scheme, ``Host`` and ASGI root path.
    """
    if settings.agent_public_url:
        return settings.agent_public_url.rstrip("/") + "/"
    headers = request.headers

    def forwarded(name: str) -> str:
        return headers.get(name, "").split(",")[0].strip()

    scheme = forwarded("x-forwarded-proto") or request.url.scheme
    host = forwarded("x-forwarded-host") or headers.get("host") or request.url.netloc
    prefix = forwarded("x-forwarded-prefix") or str(request.scope.get("root_path", ""))
    prefix = prefix.strip("/")
    return f"{scheme}://{host}/{prefix + '/' if prefix else ''}"


def card_response(
    wire: Mapping[str, Any], request: Request, changed_at: float, *, from_request: bool = False
) -> Response:
    """The card ``wire`` as an HTTP response: JSON with ``Cache-Control: public, max-age=...``, a strong ``ETag``
    (SHA-256 of the body) and ``Last-Modified`` (``changed_at``, Unix seconds: when the card's contents last
    changed); 304 without a body when ``If-None-Match`` names that tag (or ``*``). ``from_request``: the card's URL
    was derived from the request's headers (:func:`public_base_url` without ``AGENT_PUBLIC_URL``), so the answer
    says ``Vary`` on those headers (:data:`URL_HEADERS`): a shared cache keeps one card per URL, and a request that
    names another host never has its card served to others."""
    body = json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {
        "Cache-Control": f"public, max-age={CARD_MAX_AGE_SECONDS}",
        "ETag": etag,
        "Last-Modified": formatdate(changed_at, usegmt=True),
    }
    if from_request:
        headers["Vary"] = URL_HEADERS
    asked = {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}
    if etag in asked or "*" in asked:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _skill(tool: Mapping[str, Any]) -> AgentSkill:
    source = str(tool.get("source", "tool"))
    # "mcp:calc" -> tags ["mcp", "calc"]: lets clients group skills by the tool server they come from.
    tags = [part for part in source.split(":") if part]
    name = str(tool["name"])
    return AgentSkill(id=name, name=name, description=str(tool.get("description") or name), tags=tags)


class AgentCardSource:
    """Builds and caches the agent card. ``tools`` returns the runtime's tool definitions (``{name,
    description, source, ...}``), or an empty list while the runtime loads; delegation targets come from
    ``settings.sub_agent_urls`` so they are on the card even before that."""

    def __init__(self, settings: AgentSettings, tools: ToolDefinitions) -> None:
        self._settings = settings
        self._tools = tools
        self._key: tuple[tuple[str, str, str], ...] | None = None
        self._tool_list: list[Mapping[str, Any]] = []
        # Base URL -> (card, wire dict); a handful of entries (direct, via gateway), cleared when tools change.
        self._by_url: dict[str, tuple[AgentCard, dict[str, Any]]] = {}
        self.builds = 0  # how many times the skills were (re)built, for tests of the cache
        #: When the card's contents last changed (Unix seconds): start-up, or the tool list changing.
        self.changed_at = time.time()

    def card(self, base_url: str) -> AgentCard:
        """The card for clients that reach the agent at ``base_url``; rebuilt only when an input changed."""
        return self._entry(base_url)[0]

    def card_dict(self, base_url: str) -> dict[str, Any]:
        """The card as served on the wire (A2A 0.3 JSON with the 1.0 fields the SDK adds)."""
        return self._entry(base_url)[1]

    def _entry(self, base_url: str) -> tuple[AgentCard, dict[str, Any]]:
        self._refresh_tools()
        entry = self._by_url.get(base_url)
        if entry is None:
            if len(self._by_url) >= MAX_CACHED_URLS:  # forged Host headers must not grow the cache unboundedly
                self._by_url.clear()
            card = self._build(base_url, self._tool_list)
            wire = agent_card_to_dict(card)
            entry = self._by_url[base_url] = (card, wire)
        return entry

    def _refresh_tools(self) -> None:
        tools = list(self._tools())
        names = {str(t["name"]) for t in tools}
        # Delegation targets are skills even before the runtime (which owns the tool list) has loaded.
        for agent in self._settings.sub_agent_urls:
            if f"delegate_to_{agent}" not in names:
                tools.append(
                    {
                        "name": f"delegate_to_{agent}",
                        "description": f"Delegate a task to the peer agent '{agent}' and return its answer.",
                        "source": "delegation",
                    }
                )
        key = tuple((str(t["name"]), str(t.get("description") or ""), str(t.get("source", ""))) for t in tools)
        if key != self._key:
            self._key = key
            self._tool_list = tools
            self._by_url.clear()
            self.builds += 1
            self.changed_at = time.time()

    def _chat_skill(self) -> AgentSkill:
        return AgentSkill(
            id="chat",
            name=self._settings.agent_name,
            description=self._settings.agent_description,
            tags=["chat"],
        )

    @property
    def extended(self) -> bool:
        """True when the card offers the authenticated extended card: the agent verifies users."""
        return bool(self._settings.auth_jwt_jwks_url or self._settings.auth_trusted_user_header)

    def _security_schemes(self) -> dict[str, SecurityScheme]:
        if not self._settings.auth_jwt_jwks_url:
            return {}
        bearer = HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="JWT", description="A user's token; without one the caller is anonymous."
        )
        return {BEARER_SCHEME: SecurityScheme(http_auth_security_scheme=bearer)}

    def _build(self, base_url: str, tools: Sequence[Mapping[str, Any]]) -> AgentCard:
        settings = self._settings
        return AgentCard(
            name=settings.agent_name,
            description=settings.agent_description,
            version=kora.__version__,
            supported_interfaces=[
                AgentInterface(url=base_url, protocol_binding=JSONRPC_BINDING, protocol_version=PROTOCOL_VERSION_1),
                # Without the trailing slash: clients append the binding's paths (``/message:send``) to it.
                AgentInterface(
                    url=base_url.rstrip("/") or base_url,
                    protocol_binding=REST_BINDING,
                    protocol_version=PROTOCOL_VERSION_1,
                ),
                AgentInterface(url=base_url, protocol_binding=JSONRPC_BINDING, protocol_version=PROTOCOL_VERSION),
            ],
            # Left unset (not false) without an extended card, so the card carries no field about it. Push
            # notifications are delivered with the shared task store only (kora.agent.a2a.push).
            capabilities=AgentCapabilities(
                streaming=True,
                push_notifications=settings.task_store_type == "postgres",
                extended_agent_card=True if self.extended else None,
            ),
            security_schemes=self._security_schemes(),
            default_input_modes=INPUT_MODES,
            default_output_modes=OUTPUT_MODES,
            # A2A requires at least one skill: the agent's own conversation comes first, then its tools.
            skills=[self._chat_skill(), *(_skill(tool) for tool in tools)],
        )
