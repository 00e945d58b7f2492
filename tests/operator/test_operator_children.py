"""The operator's child objects, as tables over kinds and modes: gateway routes and their timeouts, strict
gateway-only traffic, the operator's settings.

Every manifest is also validated offline: Deployments, Services, ConfigMaps, PersistentVolumeClaims and
NetworkPolicies against the Kubernetes 1.37 types of lightkube-models (types, required fields, and unknown
fields, which a round trip drops), HTTPRoutes and Gateways against the Gateway API v1.6.1 CRD schemas in
tests/data with unknown fields refused.
"""

import copy
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Service
from lightkube.resources.networking_v1 import NetworkPolicy
from pydantic import ValidationError

from kora.core.errors import SettingsError
from kora.operator.children import (
    CHILD_KINDS,
    DEFAULT_MEMORY_STORAGE_SIZE,
    FILES_DIR,
    MANAGED_BY,
    MEMORY_DATA_ROOT,
    NAMESPACE_NAME_LABEL,
    SPEC_HASH_ANNOTATION,
    ChildRef,
    bound_store,
    child_label_selector,
    child_manifests,
    cluster_problems,
    desired_children,
    gateway_manifest,
    image_of,
    owner_reference,
    plan_for,
    policy_namespaces,
    recorded_hash,
    spec_hash,
    stale_children,
    up_to_date,
)
from kora.operator.settings import OperatorSettings, load_operator_settings
from kora.resources.hosted_models import unsupported_message
from kora.resources.loader import load_path, load_text
from kora.resources.models import RESOURCE_CLASSES, AnyResource, EnvVar, ModelAPI
from kora.resources.urls import ClusterDNS, GatewayRouted
from kora.resources.wiring import plan_workload
from tests.support.kube import restricted_problems

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GATEWAY_CRDS = ROOT / "tests" / "data" / "gateway-api-v1.6.1"
NO_FILE = Path("/nonexistent/serviceaccount/namespace")

MANIFESTS = r"""
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm, namespace: team, uid: uid-llm}
spec:
  mode: Scripted
  scriptedConfig: {script: [{reply: "costs $5, not $(PRICE)"}]}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: echo, namespace: team, uid: uid-echo}
spec: {mode: Scripted}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: openai, namespace: team, uid: uid-openai}
spec:
  mode: Proxy
  proxyConfig:
    apiBase: https://api.openai.com/v1
    apiKey: {valueFrom: {secretKeyRef: {name: openai, key: api-key}}}
    models: [gpt-4o, gpt-4o-mini]
  gatewayRoute: {timeout: 5m}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: minilm, namespace: team, uid: uid-minilm}
spec: {mode: Hosted, hostedConfig: {model: all-MiniLM-L6-v2}}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: web-tools, namespace: team, uid: uid-web-tools}
spec:
  config:
    toolsString: "def ping() -> str:\n    '''Ping.'''\n    return '$(HOME) and $$'\n"
    env:
      - {name: API_URL, value: "http://api"}
      - {name: API_KEY, valueFrom: {secretKeyRef: {name: keys, key: api}}}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: fetcher, namespace: team, uid: uid-fetcher}
spec: {type: python-package, config: {mcp: mcp-server-fetch}, gatewayRoute: {timeout: 90s}}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: mem, namespace: team, uid: uid-mem}
spec:
  storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}
  models: {summarization: {modelAPI: llm, model: small}, embedding: {modelAPI: minilm}}
  gatewayRoute: {enabled: true}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: notes, namespace: team, uid: uid-notes}
spec:
  models: {summarization: {modelAPI: llm}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: research-bot, namespace: team, uid: uid-research-bot}
spec: {modelAPI: llm, model: scripted, agentNetwork: {expose: true}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team, uid: uid-boss}
spec:
  modelAPI: openai
  model: gpt-4o
  instructions: "Be brief; never print $(SECRET)."
  mcpServers: [web-tools]
  agentNetwork: {access: [research-bot]}
  replicas: 3
  gatewayRoute: {timeout: 90s}
  telemetry: {endpoint: "http://otel.monitoring:4318"}
  config:
    memory: {type: remote, memoryStore: mem, maxReadScope: user}
    env:
      - {name: LOG_LEVEL, value: DEBUG}
      - {name: SEARCH_KEY, valueFrom: {secretKeyRef: {name: search, key: token}}}
"""

GRAPH = load_text(MANIFESTS)
IMAGE = {"KORA_IMAGE": "registry.example/kora:0.1.0"}
GATEWAY = IMAGE | {"GATEWAY_API_ENABLED": "true", "GATEWAY_NAME": "edge", "GATEWAY_NAMESPACE": "gateways"}
ROUTED = GATEWAY | {"GATEWAY_INTERNAL_URL": "http://edge.gateways.svc"}
STRICT = ROUTED | {"STRICT_GATEWAY_API_ENABLED": "true", "OPERATOR_NAMESPACE": "kora-system"}
POLICY = IMAGE | {"NETWORK_POLICY_ENABLED": "true", "OPERATOR_NAMESPACE": "kora-system"}
MODES = {"plain": IMAGE, "gateway": GATEWAY, "routed": ROUTED, "strict": STRICT, "policy": POLICY}


def operator(env: Mapping[str, str]) -> OperatorSettings:
    return load_operator_settings(dict(env), namespace_file=NO_FILE)


def find(kind: str, name: str) -> AnyResource:
    for item in GRAPH:
        if item.kind == kind and item.name == name:
            return item
    raise KeyError((kind, name))


def by_kind(item: AnyResource, env: Mapping[str, str] = IMAGE) -> dict[str, dict[str, Any]]:
    manifests = child_manifests(item, operator(env))
    kinds = [manifest["kind"] for manifest in manifests]
    assert len(kinds) == len(set(kinds))
    return {manifest["kind"]: manifest for manifest in manifests}


def container(manifests: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    (only,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def env_of(manifests: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container(manifests)["env"]}


def value(manifests: Mapping[str, dict[str, Any]], name: str) -> str:
    return env_of(manifests)[name]["value"]


# --- offline schema validation ---------------------------------------------------------------------------------

_CORE_TYPES = {
    "Deployment": Deployment,
    "Service": Service,
    "ConfigMap": ConfigMap,
    "PersistentVolumeClaim": PersistentVolumeClaim,
    "NetworkPolicy": NetworkPolicy,
}


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (the API server would prune them silently)."""
    if isinstance(schema, dict):
        result = {key: _closed(child) for key, child in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            result.setdefault("additionalProperties", False)
        return result
    if isinstance(schema, list):
        return [_closed(child) for child in schema]
    return schema


@functools.cache
def _gateway_api_validator(kind: str) -> jsonschema.Draft7Validator:
    file = {"HTTPRoute": "httproutes.yaml", "Gateway": "gateways.yaml"}[kind]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((GATEWAY_CRDS / file).read_text(encoding="utf-8"), Loader=loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_closed(version["schema"]["openAPIV3Schema"]))


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Raise when ``manifest`` is not a valid object of its kind (see the module docstring)."""
    kind = manifest["kind"]
    if kind in _CORE_TYPES:
        back = _CORE_TYPES[kind].from_dict(manifest).to_dict()
        assert back == manifest, f"{kind}: fields lost in the round trip (unknown or mistyped)"
    else:
        _gateway_api_validator(kind).validate(manifest)


def test_the_validators_catch_mistakes():
    good = by_kind(find("Agent", "boss"), GATEWAY)
    validate_manifest(good["Deployment"])
    validate_manifest(good["HTTPRoute"])
    typo = copy.deepcopy(good["Deployment"])
    typo["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(AssertionError, match="fields lost"):
        validate_manifest(typo)
    mistyped = copy.deepcopy(good["Service"])
    mistyped["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(Exception, match="port"):
        validate_manifest(mistyped)
    bad_route = copy.deepcopy(good["HTTPRoute"])
    bad_route["spec"]["rules"][0]["timeouts"]["request"] = "90 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(bad_route)
    stray = copy.deepcopy(good["HTTPRoute"])
    stray["spec"]["rules"][0]["timeout"] = "1s"
    with pytest.raises(jsonschema.ValidationError, match="timeout"):
        validate_manifest(stray)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_manifest_of_every_mode_is_valid(mode):
    for item in GRAPH:
        for manifest in child_manifests(item, operator(MODES[mode])):
            validate_manifest(manifest)
    gateway = gateway_manifest(operator(GATEWAY | {"GATEWAY_CREATE": "true", "GATEWAY_CLASS_NAME": "envoy"}))
    assert gateway is not None
    validate_manifest(gateway)


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*/kora.yaml")), ids=lambda p: p.parent.name)
def test_the_examples_build_valid_children(example):
    for item in load_path(example):
        item.metadata.uid = f"uid-{item.name}"
        for mode in MODES.values():
            for manifest in child_manifests(item, operator(mode)):
                validate_manifest(manifest)


# --- which children ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "mode", "expected"),
    [
        (
            "ModelAPI",
            "llm",
            "plain",
            [("ConfigMap", "modelapi-llm"), ("Service", "modelapi-llm"), ("Deployment", "modelapi-llm")],
        ),
        ("ModelAPI", "echo", "plain", [("Service", "modelapi-echo"), ("Deployment", "modelapi-echo")]),
        (
            "ModelAPI",
            "openai",
            "gateway",
            [("Service", "modelapi-openai"), ("Deployment", "modelapi-openai"), ("HTTPRoute", "modelapi-openai")],
        ),
        (
            "ModelAPI",
            "minilm",
            "policy",
            [("Service", "modelapi-minilm"), ("Deployment", "modelapi-minilm"), ("NetworkPolicy", "modelapi-minilm")],
        ),
        (
            "MCPServer",
            "web-tools",
            "plain",
            [("Service", "mcpserver-web-tools"), ("Deployment", "mcpserver-web-tools")],
        ),
        (
            "MCPServer",
            "fetcher",
            "strict",
            [
                ("Service", "mcpserver-fetcher"),
                ("Deployment", "mcpserver-fetcher"),
                ("HTTPRoute", "mcpserver-fetcher"),
                ("NetworkPolicy", "mcpserver-fetcher"),
            ],
        ),
        ("MemoryStore", "mem", "plain", [("Service", "memorystore-mem"), ("Deployment", "memorystore-mem")]),
        # A MemoryStore is routed only when its spec.gatewayRoute.enabled opts in (mem does, notes does not).
        (
            "MemoryStore",
            "mem",
            "routed",
            [("Service", "memorystore-mem"), ("Deployment", "memorystore-mem"), ("HTTPRoute", "memorystore-mem")],
        ),
        (
            "MemoryStore",
            "notes",
            "routed",
            [
                ("PersistentVolumeClaim", "memorystore-notes-data"),
                ("Service", "memorystore-notes"),
                ("Deployment", "memorystore-notes"),
            ],
        ),
        ("Agent", "boss", "plain", [("Service", "agent-boss"), ("Deployment", "agent-boss")]),
        (
            "Agent",
            "boss",
            "strict",
            [
                ("Service", "agent-boss"),
                ("Deployment", "agent-boss"),
                ("HTTPRoute", "agent-boss"),
                ("NetworkPolicy", "agent-boss"),
            ],
        ),
    ],
)
def test_children_per_kind_and_mode(kind, name, mode, expected):
    item = find(kind, name)
    refs = desired_children(item, operator(MODES[mode]))
    assert [(ref.kind, ref.name) for ref in refs] == expected
    assert {ref.namespace for ref in refs} == {"team"}
    api_versions = dict((k, v) for v, k in CHILD_KINDS)
    assert all(ref.api_version == api_versions[ref.kind] for ref in refs)


def test_every_child_is_labelled_owned_and_hashed():
    for item in GRAPH:
        for manifest in child_manifests(item, operator(STRICT)):
            metadata = manifest["metadata"]
            assert metadata["labels"] == {
                "app.kubernetes.io/name": item.SERVICE_PREFIX,
                "app.kubernetes.io/instance": item.service_name,
                "app.kubernetes.io/component": plan_for(item, operator(STRICT)).args[0],
                "app.kubernetes.io/managed-by": "kora-operator",
                "app.kubernetes.io/part-of": "kora",
                "kora.dev/kind": item.kind,
                "kora.dev/name": item.name,
                # A bound agent's pods name their store, whose NetworkPolicy admits exactly them.
                **({"kora.dev/memorystore": store} if (store := bound_store(item)) else {}),
            }
            assert metadata["ownerReferences"] == [
                {
                    "apiVersion": "kora.dev/v1alpha1",
                    "kind": item.kind,
                    "name": item.name,
                    "uid": f"uid-{item.name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
            assert metadata["annotations"] == {SPEC_HASH_ANNOTATION: spec_hash(manifest)}


def test_component_label_names_the_command():
    components = {
        (item.kind, item.name): by_kind(item)["Deployment"]["metadata"]["labels"]["app.kubernetes.io/component"]
        for item in GRAPH
    }
    assert components[("ModelAPI", "llm")] == "model"
    assert components[("ModelAPI", "openai")] == "model-proxy"
    assert components[("ModelAPI", "minilm")] == "model-hosted"
    assert components[("MCPServer", "fetcher")] == "mcp"
    assert components[("MemoryStore", "notes")] == "memory"
    assert components[("Agent", "boss")] == "agent"


def test_a_resource_without_uid_cannot_own():
    item = find("Agent", "research-bot").model_copy(deep=True)
    item.metadata.uid = None
    with pytest.raises(ValueError, match=r"Agent team/research-bot has no metadata\.uid"):
        child_manifests(item, operator(IMAGE))
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        owner_reference(item)


# --- Deployment -----------------------------------------------------------------------------------------------------

#: Every workload's one writable directory (its root filesystem is read-only).
TMP_VOLUME = {"name": "tmp", "emptyDir": {}}
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}
#: The HOME every workload gets unless its resource sets one, after the plan's variables.
HOME_ENV = {"name": "HOME", "value": "/tmp"}


def test_deployment_shape():
    manifests = by_kind(find("Agent", "boss"), IMAGE | {"KORA_IMAGE_PULL_POLICY": "Always"})
    deployment = manifests["Deployment"]
    spec = deployment["spec"]
    assert (deployment["apiVersion"], deployment["metadata"]["name"], deployment["metadata"]["namespace"]) == (
        "apps/v1",
        "agent-boss",
        "team",
    )
    assert spec["replicas"] == 3
    assert spec["selector"] == {"matchLabels": {"kora.dev/kind": "Agent", "kora.dev/name": "boss"}}
    assert "strategy" not in spec
    template = spec["template"]
    assert template["metadata"] == {"labels": deployment["metadata"]["labels"]}
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["volumes"] == [TMP_VOLUME]
    main = container(manifests)
    assert main["name"] == "kora"
    assert main["image"] == "registry.example/kora:0.1.0"
    assert main["imagePullPolicy"] == "Always"
    assert main["args"] == ["agent"]
    assert main["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert main["livenessProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }
    assert main["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": "http"},
        "periodSeconds": 5,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert "workingDir" not in main
    assert main["volumeMounts"] == [TMP_MOUNT]
    assert main["env"][-1] == {"name": "HOME", "value": "/tmp"}
    assert "imagePullPolicy" not in container(by_kind(find("Agent", "boss")))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_workload_passes_podsecurity_restricted_with_a_read_only_root(mode):
    for item in GRAPH:
        pod = by_kind(item, MODES[mode])["Deployment"]["spec"]["template"]["spec"]
        assert restricted_problems(pod) == [], item.metadata.name
        # The root filesystem is read-only; /tmp, an emptyDir, is HOME and where temporary files go.
        (main,) = pod["containers"]
        assert TMP_MOUNT in main["volumeMounts"]
        assert TMP_VOLUME in pod["volumes"]
        writable = [m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")]
        assert writable == (["/var/lib/kora/memory", "/tmp"] if "PersistentVolumeClaim" in by_kind(item) else ["/tmp"])


def test_agent_environment_under_cluster_dns():
    manifests = by_kind(find("Agent", "boss"))
    env = env_of(manifests)
    dns = "svc.cluster.local:8000"
    expected_values = {
        "AGENT_NAME": "boss",
        "AGENT_HOST": "0.0.0.0",
        "AGENT_PORT": "8000",
        "MODEL_API_URL": f"http://modelapi-openai.team.{dns}/v1",
        "MODEL_NAME": "gpt-4o",
        "AGENT_INSTRUCTIONS": "Be brief; never print $$(SECRET).",  # $ doubled: Kubernetes would expand $(SECRET)
        "AGENT_PUBLIC_URL": f"http://agent-boss.team.{dns}",
        "MCP_SERVERS": "web-tools",
        "MCP_SERVER_WEB_TOOLS_URL": f"http://mcpserver-web-tools.team.{dns}",
        "PEER_AGENTS": "research-bot",
        "PEER_AGENT_RESEARCH_BOT_CARD_URL": f"http://agent-research-bot.team.{dns}",
        "MEMORY_ENABLED": "true",
        "MEMORY_MAX_READ_SCOPE": "user",
        "MEMORY_STORE_ENDPOINT": f"http://memorystore-mem.team.{dns}",
        "MEMORY_FAILURE_MODE": "soft",
        "OTEL_SERVICE_NAME": "boss",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel.monitoring:4318",
        "LOG_LEVEL": "DEBUG",
    }
    for name, expected in expected_values.items():
        assert env[name] == {"name": name, "value": expected}, name
    # The Secret stays a reference: its value is never in the Deployment.
    assert env["SEARCH_KEY"] == {
        "name": "SEARCH_KEY",
        "valueFrom": {"secretKeyRef": {"name": "search", "key": "token"}},
    }


def test_the_operator_runs_what_kora_up_plans():
    # Same wiring, same URL strategy: the container's environment is the plan's, entry for entry and in order.
    for item in GRAPH:
        for strategy, env in ((ClusterDNS(), IMAGE), (GatewayRouted("http://edge.gateways.svc"), STRICT)):
            plan = plan_workload(item, strategy, public=operator(env).public_strategy(), data_root=MEMORY_DATA_ROOT)
            built = container(by_kind(item, env))
            assert built["args"] == [arg.replace("$", "$$") for arg in plan.args]
            # ... then HOME, in the writable directory of the read-only root filesystem.
            assert built["env"][len(plan.env) :] == [HOME_ENV]
            assert [entry["name"] for entry in built["env"][: len(plan.env)]] == [entry.name for entry in plan.env]
            for entry, made in zip(plan.env, built["env"][: len(plan.env)], strict=True):
                if entry.secret_key_ref is None:
                    assert made["value"].replace("$$", "$") == entry.value
                else:
                    ref = made["valueFrom"]["secretKeyRef"]
                    assert (ref["name"], ref["key"]) == (entry.secret_key_ref.name, entry.secret_key_ref.key)


def test_strict_mode_gives_workloads_gateway_urls():
    boss = by_kind(find("Agent", "boss"), STRICT)
    gateway = "http://edge.gateways.svc/team"
    assert value(boss, "MODEL_API_URL") == f"{gateway}/modelapi/openai/v1"
    assert value(boss, "MCP_SERVER_WEB_TOOLS_URL") == f"{gateway}/mcp/web-tools"
    assert value(boss, "PEER_AGENT_RESEARCH_BOT_CARD_URL") == f"{gateway}/agent/research-bot"
    # The store is no public endpoint: agents reach it directly, admitted by its NetworkPolicy.
    assert value(boss, "MEMORY_STORE_ENDPOINT") == "http://memorystore-mem.team.svc.cluster.local:8000"
    assert value(boss, "AGENT_PUBLIC_URL") == f"{gateway}/agent/boss"
    assert value(boss, "AGENT_HOST") == "0.0.0.0"
    store = by_kind(find("MemoryStore", "mem"), STRICT)
    assert value(store, "MEMORY_SERVICE_SUMMARY_MODEL_API_URL") == f"{gateway}/modelapi/llm/v1"
    assert value(store, "MEMORY_SERVICE_EMBEDDING_MODEL_API_URL") == f"{gateway}/modelapi/minilm/v1"


def test_routed_mode_tells_clients_the_gateway_but_workloads_talk_directly():
    boss = by_kind(find("Agent", "boss"), ROUTED)
    assert value(boss, "AGENT_PUBLIC_URL") == "http://edge.gateways.svc/team/agent/boss"
    assert value(boss, "MODEL_API_URL") == "http://modelapi-openai.team.svc.cluster.local:8000/v1"
    assert plan_for(find("Agent", "boss"), operator(ROUTED)).public_url == "http://edge.gateways.svc/team/agent/boss"


def test_scripted_model_gets_its_script_from_a_config_map():
    manifests = by_kind(find("ModelAPI", "llm"))
    config_map = manifests["ConfigMap"]
    assert config_map["apiVersion"] == "v1"
    assert config_map["metadata"]["name"] == "modelapi-llm"
    assert json.loads(config_map["data"]["script.json"]) == {"rules": [{"reply": "costs $5, not $(PRICE)"}]}
    main = container(manifests)
    assert main["args"] == ["model", "--host", "0.0.0.0", "--port", "8000", "--script", "script.json"]
    assert main["workingDir"] == FILES_DIR
    assert main["volumeMounts"] == [{"name": "files", "mountPath": FILES_DIR, "readOnly": True}, TMP_MOUNT]
    pod = manifests["Deployment"]["spec"]["template"]
    assert pod["spec"]["volumes"] == [{"name": "files", "configMap": {"name": "modelapi-llm"}}, TMP_VOLUME]
    assert main["livenessProbe"]["httpGet"]["path"] == "/health"
    assert main["readinessProbe"]["httpGet"]["path"] == "/health"
    # A new script changes the pod template, so the pods restart and read it.
    edited = find("ModelAPI", "llm").model_copy(deep=True)
    assert edited.spec.scripted_config is not None
    edited.spec.scripted_config.script = [{"reply": "changed"}]
    new_pod = by_kind(edited)["Deployment"]["spec"]["template"]
    assert new_pod["metadata"]["annotations"] != pod["metadata"]["annotations"]
    assert set(pod["metadata"]["annotations"]) == {"kora.dev/files-hash"}


def test_scripted_model_without_script_has_no_files():
    manifests = by_kind(find("ModelAPI", "echo"))
    assert "ConfigMap" not in manifests
    assert container(manifests)["args"] == ["model", "--host", "0.0.0.0", "--port", "8000"]
    assert "annotations" not in manifests["Deployment"]["spec"]["template"]["metadata"]


def otel_resource(kind: str, name: str) -> dict[str, str]:
    """The OTEL_RESOURCE_ATTRIBUTES entry the wiring gives every workload (of namespace team)."""
    value = f"service.namespace=team,kora.resource.kind={kind},kora.resource.name={name}"
    return {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": value}


def test_proxy_model_keeps_its_key_in_the_secret():
    manifests = by_kind(find("ModelAPI", "openai"))
    main = container(manifests)
    assert main["args"] == ["model-proxy", "--host", "0.0.0.0", "--port", "8000"]
    assert main["env"] == [
        {"name": "MODEL_PROXY_API_BASE", "value": "https://api.openai.com/v1"},
        {"name": "MODEL_PROXY_API_KEY", "valueFrom": {"secretKeyRef": {"name": "openai", "key": "api-key"}}},
        {"name": "MODEL_PROXY_MODELS", "value": "gpt-4o,gpt-4o-mini"},
        {"name": "OTEL_SERVICE_NAME", "value": "modelapi-openai"},
        otel_resource("ModelAPI", "openai"),
        HOME_ENV,
    ]
    assert (main["livenessProbe"]["httpGet"]["path"], main["readinessProbe"]["httpGet"]["path"]) == (
        "/health",
        "/health",
    )


def test_hosted_model_is_ready_when_loaded():
    main = container(by_kind(find("ModelAPI", "minilm")))
    assert main["args"] == ["model-hosted", "--host", "0.0.0.0", "--port", "8000"]
    assert main["env"][0] == {"name": "MODEL_HOSTED_MODEL", "value": "all-MiniLM-L6-v2"}
    assert (main["livenessProbe"]["httpGet"]["path"], main["readinessProbe"]["httpGet"]["path"]) == (
        "/health",
        "/ready",
    )


def test_tool_servers():
    runtime = container(by_kind(find("MCPServer", "web-tools")))
    assert runtime["args"] == ["mcp", "--host", "0.0.0.0", "--port", "8000"]
    assert runtime["env"] == [
        # Kubernetes reads $$ as $ and expands $(HOME): doubled, the source arrives as written.
        {"name": "MCP_TOOLS_STRING", "value": "def ping() -> str:\n    '''Ping.'''\n    return '$$(HOME) and $$$$'\n"},
        {"name": "OTEL_SERVICE_NAME", "value": "mcpserver-web-tools"},
        otel_resource("MCPServer", "web-tools"),
        {"name": "API_URL", "value": "http://api"},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api"}}},
        HOME_ENV,
    ]
    package = container(by_kind(find("MCPServer", "fetcher")))
    assert package["env"] == [
        {"name": "MCP_PACKAGE", "value": "mcp-server-fetch"},
        {"name": "OTEL_SERVICE_NAME", "value": "mcpserver-fetcher"},
        otel_resource("MCPServer", "fetcher"),
        HOME_ENV,
    ]


def test_a_home_the_resource_sets_is_kept_and_not_doubled():
    tools = find("MCPServer", "web-tools").model_copy(deep=True)
    tools.spec.config.env.append(EnvVar(name="HOME", value="/var/lib/tools"))
    env = container(by_kind(tools))["env"]
    assert [entry for entry in env if entry["name"] == "HOME"] == [{"name": "HOME", "value": "/var/lib/tools"}]


def test_local_memory_store_keeps_its_data_on_a_volume():
    manifests = by_kind(find("MemoryStore", "notes"))
    claim = manifests["PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "memorystore-notes-data"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": DEFAULT_MEMORY_STORAGE_SIZE}},
    }
    assert DEFAULT_MEMORY_STORAGE_SIZE == "1Gi"
    spec = manifests["Deployment"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["template"]["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "memorystore-notes-data"}},
        TMP_VOLUME,
    ]
    main = container(manifests)
    assert main["volumeMounts"] == [{"name": "data", "mountPath": "/var/lib/kora/memory"}, TMP_MOUNT]
    # The wiring's <data_root>/<namespace>/<name>: a directory inside the volume, never its root (lost+found).
    assert value(manifests, "MEMORY_SERVICE_DATA_DIR") == "/var/lib/kora/memory/team/notes"
    assert value(manifests, "MEMORY_SERVICE_STORAGE_MODE") == "local"
    assert main["args"] == ["memory", "--host", "0.0.0.0", "--port", "8000"]


def test_external_memory_store_reads_its_database_url_from_the_secret():
    manifests = by_kind(find("MemoryStore", "mem"))
    assert "PersistentVolumeClaim" not in manifests
    env = env_of(manifests)
    assert env["MEMORY_SERVICE_DATABASE_URL"] == {
        "name": "MEMORY_SERVICE_DATABASE_URL",
        "valueFrom": {"secretKeyRef": {"name": "pg", "key": "url"}},
    }
    assert "MEMORY_SERVICE_DATA_DIR" not in env
    assert (
        value(manifests, "MEMORY_SERVICE_SUMMARY_MODEL_API_URL") == "http://modelapi-llm.team.svc.cluster.local:8000/v1"
    )
    assert value(manifests, "MEMORY_SERVICE_SUMMARY_MODEL") == "small"
    assert "strategy" not in manifests["Deployment"]["spec"]
    assert manifests["Deployment"]["spec"]["template"]["spec"]["volumes"] == [TMP_VOLUME]


# --- Service, HTTPRoute, NetworkPolicy, Gateway ---------------------------------------------------------------


def test_service():
    service = by_kind(find("MCPServer", "web-tools"))["Service"]
    assert (service["apiVersion"], service["metadata"]["name"]) == ("v1", "mcpserver-web-tools")
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {"kora.dev/kind": "MCPServer", "kora.dev/name": "web-tools"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
    }


@pytest.mark.parametrize(
    ("kind", "name", "env", "path", "timeout"),
    [
        ("Agent", "research-bot", {}, "/team/agent/research-bot", "2m"),
        ("Agent", "boss", {}, "/team/agent/boss", "1m30s"),  # spec.gatewayRoute.timeout 90s
        ("ModelAPI", "llm", {}, "/team/modelapi/llm", "2m"),
        ("ModelAPI", "openai", {"GATEWAY_DEFAULT_MODELAPI_TIMEOUT": "1s"}, "/team/modelapi/openai", "5m"),
        ("MCPServer", "web-tools", {}, "/team/mcp/web-tools", "30s"),
        ("MCPServer", "web-tools", {"GATEWAY_DEFAULT_MCP_TIMEOUT": "45s"}, "/team/mcp/web-tools", "45s"),
        ("MemoryStore", "mem", {}, "/team/memorystore/mem", "30s"),
        ("MemoryStore", "mem", {"GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT": "1500ms"}, "/team/memorystore/mem", "1s500ms"),
        ("Agent", "research-bot", {"GATEWAY_DEFAULT_AGENT_TIMEOUT": "1h0m"}, "/team/agent/research-bot", "1h"),
    ],
)
def test_http_route(kind, name, env, path, timeout):
    item = find(kind, name)
    route = by_kind(item, GATEWAY | env)["HTTPRoute"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["name"] == item.service_name
    assert route["spec"] == {
        "parentRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge", "namespace": "gateways"}
        ],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
                    }
                ],
                "backendRefs": [{"kind": "Service", "name": item.service_name, "port": 8000}],
                "timeouts": {"request": timeout},
            }
        ],
    }


def _from(policy: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    return rule["from"]


def _namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


KORA_PODS = {
    "podSelector": {
        "matchLabels": {"app.kubernetes.io/managed-by": "kora-operator", "app.kubernetes.io/part-of": "kora"}
    }
}


@pytest.mark.parametrize(
    ("env", "peers"),
    [
        # Strict: the gateway's namespace and the operator's only, even with NETWORK_POLICY_ENABLED=false.
        (STRICT | {"NETWORK_POLICY_ENABLED": "false"}, [_namespace("gateways"), _namespace("kora-system")]),
        (STRICT | {"GATEWAY_NAMESPACE": "kora-system"}, [_namespace("kora-system")]),
        # Network policies without strict mode: the operator, and Kora's own workloads of the namespace.
        (POLICY, [_namespace("kora-system"), KORA_PODS]),
        (POLICY | GATEWAY, [_namespace("gateways"), _namespace("kora-system"), KORA_PODS]),
    ],
)
def test_network_policy(env, peers):
    for item in GRAPH:
        if item.kind == "MemoryStore":
            continue  # test_memory_store_network_policy_admits_exactly_its_agents
        policy = by_kind(item, env)["NetworkPolicy"]
        assert policy["apiVersion"] == "networking.k8s.io/v1"
        assert policy["metadata"]["name"] == item.service_name
        assert policy["spec"]["podSelector"] == {
            "matchLabels": {"kora.dev/kind": item.kind, "kora.dev/name": item.name}
        }
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert _from(policy) == peers


@pytest.mark.parametrize("env", [STRICT, STRICT | {"NETWORK_POLICY_ENABLED": "false"}, POLICY, POLICY | GATEWAY])
def test_memory_store_network_policy_admits_exactly_its_agents(env):
    its_agents = {
        "podSelector": {"matchLabels": {"kora.dev/memorystore": "mem", "app.kubernetes.io/managed-by": "kora-operator"}}
    }
    # mem is routed on the gateway (spec.gatewayRoute.enabled): the Gateway's namespace is admitted too.
    routed = [_namespace("gateways")] if env.get("GATEWAY_API_ENABLED") == "true" else []
    assert _from(by_kind(find("MemoryStore", "mem"), env)["NetworkPolicy"]) == [
        *routed,
        _namespace("kora-system"),
        its_agents,
    ]
    notes = {
        "podSelector": {
            "matchLabels": {"kora.dev/memorystore": "notes", "app.kubernetes.io/managed-by": "kora-operator"}
        }
    }
    assert _from(by_kind(find("MemoryStore", "notes"), env)["NetworkPolicy"]) == [_namespace("kora-system"), notes]
    boss = by_kind(find("Agent", "boss"), env)["Deployment"]
    assert boss["spec"]["template"]["metadata"]["labels"]["kora.dev/memorystore"] == "mem"
    assert (
        "kora.dev/memorystore"
        not in by_kind(find("Agent", "research-bot"), env)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    )


def test_no_network_policy_by_default():
    for env in (IMAGE, GATEWAY, ROUTED):
        assert "NetworkPolicy" not in by_kind(find("Agent", "boss"), env)
        # ... and no namespace for the operator to label.
        assert policy_namespaces(operator(env)) == []


def test_the_namespaces_to_label_are_the_ones_the_policies_admit():
    for env in (STRICT, STRICT | {"GATEWAY_NAMESPACE": "kora-system"}, POLICY, POLICY | GATEWAY):
        policy = by_kind(find("Agent", "boss"), env)["NetworkPolicy"]
        selected = [
            peer["namespaceSelector"]["matchLabels"][NAMESPACE_NAME_LABEL]
            for peer in _from(policy)
            if "namespaceSelector" in peer
        ]
        assert policy_namespaces(operator(env)) == selected


def test_gateway_manifest():
    assert gateway_manifest(operator(GATEWAY)) is None
    gateway = gateway_manifest(
        operator(GATEWAY | {"GATEWAY_CREATE": "true", "GATEWAY_CLASS_NAME": "envoy", "GATEWAY_LISTENER_PORT": "8080"})
    )
    assert gateway is not None
    assert gateway["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert gateway["kind"] == "Gateway"
    metadata = gateway["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("edge", "gateways")
    assert "ownerReferences" not in metadata  # cross-namespace and shared by every resource
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == MANAGED_BY
    assert metadata["annotations"] == {SPEC_HASH_ANNOTATION: spec_hash(gateway)}
    assert gateway["spec"] == {
        "gatewayClassName": "envoy",
        "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 8080, "allowedRoutes": {"namespaces": {"from": "All"}}}
        ],
    }


# --- hashes, stale children, problems -------------------------------------------------------------------------------


def test_hash_skips_unchanged_writes():
    item = find("Agent", "boss")
    first = child_manifests(item, operator(IMAGE))
    again = child_manifests(item, operator(IMAGE))
    assert json.dumps(first) == json.dumps(again)
    deployment = first[1]
    # A live object carries server fields (status, resourceVersion, other annotations): still up to date.
    live = copy.deepcopy(deployment)
    live["metadata"]["resourceVersion"] = "42"
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    live["status"] = {"replicas": 3}
    assert up_to_date(deployment, live)
    assert recorded_hash(live) == deployment["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    assert not up_to_date(deployment, None)
    assert not up_to_date(deployment, {"metadata": {}})
    # Any change of what Kora sets changes the hash.
    scaled = item.model_copy(deep=True)
    scaled.spec.replicas = 4
    assert not up_to_date(child_manifests(scaled, operator(IMAGE))[1], live)
    assert not up_to_date(child_manifests(item, operator(IMAGE | {"KORA_IMAGE": "kora:2"}))[1], live)
    # The hash covers everything but itself.
    assert spec_hash(deployment) == spec_hash(
        {**deployment, "metadata": {k: v for k, v in deployment["metadata"].items() if k != "annotations"}}
    )


def test_stale_children():
    item = find("ModelAPI", "llm")
    before = desired_children(item, operator(STRICT))
    assert {ref.kind for ref in before} == {"ConfigMap", "Service", "Deployment", "HTTPRoute", "NetworkPolicy"}
    # Gateway API and strict mode turned off: the route and the policy go.
    assert stale_children(item, operator(IMAGE), before) == sorted(
        [
            ChildRef("gateway.networking.k8s.io/v1", "HTTPRoute", "team", "modelapi-llm"),
            ChildRef("networking.k8s.io/v1", "NetworkPolicy", "team", "modelapi-llm"),
        ]
    )
    # The inline script removed: the ConfigMap goes.
    emptied = item.model_copy(deep=True)
    emptied.spec.scripted_config = None
    assert stale_children(emptied, operator(STRICT), before) == [ChildRef("v1", "ConfigMap", "team", "modelapi-llm")]
    assert stale_children(item, operator(STRICT), before) == []
    # A volume is never pruned by a spec edit; kinds Kora does not make are not its business.
    store = find("MemoryStore", "notes")
    claim = ChildRef("v1", "PersistentVolumeClaim", "team", "memorystore-notes-data")
    stranger = ChildRef("v1", "Secret", "team", "memorystore-notes")
    assert stale_children(find("MemoryStore", "mem"), operator(IMAGE), [claim, stranger]) == []
    assert claim in desired_children(store, operator(IMAGE))
    assert str(claim) == "PersistentVolumeClaim team/memorystore-notes-data"


def test_child_label_selector():
    assert child_label_selector(find("Agent", "boss")) == (
        "app.kubernetes.io/managed-by=kora-operator,kora.dev/kind=Agent,kora.dev/name=boss"
    )


def test_cluster_problems():
    assert cluster_problems(find("ModelAPI", "llm")) == []
    with_file = RESOURCE_CLASSES["ModelAPI"].model_validate(
        {
            "metadata": {"name": "f", "uid": "u"},
            "spec": {"mode": "Scripted", "scriptedConfig": {"scriptFile": "/tmp/s.yaml"}},
        }
    )
    (problem,) = cluster_problems(with_file)
    assert "spec.scriptedConfig.scriptFile" in problem


# --- any valid resource ----------------------------------------------------------------------------------------------

_label = st.from_regex(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?", fullmatch=True)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_duration = st.sampled_from([None, "1s", "90s", "1h30m", "500ms", "99999h99999h", "0s"])
_env = st.lists(
    st.fixed_dictionaries({"name": st.from_regex(r"X_[A-Z0-9_]{0,10}", fullmatch=True), "value": _text})
    | st.fixed_dictionaries(
        {
            "name": st.from_regex(r"Y_[A-Z0-9_]{0,10}", fullmatch=True),
            "valueFrom": st.fixed_dictionaries(
                {"secretKeyRef": st.fixed_dictionaries({"name": _label, "key": _label})}
            ),
        }
    ),
    max_size=3,
)


@st.composite
def any_resource(draw: st.DrawFn) -> dict[str, Any]:
    metadata = {"name": draw(_label), "namespace": draw(_label), "uid": draw(st.uuids()).hex}
    route = {"timeout": t} if (t := draw(_duration)) is not None else {}
    kind = draw(
        st.sampled_from(
            [
                "Agent",
                "ModelAPI-Scripted",
                "ModelAPI-Proxy",
                "ModelAPI-Hosted",
                "MCPServer",
                "MCPServer-package",
                "MemoryStore-local",
                "MemoryStore-external",
            ]
        )
    )
    if kind == "Agent":
        memory: dict[str, Any] = draw(
            st.sampled_from([{}, {"enabled": False}, {"type": "remote", "memoryStore": "mem"}])
        )
        spec: dict[str, Any] = {
            "modelAPI": draw(_label),
            "model": draw(_text.filter(bool)),
            "instructions": draw(_text),
            "mcpServers": draw(st.lists(_label, max_size=3, unique=True)),
            "agentNetwork": {"access": draw(st.lists(_label, max_size=3, unique=True))},
            "replicas": draw(st.integers(0, 50)),
            "config": {"memory": memory, "env": draw(_env), "agenticLoop": {"enableTools": draw(st.booleans())}},
        }
        return {"kind": "Agent", "metadata": metadata, "spec": spec | {"gatewayRoute": route}}
    if kind.startswith("ModelAPI"):
        mode = kind.split("-")[1]
        configs = {
            "Scripted": {"scriptedConfig": {"script": [{"reply": draw(_text)}]}} if draw(st.booleans()) else {},
            "Proxy": {
                "proxyConfig": {
                    "apiBase": "http://backend:1/v1",
                    "apiKey": {"value": draw(_text)},
                    "models": draw(st.lists(_label, max_size=2)),
                }
            },
            "Hosted": {"hostedConfig": {"model": draw(_text.filter(bool))}},
        }
        return {
            "kind": "ModelAPI",
            "metadata": metadata,
            "spec": {"mode": mode, "gatewayRoute": route, **configs[mode]},
        }
    if kind.startswith("MCPServer"):
        if kind == "MCPServer":
            config = {"toolsString": f"def f() -> str:\n    return {draw(_text)!r}\n", "env": draw(_env)}
            return {"kind": "MCPServer", "metadata": metadata, "spec": {"config": config, "gatewayRoute": route}}
        return {
            "kind": "MCPServer",
            "metadata": metadata,
            "spec": {"type": "python-package", "config": {"mcp": draw(_label)}},
        }
    storage = (
        {"type": "local"}
        if kind.endswith("local")
        else {"type": "external", "external": {"connectionSecretRef": {"name": draw(_label), "key": "url"}}}
    )
    models = {"summarization": {"modelAPI": draw(_label)}} if draw(st.booleans()) else {}
    return {
        "kind": "MemoryStore",
        "metadata": metadata,
        "spec": {"storage": storage, "models": models, "gatewayRoute": route},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=any_resource(), mode=st.sampled_from(sorted(MODES)))
def test_builders_never_raise_and_are_deterministic(data, mode):
    try:
        item = RESOURCE_CLASSES[data["kind"]].model_validate(data)
    except ValidationError:
        assume(False)
        raise
    env = operator(MODES[mode])
    first = child_manifests(item, env)
    second = child_manifests(item, env)
    assert json.dumps(first, sort_keys=False) == json.dumps(second, sort_keys=False)
    for manifest in first:
        validate_manifest(manifest)
        assert recorded_hash(manifest) == spec_hash(manifest)
    plan = plan_for(item, env)
    (deployment,) = [m for m in first if m["kind"] == "Deployment"]
    assert restricted_problems(deployment["spec"]["template"]["spec"]) == []
    built = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    home = [] if any(entry.name == "HOME" for entry in plan.env) else [HOME_ENV]
    assert built[len(plan.env) :] == home
    for entry, made in zip(plan.env, built[: len(plan.env)], strict=True):
        if entry.value is not None:
            assert made["value"].replace("$$", "$") == entry.value


def test_a_memory_store_is_told_its_gateway_url_only_when_it_opted_into_a_route():
    routed = plan_for(find("MemoryStore", "mem"), operator(ROUTED))
    assert routed.public_url == "http://edge.gateways.svc/team/memorystore/mem"
    assert routed.url == "http://memorystore-mem.team.svc.cluster.local:8000"  # what its agents use
    unrouted = plan_for(find("MemoryStore", "notes"), operator(ROUTED))
    assert unrouted.public_url == "http://memorystore-notes.team.svc.cluster.local:8000"


def test_the_charts_default_budget_fills_the_fields_an_agent_leaves_unset():
    from kora.operator.settings import load_operator_settings
    from kora.resources.loader import load_text as load

    graph = load(
        """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm, namespace: team}
spec: {mode: Scripted, pricing: {inputPerMillion: 1, outputPerMillion: 4}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec: {modelAPI: llm, model: scripted, config: {budget: {maxToolCalls: 7}}}
"""
    )
    settings = load_operator_settings(
        {"KORA_IMAGE": "kora:test", "DEFAULT_BUDGET_MAX_TOOL_CALLS": "2", "DEFAULT_BUDGET_MAX_SECONDS": "90"}
    )
    plan = plan_for(graph.agent("boss", "team"), settings, graph.model_api("llm", "team"))
    env = {e.name: e.value for e in plan.env if e.name.startswith(("BUDGET_", "MODEL_PRICE_"))}
    assert env == {
        "BUDGET_MAX_TOOL_CALLS": "7",  # the agent's own
        "BUDGET_MAX_SECONDS": "90",  # the chart's default
        "MODEL_PRICE_INPUT_PER_MILLION": "1",
        "MODEL_PRICE_OUTPUT_PER_MILLION": "4",
    }


def test_the_charts_default_tool_approval_fills_what_an_agent_leaves_unset():
    graph = load_text(
        """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm, namespace: team}
spec: {mode: Scripted}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: plain, namespace: team}
spec: {modelAPI: llm, model: scripted}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: own, namespace: team}
spec: {modelAPI: llm, model: scripted, config: {toolApproval: {required: [files/rm], timeoutSeconds: 30}}}
"""
    )
    settings = load_operator_settings(
        {
            "KORA_IMAGE": "kora:test",
            "DEFAULT_TOOL_APPROVAL_REQUIRED": "*/delete_*,agents/payments",
            "DEFAULT_TOOL_APPROVAL_TIMEOUT_SECONDS": "600",
        }
    )

    def approval_env(name: str) -> dict[str, str]:
        plan = plan_for(graph.agent(name, "team"), settings, graph.model_api("llm", "team"))
        return {e.name: str(e.value) for e in plan.env if e.name.startswith("TOOL_APPROVAL_")}

    assert approval_env("plain") == {
        "TOOL_APPROVAL_REQUIRED": "*/delete_*,agents/payments",  # the chart's default
        "TOOL_APPROVAL_TIMEOUT_SECONDS": "600",
    }
    assert approval_env("own") == {"TOOL_APPROVAL_REQUIRED": "files/rm", "TOOL_APPROVAL_TIMEOUT_SECONDS": "30"}
    # Without defaults nothing is written: no call waits.
    bare = load_operator_settings({"KORA_IMAGE": "kora:test"})
    assert not [e.name for e in plan_for(graph.agent("plain", "team"), bare).env if e.name.startswith("TOOL_APP")]


@pytest.mark.parametrize("patterns", ["files", "a/b/c", "x/y,bad pattern/z"])
def test_a_default_tool_approval_pattern_that_is_no_server_tool_pair_stops_the_operator(patterns):
    with pytest.raises(SettingsError, match=r"DEFAULT_TOOL_APPROVAL_REQUIRED: .* is no '<server>/<tool>' pattern"):
        load_operator_settings({"KORA_IMAGE": "kora:test", "DEFAULT_TOOL_APPROVAL_REQUIRED": patterns})


def test_each_resource_may_name_its_own_image_and_hosted_models_get_the_embeddings_variant():
    settings = _settings_for_images()
    hosted = ModelAPI.model_validate(
        {"metadata": {"name": "emb"}, "spec": {"mode": "Hosted", "hostedConfig": {"model": "all-MiniLM-L6-v2"}}}
    )
    assert image_of(hosted, settings) == "registry.example/kora:0.1.0-embeddings"
    pinned = ModelAPI.model_validate(
        {
            "metadata": {"name": "emb"},
            "spec": {
                "mode": "Hosted",
                "hostedConfig": {"model": "all-MiniLM-L6-v2"},
                "container": {"image": "mirror.example/kora:custom"},
            },
        }
    )
    assert image_of(pinned, settings) == "mirror.example/kora:custom"
    scripted = ModelAPI.model_validate({"metadata": {"name": "s"}, "spec": {"mode": "Scripted"}})
    assert image_of(scripted, settings) == "registry.example/kora:0.1.0"
    chosen = load_operator_settings({"KORA_IMAGE": "r/kora", "KORA_EMBEDDINGS_IMAGE": "r/kora-emb:1"})
    assert image_of(hosted, chosen) == "r/kora-emb:1"
    assert load_operator_settings({"KORA_IMAGE": "r:5000/kora"}).embeddings_image == "r:5000/kora:latest-embeddings"


def test_a_hosted_model_it_cannot_serve_is_refused_with_kora_ups_message():
    llama = ModelAPI.model_validate(
        {"metadata": {"name": "llm"}, "spec": {"mode": "Hosted", "hostedConfig": {"model": "llama3"}}}
    )
    assert cluster_problems(llama) == [unsupported_message("llama3")]
    minilm = ModelAPI.model_validate(
        {"metadata": {"name": "emb"}, "spec": {"mode": "Hosted", "hostedConfig": {"model": "all-MiniLM-L6-v2"}}}
    )
    assert cluster_problems(minilm) == []
    assert "hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH)" in unsupported_message("llama3")


def test_a_named_hosted_model_with_a_path_runs_and_the_pod_gets_the_path():
    named = ModelAPI.model_validate(
        {
            "metadata": {"name": "bge"},
            "spec": {"mode": "Hosted", "hostedConfig": {"model": "BAAI/bge-small-en-v1.5", "modelPath": "/models/bge"}},
        }
    )
    assert cluster_problems(named) == []
    plan = plan_workload(named, ClusterDNS())
    assert plan.env_value("MODEL_HOSTED_MODEL") == "BAAI/bge-small-en-v1.5"
    assert plan.env_value("MODEL_HOSTED_MODEL_PATH") == "/models/bge"


@pytest.mark.parametrize("path", ["models/bge", ""])
def test_a_model_path_that_is_not_absolute_is_refused_naming_the_field(path: str):
    with pytest.raises(ValidationError, match="modelPath"):
        ModelAPI.model_validate(
            {"metadata": {"name": "bge"}, "spec": {"mode": "Hosted", "hostedConfig": {"model": "m", "modelPath": path}}}
        )


def _settings_for_images():
    return load_operator_settings({"KORA_IMAGE": "registry.example/kora:0.1.0"})
