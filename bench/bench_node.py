"""Kora on a real single-node cluster against ``kora up``, measured in one run.

Run (root; ~5 min with the image cached): ``python bench/bench_node.py [--image ARCHIVE]``. Starts the e2e tier's
node (``scripts/k8s/start-node.sh``), builds the image unless ``--image`` names an archive, imports it, and prints:

- ``helm install`` to every quickstart workload Ready: the chart installed with ``--wait``, the quickstart applied
  at once, until its three resources report phase Ready (the operator saw their Deployments available from pods
  the kubelet found ready);
- ``kubectl apply`` of the multi-agent example to all six resources Ready;
- a deleted agent pod to serving again: ``kubectl delete pod`` until a chat through the agent's Service answers;
- an agent pod's start to ``/ready``: from the container running (its ``startedAt``) to the pod's Ready condition,
  both as the kubelet reports them (1 s resolution), and from the new pod first seen to Ready, polled every 0.1 s;

then the same figures for ``kora up`` (start to every workload Ready, for both examples; a killed agent Ready
again), measured in the same run once the node is stopped, so the two never share the machine. Every wait is
bounded.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_up import restart_time, start_up, stop  # noqa: E402

from tests.support.node import (  # noqa: E402
    KoraOnNode,
    build_image,
    load_documents,
    load_image,
    start_node,
    stop_node,
    wait_for,
)

EXAMPLES = ROOT / "examples"
CHAT = {"model": "assistant", "messages": [{"role": "user", "content": "What is 2 plus 3?"}]}


def all_ready(kora: KoraOnNode, example: str, namespace: str) -> float:
    """Seconds until every resource of ``examples/<example>`` in ``namespace`` is Ready (polled every second)."""
    started = time.monotonic()
    kora.wait_all_ready(load_documents(EXAMPLES / example), namespace)
    return time.monotonic() - started


def agent_pod(kora: KoraOnNode, namespace: str) -> dict:
    pods = [p for p in kora.pods(namespace, "kora.dev/kind=Agent") if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else {}


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pod_restart(kora: KoraOnNode, namespace: str) -> None:
    """Delete the quickstart's agent pod; print the figures of its replacement."""
    old = agent_pod(kora, namespace)["metadata"]["name"]
    url = kora.service_url("agent-assistant", namespace, "/v1/chat/completions")
    started = time.monotonic()
    kora.kubectl("delete", "pod", "-n", namespace, old, "--wait=false")
    seen = ready = None
    deadline = started + 300
    while ready is None:
        assert time.monotonic() < deadline, "no new agent pod Ready in 300 s"
        pod = agent_pod(kora, namespace)
        if pod and pod["metadata"]["name"] != old:
            seen = seen or time.monotonic()
            if _ready(pod):
                ready = time.monotonic()
        time.sleep(0.1)

    def serving() -> bool:
        return httpx.post(url, json=CHAT, timeout=10).status_code == 200

    wait_for(serving, "a chat through the Service", 120, every=0.1)
    served = time.monotonic()
    pod = agent_pod(kora, namespace)
    running = _stamp(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
    ready_at = next(_stamp(c["lastTransitionTime"]) for c in pod["status"]["conditions"] if c["type"] == "Ready")
    print(
        f"  deleted agent pod -> new pod Ready {ready - started:.1f} s, "
        f"serving through its Service {served - started:.1f} s"
    )
    print(
        f"  agent pod start -> /ready: {(ready_at - running).total_seconds():.0f} s by the kubelet's stamps, "
        f"{ready - seen:.1f} s from the new pod first seen to Ready"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", type=Path, help="an OCI archive from scripts/image/build.sh (default: build one)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        archive = options.image or build_image(Path(tmp) / "image").archive
        cluster = start_node()
        try:
            load_image(cluster, archive)
            kora = KoraOnNode(cluster, image_tag=archive.name.removeprefix("kora-").removesuffix(".oci.tar"))
            print("real node (Kubernetes 1.20.2, containerd, one node)")
            started = time.monotonic()
            kora.install()
            installed = time.monotonic() - started
            kora.apply(EXAMPLES / "quickstart", kora.namespace("bench-quickstart"))
            all_ready(kora, "quickstart", "bench-quickstart")
            print(
                f"  helm install -> quickstart all Ready: {time.monotonic() - started:.1f} s "
                f"(helm install --wait {installed:.1f} s)"
            )
            started = time.monotonic()
            kora.apply(EXAMPLES / "multi-agent", kora.namespace("bench-multi-agent"))
            all_ready(kora, "multi-agent", "bench-multi-agent")
            print(f"  kubectl apply multi-agent -> all Ready: {time.monotonic() - started:.1f} s")
            pod_restart(kora, "bench-quickstart")
        finally:
            stop_node()
        print("kora up (local processes)")
        for example in ("quickstart", "multi-agent"):
            state_dir = Path(tmp) / f"up-{example}"
            process, _, state = start_up(str(EXAMPLES / example), state_dir)
            try:
                if example == "quickstart":
                    restart_time(process, state_dir, state)
            finally:
                stop(process)


if __name__ == "__main__":
    main()
