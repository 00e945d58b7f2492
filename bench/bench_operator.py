"""``kora operator`` with 100 Agents on a real kube-apiserver: time to Ready, writes per unchanged reconcile, RSS.

Run: ``python bench/bench_operator.py [--agents N]`` (~1-2 min on 2 cores, the control plane built and cached by
``scripts/k8s/build-control-plane.sh`` the first time). Starts etcd + kube-apiserver + a controller-manager with
only the garbage-collector and namespace controllers (tests/support/kube.py), then ``kora operator --namespace NS``
as a subprocess with its admission webhook (tests/support/operator.py), and prints:

- **idle RSS**: ``VmRSS`` of the operator with no Kora resource, 3 s after its liveness endpoint answered (the
  baseline);
- **time to Ready**: N Agents, each with its own ModelAPI (``Scripted``, an inline script), all sharing one
  MCPServer (``tools``, an inline tool), created one by one through the API server (every create passes the
  operator's admission webhook). Timed from the first create to: all created, all N+N+1 Deployments and Services
  present, all Agents ``Ready``. No kubelet runs, so a loop in this process plays kubelet + deployment controller:
  it lists Deployments every 50 ms and marks each new one available through the status subresource
  (:meth:`KubeCluster.mark_deployment_available`); that loop's own time (its API calls included) is printed,
  since it is part of the wall-clock figure;
- **RSS with N Agents**: the same operator once every Agent is Ready;
- **writes per unchanged reconcile**: the operator is restarted with ``--log-level debug``; once every resource has
  logged ``reconciled <Kind> <name> in <ns>: W writes``, the W are summed (goal 0) and the ``resourceVersion`` of
  every Deployment, Service, ConfigMap, Agent, ModelAPI and MCPServer is compared with the one read before the
  restart (goal: none changed). The restarted operator's RSS and time to converge are printed too.

Goals: all Agents Ready <= 10 s, 0 writes, RSS <= 150 MB.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lightkube import Client  # noqa: E402
from lightkube.resources.apps_v1 import Deployment  # noqa: E402
from lightkube.resources.core_v1 import ConfigMap, Service  # noqa: E402
from lightkube.types import PatchType  # noqa: E402

from kora.operator.kube import KORA_RESOURCES  # noqa: E402
from tests.support.kube import KubeCluster, deployment_available_status, load_yaml_documents, start_kube_cluster  # noqa: E402
from tests.support.operator import OperatorProcess, running_operator  # noqa: E402

GOAL_SECONDS = 10.0
GOAL_RSS_MB = 150.0
QUICKSTART = ROOT / "examples" / "quickstart" / "kora.yaml"
RECONCILED = re.compile(r"reconciled (\w+) (\S+) in (\S+): (\d+) writes")


def rss_mb(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MB (from ``/proc/<pid>/status``, which gives kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def manifests(agents: int) -> list[tuple[str, dict[str, object]]]:
    """(kind, body) of the shared MCPServer (the quickstart's inline tools), then per agent its ModelAPI (the
    quickstart's inline script) and the Agent."""
    quickstart = {doc["kind"]: doc for doc in load_yaml_documents(QUICKSTART)}
    script = quickstart["ModelAPI"]["spec"]["scriptedConfig"]["script"]
    documents: list[tuple[str, dict[str, object]]] = [
        ("MCPServer", {"metadata": {"name": "tools"}, "spec": quickstart["MCPServer"]["spec"]})
    ]
    for index in range(agents):
        name = f"a{index:03d}"
        documents.append(
            (
                "ModelAPI",
                {"metadata": {"name": f"m-{name}"}, "spec": {"mode": "Scripted", "scriptedConfig": {"script": script}}},
            )
        )
        documents.append(
            (
                "Agent",
                {
                    "metadata": {"name": name},
                    "spec": {
                        "modelAPI": f"m-{name}",
                        "model": "scripted",
                        "mcpServers": ["tools"],
                        "config": {"agenticLoop": {"enableTools": True}},
                    },
                },
            )
        )
    return documents


class Kubelet(threading.Thread):
    """Marks every Deployment of ``namespace`` available as it appears (a kubelet plus the deployment controller);
    ``busy`` is the seconds spent in its own API calls, ``marked`` the Deployments it marked."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.namespace = namespace
        self.stopped = threading.Event()
        self.marked: set[str] = set()
        self.busy = 0.0

    def run(self) -> None:
        with self.cluster.client() as client:
            while not self.stopped.is_set():
                started = time.perf_counter()
                for deployment in client.list(Deployment, namespace=self.namespace):
                    name = deployment.metadata.name
                    if name not in self.marked:
                        # What KubeCluster.mark_deployment_available does, on this loop's one connection.
                        client.patch(
                            Deployment.Status,
                            name,
                            {"status": deployment_available_status(deployment)},
                            namespace=self.namespace,
                            patch_type=PatchType.MERGE,
                        )
                        self.marked.add(name)
                self.busy += time.perf_counter() - started
                self.stopped.wait(0.05)


def count(client: Client, resource: type, namespace: str) -> int:
    return sum(1 for _ in client.list(resource, namespace=namespace))


def ready_agents(client: Client, namespace: str) -> int:
    return sum(
        1
        for agent in client.list(KORA_RESOURCES["Agent"], namespace=namespace)
        if (agent.get("status") or {}).get("phase") == "Ready"
    )


def versions(cluster: KubeCluster, namespace: str) -> dict[str, str]:
    """``Kind/name -> resourceVersion`` of everything the operator made or reconciles in ``namespace``."""
    found: dict[str, str] = {}
    with cluster.client() as client:
        for resource in (
            Deployment,
            Service,
            ConfigMap,
            *(KORA_RESOURCES[k] for k in ("Agent", "ModelAPI", "MCPServer")),
        ):
            for item in client.list(resource, namespace=namespace):
                found[f"{resource.__name__}/{item.metadata.name}"] = item.metadata.resourceVersion
    return found


def reconciled(operator: OperatorProcess) -> dict[str, int]:
    """``Kind/name -> writes summed over every reconcile`` the operator logged."""
    totals: dict[str, int] = {}
    for kind, name, _, writes in RECONCILED.findall(operator.output()):
        totals[f"{kind}/{name}"] = totals.get(f"{kind}/{name}", 0) + int(writes)
    return totals


def wait(what: str, probe, within: float = 120.0, every: float = 0.05) -> float:
    """Poll ``probe`` until truthy; the time it took. SystemExit naming ``what`` after ``within`` s."""
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > within:
            raise SystemExit(f"{what}: not reached within {within} s")
        time.sleep(every)
    return time.monotonic() - started


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100)
    agents = parser.parse_args().agents
    documents = manifests(agents)
    workloads = len(documents)  # one Deployment and one Service per resource
    with (
        tempfile.TemporaryDirectory(prefix="kora-bench-operator-") as tmp,
        start_kube_cluster(Path(tmp) / "k8s") as cluster,
    ):
        namespace = cluster.fresh_namespace("bench")
        with running_operator(cluster, namespace, Path(tmp) / "operator.log") as operator:
            time.sleep(3)
            idle = rss_mb(operator.process.pid)
            print(f"operator idle, no resources:          RSS {idle:6.1f} MB")

            kubelet = Kubelet(cluster, namespace)
            kubelet.start()
            with cluster.client(namespace) as client:
                started = time.monotonic()
                for kind, body in documents:
                    client.create(KORA_RESOURCES[kind](**body))
                created = time.monotonic() - started
                children = (
                    wait(
                        "every child",
                        lambda: (
                            count(client, Deployment, namespace) >= workloads
                            and count(client, Service, namespace) >= workloads
                        ),
                    )
                    + created
                )
                ready = time.monotonic() - started
                ready += wait("every Agent Ready", lambda: ready_agents(client, namespace) == agents, every=0.1)
                ready = time.monotonic() - started
            kubelet.stopped.set()
            kubelet.join()
            loaded = rss_mb(operator.process.pid)
            print(f"{agents} Agents + {agents} ModelAPIs + 1 MCPServer ({workloads} workloads):")
            print(f"  created (one create per resource): {created:6.2f} s")
            print(f"  every Deployment and Service made: {children:6.2f} s")
            print(
                f"  every Agent Ready:                 {ready:6.2f} s  "
                f"goal <= {GOAL_SECONDS:.0f} s: {verdict(ready <= GOAL_SECONDS)}"
            )
            print(f"  ... of which after the last create: {ready - created:6.2f} s (the operator's own lag)")
            print(f"  kubelet loop's own API time:       {kubelet.busy:6.2f} s ({len(kubelet.marked)} marked)")
            print(
                f"  operator RSS:                      {loaded:6.1f} MB  (+{loaded - idle:.1f} MB over idle)  "
                f"goal <= {GOAL_RSS_MB:.0f} MB: {verdict(loaded <= GOAL_RSS_MB)}"
            )

        before = versions(cluster, namespace)
        restarted_at = time.monotonic()
        with running_operator(cluster, namespace, Path(tmp) / "restarted.log", None, "--log-level", "debug") as again:
            converged = wait("every resource reconciled", lambda: len(reconciled(again)) >= workloads, every=0.2)
            converged = time.monotonic() - restarted_at
            time.sleep(2)  # anything a late watch event would make it write
            totals = reconciled(again)
            after = versions(cluster, namespace)
            restarted_rss = rss_mb(again.process.pid)
            # What it wrote, and why (the reconciler logs each status it writes and each child it applies).
            written = [
                line
                for line in again.output().splitlines()
                if (RECONCILED.search(line) and not line.endswith(": 0 writes"))
                or " applying " in line
                or (" is " in line and "kora.operator.reconciler" in line)
            ]
        changed = sorted(key for key in before if after.get(key) != before[key])
        writes = sum(totals.values())
        print(f"restarted operator (--log-level debug), {len(before)} objects:")
        print(f"  every resource reconciled:         {converged:6.2f} s after start (liveness included)")
        print(f"  API writes, all reconciles:        {writes:6d}  goal 0: {verdict(writes == 0)}")
        print(f"  resourceVersions changed:          {len(changed):6d}  {changed[:5] if changed else ''}")
        print(f"  operator RSS:                      {restarted_rss:6.1f} MB")
        for line in written[:20]:
            print(f"  | {line}")


if __name__ == "__main__":
    main()
