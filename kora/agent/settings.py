"""Agent server settings, read from the environment (docs/configuration.md "Agent server").

Each setting is read from the upper-case form of its name (``agent_port`` <- ``AGENT_PORT``). On top of
the settings shared with KAOS's agent server (same names and defaults) Kora adds a few operational settings
(marked "Kora" below); their names follow the same rule. :func:`load_agent_settings` validates everything at
once and raises :class:`~kora.core.settings_errors.SettingsError` naming every bad variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from kora.agent.approvals import parse_approval_patterns
from kora.core import env as envnames
from kora.core import protocol
from kora.core.env import DEFAULT_MAX_REQUEST_BYTES, MIN_MAX_REQUEST_BYTES
from kora.core.net import is_http_url, is_postgres_url
from kora.core.serving import load_settings
from kora.core.settings_model import WorkloadSettings

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
#: Scopes an agent may read, narrowest first: this session < this agent's memories of the user (across
#: sessions) < the user's memories across every agent bound to the store. The store-wide scope ``store`` is for
#: administrators only, so it is never an agent's ceiling.
ReadScope = Literal["session", "agent", "user"]


def parse_sub_agents(value: str) -> dict[str, str]:
    """Parse ``agent_sub_agents``: comma-separated ``name:url`` pairs -> ``{name: url}``.

    The name ends at the first colon, so URLs keep theirs: ``"math:http://math:8000"``. Raises
    ``ValueError`` naming each malformed entry.
    """
    result: dict[str, str] = {}
    bad: list[str] = []
    for entry in envnames.split_names(value):
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or not is_http_url(url):
            bad.append(entry)
            continue
        result[name] = url
    if bad:
        raise ValueError(f"entries must be 'name:http(s)://url', got {', '.join(repr(b) for b in bad)}")
    return result


#: An HTTP header name (RFC 9110 "token").
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Headers that cannot carry a trusted user id: they are credentials, framing, or already Kora's.
_RESERVED_HEADERS = frozenset(
    name.lower()
    for name in (
        "Authorization",
        "Cookie",
        "Host",
        "Content-Type",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        protocol.SESSION_HEADER,
        protocol.DELEGATED_BY_HEADER,
    )
)
#: Settings that only mean something with ``auth_jwt_jwks_url``.
_JWT_DEPENDENT = ("auth_jwt_issuer", "auth_jwt_audience", "auth_jwt_user_claim")

#: How the per-name variables are written in docs: ``MCP_SERVER_<NAME>_URL``, ``PEER_AGENT_<NAME>_CARD_URL``.
_MCP_SERVER_URL = envnames.mcp_server_url_var("<NAME>")
_PEER_AGENT_CARD_URL = envnames.peer_agent_card_url_var("<NAME>")


class AgentSettings(WorkloadSettings):
    """Settings of one agent server. Required: ``AGENT_NAME``, ``MODEL_API_URL``, ``MODEL_NAME``.

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``);
    descriptions starting "Kora:" mark Kora's additions to the agent resource's standard settings.
    """

    # Identity and model.
    agent_name: str = Field(
        min_length=1, description="The agent's name: its memory app name, agent card name and identity in delegation."
    )
    model_api_url: str = Field(
        description="OpenAI-compatible base URL of the model API, including `/v1`.",
        examples=["http://model:8000/v1"],
        json_schema_extra={"format": "uri"},  # a URL in the schema and the docs
    )
    model_name: str = Field(min_length=1, description="Model name sent to the model API.")
    agent_description: str = Field(default="AI Agent", description="Description of the agent, shown in its agent card.")
    agent_instructions: str = Field(
        default="You are a helpful assistant.", description="System instructions sent to the model."
    )
    # Serving.
    agent_port: int = Field(default=8000, ge=1, le=65535, description="Port to listen on.")
    agent_log_level: LogLevel = Field(default="INFO", description="Log level (any case).")
    agent_access_log: bool = Field(default=False, description="Write uvicorn's access log (a line per request).")
    agent_a2a_sdk_spans: bool = Field(
        default=False,
        description="Kora: with tracing on, also export the a2a-sdk's own spans (its request handler, event queue "
        "and task manager: about 50 per `message/send`), for debugging the A2A layer. Off, an A2A request is its "
        "server span `POST /` and Kora's `a2a task` span with the turn below it.",
    )
    agent_max_request_bytes: int = Field(
        default=DEFAULT_MAX_REQUEST_BYTES,
        ge=MIN_MAX_REQUEST_BYTES,
        description="Kora: largest request body accepted, in bytes; a larger one is refused with 413 before it is "
        "read (see Request limits).",
    )
    # Tools and delegation.
    agent_sub_agents: str = Field(
        default="",
        description="Sub-agents in the direct format: comma-separated `name:url` pairs (the name ends at the "
        "first colon), each offered to the model as a delegation tool.",
        examples=["math:http://math:8000,search:http://search:8000"],
    )
    peer_agents: str = Field(
        default="",
        description=f"Peers in the orchestrator format: comma-separated names; each needs `{_PEER_AGENT_CARD_URL}`.",
    )
    mcp_servers: str = Field(
        default="",
        description=f"Tool servers: comma-separated names; each needs `{_MCP_SERVER_URL}`.",
        examples=["web-search,calc"],
    )
    agentic_loop_max_steps: int = Field(default=5, ge=1, description="Model requests per turn, at most.")
    # Budgets (Kora): each bounds one turn (one A2A task); unset: no limit. Checked before each model request and
    # tool call (kora.agent.budget).
    model_price_input_per_million: float | None = Field(
        default=None, ge=0, description="Kora: USD per million input tokens (the ModelAPI's `spec.pricing`)."
    )
    model_price_output_per_million: float | None = Field(
        default=None, ge=0, description="Kora: USD per million output tokens (the ModelAPI's `spec.pricing`)."
    )
    budget_max_tool_calls: int | None = Field(
        default=None, ge=0, description="Kora: tool calls per turn (delegations included), at most; unset: no limit."
    )
    budget_max_model_requests: int | None = Field(
        default=None,
        ge=1,
        description="Kora: model requests per turn, at most, counting those of the agents it delegates to; unset: "
        "no limit.",
    )
    budget_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Kora: tokens (input plus output, as the model reports them) per turn, delegations included; "
        "unset: no limit.",
    )
    budget_max_seconds: float | None = Field(
        default=None, gt=0, description="Kora: wall-clock seconds per turn from its start; unset: no limit."
    )
    budget_max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Kora: USD per turn at the model's prices (needs `MODEL_PRICE_INPUT_PER_MILLION` and "
        "`MODEL_PRICE_OUTPUT_PER_MILLION`), delegations included; unset: no limit.",
    )
    tool_approval_required: str = Field(
        default="",
        description="Kora: tools whose calls wait for a person's approval, comma-separated `server/tool` patterns "
        "(`*` matches any characters; an MCP tool is `<server>/<tool>`, a delegation `agents/<peer>`); empty: none. An "
        "Agent's `spec.config.toolApproval.required`.",
        examples=["files/delete_*,agents/*"],
    )
    tool_approval_timeout_seconds: float = Field(
        default=900.0,
        gt=0,
        description="Kora: seconds a call waits for its approval; then it is rejected and the turn goes on. An Agent's "
        "`spec.config.toolApproval.timeoutSeconds`.",
    )
    # Memory.
    memory_enabled: bool = Field(default=True, description="`false` selects NullMemory (nothing kept or replayed).")
    memory_context_limit: int = Field(default=6, ge=0, description="Events of the session replayed as history.")
    memory_max_sessions: int = Field(
        default=1000, ge=1, description="LocalMemory bound: sessions kept (past it the oldest 10 % are evicted)."
    )
    memory_max_session_events: int = Field(default=500, ge=1, description="LocalMemory bound: events per session.")
    memory_store_endpoint: str = Field(
        default="",
        description="Memory service URL (a MemoryStore's `kora memory`); selects RemoteMemory.",
        json_schema_extra={"format": "uri"},  # a URL in the schema and the docs
    )
    memory_store_token: str = Field(
        default="",
        repr=False,
        description="Kora: bearer token sent to the memory service (its `MEMORY_SERVICE_AGENT_TOKEN`); the operator "
        "and `kora up` set it with `MEMORY_STORE_ENDPOINT`. Empty: the store refuses the agent (401).",
    )
    memory_max_read_scope: ReadScope = Field(
        default="session",
        description="Broadest scope recall and `search_memory` may read: `session` < `agent` (this agent's "
        "memories of the user) < `user` (the user's memories across agents). Above `session` needs "
        "`MEMORY_STORE_ENDPOINT`.",
    )
    memory_tools: Literal["all", "read", "write"] | None = Field(
        default=None,
        description="Memory tools the model gets: `all` (search and save), `read` (`search_memory`) or `write` "
        "(`save_memory`); unset: none.",
    )
    memory_failure_mode: Literal["soft", "strict"] = Field(
        default="soft",
        description="RemoteMemory while the store is unreachable: `soft` answers from the agent's own short-term "
        "window (`/ready` says `memory: degraded`, writes are queued and replayed); `strict` answers 503.",
    )
    memory_rolling_summary: bool = Field(
        default=False, description="RemoteMemory: keep a rolling summary of turns that left the window (medium tier)."
    )
    memory_client_token_budget: int = Field(
        default=2000, ge=0, description="RemoteMemory: most tokens (estimated) of window events put before a turn."
    )
    # A2A.
    task_store_type: Literal["local", "null", "postgres"] = Field(
        default="local",
        description="A2A task store: `local` keeps finished tasks, `null` only running ones, `postgres` keeps them "
        "in the database of `TASK_STORE_URL`, shared by every replica of the agent.",
    )
    task_store_url: str = Field(
        default="",
        repr=False,
        description="Kora: the `postgresql://` connection string of the shared task store (needs "
        "`TASK_STORE_TYPE=postgres`; the agent creates its tables in schema `kora_a2a`).",
        examples=["postgresql://kora:secret@postgres:5432/kora"],
    )
    task_lease_seconds: float = Field(
        default=30.0,
        ge=1.0,
        le=60.0,
        description="Kora: `postgres` task store: a running task's lease; the replica running it renews it every "
        "third of it, and a task whose lease ran out (its replica died) is ended `failed` by another replica.",
    )
    task_retention_seconds: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="Kora: `postgres` task store: how long a finished task (completed, failed, canceled, rejected) is "
        "kept after its last change; older ones are deleted in the background, with their events and push configs. "
        "Paused turns (calls waiting for approval) whose calls expired longer than this (an hour at least) ago are "
        "deleted too (their agent no longer runs: a running one resumes them at their expiry).",
    )

    # Kora's additions.
    agent_host: str = Field(
        default="0.0.0.0",
        description="Kora: interface to bind (a pod listens on every interface; tests pass `127.0.0.1`).",
    )
    model_api_key: str = Field(
        default="kora-no-key",
        description="Kora: API key sent to the model API (OpenAI-compatible servers that need none accept any).",
    )
    model_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Kora: seconds to connect and between reads of a model answer; past it the turn fails with 504.",
    )
    model_max_retries: int = Field(
        default=2,
        ge=0,
        description="Kora: retries of a model request after 408/409/429/5xx, timeouts and connection errors "
        "(back-off from 0.5 s, at most 8 s, or `Retry-After`); a stream only before its first event.",
    )
    delegation_timeout_seconds: float = Field(
        default=120.0, gt=0, description="Kora: seconds to wait for a peer agent's answer to a delegated task."
    )
    mcp_call_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Kora: seconds one call of a tool server's tool may take; past it the call is given up and the "
        "model is told the tool failed (the turn goes on). The default matches what tool servers allow: `kora mcp` "
        "stops a tool after `MCP_TOOL_TIMEOUT_SECONDS` (30), a gateway's MCP route after 30s; raise it with them.",
    )
    agent_public_url: str = Field(
        default="",
        description="Kora: the base URL clients reach this agent at (agent card `url`); empty: taken from each "
        "request.",
        json_schema_extra={"format": "uri"},  # a URL in the schema and the docs
    )
    # The tests run both values of this one.
    agent_direct_first_request: bool = Field(
        default=True,
        description="Kora: send each turn's first model request directly (a text answer then ends the turn "
        "without starting pydantic-ai's run, ~2 ms of CPU less); `false` runs every turn wholly in pydantic-ai's "
        "Agent. Same answers, events and errors either way. A turn with a time budget (`BUDGET_MAX_SECONDS`) always "
        "runs in the Agent, which cuts its steps at the deadline.",
    )
    # User identity (docs/identity.md): both sources off unless set; without them every request is anonymous.
    auth_jwt_jwks_url: str = Field(
        default="",
        description="Kora: URL of the JSON Web Key Set that signs users' bearer tokens; set, a request's "
        "`Authorization: Bearer <JWT>` is verified and its user claim becomes the turn's user id (a token that "
        "fails answers 401). Empty: bearer tokens are not read.",
        examples=["https://idp.example.com/realms/kora/protocol/openid-connect/certs"],
        json_schema_extra={"format": "uri"},  # a URL in the schema and the docs
    )
    auth_jwt_issuer: str = Field(
        default="",
        description="Kora: the `iss` a bearer token must carry (needs `AUTH_JWT_JWKS_URL`); empty: not checked.",
    )
    auth_jwt_audience: str = Field(
        default="",
        description="Kora: the `aud` a bearer token must include (needs `AUTH_JWT_JWKS_URL`); empty: tokens that "
        "name an audience are refused.",
    )
    auth_jwt_user_claim: str = Field(
        default="sub",
        min_length=1,
        description="Kora: the bearer token's claim holding the user id (needs `AUTH_JWT_JWKS_URL`).",
    )
    agent_admin_token: str = Field(
        default="",
        repr=False,
        description="Kora: the operator's bearer token on this agent: `/memory/*` for every session and erasure of "
        "any session or user (docs/identity.md), checked before any user JWT. Empty: no request is the operator's.",
    )
    auth_trusted_user_header: str = Field(
        default="",
        description="Kora: a header set by a trusted gateway whose value is the user id (1-256 visible ASCII "
        "characters and spaces, else 400); empty: no header is trusted. Set it only when every request passes "
        "that gateway, which must overwrite the header.",
        examples=["X-Forwarded-User"],
    )

    # Resolved by load_agent_settings from MCP_SERVER_<NAME>_URL / PEER_AGENT_<NAME>_CARD_URL (documented by
    # NAMED_VARIABLES); not read under their own names, so not part of the settings' schema.
    mcp_server_urls: SkipJsonSchema[dict[str, str]] = Field(default_factory=dict)
    sub_agent_urls: SkipJsonSchema[dict[str, str]] = Field(default_factory=dict)

    @field_validator("model_api_url")
    @classmethod
    def _model_api_url_is_http(cls, value: str) -> str:
        if not is_http_url(value):
            raise ValueError("must be an http(s) URL such as http://model:8000/v1")
        return value.rstrip("/")

    @field_validator("agent_sub_agents")
    @classmethod
    def _sub_agents_well_formed(cls, value: str) -> str:
        parse_sub_agents(value)
        return value

    @field_validator("tool_approval_required")
    @classmethod
    def _approval_patterns_well_formed(cls, value: str) -> str:
        parse_approval_patterns(value)
        return value

    @field_validator("memory_store_endpoint")
    @classmethod
    def _memory_store_endpoint_is_http(cls, value: str) -> str:
        if value and not is_http_url(value):
            raise ValueError("must be an http(s) URL or empty")
        return value.rstrip("/")

    @field_validator("memory_max_read_scope")
    @classmethod
    def _pooled_scope_needs_a_store(cls, value: ReadScope, info: ValidationInfo) -> ReadScope:
        # LocalMemory keeps each session apart: a broader ceiling would promise recall it cannot give.
        # Fields declared earlier are in info.data only when valid; a bad one is already reported.
        enabled, endpoint = info.data.get("memory_enabled", False), info.data.get("memory_store_endpoint", "-")
        if value != "session" and enabled and not endpoint:
            raise ValueError(
                f"{value!r} reads across sessions and needs a MemoryStore (MEMORY_STORE_ENDPOINT); "
                "pod-local memory offers 'session' only"
            )
        return value

    @field_validator("auth_jwt_jwks_url")
    @classmethod
    def _jwks_url_is_http(cls, value: str) -> str:
        if value and not is_http_url(value):
            raise ValueError("must be an http(s) URL or empty")
        return value

    @field_validator("auth_trusted_user_header")
    @classmethod
    def _trusted_header_is_a_free_name(cls, value: str) -> str:
        value = value.strip()
        if value and not _HEADER_NAME.fullmatch(value):
            raise ValueError("must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)")
        if value.lower() in _RESERVED_HEADERS:
            raise ValueError(f"{value!r} already means something else to the agent server; choose another header")
        return value

    @field_validator("budget_max_cost_usd")
    @classmethod
    def _cost_needs_prices(cls, value: float | None, info: ValidationInfo) -> float | None:
        # A cost budget without prices could never be enforced: refuse it rather than ignore it.
        if value is not None and (
            info.data.get("model_price_input_per_million") is None
            or info.data.get("model_price_output_per_million") is None
        ):
            raise ValueError(
                "a cost budget needs the model's prices: set MODEL_PRICE_INPUT_PER_MILLION and "
                "MODEL_PRICE_OUTPUT_PER_MILLION (a ModelAPI's spec.pricing)"
            )
        return value

    @field_validator("agent_log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def mcp_server_names(self) -> list[str]:
        """Names listed in ``MCP_SERVERS``, in order."""
        return envnames.split_names(self.mcp_servers)


#: The per-name variables :func:`load_agent_settings` reads besides the model's fields (docs/configuration.md).
NAMED_VARIABLES = (
    envnames.VariableDoc(
        _MCP_SERVER_URL,
        "URL",
        f"Base URL of tool server `<name>` (`{envnames.MCP_PATH}` is appended unless it ends with it).",
        required=f"for each name in `{envnames.MCP_SERVERS}`",
    ),
    envnames.VariableDoc(
        _PEER_AGENT_CARD_URL,
        "URL",
        "Base URL of peer agent `<name>` (its agent card is fetched from there).",
        required=f"for each name in `{envnames.PEER_AGENTS}`",
    ),
)


def _resolve_urls(
    names: list[str], variable_of: Mapping[str, str], environ: Mapping[str, str], problems: list[str]
) -> dict[str, str]:
    urls: dict[str, str] = {}
    for name in names:
        variable = variable_of[name]
        url = environ.get(variable, "").strip()
        if not url:
            problems.append(f"{variable}: required because {name!r} is listed, but not set")
        elif not is_http_url(url):
            problems.append(f"{variable}: must be an http(s) URL (got {url!r})")
        else:
            urls[name] = url.rstrip("/")
    return urls


def _auth_problems(fields: Mapping[str, str]) -> list[str]:
    """Identity settings (as read, lower-case names) that cannot work: a token check without the keys to
    verify tokens with."""
    if fields.get("auth_jwt_jwks_url", "").strip():
        return []
    return [
        f"{name.upper()}: set, but bearer tokens are only verified with AUTH_JWT_JWKS_URL, which is not set"
        for name in _JWT_DEPENDENT
        if fields.get(name, "").strip()
    ]


def _task_store_problems(fields: Mapping[str, str]) -> list[str]:
    """The shared task store's settings (as read, lower-case names) that cannot work; never echoes the URL,
    which holds a password."""
    url = fields.get("task_store_url", "")
    if fields.get("task_store_type", "local").strip() != "postgres":
        return [f"{envnames.TASK_STORE_URL}: set, but only read with TASK_STORE_TYPE=postgres"] if url else []
    if not url:
        return [f"{envnames.TASK_STORE_URL}: required with TASK_STORE_TYPE=postgres, but not set"]
    if not is_postgres_url(url):
        return [
            f"{envnames.TASK_STORE_URL}: must be a postgresql:// connection string "
            "(postgresql://user:password@host:5432/database)"
        ]
    return []


def load_agent_settings(environ: Mapping[str, str] | None = None) -> AgentSettings:
    """Read and validate the agent's settings from ``environ`` (default: the process environment).

    Resolves ``MCP_SERVER_<NAME>_URL`` for each name in ``MCP_SERVERS`` (``/mcp`` appended) and the
    sub-agents from ``AGENT_SUB_AGENTS`` (direct format) plus ``PEER_AGENT_<NAME>_CARD_URL`` for each name
    in ``PEER_AGENTS`` (orchestrator format). Raises ``SettingsError`` listing every bad variable.
    """
    # Pass the mapping explicitly so callers (tests, the local runtime) need not touch os.environ.
    env = dict(os.environ if environ is None else environ)
    upper = {key.upper(): value for key, value in env.items()}
    mcp_names = envnames.split_names(upper.get(envnames.MCP_SERVERS, ""))
    peer_names = envnames.split_names(upper.get(envnames.PEER_AGENTS, ""))
    url_problems: list[str] = []
    mcp_urls = _resolve_urls(mcp_names, {n: envnames.mcp_server_url_var(n) for n in mcp_names}, upper, url_problems)
    peer_urls = _resolve_urls(
        peer_names, {n: envnames.peer_agent_card_url_var(n) for n in peer_names}, upper, url_problems
    )

    def prepare(fields: dict[str, Any]) -> list[str]:
        fields.pop("mcp_server_urls", None)  # resolved from MCP_SERVERS and PEER_AGENTS here, never read
        fields.pop("sub_agent_urls", None)
        return _auth_problems(fields) + _task_store_problems(fields)

    settings = load_settings(AgentSettings, "kora agent", env, prepare=prepare, check=lambda _: url_problems)
    sub_agents = parse_sub_agents(settings.agent_sub_agents)
    sub_agents.update(peer_urls)
    return settings.model_copy(
        update={
            "mcp_server_urls": {name: envnames.mcp_endpoint(url) for name, url in mcp_urls.items()},
            "sub_agent_urls": sub_agents,
        }
    )
