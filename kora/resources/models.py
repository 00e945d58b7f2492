"""Pydantic models of Kora's four custom resources: Agent, ModelAPI, MCPServer and MemoryStore.

User documentation: docs/resources.md (api version ``<group>/v1alpha1``). These models are the single source of truth:
``kora up`` parses manifests with them (:mod:`kora.resources.loader`), the operator validates custom objects with them
and the CRD schemas are generated from them (:mod:`kora.resources.crd`).

Wire format: camelCase keys as in YAML (``modelAPI``, ``mcpServers``, ``toolsString``); Python code may
use the snake_case field names too. Specs forbid unknown keys, so a typo is an error rather than a
silently ignored setting. Cross-field rules (mode/config consistency, ``memory.type: remote`` needs
``memoryStore``) are model validators; they raise ``ValueError`` which pydantic reports as a
``ValidationError`` at the field path of the object that holds the fields.

``apiVersion`` is ``kora.dev/v1alpha1``; ``kaos.tools/v1alpha1`` is accepted on input and normalised so
KAOS manifests carry over.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from kora.core.env import not_an_approval_pattern
from kora.core.inline_tools import unavailable_imports, unavailable_message

GROUP = "kora.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
#: Group of KAOS, whose manifests Kora accepts unchanged (input only; output always uses GROUP).
KAOS_GROUP = "kaos.tools"
ACCEPTED_API_VERSIONS = frozenset({API_VERSION, f"{KAOS_GROUP}/{VERSION}"})

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Gateway API's Duration format (GEP-2257), so the value can be copied into an HTTPRoute unchanged.
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Python distribution name (PEP 508 name, no version specifier).
_PACKAGE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            "must be a DNS-1123 label: at most 63 characters, lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def _check_duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError("must be a duration such as '30s', '2m', '1h30m' or '500ms'")
    return value


def _check_http_url(value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError("must be an http(s) URL such as http://host:8000/v1")
    return value.rstrip("/")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError("must be an environment variable name: letters, digits and '_', not starting with a digit")
    return value


def _check_tools_source(value: str) -> str:
    # Syntax errors and imports the tool server refuses surface at load time with a line number instead of
    # as a crash-looping tool server whose reason is only in its log.
    try:
        tree = ast.parse(value, filename="toolsString")
    except SyntaxError as error:
        raise ValueError(f"is not valid Python: {error.msg} (line {error.lineno})") from None
    except (RecursionError, MemoryError):
        # CPython's parser gives up on pathological nesting (-(-(-...)), a.b.b...) with these, not SyntaxError.
        raise ValueError("is not valid Python: nested too deeply for the parser") from None
    unavailable = unavailable_imports(tree)
    if unavailable:
        line, module = unavailable[0]
        raise ValueError(f"line {line}: {unavailable_message(module)}")
    return value


def parse_duration(value: str) -> float:
    """Seconds in a duration string such as ``"30s"``, ``"2m"``, ``"1h30m"`` or ``"500ms"``.

    Raises ``ValueError`` for anything else (the Gateway API Duration format).
    """
    _check_duration(value)
    return sum(int(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(value))


#: Longest duration the Gateway API format can write with one component per unit: 99999h59m59s999ms.
MAX_DURATION_SECONDS = 99999 * 3600 + 59 * 60 + 59.999


def format_duration(seconds: float) -> str:
    """The Gateway API Duration (GEP-2257) of ``seconds``, rounded to the millisecond: greatest unit first, each
    unit once, zero as ``"0s"``: ``120`` -> ``"2m"``, ``90`` -> ``"1m30s"``, ``0.5`` -> ``"500ms"``.

    The inverse of :func:`parse_duration` up to spelling. Raises ``ValueError`` for a negative value or one above
    :data:`MAX_DURATION_SECONDS`, which the format cannot express.
    """
    if not 0 <= seconds <= MAX_DURATION_SECONDS:
        raise ValueError(f"{seconds!r} seconds is outside the Gateway API duration range 0s..99999h59m59s999ms")
    millis = round(seconds * 1000)
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


DnsLabel = Annotated[str, AfterValidator(_check_dns_label)]
Duration = Annotated[str, AfterValidator(_check_duration)]
HttpUrl = Annotated[str, AfterValidator(_check_http_url)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]


class WireModel(BaseModel):
    """Base of every spec object: camelCase on the wire, snake_case in Python, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


# --- shared pieces ---------------------------------------------------------------------------------


class Kind(StrEnum):
    """The four resource kinds Kora manages."""

    AGENT = "Agent"
    MODEL_API = "ModelAPI"
    MCP_SERVER = "MCPServer"
    MEMORY_STORE = "MemoryStore"


class Phase(StrEnum):
    """``status.phase`` (docs/operator.md "Phases and conditions")."""

    PENDING = "Pending"
    WAITING = "Waiting"
    READY = "Ready"
    FAILED = "Failed"


#: Condition type reported on an Agent whose bound MemoryStore is not Ready or unreachable.
CONDITION_MEMORY_DEGRADED = "MemoryDegraded"
CONDITION_READY = "Ready"


class SecretKeySelector(WireModel):
    """A key in a Secret of the resource's namespace."""

    name: str = Field(min_length=1)
    """Name of the Secret."""
    key: str = Field(min_length=1)
    """Key within the Secret's data."""


class ValueSource(WireModel):
    """Where a value that is not written inline comes from."""

    secret_key_ref: SecretKeySelector
    """Take the value from this Secret key."""


class SecretValue(WireModel):
    """A value given inline (``value``) or read from a Secret (``valueFrom.secretKeyRef``); exactly one."""

    value: str | None = None
    """The literal value."""
    value_from: ValueSource | None = None
    """Read the value from a Secret instead."""

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretValue:
        if (self.value is None) == (self.value_from is None):
            raise ValueError("give exactly one of 'value' and 'valueFrom'")
        return self


class EnvVar(SecretValue):
    """One environment variable of a workload: ``{name, value}`` or ``{name, valueFrom: {secretKeyRef}}``."""

    name: EnvName
    """Variable name."""


class GatewayRouteSpec(WireModel):
    """Per-resource settings of the resource's gateway route."""

    timeout: Duration | None = None
    """Route timeout overriding the per-kind default (agent 120s, modelAPI 120s, mcp 30s)."""


class MemoryStoreGatewayRouteSpec(GatewayRouteSpec):
    """A MemoryStore's gateway route: none unless ``enabled`` (the store is no public endpoint; its agents reach
    it directly). Routed or not, every ``/v1`` route of the memory service needs its credentials."""

    enabled: bool = False
    """Route the memory service on the shared gateway (off by default; its API still needs credentials)."""


class ObjectMeta(BaseModel):
    """The part of Kubernetes ``metadata`` Kora reads. Other keys the API server adds are kept as given."""

    model_config = ConfigDict(extra="allow", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    name: DnsLabel
    namespace: DnsLabel = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
    uid: str | None = None


class Condition(WireModel):
    """One status condition, Kubernetes style (``type`` such as ``Ready`` or ``MemoryDegraded``)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


class ResourceStatus(WireModel):
    """``status`` of every kind, written by the operator (and shown by ``kora status``)."""

    # Unknown keys are ignored rather than rejected: status is written by controllers, not users.
    model_config = ConfigDict(extra="ignore")

    phase: Phase = Phase.PENDING
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    endpoint: str | None = None
    """Base URL the resource is reachable at."""
    observed_generation: int | None = None


def _normalise_api_version(value: object) -> object:
    if isinstance(value, str) and value in ACCEPTED_API_VERSIONS:
        return API_VERSION
    return value


class Resource(WireModel):
    """Fields common to the four kinds. Subclasses add ``kind`` and ``spec``."""

    #: Prefix of the workload's Service (and HTTPRoute) name: ``<prefix>-<metadata.name>``.
    SERVICE_PREFIX: ClassVar[str] = ""
    #: Path segment of the gateway route: ``/{namespace}/<segment>/{name}/...``.
    ROUTE_SEGMENT: ClassVar[str] = ""

    api_version: Annotated[Literal["kora.dev/v1alpha1"], BeforeValidator(_normalise_api_version)] = "kora.dev/v1alpha1"
    metadata: ObjectMeta
    status: ResourceStatus | None = None

    @model_validator(mode="after")
    def _service_name_fits(self) -> Resource:
        # The Service name must itself be a DNS-1123 label, so the prefix eats into the 63 characters.
        limit = 63 - len(self.SERVICE_PREFIX) - 1
        if len(self.metadata.name) > limit:
            raise ValueError(
                f"metadata.name: at most {limit} characters for this kind (its Service is named "
                f"'{self.SERVICE_PREFIX}-<name>')"
            )
        return self

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.metadata.name

    @property
    def namespace(self) -> str:
        """``metadata.namespace``."""
        return self.metadata.namespace

    @property
    def service_name(self) -> str:
        """Name of the workload's Service and HTTPRoute, e.g. ``agent-coordinator``."""
        return f"{self.SERVICE_PREFIX}-{self.metadata.name}"


# --- Agent -----------------------------------------------------------------------------------------

#: Memory scopes an agent or a store's ceiling may name, narrowest first: ``session`` (this session) < ``agent``
#: (this agent's memories of the user, across sessions) < ``user`` (the user's memories across every agent bound
#: to the store). The store-wide ``store`` scope is for administrators only and never configured here.
ReadScope = Literal["session", "agent", "user"]


class AgentNetwork(WireModel):
    """Delegation: which peers this agent may call and whether others may call it."""

    access: list[DnsLabel] = Field(default_factory=list)
    """Names of peer Agents (same namespace) this agent may delegate to; each must have ``expose: true``."""
    expose: bool = True
    """Whether this agent may be reached as a peer by other agents."""


class AgenticLoopSpec(WireModel):
    """The agentic loop (``spec.config.agenticLoop``)."""

    enable_tools: bool = True
    """Use the tools of ``spec.mcpServers``; false wires no tool server."""
    enable_delegation: bool = True
    """Delegate to ``spec.agentNetwork.access``; false wires no peer."""
    max_steps: int = Field(default=5, ge=1)
    """Maximum steps (model requests) of one run."""


class MemoryClientParams(WireModel):
    """Parameters of the agent's memory client."""

    rolling_summary: bool = False
    """Keep a rolling summary of evicted turns (the medium-term tier; remote memory only)."""
    token_budget: int = Field(default=2000, ge=1)
    """Tokens of the model's context memory may fill: summary, recalled facts and window (remote memory only)."""


class MemoryConfig(WireModel):
    """The agent's memory (``spec.config.memory``)."""

    enabled: bool = True
    """False disables memory (NullMemory)."""
    type: Literal["local", "remote"] = "local"
    """``local``: pod-local window; ``remote``: the bound MemoryStore (``memoryStore``)."""
    memory_store: DnsLabel | None = None
    """Name of the MemoryStore (same namespace); required with ``type: remote``."""
    max_read_scope: ReadScope = "session"
    """Automatic recall scope and search_memory ceiling (session < agent < user); above session needs type remote."""
    tools: Literal["all", "read", "write"] | None = None
    """Explicit memory tools offered to the model."""
    failure_mode: Literal["soft", "strict"] = "soft"
    """What to do when the memory store fails: ``soft`` keeps serving with the short-term window."""
    context_limit: int = Field(default=6, ge=0)
    """Maximum history events replayed to the model."""
    max_sessions: int = Field(default=1000, ge=1)
    """LocalMemory: sessions kept before the oldest 10% are evicted."""
    max_session_events: int = Field(default=500, ge=1)
    """LocalMemory: events kept per session."""
    client_params: MemoryClientParams = Field(default_factory=MemoryClientParams)
    """Parameters of the agent's memory client."""

    @model_validator(mode="after")
    def _store_matches_type(self) -> MemoryConfig:
        if self.type == "remote" and self.memory_store is None:
            raise ValueError("type 'remote' needs 'memoryStore' (the name of a MemoryStore)")
        if self.type == "local" and self.memory_store is not None:
            raise ValueError("'memoryStore' is used only with type 'remote'")
        if self.type == "local" and self.max_read_scope != "session":
            raise ValueError(f"maxReadScope {self.max_read_scope!r} pools memory and needs type 'remote'")
        return self


class AgentBudget(WireModel):
    """What one turn (one A2A task) of the agent may spend (``spec.config.budget``); unset: no limit. Each is checked
    before every model request and tool call; a delegation passes what is left to the peer."""

    max_tool_calls: int | None = Field(default=None, ge=0)
    """Tool calls per turn, delegations included (``BUDGET_MAX_TOOL_CALLS``)."""
    max_model_requests: int | None = Field(default=None, ge=1)
    """Model requests per turn, the peers' included (``BUDGET_MAX_MODEL_REQUESTS``)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Input plus output tokens per turn, the peers' included (``BUDGET_MAX_TOKENS``)."""
    max_seconds: float | None = Field(default=None, gt=0)
    """Wall-clock seconds per turn (``BUDGET_MAX_SECONDS``)."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """USD per turn at the ModelAPI's ``spec.pricing`` (``BUDGET_MAX_COST_USD``; needs the pricing)."""


#: One ``spec.config.toolApproval.required`` pattern: ``*``, or ``<server>/<tool>`` (``*`` wildcards on either side).
APPROVAL_PATTERN = r"^(\*|[^/,\s]+/[^/,\s]+)$"


def check_approval_pattern(value: str) -> str:
    """``value``, one ``toolApproval.required`` item (``TOOL_APPROVAL_REQUIRED``, the operator's default), when it
    matches :data:`APPROVAL_PATTERN`; else ``ValueError`` with the agent's message
    (:func:`~kora.core.env.not_an_approval_pattern`)."""
    if not re.fullmatch(APPROVAL_PATTERN, value):
        raise ValueError(not_an_approval_pattern(value))
    return value


#: A ``toolApproval.required`` item: refused with the agent's message; the CRD's schema keeps the pattern, for the
#: API server.
ApprovalPattern = Annotated[
    str, AfterValidator(check_approval_pattern), Field(json_schema_extra={"pattern": APPROVAL_PATTERN})
]


class ToolApproval(WireModel):
    """Tool calls that wait for a person's approval (``spec.config.toolApproval``; docs/approvals.md)."""

    required: list[ApprovalPattern] = Field(default_factory=list)
    """Patterns of the tools whose calls need approval: ``<mcpServer>/<tool>``, ``agents/<peer>`` for a
    delegation, ``*`` matching any characters (``TOOL_APPROVAL_REQUIRED``)."""
    timeout_seconds: float | None = Field(default=None, gt=0)
    """Seconds a call waits for its decision before it is rejected (``TOOL_APPROVAL_TIMEOUT_SECONDS``; unset: the
    agent's default, 900)."""


class AgentConfig(WireModel):
    """``spec.config`` of an Agent."""

    description: str | None = None
    """Description shown in the agent card (agent default: 'AI Agent')."""
    instructions: str | None = None
    """System prompt; same as ``spec.instructions`` (give one of the two)."""
    agentic_loop: AgenticLoopSpec = Field(default_factory=AgenticLoopSpec)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    task_store_type: Literal["local", "null", "postgres"] = "local"
    """A2A task store: ``local``, ``null`` (none) or ``postgres`` (``TASK_STORE_URL``'s or the MemoryStore's)."""
    budget: AgentBudget = Field(default_factory=AgentBudget)
    """What one turn may spend (unset fields: no limit)."""
    tool_approval: ToolApproval = Field(default_factory=ToolApproval)
    """Tool calls that wait for a person's approval (none by default)."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables; names Kora sets from the spec are rejected."""

    @model_validator(mode="after")
    def _shared_store_has_a_database(self) -> AgentConfig:
        if (
            self.task_store_type == "postgres"
            and not any(var.name == "TASK_STORE_URL" for var in self.env)
            and not (self.memory.enabled and self.memory.type == "remote")
        ):
            raise ValueError(
                "taskStoreType 'postgres' needs TASK_STORE_URL in 'env' (a postgresql:// URL, valueFrom a Secret) "
                "or a bound MemoryStore (memory.type: remote), whose Postgres then keeps the tasks"
            )
        return self


class TelemetrySpec(WireModel):
    """OpenTelemetry export of the agent."""

    endpoint: HttpUrl
    """OTLP/HTTP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""


#: Environment variables Kora writes into an Agent's workload; ``spec.config.env`` may not set them.
AGENT_RESERVED_ENV = frozenset(
    {
        "AGENT_NAME",
        "AGENT_HOST",
        "AGENT_PORT",
        "AGENT_DESCRIPTION",
        "AGENT_INSTRUCTIONS",
        "AGENT_PUBLIC_URL",
        "AGENT_SUB_AGENTS",
        "AGENTIC_LOOP_MAX_STEPS",
        "MODEL_API_URL",
        "MODEL_NAME",
        "MCP_SERVERS",
        "PEER_AGENTS",
        "TASK_STORE_TYPE",
        "OTEL_SERVICE_NAME",
        "AGENT_ADMIN_TOKEN",
        "MODEL_PRICE_INPUT_PER_MILLION",
        "MODEL_PRICE_OUTPUT_PER_MILLION",
        "TOOL_APPROVAL_REQUIRED",
        "TOOL_APPROVAL_TIMEOUT_SECONDS",
    }
)
#: Prefixes of variables Kora writes into an Agent's workload (per-server URLs and all memory settings).
AGENT_RESERVED_ENV_PREFIXES = ("MCP_SERVER_", "PEER_AGENT_", "MEMORY_", "BUDGET_")


def reserved_env_problems(env: list[EnvVar], names: frozenset[str], prefixes: tuple[str, ...] = ()) -> list[str]:
    """Names in ``env`` that Kora sets itself (so a user entry would silently fight the spec)."""
    return [entry.name for entry in env if entry.name.upper() in names or entry.name.upper().startswith(prefixes)]


class ContainerOverride(WireModel):
    """``spec.container``: how the operator runs this resource's container, where it differs from the defaults."""

    image: str | None = Field(default=None, min_length=1, pattern=r"^\S+$")
    """Image of this resource's workload instead of the operator's ``KORA_IMAGE`` (or, for a Hosted ModelAPI,
    ``KORA_EMBEDDINGS_IMAGE``); its entrypoint must be ``kora``. Cluster only: ``kora up`` runs local processes
    and says it ignores this."""


class AgentSpec(WireModel):
    """``spec`` of an Agent."""

    model_api: DnsLabel = Field(alias="modelAPI")
    """Name of the ModelAPI (same namespace) the agent calls."""
    model: str = Field(min_length=1)
    """Model name sent to the ModelAPI (``MODEL_NAME``)."""
    instructions: str | None = None
    """System prompt (``AGENT_INSTRUCTIONS``)."""
    mcp_servers: list[DnsLabel] = Field(default_factory=list)
    """Names of MCPServers (same namespace) whose tools the agent uses."""
    agent_network: AgentNetwork = Field(default_factory=AgentNetwork)
    gateway_route: GatewayRouteSpec = Field(default_factory=GatewayRouteSpec)
    container: ContainerOverride = Field(default_factory=ContainerOverride)
    config: AgentConfig = Field(default_factory=AgentConfig)
    wait_for_dependencies: bool = True
    """Keep the agent Waiting until its bound MemoryStore is Ready, so it never starts degraded."""
    replicas: int = Field(default=1, ge=0)
    telemetry: TelemetrySpec | None = None
    """Export OpenTelemetry spans; absent: no export."""

    @model_validator(mode="after")
    def _consistent(self) -> AgentSpec:
        if self.instructions is not None and self.config.instructions is not None:
            raise ValueError("give the system prompt once: 'instructions' or 'config.instructions', not both")
        for fields, what in ((self.mcp_servers, "mcpServers"), (self.agent_network.access, "agentNetwork.access")):
            duplicates = sorted({name for name in fields if fields.count(name) > 1})
            if duplicates:
                raise ValueError(f"{what} lists {', '.join(duplicates)} more than once")
        reserved = set(AGENT_RESERVED_ENV)
        if self.telemetry is not None:
            reserved.add("OTEL_EXPORTER_OTLP_ENDPOINT")
        clashes = reserved_env_problems(self.config.env, frozenset(reserved), AGENT_RESERVED_ENV_PREFIXES)
        if clashes:
            raise ValueError(f"config.env may not set {', '.join(clashes)}: Kora sets it from the spec")
        return self

    @property
    def system_prompt(self) -> str | None:
        """The system prompt from ``instructions`` or ``config.instructions`` (whichever is set)."""
        return self.instructions if self.instructions is not None else self.config.instructions


class Agent(Resource):
    """An agent server (``kora agent``)."""

    SERVICE_PREFIX: ClassVar[str] = "agent"
    ROUTE_SEGMENT: ClassVar[str] = "agent"
    kind: Literal["Agent"] = "Agent"
    spec: AgentSpec


# --- ModelAPI --------------------------------------------------------------------------------------


class ModelAPIMode(StrEnum):
    """How a ModelAPI serves: forward to a backend, host a model, or answer from a script (offline)."""

    PROXY = "Proxy"
    HOSTED = "Hosted"
    SCRIPTED = "Scripted"


class ProxyConfig(WireModel):
    """``Proxy`` mode: forward OpenAI-compatible requests to ``apiBase``."""

    api_base: HttpUrl
    """The backend's OpenAI-compatible base URL, including its ``/v1`` if it has one."""
    api_key: SecretValue | None = None
    """API key sent to the backend (inline or from a Secret)."""
    models: list[str] = Field(default_factory=list)
    """Model names the proxy offers; empty: any."""


class HostedConfig(WireModel):
    """``Hosted`` mode: the workload serves the model's weights itself."""

    model: str = Field(min_length=1)
    """Model to serve, by its exact name: ``all-MiniLM-L6-v2`` (the packaged embedding model; needs
    ``kora[embeddings]``), or the sentence-transformers model whose files ``modelPath`` holds. Another name without
    ``modelPath``: ``Failed``, with the same message from ``kora up`` and the operator
    (:func:`kora.resources.hosted_models.unsupported_message`)."""
    model_path: str | None = Field(default=None, min_length=1, pattern=r"^/")
    """Absolute path of a directory in the workload's filesystem holding the files of the sentence-transformers
    model ``model`` names (as ``SentenceTransformer(name).save(directory)`` writes them; in a cluster, from a volume
    or an image of your own in ``spec.container.image``), read with no network. Unset: the packaged model."""


class ScriptedConfig(WireModel):
    """``Scripted`` mode: Kora's scripted offline model (``kora model``) answers from rules.

    Rule format: see ``kora.scripted.model`` (``when: {user_matches, system_matches, after_tool,
    tool_available, response_format}``, ``reply: {kind: text | tool_calls | error, ...}``, ``times``).
    """

    script: list[dict[str, Any]] | None = None
    """Inline rules."""
    script_file: str | None = Field(default=None, min_length=1)
    """Path of a YAML/JSON script file; relative paths are resolved against the manifest's folder."""

    @model_validator(mode="after")
    def _at_most_one(self) -> ScriptedConfig:
        if self.script is not None and self.script_file is not None:
            raise ValueError("give 'script' or 'scriptFile', not both")
        return self


class Pricing(WireModel):
    """What the model's tokens cost, in USD per million (``spec.pricing``); agents on this ModelAPI price their
    turns with it (``MODEL_PRICE_INPUT_PER_MILLION``, ``MODEL_PRICE_OUTPUT_PER_MILLION``) for cost budgets."""

    input_per_million: float = Field(ge=0)
    """USD per million input (prompt) tokens."""
    output_per_million: float = Field(ge=0)
    """USD per million output (completion) tokens."""


class ModelAPISpec(WireModel):
    """``spec`` of a ModelAPI. The config object matching ``mode`` is required; the others are rejected."""

    mode: ModelAPIMode
    proxy_config: ProxyConfig | None = None
    hosted_config: HostedConfig | None = None
    scripted_config: ScriptedConfig | None = None
    """Optional: without it the scripted model echoes (``You said: ...``)."""
    pricing: Pricing | None = None
    """Token prices, for agents' cost budgets (``spec.config.budget.maxCostUsd``)."""
    gateway_route: GatewayRouteSpec = Field(default_factory=GatewayRouteSpec)
    container: ContainerOverride = Field(default_factory=ContainerOverride)

    @model_validator(mode="after")
    def _mode_matches_config(self) -> ModelAPISpec:
        configs = {
            ModelAPIMode.PROXY: ("proxyConfig", self.proxy_config),
            ModelAPIMode.HOSTED: ("hostedConfig", self.hosted_config),
            ModelAPIMode.SCRIPTED: ("scriptedConfig", self.scripted_config),
        }
        wanted, config = configs[self.mode]
        if config is None and self.mode is not ModelAPIMode.SCRIPTED:
            raise ValueError(f"mode {self.mode.value} needs '{wanted}'")
        stray = [key for mode, (key, value) in configs.items() if mode is not self.mode and value is not None]
        if stray:
            raise ValueError(f"mode {self.mode.value} does not use {', '.join(repr(s) for s in stray)}")
        return self


class ModelAPI(Resource):
    """An OpenAI-compatible model endpoint that agents call (``MODEL_API_URL`` = its URL + ``/v1``)."""

    SERVICE_PREFIX: ClassVar[str] = "modelapi"
    ROUTE_SEGMENT: ClassVar[str] = "modelapi"
    kind: Literal["ModelAPI"] = "ModelAPI"
    spec: ModelAPISpec


# --- MCPServer -------------------------------------------------------------------------------------


class MCPServerType(StrEnum):
    """``python-runtime``: tools from inline source; ``python-package``: a package that implements MCP."""

    PYTHON_RUNTIME = "python-runtime"
    PYTHON_PACKAGE = "python-package"


#: Environment variables Kora writes into an MCPServer's workload; ``spec.config.env`` may not set them.
MCP_RESERVED_ENV = frozenset({"MCP_TOOLS_STRING", "MCP_PACKAGE", "OTEL_SERVICE_NAME"})


class MCPServerConfig(WireModel):
    """``spec.config`` of an MCPServer."""

    tools_string: Annotated[str, AfterValidator(_check_tools_source)] | None = None
    """Python source defining the tool functions (``python-runtime``; standard library only)."""
    mcp: str | None = None
    """Name of the package that implements MCP (``python-package``)."""
    env: list[EnvVar] = Field(default_factory=list)
    """Environment of the tool server, e.g. API keys from Secrets (never embed secrets in tool code)."""

    @model_validator(mode="after")
    def _package_name(self) -> MCPServerConfig:
        if self.mcp is not None and not _PACKAGE.match(self.mcp):
            raise ValueError(f"mcp: {self.mcp!r} is not a package name")
        clashes = reserved_env_problems(self.env, MCP_RESERVED_ENV)
        if clashes:
            raise ValueError(f"env may not set {', '.join(clashes)}: Kora sets it from the spec")
        return self


class MCPServerSpec(WireModel):
    """``spec`` of an MCPServer: ``python-runtime`` needs ``config.toolsString``, ``python-package`` ``config.mcp``."""

    type: MCPServerType = MCPServerType.PYTHON_RUNTIME
    config: MCPServerConfig = Field(default_factory=MCPServerConfig)
    gateway_route: GatewayRouteSpec = Field(default_factory=GatewayRouteSpec)
    container: ContainerOverride = Field(default_factory=ContainerOverride)

    @model_validator(mode="after")
    def _type_matches_config(self) -> MCPServerSpec:
        if self.type is MCPServerType.PYTHON_RUNTIME:
            if not self.config.tools_string:
                raise ValueError("type python-runtime needs 'config.toolsString'")
            if self.config.mcp is not None:
                raise ValueError("type python-runtime does not use 'config.mcp' (use type python-package)")
        else:
            if self.config.mcp is None:
                raise ValueError("type python-package needs 'config.mcp' (a package name)")
            if self.config.tools_string is not None:
                raise ValueError("type python-package does not use 'config.toolsString'")
        return self


class MCPServer(Resource):
    """A tool server speaking MCP over Streamable HTTP (``kora mcp``)."""

    SERVICE_PREFIX: ClassVar[str] = "mcpserver"
    ROUTE_SEGMENT: ClassVar[str] = "mcp"
    kind: Literal["MCPServer"] = "MCPServer"
    spec: MCPServerSpec


# --- MemoryStore -----------------------------------------------------------------------------------


class ExternalStorage(WireModel):
    """An external Postgres database with the vector extension."""

    connection_secret_ref: SecretKeySelector
    """Secret key holding the Postgres connection string."""


StorageType = Literal["local", "external"]


class MemoryStorage(WireModel):
    """Where the memory service keeps its data."""

    type: StorageType = "local"
    """``local``: a database in the workload's data directory; ``external``: the Postgres of ``external``."""
    mode: StorageType | None = None
    """Deprecated name of ``type``, accepted on input (giving both with different values is an error)."""
    external: ExternalStorage | None = None
    """The external database; required with type ``external``, rejected otherwise."""

    @model_validator(mode="after")
    def _external_matches_type(self) -> MemoryStorage:
        if self.mode is not None:
            if "type" in self.model_fields_set and self.type != self.mode:
                raise ValueError(f"type {self.type!r} and its deprecated name mode {self.mode!r} disagree")
            # Fold the old spelling in, so the rest of Kora reads `type` only.
            self.type, self.mode = self.mode, None
        if self.type == "external" and self.external is None:
            raise ValueError("type 'external' needs 'external.connectionSecretRef'")
        if self.type == "local" and self.external is not None:
            raise ValueError("'external' is used only with type 'external'")
        return self


class ModelReference(WireModel):
    """A ModelAPI (same namespace) and optionally the model name to request from it."""

    model_api: DnsLabel = Field(alias="modelAPI")
    """Name of the ModelAPI (same namespace)."""
    model: str | None = Field(default=None, min_length=1)
    """Model name sent to the ModelAPI; absent: the ModelAPI's default."""


class MemoryModels(WireModel):
    """The models the memory service calls. Without ``embedding`` there is no semantic long-term recall."""

    summarization: ModelReference | None = None
    """ModelAPI that writes rolling summaries and extracts long-term facts."""
    embedding: ModelReference | None = None
    """ModelAPI that embeds facts for recall by relevance."""


class ShortTermMemory(WireModel):
    """The window of recent events of a session put back into the model's context."""

    token_budget: int = Field(default=2000, ge=1)
    """Tokens the window may take, at most."""
    hard_event_cap: int = Field(default=50, ge=1)
    """Events the window holds, at most, whatever their size."""


class MediumTermMemory(WireModel):
    """The rolling summary of a session's events that have left the window."""

    enabled: bool = True
    """Keep rolling summaries (needs ``models.summarization``)."""
    compaction_trigger: int = Field(default=20, ge=1)
    """Events out of the window and not yet summarised that start a fold into the summary."""
    compaction_target: int = Field(default=400, ge=1)
    """Target length of a summary, in tokens."""
    digest_retention: int = Field(default=5, ge=1)
    """Summary versions kept per session."""


class LongTermMemory(WireModel):
    """Facts extracted from conversations and recalled by relevance across sessions."""

    enabled: bool = True
    """Extract and recall long-term facts."""
    default_top_k: int = Field(default=5, ge=1)
    """Facts recalled per request when the request names no count."""
    score_threshold: float = Field(default=0.2, ge=0, le=1)
    """Relevance (0 to 1) below which a fact is not recalled."""


class MemoryStoreSpec(WireModel):
    """``spec`` of a MemoryStore (field names as KAOS's, so its manifests carry over)."""

    storage: MemoryStorage = Field(default_factory=MemoryStorage)
    """Where the data is kept."""
    models: MemoryModels = Field(default_factory=MemoryModels)
    """The summarization and embedding models."""
    short_term: ShortTermMemory = Field(default_factory=ShortTermMemory)
    """The recent-events window."""
    medium_term: MediumTermMemory = Field(default_factory=MediumTermMemory)
    """Rolling summaries."""
    long_term: LongTermMemory = Field(default_factory=LongTermMemory)
    """Long-term facts."""
    max_read_scope: ReadScope = "user"
    """Broadest scope any agent bound to this store may read (session < agent < user), whatever the agent asks."""
    gateway_route: MemoryStoreGatewayRouteSpec = Field(default_factory=MemoryStoreGatewayRouteSpec)
    container: ContainerOverride = Field(default_factory=ContainerOverride)
    """Gateway route of the memory service: none unless ``enabled`` is true."""


class MemoryStore(Resource):
    """The central memory service (``kora memory``) that remote-memory agents bind to."""

    SERVICE_PREFIX: ClassVar[str] = "memorystore"
    ROUTE_SEGMENT: ClassVar[str] = "memorystore"
    kind: Literal["MemoryStore"] = "MemoryStore"
    spec: MemoryStoreSpec


AnyResource = Agent | ModelAPI | MCPServer | MemoryStore

#: kind name -> model class.
RESOURCE_CLASSES: dict[str, type[Agent] | type[ModelAPI] | type[MCPServer] | type[MemoryStore]] = {
    Kind.AGENT.value: Agent,
    Kind.MODEL_API.value: ModelAPI,
    Kind.MCP_SERVER.value: MCPServer,
    Kind.MEMORY_STORE.value: MemoryStore,
}
