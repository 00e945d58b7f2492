"""``MemoryDegraded`` from what a running agent says of its memory store, on a real kube-apiserver.

No kubelet runs: the agent is a real agent server on 127.0.0.1, bound to a real ``kora memory`` on Postgres, and
the test writes the Pod a kubelet would have started for the operator's Deployment (its labels, the agent's
port, phase Running, pod IP 127.0.0.1). The operator asks that pod's ``/ready`` (every second here) and sets the
condition when the agent says it cannot reach its store, with the soft-mode message, then clears it once the
store is back.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lightkube.models.core_v1 import Container, ContainerPort, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tests.support.agent import running_agent
from tests.support.eventually import eventually
from tests.support.kube import KubeCluster, exists
from tests.support.memory import MemoryProcess, service_env
from tests.support.operator import phase_is, resource_status, running_operator, wait_for
from tests.support.scripted_server import ScriptedModelServer

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _memory_condition(status: dict[str, object]) -> dict[str, str]:
    conditions = status.get("conditions")
    assert isinstance(conditions, list)
    return next(c for c in conditions if c["type"] == "MemoryDegraded")


async def test_memory_degraded_is_set_and_cleared_from_what_the_agent_reaches(
    kube_cluster: KubeCluster, memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    namespace = kube_cluster.fresh_namespace("reach")
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    try:
        async with running_agent(model, "assistant", MEMORY_STORE_ENDPOINT=store.url) as agent:
            env = {"AGENT_MEMORY_PROBE_SECONDS": "1"}
            with running_operator(kube_cluster, namespace, tmp_path / "operator.log", env):
                kube_cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "memory" / "kora.yaml"))
                with kube_cluster.client() as client:
                    for workload in ("modelapi-scripted", "memorystore-memory", "agent-assistant"):
                        wait_for(workload, lambda w=workload: exists(client, Deployment, w, namespace))
                        kube_cluster.mark_deployment_available(workload, namespace)
                    ready = wait_for("agent Ready", phase_is(client, "Agent", "assistant", namespace, "Ready"))
                    assert isinstance(ready, dict)
                    assert _memory_condition(ready)["status"] == "False"

                    # The pod a kubelet would run for the agent's Deployment: the real agent's port and address.
                    template = client.get(Deployment, "agent-assistant", namespace=namespace).spec.template
                    port = urlsplit(agent.url).port
                    assert port is not None
                    pod = Pod(
                        metadata=ObjectMeta(name="agent-assistant-0", labels=template.metadata.labels),
                        spec=PodSpec(
                            containers=[
                                Container(
                                    name="agent",
                                    image="registry.example/kora:test",
                                    ports=[ContainerPort(name="http", containerPort=port)],
                                )
                            ]
                        ),
                    )
                    client.create(pod, namespace=namespace)
                    client.patch(
                        Pod.Status,
                        "agent-assistant-0",
                        {"status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}},
                        namespace=namespace,
                        patch_type=PatchType.MERGE,
                    )

                    # The store goes away; the agent finds out on its next turn and keeps answering (soft mode).
                    store.kill()
                    model.enqueue("still here")
                    answer = agent.openai().chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hello"}]
                    )
                    assert answer.choices[0].message.content == "still here"
                    eventually(
                        lambda: "memory" in agent.get("/ready").json().get("details", {}), "agent degraded", within=30
                    )
                    degraded = wait_for(
                        "MemoryDegraded from the agent",
                        lambda: (
                            (s := resource_status(client, "Agent", "assistant", namespace))
                            and _memory_condition(s)["status"] == "True"
                            and s
                        ),
                    )
                    assert isinstance(degraded, dict)
                    condition = _memory_condition(degraded)
                    assert condition["reason"] == "MemoryUnreachable"
                    assert "the agent cannot reach MemoryStore memory" in condition["message"]
                    assert "short-term window only" in condition["message"]
                    # The store's own phase never changed: only the agent's word set the condition.
                    assert resource_status(client, "MemoryStore", "memory", namespace)["phase"] == "Ready"
                    assert degraded["phase"] == "Ready"

                    # The store comes back: the agent reaches it again, and the condition clears.
                    store.start()
                    cleared = wait_for(
                        "MemoryDegraded cleared",
                        lambda: (
                            (s := resource_status(client, "Agent", "assistant", namespace))
                            and _memory_condition(s)["status"] == "False"
                            and s
                        ),
                    )
                    assert isinstance(cleared, dict)
                    assert _memory_condition(cleared)["reason"] == "MemoryStoreReady"
    finally:
        store.kill()
