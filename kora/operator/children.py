"""Pure functions from one Kora resource to the Kubernetes objects the operator applies for it.

The operator renders the wiring's plan into Deployments, Services, HTTPRoutes (gateway routes with their timeouts) and
NetworkPolicies (strict gateway-only traffic); docs/operator.md "What it creates". Nothing here does I/O: the reconciler
calls :func:`child_manifests` and applies the result.

Every workload is planned by :func:`kora.resources.wiring.plan_workload` (:func:`plan_for`), the function ``kora
up`` plans its processes with, so the operator and the local runtime cannot disagree on a command, an
environment variable or a URL. Per resource (``<svc>`` is :func:`kora.resources.urls.service_name`, e.g.
``agent-helper``):

- ``ConfigMap <svc>`` when the plan has ``files`` (a scripted ModelAPI's ``script.json``), mounted read-only at
  :data:`FILES_DIR`, which is the container's ``workingDir`` so the plan's relative names resolve;
- ``PersistentVolumeClaim <svc>-data`` (:data:`DEFAULT_MEMORY_STORAGE_SIZE`, ReadWriteOnce) for a MemoryStore
  with local storage, mounted at :data:`MEMORY_DATA_ROOT`; the wiring puts ``MEMORY_SERVICE_DATA_DIR`` at
  ``<root>/<namespace>/<name>`` inside it. Such a Deployment runs one replica with strategy ``Recreate``
  (one Postgres data directory cannot have two writers, not even during a rollout);
- ``Service <svc>``: port 8000 -> the container port named ``http``;
- ``Deployment <svc>``: one container ``kora`` running the settings' image with the plan's ``args`` (the
  image's entrypoint is ``kora``) and ``env`` (literal values, Secrets as ``valueFrom.secretKeyRef``: a
  secret is never copied), liveness/readiness probes from the plan, non-root with no privilege escalation and
  no capabilities, no service-account token and no service-link variables;
- ``HTTPRoute <svc>`` (``gateway.networking.k8s.io/v1``) when Gateway API is enabled: PathPrefix
  :func:`kora.resources.urls.route_path` rewritten to ``/``, ``timeouts.request`` from the plan; for a
  MemoryStore only with ``spec.gatewayRoute.enabled`` (its agents reach it directly);
- ``NetworkPolicy <svc>`` when strict mode or ``NETWORK_POLICY_ENABLED`` is on: ingress on port 8000 only,
  from the Gateway's and the operator's namespaces (strict mode), or from the operator's namespace, the
  Gateway's when Gateway API is on, and Kora's workloads of the same namespace (``NETWORK_POLICY_ENABLED``).
  A MemoryStore's admits the operator's namespace, the Gateway's only when it is routed, and exactly its
  bound agents' pods (:data:`MEMORY_STORE_LABEL`), in either mode.

The credentials Secret of an Agent or MemoryStore (:func:`kora.resources.wiring.credentials_secret`, generated
tokens) is created once by the reconciler (:func:`credentials_manifest`) and never rewritten.

Every child carries the labels of :func:`child_labels`, an owner reference to the resource (so Kubernetes'
garbage collector deletes it with the resource) and a :data:`SPEC_HASH_ANNOTATION` over everything Kora sets,
so the reconciler can skip a write when the live object's hash matches (:func:`up_to_date`). The Gateway
(:func:`gateway_manifest`) lives in the Gateway's namespace and belongs to the installation, not to a
resource: it has no owner reference (an owner must be in the same namespace as what it owns).

Values in ``env`` and ``args`` have every ``$`` doubled: Kubernetes expands ``$(NAME)`` in both and turns
``$$`` into ``$``, so doubling makes a tool source or a prompt arrive exactly as written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from kora.core.tokens import new_token
from kora.operator.settings import OperatorSettings
from kora.resources import (
    API_VERSION,
    DEFAULT_PORT,
    MAX_DURATION_SECONDS,
    Agent,
    AnyResource,
    EnvEntry,
    MemoryStore,
    ModelAPI,
    Probes,
    WorkloadPlan,
    format_duration,
    plan_workload,
    resolve_hosted_model,
    route_path,
    task_store_problem,
)

__all__ = [
    "CHILD_KINDS",
    "CONTAINER_NAME",
    "DEFAULT_MEMORY_STORAGE_SIZE",
    "FILES_DIR",
    "MANAGED_BY",
    "MEMORY_DATA_ROOT",
    "PRUNABLE_KINDS",
    "SPEC_HASH_ANNOTATION",
    "ChildRef",
    "JsonObject",
    "child_label_selector",
    "child_labels",
    "child_manifests",
    "cluster_problems",
    "desired_children",
    "gateway_manifest",
    "owner_reference",
    "plan_for",
    "recorded_hash",
    "selector_labels",
    "spec_hash",
    "stale_children",
    "up_to_date",
]

#: A Kubernetes object (or part of one) as plain JSON.
JsonObject = dict[str, JsonValue]

APPS_V1 = "apps/v1"
CORE_V1 = "v1"
NETWORKING_V1 = "networking.k8s.io/v1"
GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_V1 = f"{GATEWAY_GROUP}/v1"

#: ``app.kubernetes.io/managed-by`` of every object the operator creates.
MANAGED_BY = "kora-operator"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PART_OF = "kora"
#: Annotation holding :func:`spec_hash` of what Kora set on the object.
SPEC_HASH_ANNOTATION = "kora.dev/spec-hash"
#: Pod-template annotation: hash of the ConfigMap's files, so a changed script restarts the pods that read it.
FILES_HASH_ANNOTATION = "kora.dev/files-hash"
KIND_LABEL = "kora.dev/kind"
NAME_LABEL = "kora.dev/name"
#: Label every namespace carries with its own name (set by the API server from Kubernetes 1.21 on).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: Label of a bound Agent's pods naming its MemoryStore: the store's NetworkPolicy admits exactly these pods.
MEMORY_STORE_LABEL = "kora.dev/memorystore"

#: Name of the one container of every workload.
CONTAINER_NAME = "kora"
PORT_NAME = "http"
#: Where a plan's ``files`` are mounted; the container's working directory.
FILES_DIR = "/etc/kora/files"
#: Mount point of a local-storage MemoryStore's volume (the wiring's ``data_root``).
MEMORY_DATA_ROOT = Path("/var/lib/kora/memory")
#: Size of a local-storage MemoryStore's volume (the MemoryStore spec has no size field).
DEFAULT_MEMORY_STORAGE_SIZE = "1Gi"
#: User, group and volume group of every workload (any non-root id works; the image needs no user of its own).
WORKLOAD_UID = 10001
#: The one writable directory of every workload's read-only root filesystem (an emptyDir), and its ``HOME``:
#: temporary files, the embedded Postgres's lock (and its socket when the data directory's path is too long for
#: one), caches a library keeps under ``HOME``. A local-storage MemoryStore writes its data on its own volume.
SCRATCH_DIR = "/tmp"
_FILES_VOLUME = "files"
_DATA_VOLUME = "data"
_SCRATCH_VOLUME = "tmp"

#: ``(apiVersion, kind)`` of every object a resource may own, in apply order.
CHILD_KINDS: tuple[tuple[str, str], ...] = (
    (CORE_V1, "ConfigMap"),
    (CORE_V1, "PersistentVolumeClaim"),
    (CORE_V1, "Service"),
    (APPS_V1, "Deployment"),
    (GATEWAY_V1, "HTTPRoute"),
    (NETWORKING_V1, "NetworkPolicy"),
)
#: Kinds :func:`stale_children` may name. A PersistentVolumeClaim holds data: an edit of the spec (local ->
#: external storage) never deletes it; deleting the MemoryStore does, through the owner reference.
PRUNABLE_KINDS: frozenset[tuple[str, str]] = frozenset(CHILD_KINDS) - {(CORE_V1, "PersistentVolumeClaim")}


@dataclass(frozen=True, order=True)
class ChildRef:
    """Identity of one child object: ``(apiVersion, kind, namespace, name)``."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, manifest: Mapping[str, object]) -> ChildRef:
        """The identity of a manifest (``KeyError``/``TypeError`` when it has no apiVersion, kind or name)."""
        metadata = manifest["metadata"]
        if not isinstance(metadata, Mapping):
            raise TypeError("manifest metadata is not an object")
        return cls(
            str(manifest["apiVersion"]), str(manifest["kind"]), str(metadata["namespace"]), str(metadata["name"])
        )

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


# --- labels, owner, hash ---------------------------------------------------------------------------------


def selector_labels(resource: AnyResource) -> dict[str, str]:
    """The labels that select a resource's pods: ``kora.dev/kind`` and ``kora.dev/name``. They never change for
    a resource, as a Deployment's selector may not."""
    return {KIND_LABEL: resource.kind, NAME_LABEL: resource.name}


def bound_store(resource: AnyResource) -> str | None:
    """The MemoryStore an Agent is bound to (remote memory), else None."""
    if not isinstance(resource, Agent):
        return None
    memory = resource.spec.config.memory
    return memory.memory_store if memory.enabled and memory.type == "remote" else None


def child_labels(resource: AnyResource, plan: WorkloadPlan) -> dict[str, str]:
    """Labels of every child and pod: the recommended ``app.kubernetes.io/*`` (``name`` the kind's service
    prefix such as ``agent``, ``instance`` the service name, ``component`` the ``kora`` sub-command the pod
    runs, ``managed-by`` :data:`MANAGED_BY`, ``part-of`` ``kora``) plus :func:`selector_labels`; an Agent bound
    to a MemoryStore also :data:`MEMORY_STORE_LABEL` naming it, which the store's NetworkPolicy admits."""
    labels = {
        "app.kubernetes.io/name": resource.SERVICE_PREFIX,
        "app.kubernetes.io/instance": plan.service_name,
        "app.kubernetes.io/component": plan.args[0],
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": PART_OF,
        **selector_labels(resource),
    }
    store = bound_store(resource)
    if store is not None:
        labels[MEMORY_STORE_LABEL] = store
    return labels


def child_label_selector(resource: AnyResource) -> str:
    """Label selector (``k=v,k=v``) matching every child the operator made for ``resource``: list these and pass
    their :class:`ChildRef` to :func:`stale_children`."""
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **selector_labels(resource)}
    return ",".join(f"{key}={value}" for key, value in labels.items())


def owner_reference(resource: AnyResource) -> JsonObject:
    """The controller owner reference to ``resource`` (``kora.dev/v1alpha1``, with ``blockOwnerDeletion``: the
    operator's role needs ``update`` on ``<plural>/finalizers``).

    Raises ``ValueError`` when ``metadata.uid`` is missing: only an object read from the API server can own.
    """
    if not resource.metadata.uid:
        raise ValueError(f"{resource.kind} {resource.namespace}/{resource.name} has no metadata.uid")
    return {
        "apiVersion": API_VERSION,
        "kind": resource.kind,
        "name": resource.name,
        "uid": resource.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _canonical(value: JsonValue) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def spec_hash(manifest: Mapping[str, JsonValue]) -> str:
    """SHA-256 (hex) of the canonical JSON (sorted keys, no spaces) of ``manifest`` without its
    :data:`SPEC_HASH_ANNOTATION`: the annotation :func:`child_manifests` writes, computed the same way."""
    body: JsonObject = dict(manifest)
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and SPEC_HASH_ANNOTATION in annotations:
            rest = {key: value for key, value in annotations.items() if key != SPEC_HASH_ANNOTATION}
            trimmed: JsonObject = {key: value for key, value in metadata.items() if key != "annotations"}
            if rest:
                trimmed["annotations"] = rest
            body["metadata"] = trimmed
    return hashlib.sha256(_canonical(body)).hexdigest()


def _stamped(manifest: JsonObject) -> JsonObject:
    """``manifest`` with its :data:`SPEC_HASH_ANNOTATION` set (the manifest has no other annotations)."""
    digest = spec_hash(manifest)
    metadata = manifest["metadata"]
    assert isinstance(metadata, dict)  # every builder here writes metadata as an object
    metadata["annotations"] = {SPEC_HASH_ANNOTATION: digest}
    return manifest


def recorded_hash(obj: Mapping[str, object]) -> str | None:
    """The :data:`SPEC_HASH_ANNOTATION` of an object (a desired manifest or a live object such as kopf's body),
    or None."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(SPEC_HASH_ANNOTATION) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


def up_to_date(desired: Mapping[str, object], live: Mapping[str, object] | None) -> bool:
    """True when ``live`` exists and records the hash ``desired`` carries: nothing Kora sets has changed, so no
    write is needed. (Drift made by others under an unchanged hash is not seen; the drift timer's full apply is
    for that.)"""
    expected = recorded_hash(desired)
    return live is not None and expected is not None and recorded_hash(live) == expected


# --- planning ------------------------------------------------------------------------------------------------


def plan_for(
    resource: AnyResource,
    settings: OperatorSettings,
    model_api: ModelAPI | None = None,
    memory_store: MemoryStore | None = None,
) -> WorkloadPlan:
    """The wiring's plan of ``resource`` under the operator's settings: workload URLs from
    :meth:`OperatorSettings.workload_strategy`, public URLs (``status.endpoint``, the agent card) from
    :meth:`~OperatorSettings.public_strategy`, the chart's route timeouts, local MemoryStore data under
    :data:`MEMORY_DATA_ROOT`; an Agent's prices from its ``model_api`` when known, the chart's default budget for
    the fields its ``spec.config.budget`` leaves unset, and the database of a shared task store from its bound
    ``memory_store`` when known (an external store's connection Secret, as a ``secretKeyRef``)."""
    return plan_workload(
        resource,
        settings.workload_strategy(),
        public=settings.public_strategy(),
        timeouts=settings.route_timeouts,
        data_root=MEMORY_DATA_ROOT,
        model_api=model_api,
        budget_defaults=settings.budget_defaults,
        approval_defaults=settings.approval_defaults,
        memory_store=memory_store,
    )


def cluster_problems(resource: AnyResource, memory_store: MemoryStore | None = None) -> list[str]:
    """Why ``resource`` cannot run in a cluster although the models accept it (empty: it can): a scripted
    ModelAPI's ``scriptFile`` names a file on the machine that loaded the manifest (use ``script``); a Hosted
    ModelAPI names a model Hosted mode does not serve without ``modelPath`` (``kora up``'s message; whether
    ``modelPath`` holds the model only the pod can tell: ``kora model-hosted`` refuses it at start-up); an Agent
    sharing its tasks in its bound ``memory_store``'s Postgres (when known) where that Postgres is the store pod's
    own."""
    if isinstance(resource, Agent):
        problem = task_store_problem(resource, memory_store, embedded_postgres=False, data_root=MEMORY_DATA_ROOT)
        return [problem] if problem is not None else []
    if isinstance(resource, ModelAPI):
        config = resource.spec.scripted_config
        if config is not None and config.script_file is not None:
            return [
                "spec.scriptedConfig.scriptFile names a file on the machine that loaded the manifest, which a pod "
                "cannot read: give the rules inline as spec.scriptedConfig.script"
            ]
        hosted = resource.spec.hosted_config
        if hosted is not None:
            model = resolve_hosted_model(hosted.model, hosted.model_path)
            if isinstance(model, str):
                return [model]
    return []


def image_of(resource: AnyResource, settings: OperatorSettings) -> str:
    """The image of ``resource``'s workload: its ``spec.container.image``, else ``KORA_EMBEDDINGS_IMAGE`` for a
    Hosted ModelAPI (the variant with the embedding runtime), else ``KORA_IMAGE``."""
    if resource.spec.container.image is not None:
        return resource.spec.container.image
    if isinstance(resource, ModelAPI) and resource.spec.hosted_config is not None:
        return settings.embeddings_image
    return settings.kora_image


def _local_memory(resource: AnyResource) -> bool:
    return isinstance(resource, MemoryStore) and resource.spec.storage.type == "local"


def _data_claim_name(plan: WorkloadPlan) -> str:
    return f"{plan.service_name}-data"


# --- the children --------------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    # Kubernetes expands $(NAME) in env values and args and reads $$ as $; doubling keeps the text as written.
    return value.replace("$", "$$")


def _env_var(entry: EnvEntry) -> JsonObject:
    if entry.secret_key_ref is not None:
        ref = entry.secret_key_ref
        return {"name": entry.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
    assert entry.value is not None  # guaranteed by EnvEntry.__post_init__
    return {"name": entry.name, "value": _escape(entry.value)}


def _probe(path: str, period_seconds: int) -> JsonObject:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period_seconds,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }


def _probes(probes: Probes) -> JsonObject:
    return {"livenessProbe": _probe(probes.liveness, 10), "readinessProbe": _probe(probes.readiness, 5)}


def _metadata(resource: AnyResource, name: str, labels: Mapping[str, str]) -> JsonObject:
    return {
        "name": name,
        "namespace": resource.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner_reference(resource)],
    }


def _deployment(
    resource: AnyResource, settings: OperatorSettings, plan: WorkloadPlan, labels: dict[str, str]
) -> JsonObject:
    env: list[JsonValue] = [_env_var(entry) for entry in plan.env]
    if not any(entry.name == "HOME" for entry in plan.env):
        # A uid without an entry in the image's /etc/passwd gets HOME=/ from the runtime: read-only.
        env.append({"name": "HOME", "value": SCRATCH_DIR})
    container: JsonObject = {
        "name": CONTAINER_NAME,
        "image": image_of(resource, settings),
        "args": [_escape(arg) for arg in plan.args],
        "env": env,
        "ports": [{"name": PORT_NAME, "containerPort": plan.port, "protocol": "TCP"}],
        # A container that exits with an error leaves its last output in its status, where the operator reads
        # why a workload does not start (kora.operator.status.pod_failure).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **_probes(plan.probes),
        # What PodSecurity's "restricted" profile asks of a container, and a read-only root filesystem.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    if settings.kora_image_pull_policy is not None:
        container["imagePullPolicy"] = settings.kora_image_pull_policy
    volumes: list[JsonValue] = []
    mounts: list[JsonValue] = []
    template_metadata: JsonObject = {"labels": dict(labels)}
    if plan.files:
        volumes.append({"name": _FILES_VOLUME, "configMap": {"name": plan.service_name}})
        mounts.append({"name": _FILES_VOLUME, "mountPath": FILES_DIR, "readOnly": True})
        container["workingDir"] = FILES_DIR
        # A ConfigMap edit alone does not restart pods, and the workloads read their files at start.
        template_metadata["annotations"] = {
            FILES_HASH_ANNOTATION: hashlib.sha256(_canonical(dict(plan.files))).hexdigest()
        }
    local_memory = _local_memory(resource)
    if local_memory:
        volumes.append({"name": _DATA_VOLUME, "persistentVolumeClaim": {"claimName": _data_claim_name(plan)}})
        mounts.append({"name": _DATA_VOLUME, "mountPath": str(MEMORY_DATA_ROOT)})
    volumes.append({"name": _SCRATCH_VOLUME, "emptyDir": {}})
    mounts.append({"name": _SCRATCH_VOLUME, "mountPath": SCRATCH_DIR})
    container["volumeMounts"] = mounts
    pod_spec: JsonObject = {
        "containers": [container],
        "automountServiceAccountToken": False,
        # Service links add ~7 variables per Service of the namespace to every pod; the wiring passes URLs itself.
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKLOAD_UID,
            "runAsGroup": WORKLOAD_UID,
            "fsGroup": WORKLOAD_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": volumes,
    }
    spec: JsonObject = {
        "replicas": 1 if local_memory else plan.replicas,
        "selector": {"matchLabels": dict(selector_labels(resource))},
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    if local_memory:
        spec["strategy"] = {"type": "Recreate"}
    return {
        "apiVersion": APPS_V1,
        "kind": "Deployment",
        "metadata": _metadata(resource, plan.service_name, labels),
        "spec": spec,
    }


def _service(resource: AnyResource, plan: WorkloadPlan, labels: dict[str, str]) -> JsonObject:
    return {
        "apiVersion": CORE_V1,
        "kind": "Service",
        "metadata": _metadata(resource, plan.service_name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector_labels(resource)),
            "ports": [{"name": PORT_NAME, "port": DEFAULT_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def _config_map(resource: AnyResource, plan: WorkloadPlan, labels: dict[str, str]) -> JsonObject:
    return {
        "apiVersion": CORE_V1,
        "kind": "ConfigMap",
        "metadata": _metadata(resource, plan.service_name, labels),
        "data": {name: plan.files[name] for name in sorted(plan.files)},
    }


def _data_claim(resource: AnyResource, plan: WorkloadPlan, labels: dict[str, str]) -> JsonObject:
    return {
        "apiVersion": CORE_V1,
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(resource, _data_claim_name(plan), labels),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": DEFAULT_MEMORY_STORAGE_SIZE}},
        },
    }


def _http_route(
    resource: AnyResource, settings: OperatorSettings, plan: WorkloadPlan, labels: dict[str, str]
) -> JsonObject:
    # The Gateway API format stops at 99999h59m59s999ms; a longer timeout (four 99999h parts) is that in effect.
    timeout = format_duration(min(plan.route_timeout_seconds, MAX_DURATION_SECONDS))
    return {
        "apiVersion": GATEWAY_V1,
        "kind": "HTTPRoute",
        "metadata": _metadata(resource, plan.service_name, labels),
        "spec": {
            "parentRefs": [
                {
                    "group": GATEWAY_GROUP,
                    "kind": "Gateway",
                    "name": settings.gateway_name,
                    "namespace": settings.gateway_namespace,
                }
            ],
            "rules": [
                {
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": route_path(plan.kind, plan.namespace, plan.name)}}
                    ],
                    "filters": [
                        {
                            "type": "URLRewrite",
                            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
                        }
                    ],
                    # No "group": the core group is its default, and a 1.20 API server reads an explicit "" as null.
                    "backendRefs": [{"kind": "Service", "name": plan.service_name, "port": DEFAULT_PORT}],
                    "timeouts": {"request": timeout},
                }
            ],
        },
    }


def policy_namespaces(settings: OperatorSettings) -> list[str]:
    """The namespaces whose pods the workloads' NetworkPolicies admit (selected by :data:`NAMESPACE_NAME_LABEL`),
    sorted: the operator's, and the Gateway's in strict mode or with Gateway API; none when no NetworkPolicy is
    made (neither ``NETWORK_POLICY_ENABLED`` nor strict mode)."""
    if not settings.network_policies:
        return []
    namespaces = {settings.operator_namespace}
    if settings.strict_gateway_api_enabled or settings.gateway_api_enabled:
        namespaces.add(settings.gateway_namespace)
    return sorted(namespaces)


def _namespace_peer(namespace: str) -> JsonObject:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _network_policy(
    resource: AnyResource, settings: OperatorSettings, plan: WorkloadPlan, labels: dict[str, str]
) -> JsonObject:
    """The NetworkPolicy of one workload: ingress to its pods only on TCP 8000, only from

    - strict mode: the Gateway's namespace and the operator's (selected by :data:`NAMESPACE_NAME_LABEL`), so
      workloads reach each other through the Gateway only;
    - ``NETWORK_POLICY_ENABLED`` without strict mode: the operator's namespace, the Gateway's when Gateway API
      is enabled, and every Kora workload of the same namespace (pods labelled ``app.kubernetes.io/part-of:
      kora`` and ``managed-by: kora-operator``), which reach each other directly by Service DNS; other pods of
      the namespace are refused.

    Egress is not restricted (agents call model backends and tools anywhere). A Gateway in the workloads' own
    namespace admits that whole namespace; a gateway implementation that runs its proxies in another namespace
    than the Gateway object's needs that namespace admitted (not configurable yet). The label is set by the API
    server from Kubernetes 1.21; on 1.20 the operator sets it on :func:`policy_namespaces` (the reconciler).
    """
    namespaces = {settings.operator_namespace}
    routed = plan.gateway_route and (settings.strict_gateway_api_enabled or settings.gateway_api_enabled)
    if routed:
        namespaces.add(settings.gateway_namespace)
    peers: list[JsonValue] = [_namespace_peer(namespace) for namespace in sorted(namespaces)]
    if isinstance(resource, MemoryStore):
        # Exactly its bound agents (pods of this namespace labelled with its name), in either mode.
        agents: JsonObject = {MEMORY_STORE_LABEL: resource.metadata.name, MANAGED_BY_LABEL: MANAGED_BY}
        peers.append({"podSelector": {"matchLabels": agents}})
    elif not settings.strict_gateway_api_enabled:
        workloads = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": PART_OF}
        peers.append({"podSelector": {"matchLabels": dict(workloads)}})
    return {
        "apiVersion": NETWORKING_V1,
        "kind": "NetworkPolicy",
        "metadata": _metadata(resource, plan.service_name, labels),
        "spec": {
            "podSelector": {"matchLabels": dict(selector_labels(resource))},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": plan.port}]}],
        },
    }


def child_manifests(
    resource: AnyResource, settings: OperatorSettings, plan: WorkloadPlan | None = None
) -> list[JsonObject]:
    """Every object ``resource`` should own, in apply order (ConfigMap, PersistentVolumeClaim, Service,
    Deployment, HTTPRoute, NetworkPolicy; those that do not apply are left out), each with labels, owner
    reference and :data:`SPEC_HASH_ANNOTATION`. ``plan`` defaults to :func:`plan_for`; pass it when the caller
    has one (the reconciler also needs ``plan.public_url`` for ``status.endpoint``).

    Deterministic: equal inputs give equal output, byte for byte once serialised. Raises ``ValueError`` only for
    a resource without ``metadata.uid`` (:func:`owner_reference`).
    """
    plan = plan if plan is not None else plan_for(resource, settings)
    labels = child_labels(resource, plan)
    children: list[JsonObject] = []
    if plan.files:
        children.append(_config_map(resource, plan, labels))
    if _local_memory(resource):
        children.append(_data_claim(resource, plan, labels))
    children.append(_service(resource, plan, labels))
    children.append(_deployment(resource, settings, plan, labels))
    if settings.gateway_api_enabled and plan.gateway_route:
        children.append(_http_route(resource, settings, plan, labels))
    if settings.network_policies:
        children.append(_network_policy(resource, settings, plan, labels))
    return [_stamped(child) for child in children]


def desired_children(resource: AnyResource, settings: OperatorSettings) -> list[ChildRef]:
    """The identities of :func:`child_manifests` (same order)."""
    return [ChildRef.of(child) for child in child_manifests(resource, settings)]


def stale_children(resource: AnyResource, settings: OperatorSettings, existing: Iterable[ChildRef]) -> list[ChildRef]:
    """The objects of ``existing`` (found with :func:`child_label_selector`) that ``resource`` no longer needs,
    sorted: an HTTPRoute after Gateway API was turned off, a ConfigMap after an inline script went away. Only
    :data:`PRUNABLE_KINDS` are named: a PersistentVolumeClaim goes with its MemoryStore only."""
    desired = set(desired_children(resource, settings))
    return sorted(ref for ref in set(existing) if (ref.api_version, ref.kind) in PRUNABLE_KINDS and ref not in desired)


def credentials_manifest(resource: AnyResource, name: str, keys: Iterable[str]) -> JsonObject:
    """The credentials Secret ``name`` of ``resource``: a fresh token (:func:`kora.core.tokens.new_token`) per key,
    owned by ``resource`` (deleted with it). Created only when absent: the tokens are random, so this manifest is
    never re-applied over an existing Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(
            resource, name, {**selector_labels(resource), "app.kubernetes.io/managed-by": MANAGED_BY}
        ),
        "type": "Opaque",
        "stringData": {key: new_token() for key in keys},
    }


def gateway_manifest(settings: OperatorSettings) -> JsonObject | None:
    """The Gateway to create when ``GATEWAY_CREATE`` is on (else None): ``GATEWAY_NAME`` in ``GATEWAY_NAMESPACE``
    of class ``GATEWAY_CLASS_NAME``, one HTTP listener on ``GATEWAY_LISTENER_PORT`` admitting routes from every
    namespace. Without an owner reference: it serves every resource and outlives each (delete it with the
    installation); it carries :data:`SPEC_HASH_ANNOTATION` like the children."""
    if not settings.gateway_create:
        return None
    manifest: JsonObject = {
        "apiVersion": GATEWAY_V1,
        "kind": "Gateway",
        "metadata": {
            "name": settings.gateway_name,
            "namespace": settings.gateway_namespace,
            "labels": {
                "app.kubernetes.io/name": "gateway",
                "app.kubernetes.io/managed-by": MANAGED_BY,
                "app.kubernetes.io/part-of": PART_OF,
            },
        },
        "spec": {
            "gatewayClassName": settings.gateway_class_name,
            "listeners": [
                {
                    "name": PORT_NAME,
                    "protocol": "HTTP",
                    "port": settings.gateway_listener_port,
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }
            ],
        },
    }
    return _stamped(manifest)
