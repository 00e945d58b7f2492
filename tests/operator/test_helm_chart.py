"""The Helm chart ``deploy/helm/kora`` (its values: docs/operator.md "Values"; strict gateway-only traffic),
rendered by the pinned Helm 3 binary (tests/support/helm.py).

Without a cluster: ``helm lint`` and ``helm template`` pass for the default values, Gateway API, strict mode, a
created Gateway and named namespaces; every rendered object validates against the Kubernetes schemas
(``kubernetes-validate``) or, for the Gateway, against the Gateway API CRD's schema; the values reach the operator
as settings it accepts, with the documented defaults; mistakes stop ``helm template`` with a message naming the value.

On the test API server (slow; RBAC authorization is on there): the rendered objects apply, and ``kora operator``
started from the rendered Deployment's command and environment, authenticated as the chart's ServiceAccount (so
bound to exactly the chart's roles), reconciles the quickstart to Ready without one refused API call and counts
those reconciles on its metrics port.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
import uuid
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.types import PatchType

from kora.console.app import create_app
from kora.console.settings import ConsoleSettings, load_console_settings
from kora.core import env as names
from kora.operator.children import NAMESPACE_NAME_LABEL, gateway_manifest
from kora.operator.kube import Gateway, HTTPRoute
from kora.operator.settings import VARIABLES, OperatorSettings, load_operator_settings
from kora.resources import crd
from kora.resources.loader import resource_problems
from tests.support.helm import (
    CHART,
    HelmError,
    console_container,
    deployment_of,
    find,
    helm,
    local_operator,
    operator_container,
    render,
    render_text,
    rendered_environment,
    set_flags,
)
from tests.support.kube import (
    GATEWAY_API_CRDS,
    KubeCluster,
    exists,
    kora_resource,
    load_yaml_documents,
    restricted_problems,
)
from tests.support.operator import launch_operator, metrics_url, phase_is, supervised, wait_for
from tests.support.processes import prometheus
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "kora.yaml"
INTERNAL_URL = "http://kora-gateway.kora-system.svc.cluster.local"

#: The chart configurations rendered, plus named namespaces without the webhook (the other RBAC shape).
SCENARIOS: dict[str, dict[str, object]] = {
    "defaults": {},
    "gateway-api": {"gatewayAPI.enabled": True, "gatewayAPI.internalURL": INTERNAL_URL},
    "strict": {
        "gatewayAPI.enabled": True,
        "gatewayAPI.internalURL": INTERNAL_URL,
        "security.strictGatewayApi.enabled": True,
    },
    "created-gateway": {
        "gatewayAPI.enabled": True,
        "gatewayAPI.createGateway": True,
        "gatewayAPI.gatewayClassName": "envoy",
        "gatewayAPI.gatewayName": "edge",
        "gatewayAPI.gatewayNamespace": "gateway-system",
        "gatewayAPI.listenerPort": 8080,
    },
    "namespaced": {
        "operator.watchNamespaces": ["team-a", "team-b"],
        "operator.webhook.enabled": False,
        "operator.logLevel": "debug",
        "telemetry.otlpEndpoint": "http://otel-collector.observability:4318",
        "image.repository": "registry.example/kora",
        "image.tag": "dev",
        "image.pullPolicy": "Always",
        "security.networkPolicy.enabled": True,
        "gateway.defaultTimeouts.mcp": "45s",
        "operator.metrics.enabled": False,
        "agentDefaults.budget.maxToolCalls": 0,
        "agentDefaults.budget.maxTokens": 2000000,
        "agentDefaults.budget.maxCostUsd": 0.5,
        "agentDefaults.toolApproval.required": ["files/delete_*", "agents/*"],
        "agentDefaults.toolApproval.timeoutSeconds": 600,
    },
    "console": {
        "gatewayAPI.enabled": True,
        "gatewayAPI.internalURL": INTERNAL_URL,
        "console.enabled": True,
        "console.gatewayRoute.enabled": True,
        "console.accessTokenSecret": "kora-console-token",
    },
}


def _pyproject_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def _gateway_crd_schema(kind: str = "Gateway") -> dict[str, Any]:
    """The ``v1`` schema of the Gateway API's CRD of ``kind`` (``Gateway``, ``HTTPRoute``), as shipped, not adapted
    to 1.20."""
    (document,) = load_yaml_documents(GATEWAY_API_CRDS / f"{kind.lower()}s.yaml")
    version = next(v for v in document["spec"]["versions"] if v["name"] == "v1")
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


# -- helm lint / template ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_passes(scenario: str):
    result = helm("lint", "--strict", str(CHART), *set_flags(SCENARIOS[scenario]))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_object_validates_against_the_kubernetes_schemas(scenario: str):
    objects = render(SCENARIOS[scenario], include_crds=True)
    kinds = sorted({o["kind"] for o in objects})
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount", "ClusterRole"} <= set(kinds)
    oldest = kubernetes_validate.utils.all_versions()[0]
    for document in objects:
        if document["apiVersion"].startswith("gateway.networking.k8s.io/"):
            # Not a built-in kind: the Gateway API CRD's own schema says what a Gateway or HTTPRoute may hold.
            jsonschema.validate(document, _gateway_crd_schema(document["kind"]))
            continue
        for version in (oldest, kubernetes_validate.latest_version()):
            kubernetes_validate.validate(document, version, strict=True)


def test_defaults_are_the_specs():
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values["gatewayAPI"] == {
        "enabled": False,
        "gatewayName": "kora-gateway",
        "gatewayNamespace": "",
        "createGateway": False,
        "gatewayClassName": "",
        "listenerPort": 80,
        "internalURL": "",
    }
    assert values["gateway"]["defaultTimeouts"] == {
        "agent": "120s",
        "modelAPI": "120s",
        "mcp": "30s",
        "memoryStore": "30s",
    }
    assert values["security"] == {"strictGatewayApi": {"enabled": False}, "networkPolicy": {"enabled": False}}

    objects = render(namespace="platform")
    container = operator_container(objects)
    env = rendered_environment(container)
    assert env["GATEWAY_API_ENABLED"] == "false"
    assert env["GATEWAY_NAME"] == "kora-gateway"
    assert env["GATEWAY_NAMESPACE"] == "platform"  # the release namespace
    assert env["OPERATOR_NAMESPACE"] == "platform"
    assert (env["GATEWAY_DEFAULT_AGENT_TIMEOUT"], env["GATEWAY_DEFAULT_MODELAPI_TIMEOUT"]) == ("120s", "120s")
    assert env["GATEWAY_DEFAULT_MCP_TIMEOUT"] == "30s"
    assert env["STRICT_GATEWAY_API_ENABLED"] == "false"
    assert env["NETWORK_POLICY_ENABLED"] == "false"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env
    assert not [o for o in objects if o["kind"] == "Gateway"]
    # One image for everything, tagged with Kora's version by default.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == _pyproject_version()
    assert container["image"] == f"kora:{_pyproject_version()}" == env["KORA_IMAGE"]
    assert env["KORA_IMAGE_PULL_POLICY"] == container["imagePullPolicy"] == "IfNotPresent"
    # Hosted ModelAPIs: the variant with the embedding runtime, tagged as scripts/image/build.sh tags it.
    assert env["KORA_EMBEDDINGS_IMAGE"] == f"kora:{_pyproject_version()}-embeddings"
    assert load_operator_settings(env).embeddings_image == env["KORA_EMBEDDINGS_IMAGE"]
    assert container["command"] == ["kora", "operator"]
    assert "--liveness=http://0.0.0.0:8081/healthz" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # /metrics on its own port, announced the way most Prometheus scrape configurations look for it.
    assert "--metrics-port=8080" in container["args"]
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert _pod_annotations(objects) == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }


@pytest.mark.parametrize(
    "image",
    ["registry.example/kora-embeddings:0.1.0-cuda", "registry.example:5000/ml/kora@sha256:" + "ab" * 32],
)
def test_the_embeddings_image_value_names_the_hosted_modelapis_image(image: str):
    env = rendered_environment(operator_container(render({"image.embeddings": image})))
    assert env["KORA_EMBEDDINGS_IMAGE"] == image
    settings = load_operator_settings(env)
    assert settings.embeddings_image == image
    assert settings.kora_image == f"kora:{_pyproject_version()}"  # the other workloads keep the main image


def _pod_annotations(objects: list[dict[str, Any]]) -> dict[str, str]:
    annotations: dict[str, str] = deployment_of(objects, "operator")["spec"]["template"]["metadata"].get(
        "annotations", {}
    )
    return annotations


def test_the_metrics_values_move_the_port_and_switch_it_off():
    moved = render({"operator.metrics.port": 9090, "operator.podAnnotations": {"team": "platform"}})
    container = operator_container(moved)
    assert "--metrics-port=9090" in container["args"]
    assert [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"] == [9090]
    assert _pod_annotations(moved) == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "prometheus.io/path": "/metrics",
        "team": "platform",
    }
    # podAnnotations win over the chart's own (e.g. a scraper that must skip this pod).
    overridden = render({"operator.podAnnotations": {"prometheus.io/scrape": "false"}})
    assert _pod_annotations(overridden)["prometheus.io/scrape"] == "false"

    off = render({"operator.metrics.enabled": False, "operator.podAnnotations": {"team": "platform"}})
    container = operator_container(off)
    assert "--metrics-port=0" in container["args"]  # the operator's own default (8080) would serve it
    assert "metrics" not in [p["name"] for p in container["ports"]]
    assert _pod_annotations(off) == {"team": "platform"}
    # The webhook's port is free for metrics once the webhook is off.
    reused = render({"operator.webhook.enabled": False, "operator.metrics.port": 9443})
    assert "--metrics-port=9443" in operator_container(reused)["args"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_rendered_environment_is_settings_the_operator_accepts(scenario: str):
    env = rendered_environment(operator_container(render(SCENARIOS[scenario])))
    known = {name.upper() for name in OperatorSettings.model_fields} | {v.name for v in VARIABLES}
    # Besides the operator's settings: telemetry's endpoint, and HOME (the process's, not a setting).
    assert set(env) - known == ({"OTEL_EXPORTER_OTLP_ENDPOINT"} & set(env)) | {"HOME"}
    settings = load_operator_settings(env)
    values = SCENARIOS[scenario]
    assert settings.gateway_api_enabled is bool(values.get("gatewayAPI.enabled"))
    assert settings.strict_gateway_api_enabled is bool(values.get("security.strictGatewayApi.enabled"))
    assert settings.network_policies is bool(
        values.get("security.strictGatewayApi.enabled") or values.get("security.networkPolicy.enabled")
    )
    # The chart makes the Gateway itself (Helm owns it); the operator is never asked to.
    assert settings.gateway_create is False
    if scenario == "namespaced":
        assert settings.kora_image == "registry.example/kora:dev"
        assert settings.kora_image_pull_policy == "Always"
        # The chart's default variant is the one the operator would derive from KORA_IMAGE.
        assert settings.embeddings_image == "registry.example/kora:dev-embeddings"
        assert settings.route_timeouts.mcp == 45
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
        budget = settings.budget_defaults
        assert (budget.max_tool_calls, budget.max_tokens, budget.max_cost_usd) == (0, 2000000, 0.5)
        assert (budget.max_model_requests, budget.max_seconds) == (None, None)
        approval = settings.approval_defaults
        assert (approval.required, approval.timeout_seconds) == (["files/delete_*", "agents/*"], 600)
    else:
        # null (the default): no DEFAULT_BUDGET_* variable, no limit; no default approval.
        assert not [name for name in env if name.startswith(("DEFAULT_BUDGET_", "DEFAULT_TOOL_APPROVAL_"))]
        assert settings.approval_defaults.required == []


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_operator_pod_passes_podsecurity_restricted_with_a_read_only_root(scenario: str):
    objects = render(SCENARIOS[scenario])
    pod = deployment_of(objects, "operator")["spec"]["template"]["spec"]
    assert restricted_problems(pod) == []
    container = operator_container(objects)
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert rendered_environment(container)["HOME"] == "/tmp"


def test_the_created_gateway_is_the_one_the_operator_would_make():
    values = SCENARIOS["created-gateway"]
    gateway = find(render(values), "Gateway")
    settings = load_operator_settings(
        {
            names.KORA_IMAGE: "kora:test",
            names.GATEWAY_API_ENABLED: "true",
            names.GATEWAY_CREATE: "true",
            names.GATEWAY_CLASS_NAME: "envoy",
            names.GATEWAY_NAME: "edge",
            names.GATEWAY_NAMESPACE: "gateway-system",
            names.GATEWAY_LISTENER_PORT: "8080",
        }
    )
    operators = gateway_manifest(settings)
    assert operators is not None
    assert gateway["spec"] == operators["spec"]
    assert gateway["metadata"]["name"] == "edge"
    assert gateway["metadata"]["namespace"] == "gateway-system"


def test_arguments_follow_the_webhook_and_namespace_values():
    default = operator_container(render(namespace="kora-system"))
    assert "--webhook-service=kora-system/kora-webhook" in default["args"]
    assert "--webhook-host=kora-webhook.kora-system.svc" in default["args"]
    assert not [a for a in default["args"] if a.startswith("--namespace")]

    named = render(SCENARIOS["namespaced"])
    container = operator_container(named)
    assert "--no-webhook" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--webhook")]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert "--log-level=DEBUG" in container["args"]
    assert not [o for o in named if o["kind"] == "Service"]
    # The namespaced permissions are granted in the watched namespaces only.
    bindings = [o for o in named if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert [b["roleRef"]["name"] for b in named if b["kind"] == "ClusterRoleBinding"] == ["kora-cluster"]
    cluster_rules = find(named, "ClusterRole", "kora-cluster")["rules"]
    assert {r["apiGroups"][0] for r in cluster_rules} == {"apiextensions.k8s.io", ""}  # no webhook configurations


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"gatewayAPI.enabled": True, "gatewayAPI.createGateway": True},
            "gatewayAPI.gatewayClassName is required when gatewayAPI.createGateway is true",
        ),
        ({"gatewayAPI.createGateway": True, "gatewayAPI.gatewayClassName": "envoy"}, "needs gatewayAPI.enabled=true"),
        (
            {"gatewayAPI.enabled": True, "security.strictGatewayApi.enabled": True},
            "gatewayAPI.internalURL is required when security.strictGatewayApi.enabled is true",
        ),
        (
            {"security.strictGatewayApi.enabled": True, "gatewayAPI.internalURL": INTERNAL_URL},
            "security.strictGatewayApi.enabled needs gatewayAPI.enabled=true",
        ),
        ({"gatewayApi": {"enabled": True}}, "(root): Additional property gatewayApi is not allowed"),
        ({"gatewayAPI.gatewayname": "edge"}, "gatewayAPI: Additional property gatewayname is not allowed"),
        ({"gatewayAPI.listenerPort": "80"}, "gatewayAPI.listenerPort: Invalid type. Expected: integer, given: string"),
        (
            {"security.strictGatewayApi.enabled": "true"},
            "security.strictGatewayApi.enabled: Invalid type. Expected: boolean, given: string",
        ),
        ({"gateway.defaultTimeouts.mcp": "30 seconds"}, "gateway.defaultTimeouts.mcp: Does not match pattern"),
        ({"image.pullPolicy": "Sometimes"}, "image.pullPolicy: image.pullPolicy must be one of the following"),
        ({"image.embeddings": "kora embeddings"}, "image.embeddings: Does not match pattern"),
        ({"operator.watchNamespaces": "demo"}, "operator.watchNamespaces: Invalid type. Expected: array"),
        (
            {"operator.metrics.port": 8081},
            "operator.metrics.port must differ from operator.livenessPort",
        ),
        ({"operator.metrics.port": 9443}, "operator.metrics.port must differ from operator.webhook.port"),
        ({"operator.metrics.port": "8080"}, "operator.metrics.port: Invalid type. Expected: integer, given: string"),
        ({"operator.metrics.port": 0}, "operator.metrics.port: Must be greater than or equal to 1"),
        ({"operator.metrics.enabled": "yes"}, "operator.metrics.enabled: Invalid type. Expected: boolean"),
        ({"operator.metrics.path": "/m"}, "operator.metrics: Additional property path is not allowed"),
    ],
)
def test_helm_template_refuses_with_a_message_naming_the_value(values: dict[str, object], message: str):
    result = render_text(values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not result.stdout.strip()


def test_helm_lint_refuses_an_unknown_key_too():
    with pytest.raises(HelmError) as refused:
        helm("lint", str(CHART), *set_flags({"gatewayAPI.enable": True}))
    assert "gatewayAPI: Additional property enable is not allowed" in refused.value.stdout


def test_the_chart_crds_are_deploy_crds_as_generated():
    chart_crds = CHART / "crds"
    deploy_crds = REPO / "deploy" / "crds"
    assert sorted(p.name for p in chart_crds.iterdir()) == sorted(p.name for p in deploy_crds.iterdir())
    for path in deploy_crds.iterdir():
        assert not (chart_crds / path.name).is_symlink()  # `helm package` would not follow a link out of the chart
        assert (chart_crds / path.name).read_bytes() == path.read_bytes(), (
            f"{path.name} differs: run python -m kora.resources.crd {chart_crds.relative_to(REPO)}"
        )
    assert crd.stale_files(chart_crds) == []


def test_the_schema_closes_every_object():
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))

    def open_objects(node: object, path: str) -> list[str]:
        found: list[str] = []
        if isinstance(node, dict):
            if node.get("type") == "object" and "additionalProperties" not in node and path != "global":
                found.append(path or "(root)")
            for key, value in node.items():
                found += open_objects(value, f"{path}.{key}" if path else key)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                found += open_objects(item, f"{path}[{index}]")
        return found

    assert open_objects(schema, "") == ["properties.global"]


# -- on the test API server -------------------------------------------------------------------------------------


def _apply(cluster: KubeCluster, objects: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump_all(objects, sort_keys=False)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=helm-test", "-f", "-", stdin=text)


def _release() -> str:
    return f"kora-{uuid.uuid4().hex[:8]}"


_LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
_REFUSAL = re.compile(r"\b403\b|forbidden", re.I)


def _refused_calls(log: str) -> list[str]:
    """The operator's log lines that report an API call its role refused (HTTP 403, "Forbidden").

    The timestamp is left out of the match: its milliseconds can read 403.
    """
    return [line for line in log.splitlines() if _REFUSAL.search(_LOG_TIME.sub("", line))]


@pytest.mark.slow
def test_the_rendered_objects_apply_to_the_api_server(kube_cluster: KubeCluster):
    for scenario, values in SCENARIOS.items():
        namespace = kube_cluster.fresh_namespace("helm")
        overrides = dict(values)
        if "operator.watchNamespaces" in values:
            overrides["operator.watchNamespaces"] = [kube_cluster.fresh_namespace("watched") for _ in range(2)]
        if "gatewayAPI.gatewayNamespace" in values:
            overrides["gatewayAPI.gatewayNamespace"] = kube_cluster.fresh_namespace("gateway")
        objects = render(overrides, release=_release(), namespace=namespace, include_crds=True)
        _apply(kube_cluster, objects)
        for document in objects:
            metadata = document["metadata"]
            scope = ["-n", metadata["namespace"]] if "namespace" in metadata else []
            shown = kube_cluster.kubectl("get", document["kind"], metadata["name"], *scope, "-o", "json").stdout
            assert json.loads(shown)["metadata"]["name"] == metadata["name"], scenario


def _run_rendered_operator(
    cluster: KubeCluster, tmp_path: Path, values: dict[str, object], namespace: str
) -> tuple[list[dict[str, Any]], Any]:
    """Apply the chart rendered with ``values`` in ``namespace`` and start its operator as its ServiceAccount."""
    objects = render(values, release=_release(), namespace=namespace, include_crds=True)
    _apply(cluster, objects)
    account = deployment_of(objects, "operator")["spec"]["template"]["spec"]["serviceAccountName"]
    token = cluster.service_account_token(account, namespace)
    kubeconfig = cluster.kubeconfig_for_token(token, tmp_path / "operator.kubeconfig")
    container = operator_container(objects)
    arguments, liveness = local_operator(container)
    environment = {**cluster.env(), "KUBECONFIG": str(kubeconfig), **rendered_environment(container)}
    ports = [int(a.partition("=")[2]) for a in arguments if a.startswith("--metrics-port=")]
    metrics = metrics_url(ports[0]) if ports and ports[0] else None
    return objects, launch_operator(arguments, environment, tmp_path / "operator.log", liveness, metrics=metrics)


def _quickstart_to_ready(cluster: KubeCluster, client: Client, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(QUICKSTART))
    for workload in ("modelapi-scripted", "mcpserver-tools"):
        wait_for(workload, lambda w=workload: exists(client, Deployment, w, namespace))
        cluster.mark_deployment_available(workload, namespace)
    wait_for("agent Deployment", lambda: exists(client, Deployment, "agent-assistant", namespace))
    cluster.mark_deployment_available("agent-assistant", namespace)
    wait_for("agent Ready", phase_is(client, "Agent", "assistant", namespace, "Ready"))


@pytest.mark.slow
def test_the_operator_of_the_rendered_deployment_reconciles_under_the_charts_role(
    kube_cluster: KubeCluster, tmp_path: Path
):
    """Strict mode with a created Gateway and one watched namespace: the narrowest RBAC shape (RoleBinding)."""
    release_namespace = kube_cluster.fresh_namespace("kora-system")
    watched = kube_cluster.fresh_namespace("team")
    values: dict[str, object] = {
        **SCENARIOS["strict"],
        "gatewayAPI.createGateway": True,
        "gatewayAPI.gatewayClassName": "envoy",
        "gatewayAPI.internalURL": f"http://kora-gateway.{release_namespace}.svc.cluster.local",
        "operator.watchNamespaces": [watched],
    }
    objects, operator = _run_rendered_operator(kube_cluster, tmp_path, values, release_namespace)
    image = operator_container(objects)["image"]
    with supervised(operator), kube_cluster.client() as client:
        # RBAC is enforced here: the operator's identity cannot read what its role does not name.
        as_operator = Client(KubeConfig.from_file(tmp_path / "operator.kubeconfig"), trust_env=False)
        with as_operator, pytest.raises(ApiError) as refused:
            list(as_operator.list(Secret, namespace=watched))  # (lazy until iterated)
        assert refused.value.status.code == 403

        gateway = client.get(Gateway, "kora-gateway", namespace=release_namespace)
        assert gateway["spec"]["gatewayClassName"] == "envoy"
        _quickstart_to_ready(kube_cluster, client, watched)
        # Kubernetes 1.20 sets no kubernetes.io/metadata.name: the operator labels the namespace its policies
        # admit (the role allows that one), and no other.
        assert client.get(Namespace, release_namespace).metadata.labels[NAMESPACE_NAME_LABEL] == release_namespace
        assert NAMESPACE_NAME_LABEL not in (client.get(Namespace, watched).metadata.labels or {})
        model = client.get(Deployment, "modelapi-scripted", namespace=watched)
        assert model.spec.template.spec.containers[0].image == image
        for workload in ("agent-assistant", "modelapi-scripted", "mcpserver-tools"):
            assert exists(client, HTTPRoute, workload, watched)
            assert exists(client, NetworkPolicy, workload, watched)
        assert exists(client, ConfigMap, "modelapi-scripted", watched)

        # A child the resource no longer needs is deleted (the role's delete verbs): the scripted model's
        # ConfigMap once the ModelAPI proxies a real backend.
        client.patch(
            kora_resource("ModelAPI"),
            "scripted",
            {"spec": {"mode": "Proxy", "scriptedConfig": None, "proxyConfig": {"apiBase": "http://llm.invalid/v1"}}},
            namespace=watched,
            patch_type=PatchType.MERGE,
        )
        wait_for("ConfigMap pruned", lambda: not exists(client, ConfigMap, "modelapi-scripted", watched))
        assert not _refused_calls(operator.output()), operator.output()[-5000:]


@pytest.mark.slow
def test_the_default_install_reconciles_every_namespace_and_serves_its_webhook(
    kube_cluster: KubeCluster, tmp_path: Path
):
    release_namespace = kube_cluster.fresh_namespace("kora-system")
    namespace = kube_cluster.fresh_namespace("demo")
    _, operator = _run_rendered_operator(kube_cluster, tmp_path, {}, release_namespace)
    with supervised(operator), kube_cluster.client() as client:
        _quickstart_to_ready(kube_cluster, client, namespace)
        # The webhook configuration the operator wrote under its role refuses an invalid Agent.
        # (Proxy mode without its proxyConfig: a cross-field rule the CRD schema cannot express.)
        broken = "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: broken}\nspec: {mode: Proxy}\n"
        refused = kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=broken, check=False)
        assert refused.returncode != 0
        assert "denied the request" in refused.stderr, refused.stderr
        assert "proxyConfig" in refused.stderr
        assert not _refused_calls(operator.output()), operator.output()[-5000:]
        # The chart's metrics port serves the reconciles it made, as a scraper following its annotations sees them.
        assert operator.metrics is not None
        counts = prometheus(operator.metrics)["kora_operator_reconcile_duration_seconds_count"]
        reconciled = {labels["kora_resource_kind"] for labels, value in counts if labels["kora_outcome"] == "ok"}
        assert {"Agent", "ModelAPI", "MCPServer"} <= reconciled


# -- docs/operator.md -------------------------------------------------------------------------------------------

DOC = REPO / "docs" / "operator.md"


def _documented_helm_commands() -> list[list[str]]:
    """Every ``helm install|upgrade`` command of docs/operator.md's ```bash blocks, as arguments."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command)
            if words[:1] == ["helm"] and words[1] in {"install", "upgrade"}:
                commands.append(words)
    return commands


def test_the_documented_helm_commands_render():
    """Each documented install/upgrade, run as ``helm template`` with the same chart and values (so a value the
    chart does not have, or a combination it refuses, fails here)."""
    commands = _documented_helm_commands()
    assert len(commands) >= 5
    for words in commands:
        _, _, release, chart, *options = words
        assert chart == "deploy/helm/kora"
        # Flags that only mean something to a cluster.
        options = [o for o in options if o not in {"--create-namespace", "--reuse-values"}]
        result = helm("template", release, str(REPO / chart), *options)
        assert "kind: Deployment" in result.stdout


def test_the_documented_values_table_lists_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    table = DOC.read_text(encoding="utf-8").split("### Values", 1)[1].split("###", 1)[0]

    def leaves(node: object, prefix: str) -> list[str]:
        if isinstance(node, dict) and node and prefix not in {"operator.resources", "console.resources"}:
            return [leaf for key, value in node.items() for leaf in leaves(value, f"{prefix}.{key}".strip("."))]
        return [prefix]

    for leaf in leaves(values, ""):
        head, _, last = leaf.rpartition(".")
        assert f"`{leaf}`" in table or (head and f"`{head}." in table and f".{last}`" in table), leaf


def test_the_documented_real_model_manifest_is_valid():
    block = DOC.read_text(encoding="utf-8").split("### Pointing a ModelAPI at a real model", 1)[1]
    manifest = re.search(r"```yaml\n(.*?)```", block, re.S)
    assert manifest is not None
    documents = [d for d in yaml.safe_load_all(manifest.group(1)) if d]
    assert [d["kind"] for d in documents] == ["ModelAPI", "Agent"]
    for document in documents:
        document["metadata"]["namespace"] = "demo"
        assert resource_problems(document) == [], document


# -- the console ------------------------------------------------------------------------------------------------


def test_the_console_is_off_by_default():
    objects = render({})
    assert not [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "console"]


def test_the_console_runs_kora_console_on_the_cluster_under_a_read_only_role():
    objects = render(SCENARIOS["console"])
    container = console_container(objects)
    assert container["command"] == ["kora", "console"]
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    secret = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
    assert secret == {"CONSOLE_ACCESS_TOKEN": {"secretKeyRef": {"name": "kora-console-token", "key": "token"}}}
    settings = load_console_settings({**plain, "CONSOLE_ACCESS_TOKEN": "from-the-secret"})
    assert (settings.console_source, settings.console_host, settings.console_port) == ("kubernetes", "0.0.0.0", 8090)
    assert settings.namespaces == []
    assert set(plain) - {name.upper() for name in ConsoleSettings.model_fields} == {"HOME"}
    pod = deployment_of(objects, "console")["spec"]["template"]["spec"]
    assert restricted_problems(pod) == []
    assert pod["serviceAccountName"] == "kora-console"
    # Its Service selects the console's pod, never the operator's (and the operator's Services never the console's).
    labels = deployment_of(objects, "console")["spec"]["template"]["metadata"]["labels"]
    operator_labels = deployment_of(objects, "operator")["spec"]["template"]["metadata"]["labels"]
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"].items()
        assert (selector <= labels.items()) is (service["metadata"]["name"] == "kora-console")
        assert (selector <= operator_labels.items()) is (service["metadata"]["name"] != "kora-console")
    assert find(objects, "Service", "kora-console")["spec"]["type"] == "ClusterIP"
    role = find(objects, "ClusterRole", "kora-console")
    assert role["rules"] == [
        {
            "apiGroups": ["kora.dev"],
            "resources": ["agents", "modelapis", "mcpservers", "memorystores"],
            "verbs": ["list"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ]
    binding = find(objects, "ClusterRoleBinding", "kora-console")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kora-console", "namespace": "kora-system"}]
    route = find(objects, "HTTPRoute", "kora-console")
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "kora-gateway",
            "namespace": "kora-system",
        }
    ]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": "kora-console", "port": 8090}]


def test_the_console_without_a_route_still_asks_for_its_token_and_follows_the_watched_namespaces():
    # Its ClusterIP Service is reachable from every pod, so even unrouted every request presents the token.
    objects = render(
        {
            "console.enabled": True,
            "console.accessTokenSecret": "team-token",
            "operator.watchNamespaces": ["team-a", "team-b"],
        }
    )
    assert not [o for o in objects if o["kind"] == "HTTPRoute"]
    env = {e["name"]: e for e in console_container(objects)["env"]}
    assert env["CONSOLE_ACCESS_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "team-token", "key": "token"}}
    plain = {name: e["value"] for name, e in env.items() if e.get("value")}
    assert load_console_settings(plain).namespaces == ["team-a", "team-b"]
    assert "CONSOLE_TRACE_URL" not in env
    bindings = [o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "kora-console"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "kora-console"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"console.enabled": True}, "console.accessTokenSecret is required when console.enabled is true"),
        (
            {"console.enabled": True, "console.accessTokenSecret": ""},
            "console.accessTokenSecret is required when console.enabled is true",
        ),
        (
            {"console.enabled": True, "console.gatewayRoute.enabled": True, "gatewayAPI.enabled": True},
            "console.accessTokenSecret is required when console.enabled is true",
        ),
        (
            {"console.enabled": True, "console.gatewayRoute.enabled": True, "console.accessTokenSecret": "t"},
            "console.gatewayRoute.enabled needs gatewayAPI.enabled=true",
        ),
        (
            {"console.gatewayRoute.enabled": True, "gatewayAPI.enabled": True, "console.accessTokenSecret": "t"},
            "console.gatewayRoute.enabled needs console.enabled=true",
        ),
        ({"console.enabled": "yes"}, "console.enabled: Invalid type. Expected: boolean"),
        ({"console.accessTokenSecret": "Not A Name"}, "console.accessTokenSecret: Does not match pattern"),
        ({"console.route": True}, "console: Additional property route is not allowed"),
        ({"console.traceUrl": "http://jaeger/trace"}, "console.traceUrl: Does not match pattern"),
        ({"console.traceUrl": "ftp://jaeger/{trace_id}"}, "console.traceUrl: Does not match pattern"),
    ],
)
def test_helm_template_refuses_a_console_exposed_without_a_credential(values: dict[str, object], message: str):
    result = render_text(values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_consoles_trace_url_is_its_trace_viewer_setting():
    template = "http://jaeger.example/trace/{trace_id}"
    objects = render({**SCENARIOS["console"], "console.traceUrl": template})
    plain = {e["name"]: e["value"] for e in console_container(objects)["env"] if "value" in e}
    assert plain["CONSOLE_TRACE_URL"] == template
    assert load_console_settings(plain).console_trace_url == template


@pytest.mark.slow
def test_the_rendered_console_reads_the_clusters_resources_and_tokens_under_its_role(
    kube_cluster: KubeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    release_namespace = kube_cluster.fresh_namespace("kora-system")
    namespace = kube_cluster.fresh_namespace("demo")
    values: dict[str, object] = {**SCENARIOS["console"], "operator.watchNamespaces": [namespace]}
    objects, operator = _run_rendered_operator(kube_cluster, tmp_path, values, release_namespace)
    account = deployment_of(objects, "console")["spec"]["template"]["spec"]["serviceAccountName"]
    token = kube_cluster.service_account_token(account, release_namespace)
    kubeconfig = kube_cluster.kubeconfig_for_token(token, tmp_path / "console.kubeconfig")
    # The console as its pod would run it: the rendered environment, the access token its Secret would hold,
    # the console's ServiceAccount (so exactly its role).
    plain = {e["name"]: e["value"] for e in console_container(objects)["env"] if "value" in e}
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    settings = load_console_settings({**plain, "CONSOLE_ACCESS_TOKEN": "console-secret"})
    auth = {"Authorization": "Bearer console-secret"}
    with supervised(operator), kube_cluster.client() as client:
        _quickstart_to_ready(kube_cluster, client, namespace)
        with ThreadedServer(create_app(settings), name="console", lifespan="on") as server:
            assert httpx.get(f"{server.root_url}/api/state", timeout=30).status_code == 401
            assert httpx.get(f"{server.root_url}/ready", timeout=30).status_code == 200
            state = httpx.get(f"{server.root_url}/api/state", headers=auth, timeout=30).json()
            assert state["error"] is None, state
            shown = {(r["kind"], r["name"]): r for r in state["resources"]}
            assert set(shown) == {("ModelAPI", "scripted"), ("MCPServer", "tools"), ("Agent", "assistant")}
            assistant = shown[("Agent", "assistant")]
            assert (assistant["namespace"], assistant["phase"]) == (namespace, "Ready")
            assert assistant["links"] == [
                {"relation": "model", "kind": "ModelAPI", "name": "scripted"},
                {"relation": "tools", "kind": "MCPServer", "name": "tools"},
            ]
            assert any(c["type"] == "Ready" and c["status"] == "True" for c in assistant["conditions"])
            assert assistant["gateway_path"] == f"/{namespace}/agent/assistant"
            graph = httpx.get(f"{server.root_url}/", headers=auth, timeout=30).text
            assert 'aria-label="Conditions of assistant"' in graph
            # Sessions are read with the token of the operator's Secret (the role's 'get'); the agent's Service
            # address does not resolve here (no pods), which is what the page says, not a refused Secret.
            page = httpx.get(
                f"{server.root_url}/sessions", params={"agent": f"{namespace}/assistant"}, headers=auth, timeout=60
            ).text
            assert "Agent/assistant did not answer" in page, page
            assert f"kubectl logs -n {namespace} deployment/agent-assistant" in page
    # Read-only: the console's identity lists no Secrets and writes no resource.
    as_console = Client(KubeConfig.from_file(kubeconfig), trust_env=False)
    with as_console, pytest.raises(ApiError) as refused:
        list(as_console.list(Secret, namespace=namespace))
    assert refused.value.status.code == 403
