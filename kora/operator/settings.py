"""Settings of ``kora operator``, read from the environment the Helm chart sets.

The Helm values behind them: docs/operator.md "Values". Each setting is read from the upper-case form of its field name
(``gateway_api_enabled`` <- ``GATEWAY_API_ENABLED``; the names are in :mod:`kora.core.env`); the four
``GATEWAY_DEFAULT_*_TIMEOUT`` durations are read by :meth:`kora.resources.wiring.RouteTimeouts.from_env`, the
same parser ``kora up`` would use. :func:`load_operator_settings` validates everything at once and raises
:class:`~kora.core.settings_errors.SettingsError` naming every bad variable.

Chart value -> variable (``deploy/helm/kora``): ``gatewayAPI.enabled`` -> ``GATEWAY_API_ENABLED``,
``gatewayAPI.gatewayName`` -> ``GATEWAY_NAME``, ``gatewayAPI.gatewayNamespace`` -> ``GATEWAY_NAMESPACE``,
``gatewayAPI.internalURL`` -> ``GATEWAY_INTERNAL_URL``, ``gateway.defaultTimeouts.*`` ->
``GATEWAY_DEFAULT_*_TIMEOUT``, ``security.strictGatewayApi.enabled`` -> ``STRICT_GATEWAY_API_ENABLED``,
``security.networkPolicy.enabled`` -> ``NETWORK_POLICY_ENABLED``, ``agentDefaults.budget.*`` ->
``DEFAULT_BUDGET_MAX_*``, ``operator.memoryProbeSeconds`` -> ``AGENT_MEMORY_PROBE_SECONDS``.
``gatewayAPI.createGateway``,
``gatewayClassName`` and ``listenerPort`` make the chart render the Gateway itself (Helm owns it), so the chart
never sets ``GATEWAY_CREATE``, ``GATEWAY_CLASS_NAME`` or ``GATEWAY_LISTENER_PORT``: those are for an operator run
without the chart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from kora.core import env as names
from kora.core.net import is_http_url
from kora.core.serving import load_settings
from kora.core.settings_model import WorkloadSettings
from kora.resources import (
    DEFAULT_ROUTE_TIMEOUTS,
    AgentBudget,
    ClusterDNS,
    DnsLabel,
    GatewayRouted,
    RouteTimeouts,
    ToolApproval,
    UrlStrategy,
    check_approval_pattern,
)

__all__ = [
    "COMPONENT",
    "DEFAULT_GATEWAY_NAME",
    "SERVICE_ACCOUNT_NAMESPACE_FILE",
    "VARIABLES",
    "OperatorSettings",
    "load_operator_settings",
]

COMPONENT = "kora operator"
#: Gateway name when ``GATEWAY_NAME`` is unset (KAOS's chart default names KAOS; Kora's is neutral).
DEFAULT_GATEWAY_NAME = "kora-gateway"
#: Where Kubernetes mounts the pod's namespace for its service account (absent outside a cluster).
SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: Namespace of an operator that runs outside a cluster and is given none.
FALLBACK_NAMESPACE = "default"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TIMEOUT_VARIABLES = (
    (names.GATEWAY_DEFAULT_AGENT_TIMEOUT, DEFAULT_ROUTE_TIMEOUTS.agent, "Agent"),
    (names.GATEWAY_DEFAULT_MODELAPI_TIMEOUT, DEFAULT_ROUTE_TIMEOUTS.model_api, "ModelAPI"),
    (names.GATEWAY_DEFAULT_MCP_TIMEOUT, DEFAULT_ROUTE_TIMEOUTS.mcp, "MCPServer"),
    (names.GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT, DEFAULT_ROUTE_TIMEOUTS.memory_store, "MemoryStore"),
)

#: The variables read by :meth:`RouteTimeouts.from_env` rather than a field, as docs/configuration.md lists them.
VARIABLES = tuple(
    names.VariableDoc(
        variable,
        "duration",
        f"Route timeout of {kind} HTTPRoutes without `spec.gatewayRoute.timeout` (Gateway API duration: "
        "`30s`, `2m`, `1h30m`, `500ms`).",
        f"`{default:g}s`",
    )
    for variable, default, kind in _TIMEOUT_VARIABLES
)


class OperatorSettings(WorkloadSettings):
    """Settings of the operator. Invariants after :func:`load_operator_settings`: ``operator_namespace`` and
    ``gateway_namespace`` are set; strict mode implies Gateway API and a ``gateway_internal_url``;
    ``gateway_create`` implies Gateway API and a ``gateway_class_name``.

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``).
    """

    kora_image: str = Field(
        min_length=1,
        description="Image of every Kora workload (its entrypoint is `kora`).",
        examples=["ghcr.io/example/kora:0.1.0"],
    )
    kora_embeddings_image: str = Field(
        default="",
        description="Image of Hosted ModelAPIs (the variant with the `embeddings` extra, built by "
        "`scripts/image/build.sh --extras embeddings`); empty: `KORA_IMAGE` with `-embeddings` added to its tag.",
        examples=["ghcr.io/example/kora:0.1.0-embeddings"],
    )
    kora_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="imagePullPolicy of the workloads; unset: Kubernetes' default for the tag."
    )
    operator_namespace: DnsLabel = Field(
        default=FALLBACK_NAMESPACE,
        description="Namespace the operator runs in; unset: its service account's namespace, else `default`.",
    )
    gateway_api_enabled: bool = Field(
        default=False, description="Create one HTTPRoute per resource on the configured Gateway."
    )
    gateway_name: DnsLabel = Field(default=DEFAULT_GATEWAY_NAME, description="Name of the Gateway routes attach to.")
    gateway_namespace: DnsLabel = Field(
        default=FALLBACK_NAMESPACE, description="Namespace of the Gateway; unset: the operator's namespace."
    )
    gateway_internal_url: str = Field(
        default="",
        description="In-cluster base URL of the Gateway: agent cards and `status.endpoint` use it when Gateway API "
        "is enabled; strict mode gives it to workloads. Required with `STRICT_GATEWAY_API_ENABLED`.",
        json_schema_extra={"format": "uri"},
    )
    gateway_create: bool = Field(
        default=False, description="Create the Gateway (needs `GATEWAY_API_ENABLED` and `GATEWAY_CLASS_NAME`)."
    )
    gateway_class_name: str = Field(default="", description="GatewayClass of a created Gateway.")
    gateway_listener_port: int = Field(
        default=80, ge=1, le=65535, description="HTTP listener port of a created Gateway."
    )
    strict_gateway_api_enabled: bool = Field(
        default=False,
        description="Strict gateway-only traffic: workloads reach each other through the Gateway and a "
        "NetworkPolicy per workload admits only the Gateway's and the operator's namespaces (needs "
        "`GATEWAY_API_ENABLED`).",
    )
    network_policy_enabled: bool = Field(
        default=False,
        description="One NetworkPolicy per workload (strict mode generates them even when this is false).",
    )
    # Defaults of every Agent's spec.config.budget (the chart's agentDefaults.budget); unset: no limit.
    default_budget_max_tool_calls: int | None = Field(
        default=None, ge=0, description="Default `spec.config.budget.maxToolCalls` of Agents that leave it unset."
    )
    default_budget_max_model_requests: int | None = Field(
        default=None, ge=1, description="Default `spec.config.budget.maxModelRequests` of Agents that leave it unset."
    )
    default_budget_max_tokens: int | None = Field(
        default=None, ge=1, description="Default `spec.config.budget.maxTokens` of Agents that leave it unset."
    )
    default_budget_max_seconds: float | None = Field(
        default=None, gt=0, description="Default `spec.config.budget.maxSeconds` of Agents that leave it unset."
    )
    default_budget_max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Default `spec.config.budget.maxCostUsd` of Agents that leave it unset (an Agent whose ModelAPI "
        "declares no `spec.pricing` then fails to start, naming the missing prices).",
    )
    # Defaults of every Agent's spec.config.toolApproval (the chart's agentDefaults.toolApproval).
    default_tool_approval_required: str = Field(
        default="",
        description="Default `spec.config.toolApproval.required` of Agents that name no pattern: comma-separated "
        "`<server>/<tool>` patterns (`*` wildcards, `agents/<peer>` for a delegation); empty: none.",
    )
    default_tool_approval_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Default `spec.config.toolApproval.timeoutSeconds` of Agents that leave it unset (unset: the "
        "agent's own default).",
    )
    agent_memory_probe_seconds: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="Seconds between the operator's asks of each running Agent pod bound to a MemoryStore "
        "whether it reaches its store (`GET /ready`), which set and clear the `MemoryDegraded` condition.",
    )
    # Read from GATEWAY_DEFAULT_*_TIMEOUT by RouteTimeouts.from_env (VARIABLES documents them).
    route_timeouts: SkipJsonSchema[RouteTimeouts] = Field(default=DEFAULT_ROUTE_TIMEOUTS)

    @property
    def embeddings_image(self) -> str:
        """``KORA_EMBEDDINGS_IMAGE``, else ``KORA_IMAGE`` with ``-embeddings`` after its tag (``:latest`` when it
        has none); a digest-pinned ``KORA_IMAGE`` (``@sha256:``) has no variant to derive: it is used as it is."""
        if self.kora_embeddings_image:
            return self.kora_embeddings_image
        image = self.kora_image
        if "@" in image:
            return image
        repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        return f"{repository}:{tag}-embeddings"

    @field_validator("kora_image", "kora_embeddings_image")
    @classmethod
    def _image_has_no_space(cls, value: str) -> str:
        if any(character.isspace() for character in value):
            raise ValueError("must be an image reference without spaces, such as registry/kora:0.1.0")
        return value

    @field_validator("gateway_internal_url")
    @classmethod
    def _internal_url(cls, value: str) -> str:
        if value and not is_http_url(value):
            raise ValueError("must be an http(s) URL such as http://gateway.gateway-system.svc.cluster.local")
        return value.rstrip("/")

    @field_validator("gateway_class_name")
    @classmethod
    def _class_name(cls, value: str) -> str:
        if value and (len(value) > 253 or not _SUBDOMAIN.match(value)):
            raise ValueError("must be a Kubernetes object name (lower-case letters, digits, '-' and '.')")
        return value

    @field_validator("default_tool_approval_required")
    @classmethod
    def _approval_patterns(cls, value: str) -> str:
        for item in (item.strip() for item in value.split(",")):
            if item:
                check_approval_pattern(item)
        return value

    @property
    def approval_defaults(self) -> ToolApproval:
        """The chart's default tool approval of every Agent (``agentDefaults.toolApproval``)."""
        required = [item.strip() for item in self.default_tool_approval_required.split(",") if item.strip()]
        return ToolApproval(required=required, timeout_seconds=self.default_tool_approval_timeout_seconds)

    @property
    def budget_defaults(self) -> AgentBudget:
        """The chart's default budget of every Agent (``agentDefaults.budget``), field by field."""
        return AgentBudget(
            max_tool_calls=self.default_budget_max_tool_calls,
            max_model_requests=self.default_budget_max_model_requests,
            max_tokens=self.default_budget_max_tokens,
            max_seconds=self.default_budget_max_seconds,
            max_cost_usd=self.default_budget_max_cost_usd,
        )

    @property
    def network_policies(self) -> bool:
        """True when every workload gets a NetworkPolicy: strict mode overrides the disabling switch."""
        return self.strict_gateway_api_enabled or self.network_policy_enabled

    def workload_strategy(self) -> UrlStrategy:
        """How workloads reach each other: through the Gateway in strict mode, else cluster DNS."""
        if self.strict_gateway_api_enabled:
            return GatewayRouted(self.gateway_internal_url)
        return ClusterDNS()

    def public_strategy(self) -> UrlStrategy:
        """The URLs clients are told (agent card ``url``, ``AGENT_PUBLIC_URL``, ``status.endpoint``): the Gateway's
        when Gateway API is enabled and its internal URL is known, else cluster DNS."""
        if self.gateway_api_enabled and self.gateway_internal_url:
            return GatewayRouted(self.gateway_internal_url)
        return ClusterDNS()


def _service_account_namespace(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _combination_problems(fields: Mapping[str, str]) -> list[str]:
    """Settings that need others; checked on the raw text so they are reported with the type errors."""

    def on(name: str) -> bool:
        return fields.get(name, "").strip().lower() in {"1", "true", "yes", "on", "t", "y"}

    problems = []
    if on("strict_gateway_api_enabled"):
        if not on("gateway_api_enabled"):
            problems.append(f"{names.STRICT_GATEWAY_API_ENABLED}: needs {names.GATEWAY_API_ENABLED}=true")
        if not fields.get("gateway_internal_url"):
            problems.append(
                f"{names.GATEWAY_INTERNAL_URL}: required with {names.STRICT_GATEWAY_API_ENABLED}=true "
                "(workloads reach each other through it)"
            )
    if on("gateway_create"):
        if not on("gateway_api_enabled"):
            problems.append(f"{names.GATEWAY_CREATE}: needs {names.GATEWAY_API_ENABLED}=true")
        if not fields.get("gateway_class_name"):
            problems.append(f"{names.GATEWAY_CLASS_NAME}: required with {names.GATEWAY_CREATE}=true")
    return problems


def load_operator_settings(
    environ: Mapping[str, str] | None = None,
    *,
    namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE,
) -> OperatorSettings:
    """Read and validate the operator's settings from ``environ`` (default: the process environment).

    Blank values count as unset. ``OPERATOR_NAMESPACE`` defaults to the contents of ``namespace_file`` (the
    service account's namespace in a pod), else ``default``; ``GATEWAY_NAMESPACE`` defaults to the operator's
    namespace. Raises :class:`~kora.core.settings_errors.SettingsError` listing every bad or missing variable,
    each by name.
    """
    env = os.environ if environ is None else environ
    upper = {key.upper(): value for key, value in env.items()}

    def prepare(fields: dict[str, Any]) -> list[str]:
        fields.pop("route_timeouts", None)  # read from its own variables below
        namespace = fields.get("operator_namespace") or _service_account_namespace(namespace_file)
        fields.setdefault("operator_namespace", namespace or FALLBACK_NAMESPACE)
        fields.setdefault("gateway_namespace", fields["operator_namespace"])
        return []

    def check(fields: dict[str, Any]) -> list[str]:
        problems = _combination_problems(fields)
        for variable, _, _ in _TIMEOUT_VARIABLES:
            # One variable at a time, so every malformed duration is named, not only the first.
            try:
                RouteTimeouts.from_env({variable: upper.get(variable, "")})
            except ValueError as error:
                problems.append(str(error))
        return problems

    settings = load_settings(OperatorSettings, COMPONENT, env, prepare=prepare, check=check)
    return settings.model_copy(update={"route_timeouts": RouteTimeouts.from_env(upper)})
