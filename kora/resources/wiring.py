"""Wiring: a pure function from the resource graph to each workload's plan (command, env, port, probes).

Given a URL strategy, it is written once and used by the operator and the local runtime alike: the variables
are those of docs/configuration.md, the URLs the strategy's (gateway-routed in strict gateway-only mode).

Every workload runs the one ``kora`` CLI; a :class:`WorkloadPlan` says which sub-command with which
arguments (``args``), its environment (``env``: literal values or ``secretKeyRef``s that the runner
resolves: the operator as ``valueFrom`` of the container, the local runtime from the graph's Secrets),
the files it needs in its working directory (``files``: relative name -> text; the runner writes them
and starts the process there; the operator mounts them from a ConfigMap and sets ``workingDir``), the
address it binds, its probe paths and the workloads it waits for.

Per kind (non-agent workloads take ``--host H --port P`` arguments; the agent reads AGENT_HOST/AGENT_PORT):

- Agent: ``kora agent``. ``AGENT_NAME``, ``AGENT_HOST``, ``AGENT_PORT``, ``MODEL_API_URL`` (ModelAPI URL +
  ``/v1``), ``MODEL_NAME`` (``spec.model``), ``AGENT_DESCRIPTION`` / ``AGENT_INSTRUCTIONS`` (when set),
  ``AGENT_PUBLIC_URL``, ``AGENTIC_LOOP_MAX_STEPS``, ``TASK_STORE_TYPE`` and, for ``taskStoreType: postgres``
  without ``TASK_STORE_URL`` in ``spec.config.env``, ``TASK_STORE_URL`` for the bound MemoryStore's Postgres
  (:func:`task_store_problem` says when there is none to share); ``BUDGET_MAX_*`` (the set
  ``spec.config.budget`` fields) and ``MODEL_PRICE_INPUT_PER_MILLION`` / ``MODEL_PRICE_OUTPUT_PER_MILLION`` (the
  ModelAPI's ``spec.pricing``, when declared); ``MCP_SERVERS`` +
  ``MCP_SERVER_<NAME>_URL`` unless ``enableTools`` is false; ``PEER_AGENTS`` + ``PEER_AGENT_<NAME>_CARD_URL``
  unless ``enableDelegation`` is false; ``MEMORY_ENABLED`` and, when enabled, ``MEMORY_CONTEXT_LIMIT``,
  ``MEMORY_MAX_SESSIONS``, ``MEMORY_MAX_SESSION_EVENTS``, ``MEMORY_MAX_READ_SCOPE``, ``MEMORY_TOOLS`` (when
  set) and for ``type: remote`` ``MEMORY_STORE_ENDPOINT``, ``MEMORY_STORE_TOKEN`` (the store's agent token),
  ``MEMORY_FAILURE_MODE``,
  ``MEMORY_ROLLING_SUMMARY``, ``MEMORY_CLIENT_TOKEN_BUDGET``; ``OTEL_SERVICE_NAME`` (agent name) and
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (from ``spec.telemetry``), ``OTEL_RESOURCE_ATTRIBUTES`` (every kind: see
  below). ``spec.config.env`` comes last; the models
  reject entries naming any variable Kora sets (see ``AGENT_RESERVED_ENV``), so user entries add, never
  override.
- MCPServer: ``kora mcp --host H --port P`` with ``MCP_TOOLS_STRING`` (python-runtime) or ``MCP_PACKAGE``
  (python-package), ``OTEL_SERVICE_NAME``, then ``spec.config.env`` (secretKeyRefs kept as refs).
- ModelAPI Scripted: ``kora model --host H --port P [--script script.json | --script /abs/file]``; an
  inline script becomes the file ``script.json`` (``{"rules": [...]}``). ``scriptFile`` is an absolute
  path on the machine that loaded the manifests, so it suits the local runtime only.
- ModelAPI Proxy: ``kora model-proxy --host H --port P`` with ``MODEL_PROXY_API_BASE``,
  ``MODEL_PROXY_API_KEY`` (when given) and ``MODEL_PROXY_MODELS`` (comma-separated, when given).
- ModelAPI Hosted: ``kora model-hosted --host H --port P`` with ``MODEL_HOSTED_MODEL``; readiness ``/ready``
  (503 until the model has loaded).
- MemoryStore: ``kora memory --host H --port P`` with ``MEMORY_SERVICE_STORAGE_MODE`` (``storage.type``),
  ``MEMORY_SERVICE_ADMIN_TOKEN`` / ``MEMORY_SERVICE_AGENT_TOKEN`` (from its credentials Secret),
  ``MEMORY_SERVICE_DATABASE_URL`` (external, from the Secret), ``MEMORY_SERVICE_DATA_DIR`` (local storage,
  only when the runner gives a ``data_root``: ``<data_root>/<namespace>/<name>``),
  ``MEMORY_SERVICE_SUMMARY_MODEL_API_URL`` / ``_MODEL`` and ``MEMORY_SERVICE_EMBEDDING_MODEL_API_URL`` /
  ``_MODEL`` (ModelAPI URL + ``/v1``), the tier settings ``MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET``,
  ``_SHORT_TERM_HARD_EVENT_CAP``, ``_MEDIUM_TERM_ENABLED``, ``_COMPACTION_TRIGGER``, ``_COMPACTION_TARGET``,
  ``_DIGEST_RETENTION``, ``_LONG_TERM_ENABLED``, ``_DEFAULT_TOP_K``, ``_SCORE_THRESHOLD`` (always, from
  ``shortTerm`` / ``mediumTerm`` / ``longTerm``) and ``MEMORY_SERVICE_MAX_READ_SCOPE`` (``maxReadScope``).

Credentials (docs/identity.md): Agents and MemoryStores own a Secret of generated tokens,
:func:`credentials_secret` (``WorkloadPlan.credentials``). An agent reads its operator token ``AGENT_ADMIN_TOKEN``
from its own; a MemoryStore its admin and agent tokens from its own, and its bound agents the agent token as
``MEMORY_STORE_TOKEN``. Every value is a ``secretKeyRef``, so no token is ever written into a manifest.

Every kind also gets ``OTEL_RESOURCE_ATTRIBUTES`` = ``service.namespace=<ns>,kora.resource.kind=<Kind>,
kora.resource.name=<name>`` after its ``OTEL_SERVICE_NAME`` (merged with a user's own value), which
:func:`kora.core.telemetry.setup_telemetry` reads for the telemetry resource.

Dependencies (``depends_on``) are :func:`kora.resources.graph.dependencies_of`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from kora.core import env as names
from kora.core.telemetry import resource_attributes_value
from kora.resources.graph import ResourceGraph, ResourceRef, dependencies_of, ref_of
from kora.resources.loader import ManifestError, Problem, dependency_order
from kora.resources.models import (
    Agent,
    AgentBudget,
    AnyResource,
    EnvVar,
    Kind,
    MCPServer,
    MCPServerType,
    MemoryStore,
    ModelAPI,
    ModelAPIMode,
    SecretValue,
    ToolApproval,
    parse_duration,
)
from kora.resources.urls import GatewayRouted, UrlStrategy, service_name

__all__ = [
    "DEFAULT_ROUTE_TIMEOUTS",
    "EnvEntry",
    "Probes",
    "RouteTimeouts",
    "SecretKeyRef",
    "WorkloadPlan",
    "plan_workload",
    "plan_workloads",
    "route_timeout",
]

#: Name of the file an inline scripted-model script is written to, in the workload's working directory.
SCRIPT_FILE_NAME = "script.json"


@dataclass(frozen=True)
class SecretKeyRef:
    """A key of a Secret in the workload's namespace."""

    name: str
    key: str


#: Key of a credentials Secret holding its workload's admin (operator) token.
ADMIN_TOKEN_KEY = "admin-token"
#: Key of a MemoryStore's credentials Secret holding its bound agents' token.
AGENT_TOKEN_KEY = "agent-token"


def credentials_secret(ref: ResourceRef) -> str:
    """The Secret holding the generated credentials of ``ref``'s workload: ``<service name>-credentials`` (e.g.
    ``memorystore-mem-credentials``). The runner creates it (the operator as a Secret it owns, ``kora up`` in its
    state directory); nothing else writes it. ``KeyError`` for an unknown kind."""
    return f"{service_name(ref.kind, ref.name)}-credentials"


@dataclass(frozen=True)
class EnvEntry:
    """One environment variable: a literal ``value`` or a ``secret_key_ref`` (exactly one)."""

    name: str
    value: str | None = None
    secret_key_ref: SecretKeyRef | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError(f"env entry {self.name}: give exactly one of value and secret_key_ref")

    @classmethod
    def of(cls, name: str, source: SecretValue) -> EnvEntry:
        """The entry for a spec's value-or-secret (``EnvVar``, ``apiKey``) under variable ``name``."""
        if source.value_from is not None:
            ref = source.value_from.secret_key_ref
            return cls(name, secret_key_ref=SecretKeyRef(ref.name, ref.key))
        return cls(name, value=source.value)

    @classmethod
    def from_env_var(cls, var: EnvVar) -> EnvEntry:
        """The entry for a ``spec.config.env`` item."""
        return cls.of(var.name, var)


@dataclass(frozen=True)
class Probes:
    """HTTP GET paths of the liveness and readiness probes."""

    liveness: str = "/health"
    readiness: str = "/ready"


@dataclass(frozen=True)
class WorkloadPlan:
    """What one resource runs as. ``args`` follow ``kora`` (``("agent",)``, ``("mcp", "--host", ...)``).

    ``url`` is the base URL peers use under the strategy, ``direct_url`` the workload's own address (a
    gateway's upstream), ``public_url`` the URL clients are told. ``route_timeout_seconds`` is the gateway
    route timeout (:func:`route_timeout`).
    """

    ref: ResourceRef
    service_name: str
    args: tuple[str, ...]
    env: tuple[EnvEntry, ...]
    host: str
    port: int
    url: str
    direct_url: str
    public_url: str
    probes: Probes
    depends_on: tuple[ResourceRef, ...]
    route_timeout_seconds: float
    replicas: int = 1
    files: Mapping[str, str] = field(default_factory=dict)
    #: Secrets of generated tokens this workload owns: Secret name -> its keys (:func:`credentials_secret`). The
    #: runner creates each token once (random, :func:`kora.core.tokens.new_token`) and keeps it.
    credentials: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Whether the workload gets a route on the shared gateway: a MemoryStore only with
    #: ``spec.gatewayRoute.enabled``.
    gateway_route: bool = True

    @property
    def kind(self) -> str:
        """Resource kind, e.g. ``Agent``."""
        return self.ref.kind

    @property
    def name(self) -> str:
        """Resource name."""
        return self.ref.name

    @property
    def namespace(self) -> str:
        """Resource namespace."""
        return self.ref.namespace

    def env_value(self, name: str) -> str | None:
        """The literal value of variable ``name`` (None when absent or a secret reference)."""
        for entry in self.env:
            if entry.name == name:
                return entry.value
        return None

    def environment(self, resolve_secret: Callable[[SecretKeyRef], str]) -> dict[str, str]:
        """The environment as a plain mapping, secrets resolved by ``resolve_secret`` (which may raise)."""
        result: dict[str, str] = {}
        for entry in self.env:
            if entry.secret_key_ref is not None:
                result[entry.name] = resolve_secret(entry.secret_key_ref)
            else:
                assert entry.value is not None  # guaranteed by EnvEntry.__post_init__
                result[entry.name] = entry.value
        return result


@dataclass(frozen=True)
class RouteTimeouts:
    """Per-kind default gateway route timeouts in seconds (the operator's ``GATEWAY_DEFAULT_*_TIMEOUT``)."""

    agent: float = 120.0
    model_api: float = 120.0
    mcp: float = 30.0
    memory_store: float = 30.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RouteTimeouts:
        """Read ``GATEWAY_DEFAULT_{AGENT,MODELAPI,MCP,MEMORYSTORE}_TIMEOUT`` (duration strings) over the defaults.

        Raises ``ValueError`` naming the variable for a malformed duration.
        """
        values: dict[str, float] = {}
        for attribute, variable in (
            ("agent", names.GATEWAY_DEFAULT_AGENT_TIMEOUT),
            ("model_api", names.GATEWAY_DEFAULT_MODELAPI_TIMEOUT),
            ("mcp", names.GATEWAY_DEFAULT_MCP_TIMEOUT),
            ("memory_store", names.GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT),
        ):
            raw = environ.get(variable, "").strip()
            if raw:
                try:
                    values[attribute] = parse_duration(raw)
                except ValueError as error:
                    raise ValueError(f"{variable}: {error} (got {raw!r})") from None
        return cls(**values)

    def for_kind(self, kind: str) -> float:
        """The default for ``kind`` (``KeyError`` for an unknown kind)."""
        return {
            Kind.AGENT.value: self.agent,
            Kind.MODEL_API.value: self.model_api,
            Kind.MCP_SERVER.value: self.mcp,
            Kind.MEMORY_STORE.value: self.memory_store,
        }[kind]


DEFAULT_ROUTE_TIMEOUTS = RouteTimeouts()


def route_timeout(resource: AnyResource, defaults: RouteTimeouts = DEFAULT_ROUTE_TIMEOUTS) -> float:
    """Gateway route timeout of ``resource`` in seconds: ``spec.gatewayRoute.timeout`` or the kind's default."""
    timeout = resource.spec.gateway_route.timeout
    return parse_duration(timeout) if timeout is not None else defaults.for_kind(resource.kind)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _model_api_url(strategy: UrlStrategy, namespace: str, name: str) -> str:
    return strategy.url(ResourceRef(Kind.MODEL_API.value, namespace, name)) + "/v1"


def _budget_env(agent: Agent, model_api: ModelAPI | None, defaults: AgentBudget | None) -> list[EnvEntry]:
    """``BUDGET_MAX_*`` of the set ``spec.config.budget`` fields (each unset one from ``defaults``, the chart's), and
    the ModelAPI's prices when it declares them."""
    own = agent.spec.config.budget
    budget = (
        own
        if defaults is None
        else AgentBudget.model_validate(
            {
                name: getattr(own, name) if getattr(own, name) is not None else getattr(defaults, name)
                for name in AgentBudget.model_fields
            }
        )
    )
    values = [
        (names.BUDGET_MAX_TOOL_CALLS, budget.max_tool_calls),
        (names.BUDGET_MAX_MODEL_REQUESTS, budget.max_model_requests),
        (names.BUDGET_MAX_TOKENS, budget.max_tokens),
        (names.BUDGET_MAX_SECONDS, budget.max_seconds),
        (names.BUDGET_MAX_COST_USD, budget.max_cost_usd),
    ]
    pricing = model_api.spec.pricing if model_api is not None else None
    if pricing is not None:
        values += [
            (names.MODEL_PRICE_INPUT_PER_MILLION, pricing.input_per_million),
            (names.MODEL_PRICE_OUTPUT_PER_MILLION, pricing.output_per_million),
        ]
    return [EnvEntry(name, _number(value)) for name, value in values if value is not None]


def _approval_env(agent: Agent, defaults: ToolApproval | None) -> list[EnvEntry]:
    """``TOOL_APPROVAL_*`` of ``spec.config.toolApproval`` (nothing when unset: no call waits); ``defaults`` (the
    chart's) give the patterns of an Agent that names none and the timeout of one that sets none."""
    approval = agent.spec.config.tool_approval
    required = approval.required or (defaults.required if defaults is not None else [])
    timeout = approval.timeout_seconds
    if timeout is None and defaults is not None:
        timeout = defaults.timeout_seconds
    env = []
    if required:
        env.append(EnvEntry(names.TOOL_APPROVAL_REQUIRED, ",".join(required)))
    if timeout is not None:
        env.append(EnvEntry(names.TOOL_APPROVAL_TIMEOUT_SECONDS, _number(timeout)))
    return env


def _number(value: float) -> str:
    """``value`` as an environment variable holds it: exact (``repr`` round-trips a float), without a ``.0``
    that says nothing (``10.0`` -> ``10``, ``0.1234567`` stays as it is)."""
    text = repr(value)
    return text.removesuffix(".0") if isinstance(value, float) else text


#: The unix socket an embedded Postgres listens on, in its socket directory (pgserver's default port).
EMBEDDED_POSTGRES_SOCKET = ".s.PGSQL.5432"
#: The longest unix socket path Linux binds (``sun_path`` holds 108 bytes with the closing NUL); pgserver puts the
#: socket elsewhere when its data directory's would be longer.
MAX_SOCKET_PATH = 107


def embedded_postgres_url(data_dir: Path) -> str:
    """The connection URI of the embedded Postgres of a local-storage MemoryStore whose
    ``MEMORY_SERVICE_DATA_DIR`` is ``data_dir``: the memory service's database ``postgres``, as user ``postgres``
    (no password: the socket is the machine's own, reachable by the user that runs Kora), over the unix socket in
    ``data_dir/pgdata`` (the ``pgdata`` of :mod:`kora.memory_service.embedded`)."""
    return f"postgresql://postgres@/postgres?host={quote(str(data_dir.resolve() / 'pgdata'), safe='/')}"


def _shares_store_postgres(agent: Agent) -> bool:
    """True when ``agent`` keeps its A2A tasks in its bound MemoryStore's Postgres: ``taskStoreType: postgres``
    without a ``TASK_STORE_URL`` of its own."""
    config = agent.spec.config
    return config.task_store_type == "postgres" and not any(var.name == names.TASK_STORE_URL for var in config.env)


def _store_data_dir(store: MemoryStore, data_root: Path) -> Path:
    return data_root / store.metadata.namespace / store.metadata.name


def task_store_problem(
    agent: Agent, memory_store: MemoryStore | None, *, embedded_postgres: bool, data_root: Path | None
) -> str | None:
    """Why ``agent``'s ``taskStoreType: postgres`` has no database to share, or None (it has one, names its own
    ``TASK_STORE_URL``, or does not share; ``memory_store`` None: its MemoryStore is not known yet, which the
    agent waits for). An external-storage MemoryStore's database is shared by any runner; a local-storage one's
    embedded Postgres only where agents run on its machine (``embedded_postgres``: ``kora up``, its data under
    ``data_root``), and only while its socket path fits a unix socket."""
    if not _shares_store_postgres(agent) or memory_store is None or memory_store.spec.storage.external is not None:
        return None
    where = f"MemoryStore {memory_store.metadata.name!r}"
    if not embedded_postgres or data_root is None:
        return (
            f"taskStoreType 'postgres' keeps tasks in the Postgres of {where}, but its storage.type 'local' keeps "
            "that Postgres inside the MemoryStore's own pod, where agents cannot reach it: give the MemoryStore "
            "storage.type 'external', or the agent TASK_STORE_URL in spec.config.env"
        )
    socket = _store_data_dir(memory_store, data_root).resolve() / "pgdata" / EMBEDDED_POSTGRES_SOCKET
    if len(str(socket).encode()) > MAX_SOCKET_PATH:
        return (
            f"taskStoreType 'postgres' keeps tasks in the embedded Postgres of {where}, whose socket path {socket} "
            f"is longer than a unix socket's {MAX_SOCKET_PATH} bytes: use a shorter --state-dir"
        )
    return None


def _task_store_env(
    agent: Agent, memory_store: MemoryStore | None, embedded_postgres: bool, data_root: Path | None
) -> list[EnvEntry]:
    """``TASK_STORE_URL`` for an agent that shares its bound MemoryStore's Postgres: the store's own connection
    Secret (``secretKeyRef``, never the URL itself) for external storage, the embedded Postgres's socket for a
    local-storage store where agents reach it (:func:`task_store_problem` is None); else nothing."""
    if not _shares_store_postgres(agent) or memory_store is None:
        return []
    external = memory_store.spec.storage.external
    if external is not None:
        ref = external.connection_secret_ref
        return [EnvEntry(names.TASK_STORE_URL, secret_key_ref=SecretKeyRef(ref.name, ref.key))]
    problem = task_store_problem(agent, memory_store, embedded_postgres=embedded_postgres, data_root=data_root)
    if data_root is None or problem is not None:
        return []
    return [EnvEntry(names.TASK_STORE_URL, embedded_postgres_url(_store_data_dir(memory_store, data_root)))]


def _agent_env(
    agent: Agent,
    strategy: UrlStrategy,
    public_url: str,
    host: str,
    port: int,
    model_api: ModelAPI | None = None,
    budget_defaults: AgentBudget | None = None,
    task_store_env: list[EnvEntry] | None = None,
    approval_defaults: ToolApproval | None = None,
) -> list[EnvEntry]:
    spec, namespace = agent.spec, agent.metadata.namespace
    loop, memory = spec.config.agentic_loop, spec.config.memory
    env = [
        EnvEntry(names.AGENT_NAME, agent.metadata.name),
        EnvEntry(names.AGENT_HOST, host),
        EnvEntry(names.AGENT_PORT, str(port)),
        EnvEntry(names.MODEL_API_URL, _model_api_url(strategy, namespace, spec.model_api)),
        EnvEntry(names.MODEL_NAME, spec.model),
    ]
    if spec.config.description is not None:
        env.append(EnvEntry(names.AGENT_DESCRIPTION, spec.config.description))
    if spec.system_prompt is not None:
        env.append(EnvEntry(names.AGENT_INSTRUCTIONS, spec.system_prompt))
    env += [
        EnvEntry(names.AGENT_PUBLIC_URL, public_url),
        EnvEntry(names.AGENTIC_LOOP_MAX_STEPS, str(loop.max_steps)),
        EnvEntry(names.TASK_STORE_TYPE, spec.config.task_store_type),
        *(task_store_env or []),
        *_budget_env(agent, model_api, budget_defaults),
        *_approval_env(agent, approval_defaults),
    ]
    if loop.enable_tools and spec.mcp_servers:
        env.append(EnvEntry(names.MCP_SERVERS, ",".join(spec.mcp_servers)))
        for server in spec.mcp_servers:
            url = strategy.url(ResourceRef(Kind.MCP_SERVER.value, namespace, server))
            env.append(EnvEntry(names.mcp_server_url_var(server), url))
    if loop.enable_delegation and spec.agent_network.access:
        env.append(EnvEntry(names.PEER_AGENTS, ",".join(spec.agent_network.access)))
        for peer in spec.agent_network.access:
            url = strategy.url(ResourceRef(Kind.AGENT.value, namespace, peer))
            env.append(EnvEntry(names.peer_agent_card_url_var(peer), url))
    admin = SecretKeyRef(credentials_secret(ref_of(agent)), ADMIN_TOKEN_KEY)
    env.append(EnvEntry(names.AGENT_ADMIN_TOKEN, secret_key_ref=admin))
    env.append(EnvEntry(names.MEMORY_ENABLED, _bool(memory.enabled)))
    if memory.enabled:
        env += [
            EnvEntry(names.MEMORY_CONTEXT_LIMIT, str(memory.context_limit)),
            EnvEntry(names.MEMORY_MAX_SESSIONS, str(memory.max_sessions)),
            EnvEntry(names.MEMORY_MAX_SESSION_EVENTS, str(memory.max_session_events)),
            EnvEntry(names.MEMORY_MAX_READ_SCOPE, memory.max_read_scope),
        ]
        if memory.tools is not None:
            env.append(EnvEntry(names.MEMORY_TOOLS, memory.tools))
        if memory.type == "remote" and memory.memory_store is not None:
            store = ResourceRef(Kind.MEMORY_STORE.value, namespace, memory.memory_store)
            env += [
                EnvEntry(names.MEMORY_STORE_ENDPOINT, strategy.url(store)),
                EnvEntry(
                    names.MEMORY_STORE_TOKEN, secret_key_ref=SecretKeyRef(credentials_secret(store), AGENT_TOKEN_KEY)
                ),
                EnvEntry(names.MEMORY_FAILURE_MODE, memory.failure_mode),
                EnvEntry(names.MEMORY_ROLLING_SUMMARY, _bool(memory.client_params.rolling_summary)),
                EnvEntry(names.MEMORY_CLIENT_TOKEN_BUDGET, str(memory.client_params.token_budget)),
            ]
    env.append(EnvEntry(names.OTEL_SERVICE_NAME, agent.metadata.name))
    if spec.telemetry is not None:
        env.append(EnvEntry(names.OTEL_EXPORTER_OTLP_ENDPOINT, spec.telemetry.endpoint))
    return env + _telemetry_resource(agent, [EnvEntry.from_env_var(var) for var in spec.config.env])


def _telemetry_resource(resource: AnyResource, user_env: list[EnvEntry]) -> list[EnvEntry]:
    """``OTEL_RESOURCE_ATTRIBUTES`` naming ``resource`` (namespace, kind, name), then ``user_env``. A literal
    ``OTEL_RESOURCE_ATTRIBUTES`` of the user's is appended to Kora's value instead of replacing it (the SDK keeps
    the last of a repeated key, so the user's keys win); one from a Secret replaces it, as Kubernetes keeps the
    last of two entries."""
    ref = ref_of(resource)
    value = resource_attributes_value(ref.namespace, ref.kind, ref.name)
    rest: list[EnvEntry] = []
    for entry in user_env:
        if entry.name == names.OTEL_RESOURCE_ATTRIBUTES and entry.value is not None:
            value = f"{value},{entry.value.strip()}" if entry.value.strip() else value
        else:
            rest.append(entry)
    return [EnvEntry(names.OTEL_RESOURCE_ATTRIBUTES, value), *rest]


def _listen_args(command: str, host: str, port: int) -> list[str]:
    return [command, "--host", host, "--port", str(port)]


def _model_api_command(
    model: ModelAPI, host: str, port: int
) -> tuple[list[str], list[EnvEntry], dict[str, str], Probes]:
    spec = model.spec
    env: list[EnvEntry] = []
    files: dict[str, str] = {}
    # The scripted model and the proxy answer /health only; it doubles as readiness.
    probes = Probes(liveness="/health", readiness="/health")
    if spec.mode is ModelAPIMode.SCRIPTED:
        args = _listen_args("model", host, port)
        config = spec.scripted_config
        if config is not None and config.script_file is not None:
            args += ["--script", config.script_file]
        elif config is not None and config.script is not None:
            files[SCRIPT_FILE_NAME] = json.dumps({"rules": config.script}, indent=2, sort_keys=True)
            args += ["--script", SCRIPT_FILE_NAME]
    elif spec.mode is ModelAPIMode.PROXY:
        assert spec.proxy_config is not None  # guaranteed by ModelAPISpec's mode/config check
        args = _listen_args("model-proxy", host, port)
        env.append(EnvEntry(names.MODEL_PROXY_API_BASE, spec.proxy_config.api_base))
        if spec.proxy_config.api_key is not None:
            env.append(EnvEntry.of(names.MODEL_PROXY_API_KEY, spec.proxy_config.api_key))
        if spec.proxy_config.models:
            env.append(EnvEntry(names.MODEL_PROXY_MODELS, ",".join(spec.proxy_config.models)))
    else:
        assert spec.hosted_config is not None  # guaranteed by ModelAPISpec's mode/config check
        args = _listen_args("model-hosted", host, port)
        env.append(EnvEntry(names.MODEL_HOSTED_MODEL, spec.hosted_config.model))
        if spec.hosted_config.model_path is not None:
            env.append(EnvEntry(names.MODEL_HOSTED_MODEL_PATH, spec.hosted_config.model_path))
        # Loading the weights takes seconds; /ready says when requests can be served.
        probes = Probes(liveness="/health", readiness="/ready")
    env.append(EnvEntry(names.OTEL_SERVICE_NAME, model.service_name))
    return args, env + _telemetry_resource(model, []), files, probes


def _mcp_env(server: MCPServer) -> list[EnvEntry]:
    config = server.spec.config
    if server.spec.type is MCPServerType.PYTHON_RUNTIME:
        assert config.tools_string is not None  # guaranteed by MCPServerSpec's type/config check
        env = [EnvEntry(names.MCP_TOOLS_STRING, config.tools_string)]
    else:
        assert config.mcp is not None  # guaranteed by MCPServerSpec's type/config check
        env = [EnvEntry(names.MCP_PACKAGE, config.mcp)]
    env.append(EnvEntry(names.OTEL_SERVICE_NAME, server.service_name))
    return env + _telemetry_resource(server, [EnvEntry.from_env_var(var) for var in config.env])


def _memory_store_env(store: MemoryStore, strategy: UrlStrategy, data_root: Path | None) -> list[EnvEntry]:
    spec, namespace = store.spec, store.metadata.namespace
    credentials = credentials_secret(ref_of(store))
    env = [
        EnvEntry(names.MEMORY_SERVICE_STORAGE_MODE, spec.storage.type),
        EnvEntry(names.MEMORY_SERVICE_ADMIN_TOKEN, secret_key_ref=SecretKeyRef(credentials, ADMIN_TOKEN_KEY)),
        EnvEntry(names.MEMORY_SERVICE_AGENT_TOKEN, secret_key_ref=SecretKeyRef(credentials, AGENT_TOKEN_KEY)),
    ]
    if spec.storage.external is not None:
        ref = spec.storage.external.connection_secret_ref
        env.append(EnvEntry(names.MEMORY_SERVICE_DATABASE_URL, secret_key_ref=SecretKeyRef(ref.name, ref.key)))
    elif data_root is not None:
        env.append(EnvEntry(names.MEMORY_SERVICE_DATA_DIR, str(data_root / namespace / store.metadata.name)))
    models = spec.models
    for reference, url_var, model_var in (
        (models.summarization, names.MEMORY_SERVICE_SUMMARY_MODEL_API_URL, names.MEMORY_SERVICE_SUMMARY_MODEL),
        (models.embedding, names.MEMORY_SERVICE_EMBEDDING_MODEL_API_URL, names.MEMORY_SERVICE_EMBEDDING_MODEL),
    ):
        if reference is None:
            continue
        env.append(EnvEntry(url_var, _model_api_url(strategy, namespace, reference.model_api)))
        if reference.model is not None:
            env.append(EnvEntry(model_var, reference.model))
    short, medium, long = spec.short_term, spec.medium_term, spec.long_term
    env += [
        EnvEntry(names.MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET, str(short.token_budget)),
        EnvEntry(names.MEMORY_SERVICE_SHORT_TERM_HARD_EVENT_CAP, str(short.hard_event_cap)),
        EnvEntry(names.MEMORY_SERVICE_MEDIUM_TERM_ENABLED, _bool(medium.enabled)),
        EnvEntry(names.MEMORY_SERVICE_COMPACTION_TRIGGER, str(medium.compaction_trigger)),
        EnvEntry(names.MEMORY_SERVICE_COMPACTION_TARGET, str(medium.compaction_target)),
        EnvEntry(names.MEMORY_SERVICE_DIGEST_RETENTION, str(medium.digest_retention)),
        EnvEntry(names.MEMORY_SERVICE_LONG_TERM_ENABLED, _bool(long.enabled)),
        EnvEntry(names.MEMORY_SERVICE_DEFAULT_TOP_K, str(long.default_top_k)),
        EnvEntry(names.MEMORY_SERVICE_SCORE_THRESHOLD, str(long.score_threshold)),
        EnvEntry(names.MEMORY_SERVICE_MAX_READ_SCOPE, spec.max_read_scope),
        EnvEntry(names.OTEL_SERVICE_NAME, store.service_name),
    ]
    return env + _telemetry_resource(store, [])


def plan_workload(
    resource: AnyResource,
    strategy: UrlStrategy,
    *,
    public: UrlStrategy | None = None,
    timeouts: RouteTimeouts = DEFAULT_ROUTE_TIMEOUTS,
    data_root: Path | None = None,
    model_api: ModelAPI | None = None,
    budget_defaults: AgentBudget | None = None,
    memory_store: MemoryStore | None = None,
    embedded_postgres: bool = False,
    approval_defaults: ToolApproval | None = None,
) -> WorkloadPlan:
    """The plan of one resource. URLs of the resources it names come from ``strategy``; an Agent's ``model_api``
    (when known) gives its prices (``spec.pricing``), and ``budget_defaults`` (the chart's
    ``agentDefaults.budget``) the budgets its ``spec.config.budget`` leaves unset; ``approval_defaults`` (the chart's
    ``agentDefaults.toolApproval``) the approval patterns and timeout its ``spec.config.toolApproval`` leaves unset.

    ``public`` gives the URL clients are told (``AGENT_PUBLIC_URL``, ``status.endpoint``); default
    ``strategy``. ``data_root`` is where a runner that keeps data on this machine (``kora up``) wants
    local-storage MemoryStores' databases: each gets ``MEMORY_SERVICE_DATA_DIR=<data_root>/<namespace>/<name>``,
    stable across runs; None (a cluster) leaves the service's default. An Agent's ``memory_store`` (its bound
    MemoryStore, when known) gives a shared task store its database; ``embedded_postgres``: the runner's workloads
    share one machine, so an agent may reach a local-storage MemoryStore's embedded Postgres by its socket (``kora
    up``). References are not checked here (the loader does, and :func:`task_store_problem` for the task store's
    database); a ``Loopback`` strategy raises ``KeyError`` for a workload without a port.
    """
    ref = ref_of(resource)
    host, port = strategy.listen(ref)
    public_url = (public or strategy).url(ref)
    files: dict[str, str] = {}
    probes = Probes()
    replicas = 1
    credentials: dict[str, tuple[str, ...]] = {}
    gateway_route = True
    if isinstance(resource, Agent):
        task_store_env = _task_store_env(resource, memory_store, embedded_postgres, data_root)
        args = ["agent"]
        env = _agent_env(
            resource, strategy, public_url, host, port, model_api, budget_defaults, task_store_env, approval_defaults
        )
        replicas = resource.spec.replicas
        credentials[credentials_secret(ref)] = (ADMIN_TOKEN_KEY,)
    elif isinstance(resource, MCPServer):
        args, env = _listen_args("mcp", host, port), _mcp_env(resource)
    elif isinstance(resource, ModelAPI):
        args, env, files, probes = _model_api_command(resource, host, port)
    else:
        args, env = _listen_args("memory", host, port), _memory_store_env(resource, strategy, data_root)
        credentials[credentials_secret(ref)] = (ADMIN_TOKEN_KEY, AGENT_TOKEN_KEY)
        gateway_route = resource.spec.gateway_route.enabled
        if gateway_route and isinstance(public, GatewayRouted):
            public_url = public.route_url(ref)  # its clients are told the route it opted into
    return WorkloadPlan(
        ref=ref,
        service_name=service_name(ref.kind, ref.name),
        args=tuple(args),
        env=tuple(env),
        host=host,
        port=port,
        url=strategy.url(ref),
        direct_url=strategy.direct_url(ref),
        public_url=public_url,
        probes=probes,
        depends_on=tuple(dependencies_of(resource)),
        route_timeout_seconds=route_timeout(resource, timeouts),
        replicas=replicas,
        files=files,
        credentials=credentials,
        gateway_route=gateway_route,
    )


def plan_workloads(
    graph: ResourceGraph,
    strategy: UrlStrategy,
    *,
    public: UrlStrategy | None = None,
    timeouts: RouteTimeouts = DEFAULT_ROUTE_TIMEOUTS,
    data_root: Path | None = None,
    embedded_postgres: bool = False,
) -> dict[ResourceRef, WorkloadPlan]:
    """Plans of every resource of ``graph``, in start order (:func:`kora.resources.loader.dependency_order`);
    the options are :func:`plan_workload`'s.

    Raises :class:`kora.resources.loader.ManifestError` for a delegation cycle, and naming each Agent whose shared
    task store has no database (:func:`task_store_problem`).
    """
    resources = graph.resources

    def memory_store_of(resource: AnyResource) -> MemoryStore | None:
        memory = resource.spec.config.memory if isinstance(resource, Agent) else None
        if memory is None or not memory.enabled or memory.type != "remote" or memory.memory_store is None:
            return None
        namespace, name = resource.metadata.namespace, memory.memory_store
        found = resources.get(ResourceRef(Kind.MEMORY_STORE.value, namespace, name))
        return found if isinstance(found, MemoryStore) else None

    problems = [
        Problem("<graph>", 0, f"Agent {ref.namespace}/{ref.name}", "spec.config.taskStoreType", problem)
        for ref, resource in resources.items()
        if isinstance(resource, Agent)
        and (
            problem := task_store_problem(
                resource, memory_store_of(resource), embedded_postgres=embedded_postgres, data_root=data_root
            )
        )
    ]
    if problems:
        raise ManifestError(problems)

    def model_api_of(resource: AnyResource) -> ModelAPI | None:
        if not isinstance(resource, Agent):
            return None
        found = resources.get(ResourceRef(Kind.MODEL_API.value, resource.metadata.namespace, resource.spec.model_api))
        return found if isinstance(found, ModelAPI) else None

    return {
        ref: plan_workload(
            resources[ref],
            strategy,
            public=public,
            timeouts=timeouts,
            data_root=data_root,
            model_api=model_api_of(resources[ref]),
            memory_store=memory_store_of(resources[ref]),
            embedded_postgres=embedded_postgres,
        )
        for ref in dependency_order(graph)
    }
