"""Drills on real pods, each ending with nothing lost: what a cluster does to workloads (a deleted pod, a container
killed with SIGKILL, an operator restarted, a ``helm upgrade``, tools that cannot start), done for real.

The memory example (an agent with RemoteMemory, a MemoryStore on a PersistentVolumeClaim bound to a hostPath
volume) holds the state that must survive; its store's events and facts are read back through the store's Service
with the store's admin credential, and through the agent.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from kora.core.protocol import SESSION_HEADER
from tests.support.node import REPO, KoraOnNode, host_path_volume, load_documents, wait_for
from tests.support.processes import prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.slow]

MEMORY_EXAMPLE = REPO / "examples" / "memory"


@dataclass
class MemoryApp:
    """The memory example running in ``namespace``."""

    kora: KoraOnNode
    namespace: str

    def client(self) -> openai.OpenAI:
        url = self.kora.service_url("agent-assistant", self.namespace, "/v1")
        # No retries: a retried turn could be stored twice, and the drills count what is stored.
        return openai.OpenAI(base_url=url, api_key="unused", timeout=60, max_retries=0)

    def say(self, text: str, session: str | None = None) -> str:
        """One chat turn; the session id."""
        headers = {SESSION_HEADER: session} if session else None
        raw = self.client().chat.completions.with_raw_response.create(
            model="scripted", messages=[{"role": "user", "content": text}], extra_headers=headers
        )
        assert raw.parse().choices[0].message.content
        return raw.headers[SESSION_HEADER]

    def store_url(self, path: str) -> str:
        return self.kora.service_url("memorystore-memory", self.namespace, path)

    def store_admin(self) -> dict[str, str]:
        """The ``Authorization`` header of the store's admin token, from the Secret the operator made for it."""
        secret = self.kora.get("secret", "memorystore-memory-credentials", self.namespace)
        token = base64.b64decode(secret["data"]["admin-token"]).decode()
        return {"Authorization": f"Bearer {token}"}

    def stored_events(self, session: str) -> list[str]:
        """The session's events as the memory service holds them in Postgres: ``event_type`` each."""
        url = self.store_url(f"/v1/sessions/{session}/events")
        response = httpx.get(url, params={"app_name": "assistant"}, headers=self.store_admin(), timeout=30)
        response.raise_for_status()
        return [event["event_type"] for event in response.json()["events"]]

    def wait_stored(self, session: str, expected: list[str]) -> None:
        """Wait until the store holds exactly ``expected`` (event types) for ``session``: the agent writes each
        turn's events in the background, after it answered."""
        wait_for(lambda: self.stored_events(session) == expected, f"{expected} stored for {session}", 120)

    def facts(self) -> list[str]:
        url = self.store_url("/v1/facts")
        response = httpx.get(url, params={"scope": "store"}, headers=self.store_admin(), timeout=30)
        response.raise_for_status()
        return sorted(fact["text"] for fact in response.json()["facts"])

    def pod(self, kind: str) -> dict[str, Any]:
        (pod,) = [
            p
            for p in self.kora.pods(self.namespace, f"kora.dev/kind={kind}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        return pod


@pytest.fixture(scope="module")
def memory_app(kora: KoraOnNode) -> Iterator[MemoryApp]:
    namespace = kora.namespace("drills")
    host_path_volume(kora, "drills-memory")
    kora.apply(MEMORY_EXAMPLE, namespace)
    kora.wait_all_ready(load_documents(MEMORY_EXAMPLE), namespace)
    return MemoryApp(kora, namespace)


def test_a_deleted_agent_pod_comes_back_and_the_session_goes_on(memory_app: MemoryApp) -> None:
    session = memory_app.say("Hello! I live in Lisbon.")
    old = memory_app.pod("Agent")["metadata"]["name"]
    memory_app.kora.kubectl("delete", "pod", "-n", memory_app.namespace, old, "--wait=false")
    started = time.monotonic()
    wait_for(
        lambda: (
            (pod := memory_app.pod("Agent"))["metadata"]["name"] != old
            and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        ),
        "a new agent pod Ready",
    )
    # The Service routes to the new pod only: the session goes on there, from what the store kept.
    wait_for(lambda: memory_app.say("And I like cycling.", session) == session, "a turn on the new pod", 120)
    print(f"agent pod deleted -> new pod serving: {time.monotonic() - started:.1f} s")
    memory_app.wait_stored(session, ["user_message", "agent_response"] * 2)


def test_the_memory_service_killed_with_sigkill_mid_conversation_comes_back_with_everything(
    memory_app: MemoryApp,
) -> None:
    session = memory_app.say("My sister is called Ana.")
    wait_for(lambda: "My sister is called Ana." in memory_app.facts(), "the fact extracted")
    memory_app.wait_stored(session, ["user_message", "agent_response"])
    facts_before = memory_app.facts()
    pod = memory_app.pod("MemoryStore")
    (status,) = pod["status"]["containerStatuses"]
    restarts = status["restartCount"]
    # Turns go on in the session while the store is killed: each answered turn is two events the agent must get
    # into the store, written before the kill, queued while it is down, or written after it is back.
    answered = 1
    failures: list[Exception] = []
    stop = threading.Event()

    def talk() -> None:
        # failureMode soft: the agent answers every turn, store or no store.
        nonlocal answered
        while not stop.is_set() and not failures:
            try:
                memory_app.say(f"Turn {answered} goes on.", session)
            except openai.APIError as error:
                failures.append(error)
            else:
                answered += 1

    talker = threading.Thread(target=talk)
    talker.start()
    try:
        wait_for(lambda: answered >= 3 or failures, "turns under way")
        # What an OOM kill or a container runtime's kill does: SIGKILL to the container's processes, no shutdown.
        container_id = status["containerID"].removeprefix("containerd://")
        memory_app.kora.ctr("tasks", "kill", "--all", "-s", "SIGKILL", container_id)
        wait_for(
            lambda: (
                (s := memory_app.pod("MemoryStore")["status"]["containerStatuses"][0])["restartCount"] > restarts
                and s["ready"]
            ),
            "the memory service restarted by the kubelet and Ready again",
        )
        restarted_at = answered
        wait_for(lambda: answered >= restarted_at + 3 or failures, "turns after the restart")
    finally:
        stop.set()
        talker.join(timeout=120)
    assert failures == []
    memory_app.kora.wait_ready("MemoryStore", "memory", memory_app.namespace)
    memory_app.wait_stored(session, ["user_message", "agent_response"] * answered)
    assert memory_app.facts() == facts_before


def _children_versions(kora: KoraOnNode, namespace: str) -> dict[str, str]:
    """What a write would change, per object the operator made in ``namespace``: a Deployment's generation (its
    status moves on its own) and every other kind's resourceVersion, plus each Kora resource's status."""
    versions: dict[str, str] = {}
    for kind in ("configmaps", "services", "deployments", "networkpolicies", "persistentvolumeclaims"):
        listed = json.loads(
            kora.kubectl("get", kind, "-n", namespace, "-l", "app.kubernetes.io/managed-by=kora-operator", "-o", "json")
        )
        for item in listed["items"]:
            meta = item["metadata"]
            version = meta["generation"] if kind == "deployments" else meta["resourceVersion"]
            versions[f"{kind}/{meta['name']}"] = str(version)
    for kind in ("agents", "modelapis", "mcpservers", "memorystores"):
        for item in json.loads(kora.kubectl("get", kind, "-n", namespace, "-o", "json"))["items"]:
            versions[f"{kind}/{item['metadata']['name']}"] = json.dumps(item.get("status"), sort_keys=True)
    return versions


def _operator_pod(kora: KoraOnNode) -> dict[str, Any] | None:
    """The operator's pod, None while there is not exactly one (a replacement starting, an old one going)."""
    pods = [
        p
        for p in kora.pods("kora-system", "app.kubernetes.io/component=operator")
        if not p["metadata"].get("deletionTimestamp")
    ]
    return pods[0] if len(pods) == 1 else None


def _memory_degraded(kora: KoraOnNode, namespace: str) -> list[str]:
    """The Agents of ``namespace`` whose ``MemoryDegraded`` condition is ``True``."""
    listed = json.loads(kora.kubectl("get", "agents", "-n", namespace, "-o", "json"))
    return [
        item["metadata"]["name"]
        for item in listed["items"]
        for condition in (item.get("status") or {}).get("conditions", [])
        if condition.get("type") == "MemoryDegraded" and condition.get("status") == "True"
    ]


def test_a_deleted_operator_pod_is_replaced_and_the_new_one_converges_without_a_write(
    memory_app: MemoryApp,
) -> None:
    kora = memory_app.kora
    # Settled first: the drill before this one killed the memory service, and the statuses that follow its return
    # (the agent's memory reachable again) are writes of the old operator, not of the new one.
    kora.wait_all_ready(load_documents(MEMORY_EXAMPLE), memory_app.namespace)
    wait_for(lambda: not _memory_degraded(kora, memory_app.namespace), "no Agent with MemoryDegraded")
    before = _children_versions(kora, memory_app.namespace)
    operator = _operator_pod(kora)
    assert operator is not None
    old = operator["metadata"]["name"]
    kora.kubectl("delete", "pod", "-n", "kora-system", old, "--wait=false")

    def converged() -> bool:
        pod = _operator_pod(kora)
        if pod is None or pod["metadata"]["name"] == old or not pod["status"].get("podIP"):
            return False
        samples = prometheus(f"http://{pod['status']['podIP']}:8080/metrics")
        reconciled = {
            labels["kora_resource_kind"]
            for labels, value in samples.get("kora_operator_reconcile_duration_seconds_count", [])
            if labels["kora_outcome"] == "ok" and value > 0
        }
        return {"Agent", "ModelAPI", "MemoryStore"} <= reconciled

    wait_for(converged, "the new operator reconciled every kind")
    operator = _operator_pod(kora)
    assert operator is not None
    samples = prometheus(f"http://{operator['status']['podIP']}:8080/metrics")
    # The counter is only created by a reconcile that wrote something: absent or zero is no write.
    writes = {
        labels["kora_resource_kind"]: value
        for labels, value in samples.get("kora_operator_reconcile_writes_total", [])
        if value
    }
    assert writes == {}
    assert _children_versions(kora, memory_app.namespace) == before


def test_helm_upgrade_with_a_changed_value_rolls_the_workloads_and_loses_nothing(memory_app: MemoryApp) -> None:
    kora = memory_app.kora
    session = memory_app.say("I was born in Porto.")
    wait_for(lambda: "I was born in Porto." in memory_app.facts(), "the fact extracted")
    memory_app.wait_stored(session, ["user_message", "agent_response"])
    events_before = memory_app.stored_events(session)
    facts_before = memory_app.facts()
    agent_pod = memory_app.pod("Agent")["metadata"]["name"]
    # The same image under another tag: the operator's pod rolls, then every workload it made (KORA_IMAGE).
    retag = f"{kora.image_tag}-upgrade"
    kora.retag_image(retag)
    kora.values["image.tag"] = retag
    kora.install()
    wait_for(
        lambda: (
            memory_app.pod("Agent")["spec"]["containers"][0]["image"].endswith(f":{retag}")
            and memory_app.pod("Agent")["metadata"]["name"] != agent_pod
        ),
        "the agent rolled to the new image",
    )
    for deployment in kora.kubectl(
        "get", "deployments", "-n", memory_app.namespace, "-o", "jsonpath={.items[*].metadata.name}"
    ).split():
        kora.kubectl("rollout", "status", "-n", memory_app.namespace, f"deployment/{deployment}", "--timeout=300s")
    kora.wait_all_ready(load_documents(MEMORY_EXAMPLE), memory_app.namespace)
    assert memory_app.stored_events(session) == events_before
    assert memory_app.facts() == facts_before
    memory_app.say("Still there?", session)
    memory_app.wait_stored(session, [*events_before, "user_message", "agent_response"])


BROKEN_TOOLS = """\
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: broken-tools}
spec:
  type: python-runtime
  config:
    toolsString: |
      raise RuntimeError("the tools cannot start: TOOLS_DATABASE_URL is not set")


      def ping() -> str:
          \"\"\"Answer pong.\"\"\"
          return "pong"
---
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: scripted}
spec: {mode: Scripted}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: helper}
spec:
  modelAPI: scripted
  model: scripted
  mcpServers: [broken-tools]
"""


def test_tools_that_fail_to_start_are_named_in_the_agents_status(kora: KoraOnNode) -> None:
    namespace = kora.namespace("broken-tools")
    kora.kubectl("apply", "-n", namespace, "-f", "-", stdin=BROKEN_TOOLS)

    def says_why() -> str | None:
        message = str((kora.get("agent", "helper", namespace).get("status") or {}).get("message", ""))
        return message if "TOOLS_DATABASE_URL" in message else None

    message = wait_for(says_why, "the Agent's status naming the tools' error")
    assert kora.phase("Agent", "helper", namespace) == "Waiting"
    assert "MCPServer broken-tools" in message
    assert "raised RuntimeError while loading: the tools cannot start: TOOLS_DATABASE_URL is not set" in message
