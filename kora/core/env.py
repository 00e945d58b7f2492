"""Names of the environment variables that wire workloads together (docs/configuration.md).

The operator and the local runtime *write* these variables; the agent server *reads* them. Both sides
import the helpers here so the names can never drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

MCP_SERVERS = "MCP_SERVERS"
PEER_AGENTS = "PEER_AGENTS"
AGENT_SUB_AGENTS = "AGENT_SUB_AGENTS"
MODEL_API_URL = "MODEL_API_URL"
MODEL_NAME = "MODEL_NAME"
MEMORY_STORE_ENDPOINT = "MEMORY_STORE_ENDPOINT"
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
#: The SDK's ``key=value,...`` resource attributes; the wiring writes the resource's namespace, kind and name there.
OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"

# Agent settings written by the wiring (kora.resources.wiring); the agent reads them via AgentSettings.
AGENT_NAME = "AGENT_NAME"
AGENT_HOST = "AGENT_HOST"
AGENT_PORT = "AGENT_PORT"
AGENT_DESCRIPTION = "AGENT_DESCRIPTION"
AGENT_INSTRUCTIONS = "AGENT_INSTRUCTIONS"
AGENT_PUBLIC_URL = "AGENT_PUBLIC_URL"
AGENTIC_LOOP_MAX_STEPS = "AGENTIC_LOOP_MAX_STEPS"
TASK_STORE_TYPE = "TASK_STORE_TYPE"
# Kora: a turn's budgets (spec.config.budget) and the model's prices (the ModelAPI's spec.pricing).
BUDGET_MAX_TOOL_CALLS = "BUDGET_MAX_TOOL_CALLS"
BUDGET_MAX_MODEL_REQUESTS = "BUDGET_MAX_MODEL_REQUESTS"
BUDGET_MAX_TOKENS = "BUDGET_MAX_TOKENS"
BUDGET_MAX_SECONDS = "BUDGET_MAX_SECONDS"
BUDGET_MAX_COST_USD = "BUDGET_MAX_COST_USD"
MODEL_PRICE_INPUT_PER_MILLION = "MODEL_PRICE_INPUT_PER_MILLION"
MODEL_PRICE_OUTPUT_PER_MILLION = "MODEL_PRICE_OUTPUT_PER_MILLION"
# Kora: tool calls that wait for a person's approval (spec.config.toolApproval).
TOOL_APPROVAL_REQUIRED = "TOOL_APPROVAL_REQUIRED"
TOOL_APPROVAL_TIMEOUT_SECONDS = "TOOL_APPROVAL_TIMEOUT_SECONDS"


def not_an_approval_pattern(pattern: str) -> str:
    """Why ``pattern``, one item of ``TOOL_APPROVAL_REQUIRED`` (a ``spec.config.toolApproval.required`` entry), is
    refused: it is neither ``*`` nor ``<server>/<tool>``. The one message of the agent, the operator and a
    manifest."""
    return f"{pattern!r} is no '<server>/<tool>' pattern (e.g. 'files/delete_*', 'agents/*')"


# The operator's default budget of every Agent (the chart's agentDefaults.budget).
DEFAULT_BUDGET_MAX_TOOL_CALLS = "DEFAULT_BUDGET_MAX_TOOL_CALLS"
DEFAULT_BUDGET_MAX_MODEL_REQUESTS = "DEFAULT_BUDGET_MAX_MODEL_REQUESTS"
DEFAULT_BUDGET_MAX_TOKENS = "DEFAULT_BUDGET_MAX_TOKENS"
DEFAULT_BUDGET_MAX_SECONDS = "DEFAULT_BUDGET_MAX_SECONDS"
DEFAULT_BUDGET_MAX_COST_USD = "DEFAULT_BUDGET_MAX_COST_USD"
# The operator's default tool approval of every Agent (the chart's agentDefaults.toolApproval).
DEFAULT_TOOL_APPROVAL_REQUIRED = "DEFAULT_TOOL_APPROVAL_REQUIRED"
DEFAULT_TOOL_APPROVAL_TIMEOUT_SECONDS = "DEFAULT_TOOL_APPROVAL_TIMEOUT_SECONDS"
#: Kora: the shared task store's ``postgresql://`` connection string (``TASK_STORE_TYPE=postgres``).
TASK_STORE_URL = "TASK_STORE_URL"
MEMORY_ENABLED = "MEMORY_ENABLED"
MEMORY_CONTEXT_LIMIT = "MEMORY_CONTEXT_LIMIT"
MEMORY_MAX_SESSIONS = "MEMORY_MAX_SESSIONS"
MEMORY_MAX_SESSION_EVENTS = "MEMORY_MAX_SESSION_EVENTS"
MEMORY_MAX_READ_SCOPE = "MEMORY_MAX_READ_SCOPE"
MEMORY_TOOLS = "MEMORY_TOOLS"
#: Kora: ``soft`` | ``strict`` (spec.config.memory.failureMode); written for remote memory only.
MEMORY_FAILURE_MODE = "MEMORY_FAILURE_MODE"
#: Kora: ``true`` | ``false`` (spec.config.memory.clientParams.rollingSummary); written for remote memory only.
MEMORY_ROLLING_SUMMARY = "MEMORY_ROLLING_SUMMARY"
#: Tokens of the model's context remote memory may fill: summary + recalled facts + window
#: (spec.config.memory.clientParams.tokenBudget); written for remote memory only.
MEMORY_CLIENT_TOKEN_BUDGET = "MEMORY_CLIENT_TOKEN_BUDGET"

# Tool server (``kora mcp``): inline tool source or the name of a package implementing MCP.
MCP_TOOLS_STRING = "MCP_TOOLS_STRING"
MCP_PACKAGE = "MCP_PACKAGE"

# ModelAPI workloads other than the scripted model (``kora model-proxy``, ``kora model-hosted``).
#: Backend's OpenAI-compatible base URL (with its /v1): the proxy maps ``/v1/<rest>`` to ``<base>/<rest>``.
MODEL_PROXY_API_BASE = "MODEL_PROXY_API_BASE"
#: Bearer key sent to the backend (usually from a Secret).
MODEL_PROXY_API_KEY = "MODEL_PROXY_API_KEY"
#: Comma-separated model names the proxy offers (empty: any).
MODEL_PROXY_MODELS = "MODEL_PROXY_MODELS"
#: Name of the model a Hosted ModelAPI serves (``kora.resources.hosted_models`` lists the ones Kora hosts).
MODEL_HOSTED_MODEL = "MODEL_HOSTED_MODEL"
#: Directory holding the files of the sentence-transformers model ``MODEL_HOSTED_MODEL`` names (a local copy, read
#: with no network); unset: the packaged all-MiniLM-L6-v2 (``hostedConfig.modelPath``).
MODEL_HOSTED_MODEL_PATH = "MODEL_HOSTED_MODEL_PATH"

# Memory service (``kora memory``), the MemoryStore workload.
MEMORY_SERVICE_STORAGE_MODE = "MEMORY_SERVICE_STORAGE_MODE"
#: Postgres connection string (external storage; from the connectionSecretRef Secret).
MEMORY_SERVICE_DATABASE_URL = "MEMORY_SERVICE_DATABASE_URL"
MEMORY_SERVICE_SUMMARY_MODEL_API_URL = "MEMORY_SERVICE_SUMMARY_MODEL_API_URL"
MEMORY_SERVICE_SUMMARY_MODEL = "MEMORY_SERVICE_SUMMARY_MODEL"
MEMORY_SERVICE_EMBEDDING_MODEL_API_URL = "MEMORY_SERVICE_EMBEDDING_MODEL_API_URL"
MEMORY_SERVICE_EMBEDDING_MODEL = "MEMORY_SERVICE_EMBEDDING_MODEL"
#: Local storage's database directory (default ``./data``); ``kora up`` puts it in its state dir.
MEMORY_SERVICE_DATA_DIR = "MEMORY_SERVICE_DATA_DIR"
# The MemoryStore's tier settings, one per spec field (spec.shortTerm, spec.mediumTerm, spec.longTerm).
#: Tokens the recent-events window may take (shortTerm.tokenBudget).
MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET = "MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET"
#: Events the window holds at most (shortTerm.hardEventCap).
MEMORY_SERVICE_SHORT_TERM_HARD_EVENT_CAP = "MEMORY_SERVICE_SHORT_TERM_HARD_EVENT_CAP"
#: ``true`` | ``false``: keep rolling summaries (mediumTerm.enabled).
MEMORY_SERVICE_MEDIUM_TERM_ENABLED = "MEMORY_SERVICE_MEDIUM_TERM_ENABLED"
#: Events out of the window, not yet summarised, that start a fold (mediumTerm.compactionTrigger).
MEMORY_SERVICE_COMPACTION_TRIGGER = "MEMORY_SERVICE_COMPACTION_TRIGGER"
#: Target summary length in tokens (mediumTerm.compactionTarget).
MEMORY_SERVICE_COMPACTION_TARGET = "MEMORY_SERVICE_COMPACTION_TARGET"
#: Summary versions kept per session (mediumTerm.digestRetention).
MEMORY_SERVICE_DIGEST_RETENTION = "MEMORY_SERVICE_DIGEST_RETENTION"
#: ``true`` | ``false``: extract and recall long-term facts (longTerm.enabled).
MEMORY_SERVICE_LONG_TERM_ENABLED = "MEMORY_SERVICE_LONG_TERM_ENABLED"
#: Facts recalled when a request names no count (longTerm.defaultTopK).
MEMORY_SERVICE_DEFAULT_TOP_K = "MEMORY_SERVICE_DEFAULT_TOP_K"
#: Relevance in [0, 1] below which a fact is not recalled (longTerm.scoreThreshold).
MEMORY_SERVICE_SCORE_THRESHOLD = "MEMORY_SERVICE_SCORE_THRESHOLD"
#: ``session`` | ``agent`` | ``user``: the store's read ceiling, whatever an agent asks (spec.maxReadScope).
MEMORY_SERVICE_MAX_READ_SCOPE = "MEMORY_SERVICE_MAX_READ_SCOPE"
# Credentials (kora.core.tokens; docs/identity.md): generated by the operator (kept in Secrets) and by ``kora up``.
#: The memory service's admin bearer token: every route, including those spanning agents or users.
MEMORY_SERVICE_ADMIN_TOKEN = "MEMORY_SERVICE_ADMIN_TOKEN"
#: The memory service's bound-agent bearer token: one agent's sessions; the agents send it as MEMORY_STORE_TOKEN.
MEMORY_SERVICE_AGENT_TOKEN = "MEMORY_SERVICE_AGENT_TOKEN"
#: The agent's copy of its store's agent token, sent as ``Authorization: Bearer`` to the memory service.
MEMORY_STORE_TOKEN = "MEMORY_STORE_TOKEN"
#: The agent's operator credential: ``/memory/*`` for every session, and erasure of any session or user.
AGENT_ADMIN_TOKEN = "AGENT_ADMIN_TOKEN"
#: The web console's interface, port and the ``kora up`` state directory it shows (:mod:`kora.console.settings`).
CONSOLE_HOST = "CONSOLE_HOST"
CONSOLE_PORT = "CONSOLE_PORT"
CONSOLE_STATE_DIR = "CONSOLE_STATE_DIR"
CONSOLE_TRACE_URL = "CONSOLE_TRACE_URL"

# Operator: per-kind default gateway route timeouts (duration strings, Helm values ``gateway.defaultTimeouts``).
GATEWAY_DEFAULT_AGENT_TIMEOUT = "GATEWAY_DEFAULT_AGENT_TIMEOUT"
GATEWAY_DEFAULT_MODELAPI_TIMEOUT = "GATEWAY_DEFAULT_MODELAPI_TIMEOUT"
GATEWAY_DEFAULT_MCP_TIMEOUT = "GATEWAY_DEFAULT_MCP_TIMEOUT"
#: Kora: MemoryStore routes (default 30s, as for tool servers).
GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT = "GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT"

# Operator (``kora operator``) settings, set by the Helm chart from its values (docs/operator.md "Values").
#: Image of every Kora workload the operator creates (required).
KORA_IMAGE = "KORA_IMAGE"
#: ``Always`` | ``IfNotPresent`` | ``Never``: the workloads' imagePullPolicy (unset: Kubernetes' default).
KORA_IMAGE_PULL_POLICY = "KORA_IMAGE_PULL_POLICY"
#: ``true`` | ``false``: one HTTPRoute per resource on the configured Gateway (gatewayAPI.enabled).
GATEWAY_API_ENABLED = "GATEWAY_API_ENABLED"
#: Name of the Gateway the routes attach to (gatewayAPI.gatewayName).
GATEWAY_NAME = "GATEWAY_NAME"
#: Namespace of that Gateway (gatewayAPI.gatewayNamespace; default: the operator's namespace).
GATEWAY_NAMESPACE = "GATEWAY_NAMESPACE"
#: ``true`` | ``false``: the operator creates the Gateway itself (gatewayAPI.createGateway).
GATEWAY_CREATE = "GATEWAY_CREATE"
#: GatewayClass of a created Gateway (gatewayAPI.gatewayClassName; required with GATEWAY_CREATE).
GATEWAY_CLASS_NAME = "GATEWAY_CLASS_NAME"
#: HTTP listener port of a created Gateway (gatewayAPI.listenerPort, default 80).
GATEWAY_LISTENER_PORT = "GATEWAY_LISTENER_PORT"
#: Kora: in-cluster base URL of the Gateway, e.g. ``http://gw.gateway-system.svc.cluster.local``.
GATEWAY_INTERNAL_URL = "GATEWAY_INTERNAL_URL"
#: ``true`` | ``false``: strict gateway-only traffic (security.strictGatewayApi.enabled).
STRICT_GATEWAY_API_ENABLED = "STRICT_GATEWAY_API_ENABLED"
#: ``true`` | ``false``: one NetworkPolicy per workload (security.networkPolicy.enabled; strict mode implies it).
NETWORK_POLICY_ENABLED = "NETWORK_POLICY_ENABLED"
#: Seconds between the operator's asks of Agent pods whether they reach their MemoryStore
#: (operator.memoryProbeSeconds, default 15).
AGENT_MEMORY_PROBE_SECONDS = "AGENT_MEMORY_PROBE_SECONDS"
#: Image of Hosted ModelAPIs (default: KORA_IMAGE with ``-embeddings`` after its tag).
KORA_EMBEDDINGS_IMAGE = "KORA_EMBEDDINGS_IMAGE"
#: Namespace the operator runs in (default: its service account's namespace, else ``default``).
OPERATOR_NAMESPACE = "OPERATOR_NAMESPACE"

# Request limits (kora.core.limits): the largest request body each workload accepts, in bytes (413 beyond it).
AGENT_MAX_REQUEST_BYTES = "AGENT_MAX_REQUEST_BYTES"
MCP_MAX_REQUEST_BYTES = "MCP_MAX_REQUEST_BYTES"
MEMORY_SERVICE_MAX_REQUEST_BYTES = "MEMORY_SERVICE_MAX_REQUEST_BYTES"
MODEL_PROXY_MAX_REQUEST_BYTES = "MODEL_PROXY_MAX_REQUEST_BYTES"
MODEL_HOSTED_MAX_REQUEST_BYTES = "MODEL_HOSTED_MAX_REQUEST_BYTES"
#: Intra-op threads of the hosted model runtime (``kora model-hosted``; default 1, at most 64).
MODEL_HOSTED_THREADS = "MODEL_HOSTED_THREADS"
#: Default and largest ``MODEL_HOSTED_THREADS``.
DEFAULT_HOSTED_THREADS = 1
MAX_HOSTED_THREADS = 64
#: Default of the agent and the tool server (4 MiB).
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: Default of the memory service and the model workloads (16 MiB): a batch of events, or a model request holding a
#: long conversation with tool results, may be larger than a client's request to an agent.
DEFAULT_MAX_LARGE_REQUEST_BYTES = 16 * 1024 * 1024
#: Smallest value a ``*_MAX_REQUEST_BYTES`` setting may take.
MIN_MAX_REQUEST_BYTES = 1024

#: Path appended to a tool server's base URL: the Streamable HTTP endpoint.
MCP_PATH = "/mcp"


def env_key(name: str) -> str:
    """The ``<NAME>`` part of a per-resource variable: upper case, hyphens and dots as underscores.

    >>> env_key("web-search")
    'WEB_SEARCH'
    """
    return name.upper().replace("-", "_").replace(".", "_")


def mcp_server_url_var(name: str) -> str:
    """``MCP_SERVER_<NAME>_URL``: the variable holding tool server ``name``'s base URL."""
    return f"MCP_SERVER_{env_key(name)}_URL"


def peer_agent_card_url_var(name: str) -> str:
    """``PEER_AGENT_<NAME>_CARD_URL``: the variable holding peer agent ``name``'s base URL."""
    return f"PEER_AGENT_{env_key(name)}_CARD_URL"


@dataclass(frozen=True)
class VariableDoc:
    """One environment variable that no settings model declares, as ``docs/configuration.md`` lists it.

    For per-name families (``MCP_SERVER_<NAME>_URL``) and variables read by hand (``kora model-proxy``);
    fields of a settings model are described by their ``Field(description=...)`` instead. ``type`` and
    ``default`` are the Markdown shown in their columns (``default`` ``""``: none); ``required`` is
    ``"yes"``, ``"no"`` or the condition under which the variable is required.
    """

    name: str
    type: str
    description: str
    default: str = ""
    required: str = "no"


def mcp_endpoint(base_url: str) -> str:
    """The Streamable HTTP endpoint of a tool server: its base URL with ``/mcp`` appended once."""
    base = base_url.rstrip("/")
    return base if base.endswith(MCP_PATH) else base + MCP_PATH


def split_names(value: str) -> list[str]:
    """Split a comma-separated list, dropping blanks and surrounding spaces: ``"a, b,,"`` -> ``["a", "b"]``."""
    return [part.strip() for part in value.split(",") if part.strip()]
