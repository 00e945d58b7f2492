"""``kora operator`` on a real kube-apiserver: examples applied with kubectl become Deployments, Services,
routes and policies; phases move Waiting -> Pending -> Ready as dependencies and Deployments become
available; MemoryDegraded is set and cleared; deletion cleans up; invalid resources are refused by the
admission webhook with ``kora up``'s messages; a restarted operator converges without writing anything.

No kubelet runs, so the tests mark Deployments available the way a kubelet and the deployment controller
would (tests/support/kube.py), and the control plane runs only the garbage-collector and namespace
controllers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy

from kora.operator.children import NAMESPACE_NAME_LABEL
from kora.operator.kube import Gateway, HTTPRoute, Kube
from tests.support.kube import KubeCluster, KubectlError, exists, kora_resource
from tests.support.operator import environment_of, phase_is, resource_status, running_operator, wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _exists(cluster: KubeCluster, resource: type, name: str, namespace: str) -> bool:
    with cluster.client() as client:
        return exists(client, resource, name, namespace)


def _get_or_none(client: Client, resource: type, name: str, namespace: str) -> object | None:
    try:
        return client.get(resource, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise


def _deployment(cluster: KubeCluster, name: str, namespace: str) -> Deployment:
    with cluster.client() as client:
        return client.get(Deployment, name, namespace=namespace)


def test_quickstart_goes_from_waiting_to_ready_with_every_child_wired(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("quickstart")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart" / "kora.yaml"))
        with kube_cluster.client() as client:
            # The agent waits for its model and its tool server, and names both; nothing of it exists yet.
            waiting = wait_for("agent Waiting", phase_is(client, "Agent", "assistant", namespace, "Waiting"))
            assert "ModelAPI scripted is Pending" in str(waiting["message"])
            assert "MCPServer tools is Pending" in str(waiting["message"])
            assert not _exists(kube_cluster, Deployment, "agent-assistant", namespace)

            # The tool server and the model run as soon as they are created.
            model = _deployment(kube_cluster, "modelapi-scripted", namespace)
            container = model.spec.template.spec.containers[0]
            assert container.image == "registry.example/kora:test"
            assert container.args[:1] == ["model"]
            assert "--script" in container.args
            # The inline script is a file from a ConfigMap in the container's working directory.
            assert _exists(kube_cluster, ConfigMap, "modelapi-scripted", namespace)
            tools = _deployment(kube_cluster, "mcpserver-tools", namespace)
            tools_env = environment_of(tools.spec.template.spec.containers[0].to_dict())
            assert "def add(a: int, b: int) -> int:" in str(tools_env["MCP_TOOLS_STRING"])
            for workload in ("modelapi-scripted", "mcpserver-tools"):
                owner = _deployment(kube_cluster, workload, namespace).metadata.ownerReferences[0]
                assert owner.apiVersion == "kora.dev/v1alpha1"
                assert owner.controller is True
                service = client.get(Service, workload, namespace=namespace)
                assert [p.port for p in service.spec.ports] == [8000]

            kube_cluster.mark_deployment_available("modelapi-scripted", namespace)
            waiting = wait_for(
                "agent waiting on the tools only",
                lambda: (
                    (s := resource_status(client, "Agent", "assistant", namespace))
                    and "ModelAPI" not in str(s.get("message"))
                    and s
                ),
            )
            assert waiting["phase"] == "Waiting"
            assert "MCPServer tools is Pending" in str(waiting["message"])

            kube_cluster.mark_deployment_available("mcpserver-tools", namespace)
            wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-assistant", namespace))
            pending = wait_for("agent Pending", phase_is(client, "Agent", "assistant", namespace, "Pending"))
            assert "0/1" in str(pending["message"])

            agent = _deployment(kube_cluster, "agent-assistant", namespace)
            container = agent.spec.template.spec.containers[0]
            env = environment_of(container.to_dict())
            assert env["AGENT_NAME"] == "assistant"
            assert env["MODEL_API_URL"] == f"http://modelapi-scripted.{namespace}.svc.cluster.local:8000/v1"
            assert env["MODEL_NAME"] == "scripted"
            assert env["MCP_SERVERS"] == "tools"
            assert env["MCP_SERVER_TOOLS_URL"] == f"http://mcpserver-tools.{namespace}.svc.cluster.local:8000"
            assert container.readinessProbe.httpGet.path == "/ready"
            assert container.livenessProbe.httpGet.path == "/health"

            kube_cluster.mark_deployment_available("agent-assistant", namespace)
            ready = wait_for("agent Ready", phase_is(client, "Agent", "assistant", namespace, "Ready"))
            assert ready["endpoint"] == f"http://agent-assistant.{namespace}.svc.cluster.local:8000"
            assert ready["observedGeneration"] == 1
            assert {c["type"]: c["status"] for c in ready["conditions"]}["Ready"] == "True"
            printed = kube_cluster.kubectl("get", "agents", "-n", namespace).stdout
            assert "Ready" in printed


def test_memory_degraded_is_set_while_the_store_is_not_ready_and_cleared_after(
    kube_cluster: KubeCluster, tmp_path: Path
):
    namespace = kube_cluster.fresh_namespace("memory")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "memory" / "kora.yaml"))
        with kube_cluster.client() as client:
            agents = client.list(kora_resource("Agent"), namespace=namespace)
            agent_name = next(iter(agents)).metadata.name
            stores = client.list(kora_resource("MemoryStore"), namespace=namespace)
            store_name = next(iter(stores)).metadata.name
            models = [m.metadata.name for m in client.list(kora_resource("ModelAPI"), namespace=namespace)]
            for model in models:
                wait_for(
                    "model Deployment", lambda m=model: _exists(kube_cluster, Deployment, f"modelapi-{m}", namespace)
                )
                kube_cluster.mark_deployment_available(f"modelapi-{model}", namespace)
            # The MemoryStore runs from the start; the agent waits for it (waitForDependencies).
            wait_for(
                "store Deployment", lambda: _exists(kube_cluster, Deployment, f"memorystore-{store_name}", namespace)
            )
            waiting = wait_for("agent Waiting", phase_is(client, "Agent", agent_name, namespace, "Waiting"))
            conditions = {c["type"]: c for c in waiting["conditions"]}
            assert conditions["MemoryDegraded"]["status"] == "True"
            assert conditions["MemoryDegraded"]["reason"] == "MemoryStoreNotReady"

            kube_cluster.mark_deployment_available(f"memorystore-{store_name}", namespace)
            wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, f"agent-{agent_name}", namespace))
            env = environment_of(
                _deployment(kube_cluster, f"agent-{agent_name}", namespace).spec.template.spec.containers[0].to_dict()
            )
            assert env["MEMORY_STORE_ENDPOINT"] == f"http://memorystore-{store_name}.{namespace}.svc.cluster.local:8000"
            # The credentials: Secrets the operator made once, owned by their resources, reaching pods by reference.
            store_secret = f"memorystore-{store_name}-credentials"
            assert env["MEMORY_STORE_TOKEN"] == {"secretKeyRef": {"name": store_secret, "key": "agent-token"}}
            agent_secret = f"agent-{agent_name}-credentials"
            assert env["AGENT_ADMIN_TOKEN"] == {"secretKeyRef": {"name": agent_secret, "key": "admin-token"}}
            store_env = environment_of(
                _deployment(kube_cluster, f"memorystore-{store_name}", namespace)
                .spec.template.spec.containers[0]
                .to_dict()
            )
            assert store_env["MEMORY_SERVICE_AGENT_TOKEN"] == env["MEMORY_STORE_TOKEN"]
            assert store_env["MEMORY_SERVICE_ADMIN_TOKEN"] == {
                "secretKeyRef": {"name": store_secret, "key": "admin-token"}
            }
            tokens = client.get(Secret, store_secret, namespace=namespace)
            assert set(tokens.data) == {"admin-token", "agent-token"}
            assert tokens.data["admin-token"] != tokens.data["agent-token"]
            assert tokens.metadata.ownerReferences[0].name == store_name
            assert set(client.get(Secret, agent_secret, namespace=namespace).data) == {"admin-token"}
            kube_cluster.mark_deployment_available(f"agent-{agent_name}", namespace)
            ready = wait_for("agent Ready", phase_is(client, "Agent", agent_name, namespace, "Ready"))
            assert {c["type"]: c["status"] for c in ready["conditions"]}["MemoryDegraded"] == "False"

            # The store's Deployment going away degrades the agent, which keeps running (short-term window).
            client.delete(Deployment, f"memorystore-{store_name}", namespace=namespace)
            degraded = wait_for(
                "MemoryDegraded again",
                lambda: (
                    (s := resource_status(client, "Agent", agent_name, namespace))
                    and {c["type"]: c["status"] for c in s.get("conditions", [])}.get("MemoryDegraded") == "True"
                    and s
                ),
            )
            assert "MemoryStore" in next(c["message"] for c in degraded["conditions"] if c["type"] == "MemoryDegraded")
            assert _exists(kube_cluster, Deployment, f"agent-{agent_name}", namespace)
            # ... and the operator puts the store's Deployment back, with the tokens it made first (never new ones).
            wait_for(
                "store Deployment back",
                lambda: _exists(kube_cluster, Deployment, f"memorystore-{store_name}", namespace),
            )
            assert client.get(Secret, store_secret, namespace=namespace).data == tokens.data


def _name_label(client: Client, namespace: str) -> str | None:
    labels = client.get(Namespace, namespace).metadata.labels or {}
    return labels.get(NAMESPACE_NAME_LABEL)


def test_gateway_routes_and_strict_network_policies(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("strict")
    system = kube_cluster.fresh_namespace("kora-system")
    settings = {
        "GATEWAY_API_ENABLED": "true",
        "GATEWAY_NAME": "edge",
        "GATEWAY_NAMESPACE": system,
        "GATEWAY_DEFAULT_MCP_TIMEOUT": "45s",
        "GATEWAY_INTERNAL_URL": f"http://edge.{system}.svc.cluster.local",
        "STRICT_GATEWAY_API_ENABLED": "true",
        "OPERATOR_NAMESPACE": system,
        "GATEWAY_CREATE": "true",
        "GATEWAY_CLASS_NAME": "envoy",
    }
    with kube_cluster.client() as client:
        # Kubernetes 1.20: no namespace carries its name label; the policies select the admitted ones by it.
        assert _name_label(client, system) is None
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log", settings):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart" / "kora.yaml"))
        with kube_cluster.client() as client:
            wait_for("the admitted namespace labelled", lambda: _name_label(client, system) == system)
            assert _name_label(client, namespace) is None  # only the admitted namespaces are touched
            gateway = wait_for("the Gateway", lambda: _get_or_none(client, Gateway, "edge", system))
            assert gateway["spec"]["gatewayClassName"] == "envoy"
            assert gateway["spec"]["listeners"][0]["allowedRoutes"] == {"namespaces": {"from": "All"}}
            for workload in ("modelapi-scripted", "mcpserver-tools"):
                wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
                kube_cluster.mark_deployment_available(workload, namespace)
            wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-assistant", namespace))

            route = client.get(HTTPRoute, "mcpserver-tools", namespace=namespace)
            spec = route["spec"]
            assert spec["parentRefs"][0]["name"] == "edge"
            assert spec["parentRefs"][0]["namespace"] == system
            rule = spec["rules"][0]
            assert rule["matches"][0]["path"] == {"type": "PathPrefix", "value": f"/{namespace}/mcp/tools"}
            assert rule["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/"
            assert rule["timeouts"]["request"] == "45s"
            assert rule["backendRefs"][0]["name"] == "mcpserver-tools"
            agent_route = client.get(HTTPRoute, "agent-assistant", namespace=namespace)
            assert agent_route["spec"]["rules"][0]["timeouts"]["request"] == "2m"

            # Strict mode: workloads call each other through the gateway, and each admits only the gateway's
            # and the operator's namespaces.
            env = environment_of(
                _deployment(kube_cluster, "agent-assistant", namespace).spec.template.spec.containers[0].to_dict()
            )
            gateway = f"http://edge.{system}.svc.cluster.local"
            assert env["MODEL_API_URL"] == f"{gateway}/{namespace}/modelapi/scripted/v1"
            assert env["MCP_SERVER_TOOLS_URL"] == f"{gateway}/{namespace}/mcp/tools"
            policy = client.get(NetworkPolicy, "agent-assistant", namespace=namespace)
            allowed = {
                peer.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]
                for rule in policy.spec.ingress
                for peer in rule.from_
            }
            assert allowed == {system}
            kube_cluster.mark_deployment_available("agent-assistant", namespace)
            ready = wait_for("agent Ready", phase_is(client, "Agent", "assistant", namespace, "Ready"))
            assert ready["endpoint"] == f"{gateway}/{namespace}/agent/assistant"


async def test_a_namespace_is_labelled_once_and_a_missing_one_is_reported(kube_cluster: KubeCluster):
    namespace = kube_cluster.fresh_namespace("label")
    client = kube_cluster.async_client()
    try:
        kube = Kube(client)
        assert await kube.label_namespace(namespace, NAMESPACE_NAME_LABEL, namespace) is True
        labelled = await client.get(Namespace, namespace)
        assert labelled.metadata.labels[NAMESPACE_NAME_LABEL] == namespace
        # Labelled already (as every namespace is from Kubernetes 1.21 on): read, not written.
        assert await kube.label_namespace(namespace, NAMESPACE_NAME_LABEL, namespace) is False
        again = await client.get(Namespace, namespace)
        assert again.metadata.resourceVersion == labelled.metadata.resourceVersion
        assert await kube.label_namespace(f"{namespace}-absent", NAMESPACE_NAME_LABEL, "x") is None
    finally:
        await client.close()


def test_invalid_resources_are_refused_with_readable_messages(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("invalid")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        # A cross-field rule the schema cannot express: Proxy mode without its proxyConfig.
        manifest = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: broken}
spec: {mode: Proxy}
"""
        with pytest.raises(KubectlError) as refused:
            kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)
        assert "proxyConfig" in refused.value.stderr
        assert "Traceback" not in refused.value.stderr
        # Reserved environment names are refused too (the agent sets them itself).
        agent = """
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: clash}
spec:
  modelAPI: m
  model: m
  config: {env: [{name: MODEL_NAME, value: other}]}
"""
        with pytest.raises(KubectlError) as refused:
            kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=agent)
        assert "MODEL_NAME" in refused.value.stderr
        # A reference to something that does not exist yet is accepted with a warning.
        accepted = kube_cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=agent.replace("MODEL_NAME", "MY_SETTING")
        )
        assert "ModelAPI m does not exist" in accepted.stderr


def test_deleting_a_resource_removes_what_it_created(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("delete")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart" / "kora.yaml"))
        wait_for("model Deployment", lambda: _exists(kube_cluster, Deployment, "modelapi-scripted", namespace))
        kube_cluster.kubectl("delete", "-n", namespace, "modelapi", "scripted")
        for resource in (Deployment, Service, ConfigMap):
            wait_for(
                f"{resource.__name__} gone",
                lambda r=resource: not _exists(kube_cluster, r, "modelapi-scripted", namespace),
            )
        with kube_cluster.client() as client:
            waiting = wait_for(
                "agent Waiting on a missing model", phase_is(client, "Agent", "assistant", namespace, "Waiting")
            )
            wait_for(
                "message names the missing model",
                lambda: (
                    "ModelAPI scripted does not exist"
                    in str(resource_status(client, "Agent", "assistant", namespace).get("message"))
                ),
            )
            assert waiting


def test_a_restarted_operator_converges_without_writing(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("restart")
    log = tmp_path / "operator.log"
    with running_operator(kube_cluster, namespace, log):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart" / "kora.yaml"))
        with kube_cluster.client() as client:
            for workload in ("modelapi-scripted", "mcpserver-tools"):
                wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
                kube_cluster.mark_deployment_available(workload, namespace)
            wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-assistant", namespace))
            kube_cluster.mark_deployment_available("agent-assistant", namespace)
            wait_for("agent Ready", phase_is(client, "Agent", "assistant", namespace, "Ready"))

    def versions() -> dict[str, str]:
        listed = kube_cluster.kubectl(
            "get",
            "deployments,services,configmaps,agents,modelapis,mcpservers",
            "-n",
            namespace,
            "-o",
            'jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\\n"}{end}',
        ).stdout
        return dict(line.split("=", 1) for line in listed.splitlines() if line)

    before = versions()
    with running_operator(kube_cluster, namespace, tmp_path / "restarted.log", None, "--log-level", "debug") as again:
        # Wait until the new operator has reconciled each of the three resources once; nothing may change.
        for ref in ("ModelAPI scripted", "MCPServer tools", "Agent assistant"):
            wait_for(f"{ref} reconciled", lambda r=ref: f"reconciled {r} in {namespace}: 0 writes" in again.output())
        assert versions() == before


def test_multi_agent_coordinator_waits_for_its_peers_and_is_wired_to_them(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("multi")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "multi-agent" / "kora.yaml"))
        with kube_cluster.client() as client:
            for workload in ("modelapi-scripted", "mcpserver-calculator", "mcpserver-clock-tools"):
                wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
                kube_cluster.mark_deployment_available(workload, namespace)
            for specialist in ("math", "clock"):
                wait_for(specialist, lambda s=specialist: _exists(kube_cluster, Deployment, f"agent-{s}", namespace))
            # The coordinator delegates to both specialists: it waits until each is Ready, and says which.
            waiting = wait_for("coordinator Waiting", phase_is(client, "Agent", "coordinator", namespace, "Waiting"))
            assert "Agent math is Pending" in str(waiting["message"])
            assert not _exists(kube_cluster, Deployment, "agent-coordinator", namespace)
            kube_cluster.mark_deployment_available("agent-math", namespace)
            kube_cluster.mark_deployment_available("agent-clock", namespace)
            wait_for(
                "coordinator Deployment", lambda: _exists(kube_cluster, Deployment, "agent-coordinator", namespace)
            )
            container = _deployment(kube_cluster, "agent-coordinator", namespace).spec.template.spec.containers[0]
            env = environment_of(container.to_dict())
            assert env["PEER_AGENTS"] == "math,clock"
            assert env["PEER_AGENT_MATH_CARD_URL"] == f"http://agent-math.{namespace}.svc.cluster.local:8000"
            assert "MCP_SERVERS" not in env  # tools are off for the coordinator
            kube_cluster.mark_deployment_available("agent-coordinator", namespace)
            wait_for("coordinator Ready", phase_is(client, "Agent", "coordinator", namespace, "Ready"))


def test_strict_mode_lets_exactly_its_agents_reach_a_memory_store_directly(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("strict-memory")
    settings = {
        "GATEWAY_API_ENABLED": "true",
        "GATEWAY_NAME": "edge",
        "GATEWAY_NAMESPACE": "kora-system",
        "GATEWAY_INTERNAL_URL": "http://edge.kora-system.svc.cluster.local",
        "STRICT_GATEWAY_API_ENABLED": "true",
        "OPERATOR_NAMESPACE": "kora-system",
    }
    kube_cluster.kubectl("create", "namespace", "kora-system", check=False)
    manifest = (EXAMPLES / "memory" / "kora.yaml").read_text(encoding="utf-8")
    unrouted = tmp_path / "memory.yaml"
    unrouted.write_text(manifest.replace("gatewayRoute:\n    enabled: true", "gatewayRoute:\n    enabled: false"))
    assert "enabled: false" in unrouted.read_text()
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log", settings):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(unrouted))
        with kube_cluster.client() as client:
            wait_for("model Deployment", lambda: _exists(kube_cluster, Deployment, "modelapi-scripted", namespace))
            kube_cluster.mark_deployment_available("modelapi-scripted", namespace)
            wait_for("store Deployment", lambda: _exists(kube_cluster, Deployment, "memorystore-memory", namespace))
            kube_cluster.mark_deployment_available("memorystore-memory", namespace)
            wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-assistant", namespace))
            agent = _deployment(kube_cluster, "agent-assistant", namespace)
            env = environment_of(agent.spec.template.spec.containers[0].to_dict())
            # Strict mode routes the model through the gateway, never the store: it is no public endpoint.
            assert env["MODEL_API_URL"].startswith("http://edge.kora-system.svc.cluster.local/")
            assert env["MEMORY_STORE_ENDPOINT"] == f"http://memorystore-memory.{namespace}.svc.cluster.local:8000"
            assert agent.spec.template.metadata.labels["kora.dev/memorystore"] == "memory"
            assert _get_or_none(client, HTTPRoute, "memorystore-memory", namespace) is None
            assert _get_or_none(client, HTTPRoute, "agent-assistant", namespace) is not None
            policy = client.get(NetworkPolicy, "memorystore-memory", namespace=namespace)
            (rule,) = policy.spec.ingress
            peers = [peer.to_dict() for peer in rule.from_]
            assert peers == [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kora-system"}}},
                {
                    "podSelector": {
                        "matchLabels": {
                            "kora.dev/memorystore": "memory",
                            "app.kubernetes.io/managed-by": "kora-operator",
                        }
                    }
                },
            ]


def test_the_budgets_example_wires_its_budget_and_a_pricing_change_reaches_the_agent(
    kube_cluster: KubeCluster, tmp_path: Path
):
    namespace = kube_cluster.fresh_namespace("budgets")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "budgets" / "kora.yaml"))
        for workload in ("modelapi-scripted", "mcpserver-sheep"):
            wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
            kube_cluster.mark_deployment_available(workload, namespace)
        wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-sleepy", namespace))

        def agent_env() -> dict[str, object]:
            container = _deployment(kube_cluster, "agent-sleepy", namespace).spec.template.spec.containers[0]
            return environment_of(container.to_dict())

        env = agent_env()
        assert env["BUDGET_MAX_TOOL_CALLS"] == "3"
        assert env["BUDGET_MAX_COST_USD"] == "0.05"
        assert (env["MODEL_PRICE_INPUT_PER_MILLION"], env["MODEL_PRICE_OUTPUT_PER_MILLION"]) == ("3", "15")
        # New prices on the ModelAPI reach its agent without waiting for a resync.
        kube_cluster.kubectl(
            "patch", "modelapi", "scripted", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"pricing": {"inputPerMillion": 4, "outputPerMillion": 16}}}',
        )  # fmt: skip
        wait_for("new prices", lambda: agent_env().get("MODEL_PRICE_INPUT_PER_MILLION") == "4")
        assert agent_env()["MODEL_PRICE_OUTPUT_PER_MILLION"] == "16"


def test_the_approvals_example_wires_its_tool_approval_and_a_bad_pattern_is_refused(
    kube_cluster: KubeCluster, tmp_path: Path
):
    namespace = kube_cluster.fresh_namespace("approvals")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "approvals" / "kora.yaml"))
        for workload in ("modelapi-scripted", "mcpserver-files"):
            wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
            kube_cluster.mark_deployment_available(workload, namespace)
        wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-janitor", namespace))
        container = _deployment(kube_cluster, "agent-janitor", namespace).spec.template.spec.containers[0]
        env = environment_of(container.to_dict())
        assert env["TOOL_APPROVAL_REQUIRED"] == "files/delete_*"
        assert env["TOOL_APPROVAL_TIMEOUT_SECONDS"] == "600"
        bad = """
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: careless}
spec: {modelAPI: scripted, model: scripted, config: {toolApproval: {required: [files]}}}
"""
        with pytest.raises(KubectlError) as refused:
            kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=bad)
        assert "toolApproval" in refused.value.stderr
        assert "Traceback" not in refused.value.stderr


HOSTED = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm}
spec: {mode: Hosted, hostedConfig: {model: llama3}}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: embeddings}
spec: {mode: Hosted, hostedConfig: {model: all-MiniLM-L6-v2}}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: pinned}
spec:
  mode: Hosted
  hostedConfig: {model: all-MiniLM-L6-v2}
  container: {image: mirror.example/kora:custom}
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: named}
spec: {mode: Hosted, hostedConfig: {model: BAAI/bge-small-en-v1.5, modelPath: /models/bge}}
"""


def test_hosted_models_run_the_embeddings_image_or_their_own_and_unknown_ones_fail(
    kube_cluster: KubeCluster, tmp_path: Path
):
    namespace = kube_cluster.fresh_namespace("hosted")
    manifest = tmp_path / "hosted.yaml"
    manifest.write_text(HOSTED)
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
        with kube_cluster.client() as client:
            failed = wait_for("llm Failed", phase_is(client, "ModelAPI", "llm", namespace, "Failed"))
            assert "ModelAPI mode Hosted is not supported for model 'llama3'" in str(failed["message"])
            assert "set hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH)" in str(failed["message"])
            assert not _exists(kube_cluster, Deployment, "modelapi-llm", namespace)
            for name, image in (
                ("embeddings", "registry.example/kora:test-embeddings"),
                ("pinned", "mirror.example/kora:custom"),
                ("named", "registry.example/kora:test-embeddings"),
            ):
                wait_for(
                    f"{name} Deployment", lambda n=name: _exists(kube_cluster, Deployment, f"modelapi-{n}", namespace)
                )
                container = _deployment(kube_cluster, f"modelapi-{name}", namespace).spec.template.spec.containers[0]
                assert container.image == image
            # A named model runs with its path; whether the path holds it, the pod's kora model-hosted says.
            env = {e.name: e.value for e in container.env or []}
            assert (env["MODEL_HOSTED_MODEL"], env["MODEL_HOSTED_MODEL_PATH"]) == (
                "BAAI/bge-small-en-v1.5",
                "/models/bge",
            )


SHARED_TASKS = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: scripted}
spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: shared}
spec: {storage: {type: external, external: {connectionSecretRef: {name: memory-db, key: url}}}}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: podlocal}
spec: {storage: {type: local}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: twins}
spec:
  modelAPI: scripted
  model: scripted
  replicas: 2
  config: {taskStoreType: postgres, memory: {type: remote, memoryStore: shared}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: stranded}
spec:
  modelAPI: scripted
  model: scripted
  config: {taskStoreType: postgres, memory: {type: remote, memoryStore: podlocal}}
"""


def test_a_shared_task_store_gets_its_memory_stores_database_by_secret_reference(
    kube_cluster: KubeCluster, tmp_path: Path
):
    namespace = kube_cluster.fresh_namespace("tasks")
    manifest = tmp_path / "shared-tasks.yaml"
    manifest.write_text(SHARED_TASKS)
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log"):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
        for workload in ("modelapi-scripted", "memorystore-shared"):
            wait_for(workload, lambda w=workload: _exists(kube_cluster, Deployment, w, namespace))
            kube_cluster.mark_deployment_available(workload, namespace)
        wait_for("agent Deployment", lambda: _exists(kube_cluster, Deployment, "agent-twins", namespace))
        deployment = _deployment(kube_cluster, "agent-twins", namespace)
        env = environment_of(deployment.spec.template.spec.containers[0].to_dict())
        assert env["TASK_STORE_TYPE"] == "postgres"
        # The MemoryStore's own connection Secret, by reference: no database URL (nor password) in the Deployment.
        assert env["TASK_STORE_URL"] == {"secretKeyRef": {"name": "memory-db", "key": "url"}}
        assert "postgresql://" not in str(deployment.to_dict())
        kube_cluster.mark_deployment_available("agent-twins", namespace)
        with kube_cluster.client() as client:
            ready = wait_for("agent Ready", phase_is(client, "Agent", "twins", namespace, "Ready"))
            split = {c["type"]: c["status"] for c in ready["conditions"]}
            assert split.get("TasksSplitAcrossReplicas", "False") == "False"
            assert split.get("SessionsSplitAcrossReplicas", "False") == "False"
            # A local-storage store's Postgres is inside its pod: that agent fails, saying what to change.
            failed = wait_for("agent Failed", phase_is(client, "Agent", "stranded", namespace, "Failed"))
            assert "storage.type 'external'" in failed["message"]
            assert "TASK_STORE_URL" in failed["message"]
        assert not _exists(kube_cluster, Deployment, "agent-stranded", namespace)
