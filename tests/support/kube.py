"""A real Kubernetes API server (etcd + kube-apiserver 1.20 + kube-controller-manager) on 127.0.0.1, for tests.

The binaries come from ``scripts/k8s/build-control-plane.sh`` (built once per machine, cached under
``${XDG_CACHE_HOME:-~/.cache}/kora/k8s-1.20.2``); ``scripts/k8s/start-control-plane.sh`` starts them on free ports.
:func:`start_kube_cluster` does both, installs Kora's CRDs (``deploy/crds/``) and the Gateway API CRDs (adapted to
1.20 in memory, see :func:`adapt_crd_to_1_20`), waits until every CRD is Established and yields a
:class:`KubeCluster`. ``tests/conftest.py`` turns it into the session fixture ``kube_cluster`` (and ``kube_namespace``,
a fresh namespace per test).

No kubelet and no scheduler run: pods are never started. The controller-manager runs only the garbage collector and
the namespace controller by default, so a Deployment's status is whatever a test sets
(:meth:`KubeCluster.mark_deployment_available` plays kubelet + deployment controller).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import ApiError, AsyncClient, Client, KubeConfig
from lightkube.generic_resource import GenericNamespacedResource
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.types import PatchType

from kora.core.net import free_port
from kora.operator.kube import KORA_RESOURCES

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "scripts" / "k8s"
KORA_CRDS = REPO_ROOT / "deploy" / "crds"
GATEWAY_API_CRDS = REPO_ROOT / "tests" / "data" / "gateway-api-v1.6.1"
#: What the tests' controller-manager runs: owner-reference cleanup and namespace deletion, but no deployment
#: controller (it would overwrite, within milliseconds, a Deployment status a test sets: no pod ever runs here).
TEST_CONTROLLERS = "garbagecollector,namespace"
#: Field manager of everything the harness itself writes.
FIELD_MANAGER = "kora-tests"

JsonObject = dict[str, Any]


class ControlPlaneUnavailable(RuntimeError):
    """The control plane could not be built or started (the message says why and what to install)."""


class KubectlError(RuntimeError):
    """``kubectl`` exited non-zero; ``returncode``, ``stdout`` and ``stderr`` are kept for assertions."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def build_control_plane() -> Path:
    """Build (or find, when cached) the control-plane binaries; the directory holding ``kube-apiserver``,
    ``kube-controller-manager``, ``etcd`` and ``kubectl``. Takes minutes the first time on a machine.

    Raises :class:`ControlPlaneUnavailable` with the build's last output lines when it fails (no apt-get, no
    network to Debian's archive, ...).
    """
    result = subprocess.run(
        ["bash", str(SCRIPTS / "build-control-plane.sh")], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-30:])
        raise ControlPlaneUnavailable(
            "building the test Kubernetes control plane (scripts/k8s/build-control-plane.sh) failed; it needs "
            f"apt-get (as root or with sudo) and access to deb.debian.org:\n{tail}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def adapt_crd_to_1_20(node: object) -> object:
    """A copy of a CRD (or any part of one) that Kubernetes 1.20 accepts: every ``x-kubernetes-validations``
    (CEL rules, 1.25+) and every ``default: ""`` (1.20 reads it as a null default and refuses the CRD) removed,
    at any depth. Only for installing upstream CRDs (Gateway API) on the test server; never shipped.

    Safe on schemas because a property *named* ``default`` is itself a schema object, never ``""``.
    """
    if isinstance(node, Mapping):
        return {
            key: adapt_crd_to_1_20(value)
            for key, value in node.items()
            if key != "x-kubernetes-validations" and not (key == "default" and value == "")
        }
    if isinstance(node, list):
        return [adapt_crd_to_1_20(item) for item in node]
    return node


def load_yaml_documents(path: Path) -> list[JsonObject]:
    """Every non-empty YAML document in ``path``."""
    with path.open(encoding="utf-8") as stream:
        return [document for document in yaml.safe_load_all(stream) if document]


def kora_crd_documents() -> list[JsonObject]:
    """Kora's four CRDs as generated into ``deploy/crds/``."""
    return [doc for path in sorted(KORA_CRDS.glob("*.yaml")) for doc in load_yaml_documents(path)]


def gateway_api_crd_documents() -> list[JsonObject]:
    """The Gateway API CRDs of ``tests/data``, adapted to 1.20 by :func:`adapt_crd_to_1_20`."""
    documents = [doc for path in sorted(GATEWAY_API_CRDS.glob("*.yaml")) for doc in load_yaml_documents(path)]
    return [adapted for doc in documents if isinstance(adapted := adapt_crd_to_1_20(doc), dict)]


def kora_resource(kind: str) -> type[GenericNamespacedResource]:
    """The lightkube resource class of a Kora kind (``"Agent"``, ``"ModelAPI"``, ...), the operator's own.

    Raises ``KeyError`` for an unknown kind.
    """
    return KORA_RESOURCES[kind]


def exists(client: Client, resource: type, name: str, namespace: str) -> bool:
    """Whether the API server has ``resource`` ``namespace/name`` (404: False; any other error is raised)."""
    try:
        client.get(resource, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return False
        raise
    return True


def deployment_available_status(deployment: Deployment, now: datetime | None = None) -> JsonObject:
    """The ``status`` a kubelet and the deployment controller would give ``deployment`` once all its replicas run:
    ``spec.replicas`` (default 1) replicas ready, available and updated, ``observedGeneration`` the current
    ``metadata.generation``, conditions ``Available`` and ``Progressing`` true."""
    replicas = 1
    if deployment.spec is not None and deployment.spec.replicas is not None:
        replicas = deployment.spec.replicas
    generation = deployment.metadata.generation if deployment.metadata is not None else None
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "observedGeneration": generation or 1,
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "updatedReplicas": replicas,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": "ReplicaSet has successfully progressed.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
        ],
    }


@dataclass
class KubeCluster:
    """A running control plane: ``directory`` holds its state and logs (``apiserver.log``, ``etcd.log``,
    ``kcm.log``), ``kubeconfig`` authenticates as cluster admin (group ``system:masters``), ``server`` is
    ``https://127.0.0.1:<port>``, ``bin_dir`` holds ``kubectl`` and the server binaries."""

    directory: Path
    kubeconfig: Path
    server: str
    bin_dir: Path

    def config(self) -> KubeConfig:
        """The parsed kubeconfig (for lightkube or kopf)."""
        return KubeConfig.from_file(self.kubeconfig)

    def client(self, namespace: str | None = None) -> Client:
        """A synchronous lightkube client as cluster admin; ``namespace`` is its default namespace."""
        return Client(self.config(), namespace=namespace, field_manager=FIELD_MANAGER, trust_env=False)

    def async_client(self, namespace: str | None = None) -> AsyncClient:
        """An asynchronous lightkube client as cluster admin (close it with ``await client.close()``)."""
        return AsyncClient(self.config(), namespace=namespace, field_manager=FIELD_MANAGER, trust_env=False)

    def env(self) -> dict[str, str]:
        """``os.environ`` with ``KUBECONFIG`` pointing at this cluster (for subprocesses such as ``kora operator``)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS`` against this cluster, ``stdin`` as its input (text in and out). Discovery is cached
        per cluster, so a cache from an earlier cluster on the same port never hides a kind.

        Raises :class:`KubectlError` on a non-zero exit when ``check`` (the default); ``subprocess.TimeoutExpired``
        after ``timeout`` seconds.
        """
        command = [
            str(self.bin_dir / "kubectl"),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.directory / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise KubectlError(list(args), result.returncode, result.stdout, result.stderr)
        return result

    def service_account_token(self, name: str, namespace: str, seconds: int = 3600) -> str:
        """A bearer token for ServiceAccount ``namespace/name`` (TokenRequest API, valid ``seconds``): requests
        with it are authorized by RBAC as ``system:serviceaccount:<namespace>:<name>``, not as cluster admin.
        Raises ``lightkube.ApiError`` (404) when the ServiceAccount does not exist."""
        request = ServiceAccount.Token(
            metadata=ObjectMeta(name=name), spec=TokenRequestSpec(audiences=[], expirationSeconds=seconds)
        )
        with self.client() as client:
            issued = client.create(request, name, namespace=namespace)
        assert issued.status is not None
        return str(issued.status.token)

    def kubeconfig_for_token(self, token: str, path: Path) -> Path:
        """Write, at ``path``, a kubeconfig for this cluster that authenticates with ``token`` (e.g. from
        :meth:`service_account_token`); returns ``path``."""
        config = yaml.safe_load(self.kubeconfig.read_text(encoding="utf-8"))
        config["users"] = [{"name": "token", "user": {"token": token}}]
        config["contexts"] = [{"name": "token", "context": {"cluster": config["clusters"][0]["name"], "user": "token"}}]
        config["current-context"] = "token"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        path.chmod(0o600)
        return path

    def fresh_namespace(self, prefix: str = "test") -> str:
        """Create a namespace no other test uses (``<prefix>-<8 hex digits>``); its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        with self.client() as client:
            client.create(Namespace(metadata={"name": name}))  # type: ignore[arg-type]
        return name

    def mark_deployment_available(self, name: str, namespace: str) -> Deployment:
        """Set the status of Deployment ``namespace/name`` to what a kubelet and the deployment controller would
        once its pods run (:func:`deployment_available_status`), through the status subresource; the updated
        Deployment. Raises ``lightkube.ApiError`` (404) when it does not exist."""
        with self.client() as client:
            deployment = client.get(Deployment, name, namespace=namespace)
            patched = client.patch(
                Deployment.Status,
                name,
                {"status": deployment_available_status(deployment)},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
            return cast(Deployment, Deployment.from_dict(patched.to_dict()))

    async def mark_deployment_available_async(self, name: str, namespace: str) -> Deployment:
        """:meth:`mark_deployment_available` for async tests (does not block their event loop)."""
        client = self.async_client()
        try:
            deployment = await client.get(Deployment, name, namespace=namespace)
            patched = await client.patch(
                Deployment.Status,
                name,
                {"status": deployment_available_status(deployment)},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
            return cast(Deployment, Deployment.from_dict(patched.to_dict()))
        finally:
            await client.close()


def start_control_plane(
    directory: Path,
    bin_dir: Path,
    controllers: str | None = TEST_CONTROLLERS,
    crds: list[JsonObject] | None = None,
) -> KubeCluster:
    """Start etcd, kube-apiserver and, unless ``controllers`` is None, kube-controller-manager running only
    ``controllers`` (a ``--controllers`` list; ``"*"`` for all), on free ports; returns once the API server is
    ready. ``crds`` are installed and Established before the controller-manager starts, so its garbage collector
    follows owner references to their kinds from the first moment. Stop it with :func:`stop_control_plane`.

    Raises :class:`ControlPlaneUnavailable` (with the failing component's log tail) when it does not come up.
    """
    api_port = free_port()
    env = {
        **os.environ,
        "KORA_K8S_BIN": str(bin_dir),
        "API_PORT": str(api_port),
        "ETCD_PORT": str(free_port()),
        "ETCD_PEER_PORT": str(free_port()),
        "KCM_PORT": str(free_port()),
        "KCM": "0" if controllers is None else "1",
        "KCM_CONTROLLERS": controllers or "",
        # If this test process dies without stopping the cluster, the cluster stops itself.
        "OWNER_PID": str(os.getpid()),
    }
    if crds:
        crd_dir = directory / "crds"
        crd_dir.mkdir(parents=True, exist_ok=True)
        for index, document in enumerate(crds):
            path = crd_dir / f"{index:02d}-{document['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        env["CRD_DIR"] = str(crd_dir)
    result = subprocess.run(
        ["bash", str(SCRIPTS / "start-control-plane.sh"), str(directory)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneUnavailable(f"start-control-plane.sh failed:\n{result.stderr.strip()}")
    return KubeCluster(
        directory=directory,
        kubeconfig=directory / "kubeconfig",
        server=f"https://127.0.0.1:{api_port}",
        bin_dir=bin_dir,
    )


def stop_control_plane(directory: Path) -> None:
    """End every process :func:`start_control_plane` started in ``directory`` (waits until they are gone)."""
    subprocess.run(["bash", str(SCRIPTS / "stop-control-plane.sh"), str(directory)], check=False)


@contextmanager
def start_kube_cluster(
    directory: Path, *, controllers: str | None = TEST_CONTROLLERS, install_crds: bool = True
) -> Iterator[KubeCluster]:
    """Build (cached) and start a control plane in ``directory``; with ``install_crds``, Kora's CRDs and the
    adapted Gateway API CRDs are installed and Established before it is yielded. Everything is stopped on exit.

    Raises :class:`ControlPlaneUnavailable` when the control plane cannot be built or started.
    """
    bin_dir = build_control_plane()
    crds = kora_crd_documents() + gateway_api_crd_documents() if install_crds else None
    cluster = start_control_plane(directory, bin_dir, controllers, crds)
    try:
        yield cluster
    finally:
        stop_control_plane(directory)


@contextmanager
def session_kube_cluster(directory: Path) -> Iterator[KubeCluster]:
    """:func:`start_kube_cluster` for the ``kube_cluster`` fixture: a control plane that cannot be had fails the
    tests that need it, with the reason, rather than skipping them (CI must run them)."""
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(start_kube_cluster(directory))
        except ControlPlaneUnavailable as error:
            pytest.fail(str(error), pytrace=False)
        yield cluster


#: The volume types PodSecurity's "restricted" profile allows.
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def restricted_problems(pod_spec: Mapping[str, Any]) -> list[str]:
    """What in ``pod_spec`` (a pod template's ``spec``, as JSON) PodSecurity's ``restricted`` profile (Kubernetes
    1.25's, the newest) refuses, plus a writable root filesystem; empty when it passes. The checks are the
    profile's: volume types, no privilege escalation, non-root (``runAsNonRoot`` at pod or container level, no uid
    0), ``seccompProfile`` RuntimeDefault or Localhost, every capability dropped and none but NET_BIND_SERVICE
    added; and ``readOnlyRootFilesystem`` on every container."""
    problems: list[str] = []
    pod = pod_spec.get("securityContext") or {}
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} is of type {sorted(kinds)}")
    if pod.get("runAsUser") == 0:
        problems.append("the pod runs as uid 0")
    containers = [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]
    for container in containers:
        context = container.get("securityContext") or {}
        name = container["name"]
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser", pod.get("runAsUser")) == 0:
            problems.append(f"{name}: runs as uid 0")
        seccomp = context.get("seccompProfile", pod.get("seccompProfile")) or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp or 'unset'}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities add {capabilities['add']}")
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: the root filesystem is writable")
    return problems
