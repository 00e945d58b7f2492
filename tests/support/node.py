"""A real single-node Kubernetes cluster for the e2e tier: pods run Kora's image in containers.

:func:`start_node` runs ``scripts/k8s/start-node.sh`` (etcd, the API server, controller-manager, scheduler,
containerd, kubelet, kube-proxy and a cluster DNS on the bridge ``kora0``, 10.244.0.1); :func:`stop_node` runs
``stop-node.sh``, which leaves nothing behind. :func:`build_image` builds the OCI archive with
``scripts/image/build.sh`` and :func:`load_image` imports it into the node's containerd (no registry is reachable:
pods use ``imagePullPolicy: Never``). :class:`KoraOnNode` installs the Helm chart and drives the operator's
resources with ``kubectl``, exactly as a user would.

Nothing here writes a status: readiness is what the kubelet and the controllers report. The node needs root
(containers, a bridge, iptables); ``scripts/test.sh`` runs as root in CI and sets ``KORA_REQUIRE_NODE=1``, which
turns a missing root into a failure instead of a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.eventually import eventually
from tests.support.helm import CHART, helm_binary, set_flags
from tests.support.kube import KubeCluster, KubectlError, build_control_plane, load_yaml_documents

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "k8s"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
#: The node's API server (start-node.sh binds it to the bridge address).
NODE_SERVER = "https://10.244.0.1:16443"
#: Where the node keeps its state: fixed, because one node runs per machine and a killed run's leftovers must be
#: found and stopped by the next one.
NODE_DIR = Path(os.environ.get("KORA_NODE_DIR", "/tmp/kora-e2e-node"))
#: The repository the image is imported under, and the Helm release and namespace of the operator.
IMAGE_REPOSITORY = "localhost/kora"
RELEASE = "kora"
OPERATOR_NAMESPACE = "kora-system"
#: Set by scripts/test.sh: the node tier must run (a machine without root fails it rather than skipping it).
REQUIRE_NODE = "KORA_REQUIRE_NODE"

JsonObject = dict[str, Any]


class NodeUnavailable(RuntimeError):
    """The node could not be started (the script's stderr, with the failing component's log tail, is the
    message)."""


def require_node() -> None:
    """Skip the calling test where the node tier cannot run (not root), saying why; fail it instead under
    ``KORA_REQUIRE_NODE=1`` (scripts/test.sh), where it must run."""
    if os.geteuid() == 0:
        return
    reason = "the real-node tier needs root (containers, a bridge, iptables)"
    if os.environ.get(REQUIRE_NODE) == "1":
        pytest.fail(f"{REQUIRE_NODE}=1, but {reason}", pytrace=False)
    pytest.skip(reason)


def stop_node(directory: Path = NODE_DIR, keep: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``stop-node.sh directory`` (``keep``: leave the directory whole, for a look at its logs); its result,
    exit 0 when the host is clean, 1 with what is left on stderr otherwise."""
    env = {**os.environ, "KEEP": "1" if keep else "0", "KORA_K8S_BIN": str(build_control_plane())}
    return subprocess.run(
        ["bash", str(SCRIPTS / "stop-node.sh"), str(directory)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def start_node(directory: Path = NODE_DIR) -> KubeCluster:
    """Stop whatever a killed run left in ``directory``, then start a node there; returns once the node is
    Ready with cluster DNS answering. The node stops by itself if this process dies.

    Raises :class:`NodeUnavailable` when it does not come up.
    """
    bin_dir = build_control_plane()
    leftover = stop_node(directory)
    if leftover.returncode != 0:
        raise NodeUnavailable(f"stop-node.sh could not clean up a previous node:\n{leftover.stderr}")
    env = {**os.environ, "KORA_K8S_BIN": str(bin_dir), "OWNER_PID": str(os.getpid())}
    try:
        result = subprocess.run(
            ["bash", str(SCRIPTS / "start-node.sh"), str(directory)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        stop_node(directory)
        raise NodeUnavailable(f"start-node.sh did not finish in 600 s:\n{error.stderr!r}") from error
    if result.returncode != 0:
        stop_node(directory)  # the script stops what it started; this also covers a kill half-way
        raise NodeUnavailable(f"start-node.sh failed:\n{result.stderr.strip()}")
    return KubeCluster(directory=directory, kubeconfig=directory / "kubeconfig", server=NODE_SERVER, bin_dir=bin_dir)


@dataclass(frozen=True)
class BuiltImage:
    """The image scripts/image/build.sh made: ``archive`` (OCI archive), ``rootfs`` (unpacked), ``process`` (the
    runtime configuration's process: args, env, cwd, user), ``tag``."""

    out: Path
    archive: Path
    rootfs: Path
    process: JsonObject
    tag: str


def build_image(out: Path) -> BuiltImage:
    """Build Kora's image into ``out`` (root, or ``sudo -n``; minutes on a new machine, seconds when only Kora's
    own layer changed). Raises ``AssertionError`` with the build's stderr tail when it fails."""
    as_root = [] if os.geteuid() == 0 else ["sudo", "-n"]
    built = subprocess.run(
        [*as_root, "bash", str(REPO / "scripts/image/build.sh"), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-6000:]
    runtime = json.loads((out / "runtime-config.json").read_text())
    archive = Path(built.stdout.strip().splitlines()[-1])
    return BuiltImage(out=out, archive=archive, rootfs=out / "rootfs", process=runtime["process"], tag=VERSION)


def load_image(cluster: KubeCluster, archive: Path, repository: str = IMAGE_REPOSITORY) -> list[str]:
    """Import ``archive`` into the node's containerd as ``repository:<tag>``; the image references now there."""
    result = subprocess.run(
        ["bash", str(SCRIPTS / "load-image.sh"), str(cluster.directory), str(archive), repository],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.split()


#: What a check against a node may raise while the thing it looks for is still coming up.
NOT_YET = (KubectlError, httpx.HTTPError, OSError, KeyError, IndexError, ValueError)


def wait_for(check: Callable[[], Any], what: str, within: float = 300.0, every: float = 1.0) -> Any:
    """Call ``check`` until it returns something truthy (returned) or ``within`` seconds pass (``AssertionError``
    naming ``what`` and the last exception or value). Bounds are generous: pods start in seconds on a quiet
    machine, and CI's two cores are rarely quiet."""
    return eventually(check, what, within=within, every=every, tolerate=NOT_YET)


@dataclass
class KoraOnNode:
    """Kora installed on a node with its Helm chart: ``cluster`` (``kubectl``, lightkube clients), the image
    reference the chart runs, and ``values`` given to ``helm install``."""

    cluster: KubeCluster
    image_tag: str
    values: dict[str, object] = field(default_factory=dict)

    # --- the chart --------------------------------------------------------------------------------------------

    def helm(self, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        """Run ``helm ARGS`` against the node (its kubeconfig); ``AssertionError`` with helm's output on failure."""
        result = subprocess.run(
            [str(helm_binary()), f"--kubeconfig={self.cluster.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}\n{result.stdout}"
        return result

    def chart_values(self, **extra: object) -> dict[str, object]:
        """The values every install here uses: the imported image, never pulled, plus ``values`` and ``extra``."""
        return {
            "image.repository": IMAGE_REPOSITORY,
            "image.tag": self.image_tag,
            "image.pullPolicy": "Never",
            **self.values,
            **extra,
        }

    def install(self, **extra: object) -> None:
        """``helm install`` (or ``upgrade --install``) the chart into ``kora-system`` and wait until the operator's
        Deployment is rolled out (its pod Ready by the kubelet's probe)."""
        self.helm(
            "upgrade",
            "--install",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            "--create-namespace",
            "--wait",
            "--timeout",
            "10m",
            *set_flags(self.chart_values(**extra)),
        )

    # --- resources ---------------------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        """``kubectl ARGS`` on the node; its stdout. Raises ``KubectlError`` on a non-zero exit."""
        return self.cluster.kubectl(*args, stdin=stdin, timeout=timeout).stdout

    def get(self, kind: str, name: str, namespace: str) -> JsonObject:
        """One object as JSON (``kubectl get -o json``)."""
        return dict(json.loads(self.kubectl("get", kind, name, "-n", namespace, "-o", "json")))

    def apply(self, path: Path | str, namespace: str) -> str:
        """``kubectl apply -f path -n namespace`` (a file or directory of manifests); kubectl's output."""
        return self.kubectl("apply", "-n", namespace, "-f", str(path))

    def namespace(self, name: str) -> str:
        """Create namespace ``name`` (if missing); its name."""
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
        return name

    def phase(self, kind: str, name: str, namespace: str) -> str | None:
        """``status.phase`` of a Kora resource, None before the operator wrote one."""
        status = self.get(kind, name, namespace).get("status") or {}
        phase = status.get("phase")
        return str(phase) if phase is not None else None

    def wait_ready(self, kind: str, name: str, namespace: str, within: float = 300.0) -> JsonObject:
        """Wait until the Kora resource's phase is ``Ready`` (the operator saw its Deployment available from real
        pods); the resource. ``AssertionError`` with its status when it does not get there."""
        self.wait_all_ready(
            [{"apiVersion": "kora.dev/v1alpha1", "kind": kind, "metadata": {"name": name}}], namespace, within
        )
        return self.get(kind, name, namespace)

    def wait_all_ready(self, documents: list[JsonObject], namespace: str, within: float = 300.0) -> None:
        """Wait until every Kora resource among ``documents`` (parsed manifests) is ``Ready``, all within one bound
        of ``within`` seconds; ``AssertionError`` naming each one that is not, with its status."""
        wanted = [
            (str(d["kind"]), str(d["metadata"]["name"]))
            for d in documents
            if str(d.get("apiVersion", "")).startswith("kora.dev/")
        ]

        def not_ready() -> dict[str, object]:
            waiting: dict[str, object] = {}
            for kind, name in wanted:
                try:
                    status = self.get(kind, name, namespace).get("status") or {}
                except KubectlError as error:
                    status = {"error": error.stderr.strip()}
                if status.get("phase") != "Ready":
                    waiting[f"{kind} {namespace}/{name}"] = status
            return waiting

        deadline = time.monotonic() + within
        while waiting := not_ready():
            assert time.monotonic() < deadline, f"not Ready within {within:.0f} s: {waiting}"
            time.sleep(1.0)

    def pods(self, namespace: str, selector: str) -> list[JsonObject]:
        """Pods matching label ``selector``, as JSON objects."""
        listed = json.loads(self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))
        return list(listed["items"])

    def service_url(self, service: str, namespace: str, path: str = "") -> str:
        """``http://<cluster IP>:<port><path>`` of a Service: reached from the host through kube-proxy's rules,
        as a pod reaches it, load-balanced over its ready endpoints."""
        spec = self.get("service", service, namespace)["spec"]
        return f"http://{spec['clusterIP']}:{spec['ports'][0]['port']}{path}"

    def ctr(self, *args: str) -> str:
        """``ctr ARGS`` against the node's containerd (namespace ``k8s.io``, where the kubelet's containers are);
        its stdout. ``AssertionError`` with its stderr on failure."""
        command = ["ctr", "--address", str(self.cluster.directory / "containerd.sock"), "-n", "k8s.io", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"ctr {' '.join(args)}: {result.stderr}"
        return result.stdout

    def retag_image(self, tag: str) -> str:
        """Give the imported image a second tag (another reference to the same image, as a push of a new tag
        would); the new reference."""
        reference = f"{IMAGE_REPOSITORY}:{tag}"
        self.ctr("images", "tag", "--force", f"{IMAGE_REPOSITORY}:{self.image_tag}", reference)
        return reference

    def exec(self, namespace: str, pod: str, *command: str) -> str:
        """``kubectl exec pod -- command``; its stdout."""
        return self.kubectl("exec", "-n", namespace, pod, "--", *command)


def load_documents(path: Path) -> list[JsonObject]:
    """The YAML documents of a manifest file or of every ``*.yaml`` in a directory."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [document for file in files for document in load_yaml_documents(file)]


def host_path_volume(kora: KoraOnNode, name: str, size: str = "2Gi") -> Path:
    """A PersistentVolume backed by a directory on the node (``<node dir>/volumes/<name>``), which a claim with
    no storage class binds: the test cluster has no dynamic provisioner. The directory is world-writable because
    a hostPath volume ignores ``fsGroup`` and the workloads run as an arbitrary non-root uid. Its path."""
    directory = kora.cluster.directory / "volumes" / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o777)
    manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"kora.dev/test-volume": name}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "",
            "hostPath": {"path": str(directory), "type": "Directory"},
        },
    }
    kora.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    return directory


@contextmanager
def kora_on_node(
    cluster: KubeCluster, image_tag: str, values: Mapping[str, object] | None = None
) -> Iterator[KoraOnNode]:
    """Install the chart on ``cluster`` for the body, uninstalling it afterwards (its CRDs stay, as Helm leaves
    them)."""
    kora = KoraOnNode(cluster, image_tag, dict(values or {}))
    kora.install()
    try:
        yield kora
    finally:
        subprocess.run(
            [str(helm_binary()), f"--kubeconfig={cluster.kubeconfig}", "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE],
            capture_output=True,
            check=False,
            timeout=300,
        )
