"""Kora's CRDs, the examples and the Gateway API on a real Kubernetes API server (1.20, ``kube_cluster``).

Also proves the harness itself: the adapted Gateway API CRDs install, a Deployment can be marked available
without a kubelet, owner references are garbage-collected, and stopping a control plane leaves no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from lightkube import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from kora.resources import crd
from kora.resources.models import API_VERSION, RESOURCE_CLASSES, ModelAPI, ResourceStatus
from tests.support.kube import (
    GATEWAY_API_CRDS,
    REPO_ROOT,
    KubeCluster,
    adapt_crd_to_1_20,
    gateway_api_crd_documents,
    kora_crd_documents,
    kora_resource,
    load_yaml_documents,
    start_kube_cluster,
)
from tests.support.memory import eventually

pytestmark = pytest.mark.integration

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*/kora.yaml"))
HTTPRoute = create_namespaced_resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")


def api_error(call) -> ApiError:
    """The ``ApiError`` that ``call()`` raises (fails the test if it raises none)."""
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


# --- CRDs ----------------------------------------------------------------------------------------------


def test_every_kora_and_gateway_crd_is_established(kube_cluster: KubeCluster):
    names = [doc["metadata"]["name"] for doc in kora_crd_documents() + gateway_api_crd_documents()]
    assert len(names) == len(RESOURCE_CLASSES) + 5
    with kube_cluster.client() as client:
        for name in names:
            status = client.get(CustomResourceDefinition, name).status
            assert status is not None
            true = {condition.type for condition in status.conditions or [] if condition.status == "True"}
            assert {"Established", "NamesAccepted"} <= true, name


@pytest.mark.parametrize("kind", list(RESOURCE_CLASSES))
def test_the_server_keeps_the_generated_schema_unchanged(kube_cluster: KubeCluster, kind: str):
    generated = crd.crd(kind)
    with kube_cluster.client() as client:
        served = client.get(CustomResourceDefinition, generated["metadata"]["name"]).to_dict()
    version = served["spec"]["versions"][0]
    assert version["schema"] == generated["spec"]["versions"][0]["schema"]
    assert version["subresources"] == {"status": {}}
    columns = [(column["name"], column["jsonPath"]) for column in version["additionalPrinterColumns"]]
    expected = [
        (column["name"], column["jsonPath"]) for column in generated["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert columns == expected


def test_adapting_the_gateway_crds_removes_only_what_1_20_refuses():
    original = load_yaml_documents(GATEWAY_API_CRDS / "httproutes.yaml")[0]
    text = json.dumps(original)
    assert "x-kubernetes-validations" in text
    adapted = json.dumps(adapt_crd_to_1_20(original))
    assert "x-kubernetes-validations" not in adapted
    assert '"default": ""' not in adapted
    # Non-empty defaults (e.g. PathPrefix for a path match) stay.
    assert '"default": "PathPrefix"' in adapted
    # The files in the repository stay upstream's.
    assert "x-kubernetes-validations" in (GATEWAY_API_CRDS / "httproutes.yaml").read_text(encoding="utf-8")


# --- examples -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.parent.name for path in EXAMPLES])
def test_example_applies_and_reads_back_unchanged(kube_cluster: KubeCluster, kube_namespace: str, example: Path):
    kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", str(example))
    documents = load_yaml_documents(example)
    assert documents
    for document in documents:
        kind, name = document["kind"], document["metadata"]["name"]
        output = kube_cluster.kubectl("get", "-n", kube_namespace, "-o", "json", f"{kind.lower()}.kora.dev/{name}")
        served = json.loads(output.stdout)
        assert served["apiVersion"] == API_VERSION
        model = RESOURCE_CLASSES[kind]
        # Schema pruning would drop a field the schema does not know: the models would then see a different spec.
        assert model.model_validate(served).spec == model.model_validate(document).spec, f"{kind}/{name}"


def test_printer_columns_show_spec_and_status(kube_cluster: KubeCluster, kube_namespace: str):
    kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", str(REPO_ROOT / "examples" / "quickstart" / "kora.yaml"))
    agents = kube_cluster.kubectl("get", "agents", "-n", kube_namespace).stdout.splitlines()
    assert agents[0].split() == ["NAME", "MODELAPI", "MODEL", "PHASE", "AGE"]
    assert agents[1].split()[:3] == ["assistant", "scripted", "scripted"]
    wide = kube_cluster.kubectl("get", "modelapis", "-n", kube_namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "MODE", "PHASE", "ENDPOINT", "AGE"]
    assert wide[1].split()[:2] == ["scripted", "Scripted"]
    kora = kube_cluster.kubectl("get", "kora", "-n", kube_namespace, "-o", "name").stdout.split()
    assert sorted(kora) == ["agent.kora.dev/assistant", "mcpserver.kora.dev/tools", "modelapi.kora.dev/scripted"]


# --- status subresource -----------------------------------------------------------------------------------


def scripted_model_api(name: str) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ModelAPI", "metadata": {"name": name}, "spec": {"mode": "Scripted"}}


def test_the_status_subresource_takes_a_status_patch_and_nothing_else(kube_cluster: KubeCluster, kube_namespace: str):
    resource = kora_resource("ModelAPI")
    status = {
        "phase": "Ready",
        "message": "serving",
        "endpoint": "http://modelapi-m.ns.svc:8000",
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "1/1 ready"}],
        "kopf": {"progress": {}},  # controllers keep state of their own in status
    }
    with kube_cluster.client(namespace=kube_namespace) as client:
        created = client.create(resource.from_dict(scripted_model_api("m")))  # type: ignore[arg-type]
        patched = client.patch(resource.Status, "m", {"status": status}, patch_type=PatchType.MERGE)
        assert patched.status == status
        assert patched.metadata.generation == created.metadata.generation  # a status write is no new generation
        # Through the main resource, status is ignored; the spec change bumps the generation.
        client.patch(
            resource,
            "m",
            {"spec": {"scriptedConfig": {"script": []}}, "status": {"phase": "Failed"}},
            patch_type=PatchType.MERGE,
        )
        served = client.get(resource, "m")
    assert served.status["phase"] == "Ready"
    assert served.spec["scriptedConfig"] == {"script": []}
    assert served.metadata.generation == created.metadata.generation + 1
    assert ModelAPI.model_validate(served.to_dict()).status == ResourceStatus.model_validate(status)
    row = kube_cluster.kubectl("get", "modelapi", "m", "-n", kube_namespace, "-o", "wide").stdout.splitlines()[1]
    assert row.split()[:4] == ["m", "Scripted", "Ready", "http://modelapi-m.ns.svc:8000"]


def without_empty_strings(value: object) -> object:
    """``value`` with every ``""`` member of a mapping left out, at any depth."""
    if isinstance(value, dict):
        return {key: without_empty_strings(item) for key, item in value.items() if item != ""}
    if isinstance(value, list):
        return [without_empty_strings(item) for item in value]
    return value


def test_status_from_the_models_is_accepted_once_empty_strings_are_left_out(
    kube_cluster: KubeCluster, kube_namespace: str
):
    """What the operator will write: ``ResourceStatus`` as the models dump it. Its defaults include ``message: ""``
    (status and conditions), and this 1.20 server refuses an empty string anywhere in a status write (merge patch,
    JSON patch, server-side apply or update alike; the same value in ``spec`` is accepted) with a 422 that calls it
    "null". Leaving empty strings out round-trips to the same ``ResourceStatus``, since ``""`` is the default."""
    resource = kora_resource("ModelAPI")
    model = ResourceStatus.model_validate(
        {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False", "reason": "Starting"}]}
    )
    status = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert status["message"] == ""
    with kube_cluster.client(namespace=kube_namespace) as client:
        client.create(resource.from_dict(scripted_model_api("m")))  # type: ignore[arg-type]
        error = api_error(lambda: client.patch(resource.Status, "m", {"status": status}, patch_type=PatchType.MERGE))
        assert error.status.code == 422
        assert "status.message" in error.status.message
        patched = client.patch(
            resource.Status, "m", {"status": without_empty_strings(status)}, patch_type=PatchType.MERGE
        )
    assert ResourceStatus.model_validate(patched.status) == model


# --- invalid resources --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "spec", "field", "reason"),
    [
        ("ModelAPI", {"mode": "Bogus"}, "spec.mode", "Unsupported value"),
        ("Agent", {"modelAPI": "m", "model": 5}, "spec.model", "must be of type string"),
        (
            "Agent",
            {"modelAPI": "m", "model": "x", "config": {"agenticLoop": {"maxSteps": "five"}}},
            "spec.config.agenticLoop.maxSteps",
            "must be of type integer",
        ),
        ("MCPServer", {"type": "carrier-pigeon"}, "spec.type", "Unsupported value"),
    ],
)
def test_an_invalid_resource_is_refused_with_a_readable_422(
    kube_cluster: KubeCluster, kube_namespace: str, kind: str, spec: dict, field: str, reason: str
):
    resource = kora_resource(kind)
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "bad"}, "spec": spec}
    with kube_cluster.client(namespace=kube_namespace) as client:
        error = api_error(lambda: client.create(resource.from_dict(body)))  # type: ignore[arg-type]
    assert error.status.code == 422
    assert error.status.reason == "Invalid"
    assert field in error.status.message, error.status.message
    assert reason in error.status.message, error.status.message
    # A user applying the manifest is told which field is wrong (by kubectl's own validation against the schema the
    # server publishes, for a wrong type; by the server's message, for a value outside an enum).
    applied = kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", "-", stdin=yaml.safe_dump(body), check=False)
    assert applied.returncode != 0
    assert field in applied.stderr, applied.stderr


def test_a_resource_without_spec_is_refused(kube_cluster: KubeCluster, kube_namespace: str):
    resource = kora_resource("Agent")
    body = {"apiVersion": API_VERSION, "kind": "Agent", "metadata": {"name": "empty"}}
    with kube_cluster.client(namespace=kube_namespace) as client:
        error = api_error(lambda: client.create(resource.from_dict(body)))  # type: ignore[arg-type]
    assert error.status.code == 422
    assert "spec: Required value" in error.status.message


# --- Gateway API --------------------------------------------------------------------------------------------


def test_an_httproute_with_prefix_rewrite_and_timeout_round_trips(kube_cluster: KubeCluster, kube_namespace: str):
    """The gateway's route shape: ``/{namespace}/agent/{name}/...`` with the prefix stripped."""
    prefix = f"/{kube_namespace}/agent/assistant"
    spec = {
        "parentRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "kora", "namespace": "kora-system"}
        ],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
                    }
                ],
                "backendRefs": [{"name": "agent-assistant", "port": 8000}],
                "timeouts": {"request": "300s"},
            }
        ],
    }
    body = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "agent-assistant"},
        "spec": spec,
    }
    with kube_cluster.client(namespace=kube_namespace) as client:
        client.create(HTTPRoute.from_dict(body))  # type: ignore[arg-type]
        served = client.get(HTTPRoute, "agent-assistant").to_dict()["spec"]
    rule = served["rules"][0]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": prefix}}]
    assert rule["filters"] == spec["rules"][0]["filters"]
    assert rule["timeouts"] == {"request": "300s"}
    assert served["parentRefs"] == spec["parentRefs"]
    assert rule["backendRefs"][0]["name"] == "agent-assistant"
    assert rule["backendRefs"][0]["port"] == 8000


# --- harness helpers ----------------------------------------------------------------------------------------


def deployment(name: str) -> Deployment:
    labels = {"app": name}
    return Deployment.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "kora:test"}]},
                },
            },
        }
    )


def test_a_deployment_can_be_marked_available(kube_cluster: KubeCluster, kube_namespace: str):
    with kube_cluster.client(namespace=kube_namespace) as client:
        client.create(deployment("web"))
        marked = kube_cluster.mark_deployment_available("web", kube_namespace)
        served = client.get(Deployment, "web")
    for status in (marked.status, served.status):
        assert status is not None
        assert (status.replicas, status.readyReplicas, status.availableReplicas, status.updatedReplicas) == (2, 2, 2, 2)
        assert status.observedGeneration == served.metadata.generation
        assert {(c.type, c.status) for c in status.conditions or []} >= {("Available", "True")}


async def test_a_deployment_can_be_marked_available_from_async_code(kube_cluster: KubeCluster, kube_namespace: str):
    client = kube_cluster.async_client(namespace=kube_namespace)
    try:
        await client.create(deployment("web"))
        marked = await kube_cluster.mark_deployment_available_async("web", kube_namespace)
        served = await client.get(Deployment, "web")
    finally:
        await client.close()
    assert marked.status is not None
    assert marked.status.availableReplicas == 2
    assert served.status is not None
    assert served.status.readyReplicas == 2


async def test_owned_objects_are_garbage_collected(kube_cluster: KubeCluster, kube_namespace: str):
    """The controller-manager's garbage collector runs and knows Kora's kinds: what the operator creates goes with
    its owner."""
    resource = kora_resource("ModelAPI")
    client = kube_cluster.async_client(namespace=kube_namespace)
    try:
        owner = await client.create(resource.from_dict(scripted_model_api("m")))  # type: ignore[arg-type]
        reference = {"apiVersion": API_VERSION, "kind": "ModelAPI", "name": "m", "uid": owner.metadata.uid}
        await client.create(ConfigMap.from_dict({"metadata": {"name": "owned", "ownerReferences": [reference]}}))
        await client.delete(resource, "m")

        async def gone() -> bool:
            try:
                await client.get(ConfigMap, "owned")
            except ApiError as error:
                return error.status.code == 404
            return False

        await eventually(gone, "the owned ConfigMap deleted", within=30.0)
    finally:
        await client.close()


def alive(pid: int) -> bool:
    """Is ``pid`` a running process (not a zombie waiting to be reaped)?"""
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return bool(cmdline.read_bytes())
    except OSError:
        return False


def control_plane_pids(directory: Path) -> list[int]:
    return [int((directory / f"{name}.pid").read_text()) for name in ("etcd", "apiserver", "kcm", "watcher")]


@pytest.mark.slow  # a second control plane of its own
def test_stopping_a_control_plane_leaves_no_process(tmp_path: Path):
    with start_kube_cluster(tmp_path, controllers="namespace", install_crds=False) as cluster:
        pids = control_plane_pids(tmp_path)
        assert all(alive(pid) for pid in pids)
        assert "kube-system" in cluster.kubectl("get", "namespaces", "-o", "name").stdout
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.slow  # a second control plane of its own
async def test_a_control_plane_whose_owner_dies_stops_by_itself(tmp_path: Path):
    """A test run that crashes before its teardown leaves nothing running: the OWNER_PID watcher stops it."""
    owner = (
        "import sys; from pathlib import Path; "
        "from tests.support.kube import build_control_plane, start_control_plane; "
        "start_control_plane(Path(sys.argv[1]), build_control_plane(), controllers='namespace')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", owner, str(tmp_path), cwd=REPO_ROOT, env=env)
    assert await asyncio.wait_for(process.wait(), timeout=120) == 0
    pids = control_plane_pids(tmp_path)

    async def all_gone() -> bool:
        return not any(alive(pid) for pid in pids)

    await eventually(all_gone, "every process of the orphaned control plane gone", within=30.0)
