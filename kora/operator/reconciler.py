"""The reconcile loop: make each resource's children and status match its spec, writing only what differs.

The kopf handlers of
:mod:`kora.operator.main` feed :meth:`Reconciler.observe` (Kora resources) and
:meth:`Reconciler.observe_deployment` (the Deployments the operator made) from their watches; both only
update an in-memory view and queue keys (:class:`kora.operator.queue.WorkQueue`). A worker then reconciles
one resource from that view:

1. A spec the models refuse (a cluster without the admission webhook lets it through) gives phase ``Failed``
   with the same message ``kora up`` prints; nothing else is touched.
2. Its dependencies (:func:`kora.resources.graph.dependencies_of`) are looked up in the view. An Agent whose
   dependencies are not all Ready and that has no Deployment yet stays ``Waiting`` with nothing created, so it
   never starts without its model, tools, peers or (``waitForDependencies``) memory.
3. Children (:func:`kora.operator.children.child_manifests`) are applied when their content hash differs from
   the one the object carries; children the resource no longer needs are deleted.
4. The status (:func:`kora.operator.status.compute_status`) is written when it differs from the one shown.

Nothing is written when nothing changed: content hashes of children already checked are remembered (and read
from the API server, not written, when not), and statuses are compared before writing. An index of who
references whom (``dependants``) wakes exactly the resources waiting on one whose phase changed. A resync every
``resync_seconds`` forgets what was remembered and reconciles everything, which repairs drift (a child edited or
deleted by hand).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from lightkube import ApiError
from opentelemetry import trace
from pydantic import ValidationError

from kora.operator.children import (
    NAMESPACE_NAME_LABEL,
    PRUNABLE_KINDS,
    SPEC_HASH_ANNOTATION,
    ChildRef,
    child_manifests,
    cluster_problems,
    credentials_manifest,
    gateway_manifest,
    plan_for,
    policy_namespaces,
    recorded_hash,
    stale_children,
)
from kora.operator.kube import Kube
from kora.operator.metrics import Outcome, record_reconcile
from kora.operator.queue import WorkQueue
from kora.operator.reachability import probe
from kora.operator.settings import OperatorSettings
from kora.operator.status import (
    Dependency,
    DeploymentState,
    JsonObject,
    compute_status,
    failed_status,
    parse_status,
    status_body,
)
from kora.resources import (
    RESOURCE_CLASSES,
    Agent,
    AnyResource,
    Kind,
    MemoryStore,
    ModelAPI,
    Phase,
    ResourceRef,
    credentials_secret,
    dependencies_of,
    describe_resource_error,
    references_of,
    service_name,
)

log = logging.getLogger(__name__)
# The global tracer: a no-op until `kora operator` has set up telemetry with an OTLP endpoint.
_tracer = trace.get_tracer(__name__)

#: Default seconds between full resyncs (drift repair).
RESYNC_SECONDS = 300.0


@dataclass
class Observed:
    """A Kora resource as last seen: its raw ``body``, and its ``model`` or the ``error`` that refused it."""

    body: JsonObject
    model: AnyResource | None
    error: str | None

    @property
    def phase(self) -> Phase | None:
        """``status.phase`` as shown (None before the first status)."""
        status = parse_status(self.body)
        return status.phase if status is not None else None

    @property
    def exposed(self) -> bool:
        """For an Agent: ``agentNetwork.expose``; True for other kinds."""
        return not isinstance(self.model, Agent) or self.model.spec.agent_network.expose


def _ref_of(kind: str, body: Mapping[str, object]) -> ResourceRef:
    metadata = body.get("metadata")
    assert isinstance(metadata, Mapping)
    return ResourceRef(kind, str(metadata.get("namespace") or "default"), str(metadata.get("name")))


def parse(kind: str, body: JsonObject) -> Observed:
    """``body`` of a ``kind`` resource validated by Kora's models."""
    try:
        model = RESOURCE_CLASSES[kind].model_validate(body)
    except ValidationError as error:
        return Observed(body, None, describe_resource_error(error))
    return Observed(body, model, None)


class Reconciler:
    """Reconciles Kora resources through ``kube`` under ``settings``; :meth:`run` until cancelled."""

    def __init__(
        self, kube: Kube, settings: OperatorSettings, *, workers: int = 4, resync_seconds: float = RESYNC_SECONDS
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.resync_seconds = resync_seconds
        self.queue: WorkQueue[ResourceRef] = WorkQueue(self.reconcile, workers=workers)
        self.resources: dict[ResourceRef, Observed] = {}
        #: Deployment status per owner (None: known absent); a missing key means "not known yet".
        self.deployments: dict[ResourceRef, JsonObject | None] = {}
        #: Content hash a child is known to carry ("" : present without a hash, None: known absent).
        self.children: dict[ChildRef, str | None] = {}
        self.dependants: dict[ResourceRef, set[ResourceRef]] = {}
        #: Per resource, per pod name of its workload: why that pod does not run (None: it runs or is starting).
        self.pods: dict[ResourceRef, dict[str, str | None]] = {}
        #: Per Agent, per running pod: its address (:func:`kora.operator.reachability.pod_address`).
        self.addresses: dict[ResourceRef, dict[str, str]] = {}
        #: Per Agent bound to a MemoryStore: why one of its pods last said it cannot reach the store (None: they
        #: reach it). A missing key: no pod answered yet.
        self.memory_reach: dict[ResourceRef, str | None] = {}
        self._references: dict[ResourceRef, set[ResourceRef]] = {}
        #: Resources read from the API server because the watch had not shown them, and found absent: not read
        #: again until the watch shows them or a resync forgets this (a missing dependency costs one read).
        self._absent: set[ResourceRef] = set()
        #: Namespaces of :func:`policy_namespaces` found carrying their name label (never checked again).
        self._labelled: set[str] = set()
        #: Credentials Secrets known to exist (created, or found); forgotten on resync and when a resource goes.
        self._credentials: set[ChildRef] = set()

    # -- input from the watches -------------------------------------------------------------------------------

    def observe(self, kind: str, body: JsonObject, *, deleted: bool = False) -> None:
        """A Kora resource was listed, added, modified or (``deleted``) removed."""
        ref = _ref_of(kind, body)
        before = self.resources.get(ref)
        if deleted:
            self.resources.pop(ref, None)
            self._set_references(ref, set())
            self.deployments.pop(ref, None)
            self.memory_reach.pop(ref, None)
            self.children = {key: value for key, value in self.children.items() if not _owned_by(key, ref)}
            self._credentials = {key for key in self._credentials if not _owned_by(key, ref)}
            after = None
        else:
            after = parse(kind, body)
            self.resources[ref] = after
            self._absent.discard(ref)
            references = {target for _, target in references_of(after.model)} if after.model is not None else set()
            self._set_references(ref, references)
            self.queue.add(ref)
        # Those that wait on this resource only care about its phase, its existence, whether it is exposed and (a
        # ModelAPI's agents) its prices.
        signature_before = None if before is None else (before.phase, before.exposed, _pricing(before))
        signature_after = None if after is None else (after.phase, after.exposed, _pricing(after))
        if signature_before != signature_after:
            for dependant in self.dependants.get(ref, ()):
                self.queue.add(dependant)

    def observe_deployment(self, owner: ResourceRef, status: JsonObject | None) -> None:
        """The Deployment of ``owner`` changed (``status`` None: it was deleted)."""
        if self.deployments.get(owner, ...) == status:
            return
        self.deployments[owner] = status
        if status is None:
            self.children.pop(
                ChildRef("apps/v1", "Deployment", owner.namespace, service_name(owner.kind, owner.name)), None
            )
        self.queue.add(owner)

    def observe_pod(
        self, owner: ResourceRef, pod: str, failure: str | None, *, deleted: bool = False, address: str | None = None
    ) -> None:
        """A pod of ``owner``'s workload changed: ``failure`` is :func:`kora.operator.status.pod_failure` of its
        status (``deleted``: it is gone), ``address`` where it serves while it runs (an Agent's pods are asked
        whether they reach their memory store, :meth:`probe_memory`). When that changes what ``owner`` reports,
        ``owner`` and those waiting on it are reconciled, so a crash-looping tool server is named in its own status
        and its Agents'."""
        addresses = self.addresses.setdefault(owner, {})
        if deleted or address is None:
            addresses.pop(pod, None)
        else:
            addresses[pod] = address
        if not addresses:
            del self.addresses[owner]
            if self.memory_reach.pop(owner, None) is not None:
                self.queue.add(owner)  # no pod left to say it cannot reach its store
        before = self.pod_failure(owner)
        pods = self.pods.setdefault(owner, {})
        if deleted:
            pods.pop(pod, None)
        else:
            pods[pod] = failure
        if not pods:
            del self.pods[owner]
        if self.pod_failure(owner) != before:
            self.queue.add(owner)
            for dependant in self.dependants.get(owner, ()):
                self.queue.add(dependant)

    def pod_failure(self, owner: ResourceRef) -> str | None:
        """Why a pod of ``owner``'s workload does not run (the first by pod name), None when none is failing."""
        return next((failure for _, failure in sorted(self.pods.get(owner, {}).items()) if failure), None)

    def _set_references(self, ref: ResourceRef, targets: set[ResourceRef]) -> None:
        for old in self._references.get(ref, set()) - targets:
            self.dependants.get(old, set()).discard(ref)
        for new in targets:
            self.dependants.setdefault(new, set()).add(ref)
        self._references[ref] = targets

    # -- running ------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Create the Gateway (``GATEWAY_CREATE``) and label the NetworkPolicies' namespaces
        (:meth:`label_namespaces`), then reconcile queued resources and resync every ``resync_seconds`` until
        cancelled."""
        await self.label_namespaces()
        gateway = gateway_manifest(self.settings)
        if gateway is not None:
            try:
                await self._ensure(gateway)
            except ApiError as error:
                log.error("cannot create the Gateway %s: %s", ChildRef.of(gateway), error)
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run(), name="reconcile-queue")
            group.create_task(self._resync_forever(), name="reconcile-resync")
            group.create_task(self.probe_memory_forever(), name="memory-probe")

    async def probe_memory_forever(self) -> None:
        """Every ``AGENT_MEMORY_PROBE_SECONDS``, :meth:`probe_memory` (until cancelled)."""
        # Pod IPs are reached directly, never through a proxy the operator's environment may name.
        async with httpx.AsyncClient(trust_env=False) as client:
            while True:
                try:
                    await self.probe_memory(client)
                except Exception:  # a probe's own bug must not end the reconciler's task group
                    log.exception("memory reachability probe failed; trying again next period")
                await asyncio.sleep(self.settings.agent_memory_probe_seconds)

    async def probe_memory(self, client: httpx.AsyncClient) -> None:
        """Ask every running pod of each Agent bound to a MemoryStore whether it reaches the store
        (:func:`kora.operator.reachability.probe`) and reconcile the Agents whose answer changed. An Agent none of
        whose pods answered keeps what it said last (a pod that is starting or going says nothing)."""
        for ref in sorted(self.addresses, key=str):
            observed = self.resources.get(ref)
            if observed is None or _bound_store(observed.model) is None:
                self.memory_reach.pop(ref, None)
                continue
            reach = await probe(client, list(self.addresses.get(ref, {}).values()))
            if reach.answered == 0:
                continue
            if self.memory_reach.get(ref, ...) != reach.unreachable:
                if reach.unreachable is not None:
                    log.info("%s cannot reach its MemoryStore: %s", ref, reach.unreachable)
                self.memory_reach[ref] = reach.unreachable
                self.queue.add(ref)

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            await self.label_namespaces()
            self.resync()

    async def label_namespaces(self) -> None:
        """Give each namespace the NetworkPolicies admit (:func:`policy_namespaces`) the label they select it by,
        :data:`NAMESPACE_NAME_LABEL` with its own name, when it lacks it.

        The API server sets that label on every namespace from Kubernetes 1.21; on 1.20 nothing does, and the
        policies would admit nobody, the Gateway included. The value is the one 1.21 sets, so an upgrade changes
        nothing. A namespace found labelled is not read again; one that does not exist yet, or that the operator
        may not label (RBAC), is logged and tried again at the next resync.
        """
        for namespace in policy_namespaces(self.settings):
            if namespace in self._labelled:
                continue
            try:
                written = await self.kube.label_namespace(namespace, NAMESPACE_NAME_LABEL, namespace)
            except ApiError as error:
                log.error(
                    "cannot label namespace %s with %s=%s, which the NetworkPolicies select it by "
                    "(Kubernetes 1.20 does not set it): %s",
                    namespace,
                    NAMESPACE_NAME_LABEL,
                    namespace,
                    error,
                )
                continue
            if written is None:
                log.warning("namespace %s, which the NetworkPolicies admit, does not exist (yet)", namespace)
                continue
            if written:
                log.info("labelled namespace %s with %s=%s", namespace, NAMESPACE_NAME_LABEL, namespace)
            self._labelled.add(namespace)

    def resync(self) -> None:
        """Forget remembered child hashes and Deployment states and reconcile every resource."""
        self.children.clear()
        self.deployments.clear()
        self._absent.clear()
        self._credentials.clear()
        for ref in self.resources:
            self.queue.add(ref)

    # -- one reconcile ------------------------------------------------------------------------------------------

    async def reconcile(self, ref: ResourceRef) -> None:
        """Make ``ref``'s children and status match its spec (module docstring)."""
        observed = self.resources.get(ref)
        if observed is None:
            return  # deleted: the garbage collector removes its children through their owner references
        attributes = {
            "k8s.namespace.name": ref.namespace,
            "kora.resource.kind": ref.kind,
            "kora.resource.name": ref.name,
        }
        started = time.perf_counter()
        outcome: Outcome = "error"
        writes = 0
        try:
            # One span per reconcile; an exception (an API error the queue retries) ends it with status ERROR and
            # the exception recorded, as start_as_current_span does by default.
            with _tracer.start_as_current_span(f"reconcile {ref.kind}", attributes=attributes) as span:
                writes = await self._reconcile(ref, observed)
                span.set_attribute("kora.reconcile.writes", writes)
            outcome = "ok"
        finally:
            record_reconcile(ref.kind, time.perf_counter() - started, outcome, writes)
        log.debug("reconciled %s %s in %s: %d writes", ref.kind, ref.name, ref.namespace, writes)

    async def _reconcile(self, ref: ResourceRef, observed: Observed) -> int:
        previous = parse_status(observed.body)
        if observed.model is None:
            assert observed.error is not None
            failed = failed_status(observed.error, _generation(observed.body), previous)
            return await self._write_status(ref, observed, status_body(failed))
        resource = observed.model
        bound_store = self._memory_store_model(resource)
        problems = cluster_problems(resource, bound_store)
        if problems:
            failed = failed_status("; ".join(problems), _generation(observed.body), previous)
            return await self._write_status(ref, observed, status_body(failed))
        writes = 0
        dependencies = [await self._dependency(target) for target in dependencies_of(resource)]
        deployment = await self._deployment(ref)
        held = any(d.problem() for d in dependencies) and deployment is None and isinstance(resource, Agent)
        plan = plan_for(resource, self.settings, self._model_api(resource), bound_store)
        for secret, keys in plan.credentials.items():
            writes += await self._ensure_credentials(resource, secret, keys)
        if not held:
            for manifest in child_manifests(resource, self.settings, plan):
                writes += await self._ensure(manifest)
            # Every child is named after the workload's Service (the data claim, never pruned, aside).
            possible = [ChildRef(api, kind, ref.namespace, plan.service_name) for api, kind in sorted(PRUNABLE_KINDS)]
            for key in stale_children(resource, self.settings, possible):
                writes += await self._remove(key)
        replicas = resource.spec.replicas if isinstance(resource, Agent) else 1
        status = compute_status(
            resource,
            endpoint=plan.public_url,
            dependencies=dependencies,
            workload=DeploymentState.of(deployment, replicas, self.pod_failure(ref)),
            memory_store=await self._memory_store(resource),
            memory_unreachable=self.memory_reach.get(ref),
            previous=previous,
        )
        return writes + await self._write_status(ref, observed, status_body(status))

    async def _dependency(self, target: ResourceRef) -> Dependency:
        observed = self.resources.get(target)
        if observed is None:
            # Not on the watch (yet): each kind has its own watch, so just after a start an Agent can be
            # reconciled before its ModelAPI was listed. Read it rather than report it missing (a status
            # write, and a Ready Agent shown Waiting); the watch brings it into the view and wakes this one.
            if target in self._absent:
                return Dependency(target, None)
            body = await self.kube.resource(target.kind, target.namespace, target.name)
            if body is None:
                self._absent.add(target)
                return Dependency(target, None)
            observed = parse(target.kind, body)
        return Dependency(
            target, observed.phase or Phase.PENDING, exposed=observed.exposed, failure=self.pod_failure(target)
        )

    def _model_api(self, resource: AnyResource) -> ModelAPI | None:
        """An Agent's ModelAPI as the view holds it (its ``spec.pricing`` prices the agent's turns); None for other
        kinds or one not seen yet (the ModelAPI's arrival wakes the agent)."""
        if not isinstance(resource, Agent):
            return None
        ref = ResourceRef(Kind.MODEL_API.value, resource.metadata.namespace, resource.spec.model_api)
        observed = self.resources.get(ref)
        model = observed.model if observed is not None else None
        return model if isinstance(model, ModelAPI) else None

    def _memory_store_model(self, resource: AnyResource) -> MemoryStore | None:
        """An Agent's bound MemoryStore as the view holds it (its storage gives a shared task store its
        database); None for other kinds, an unbound agent or a store not seen yet (its arrival wakes the agent)."""
        store = _bound_store(resource)
        if store is None:
            return None
        observed = self.resources.get(ResourceRef(Kind.MEMORY_STORE.value, resource.metadata.namespace, store))
        model = observed.model if observed is not None else None
        return model if isinstance(model, MemoryStore) else None

    async def _memory_store(self, resource: AnyResource) -> Dependency | None:
        store = _bound_store(resource)
        if store is None:
            return None
        return await self._dependency(ResourceRef(Kind.MEMORY_STORE.value, resource.metadata.namespace, store))

    async def _deployment(self, ref: ResourceRef) -> JsonObject | None:
        if ref not in self.deployments:
            # Not seen on the watch yet (the operator just started): read it rather than guess, so a restart
            # neither re-creates nor re-reports what is already there.
            self.deployments[ref] = await self.kube.deployment_status(ref.namespace, service_name(ref.kind, ref.name))
        return self.deployments[ref]

    async def _ensure(self, manifest: Mapping[str, object]) -> int:
        key = ChildRef.of(manifest)
        wanted = recorded_hash(manifest)
        if key not in self.children:
            self.children[key] = await self.kube.annotation(key, SPEC_HASH_ANNOTATION)
        if self.children[key] == wanted:
            return 0
        log.info("applying %s", key)
        await self.kube.apply(manifest)
        self.children[key] = wanted
        return 1

    async def _ensure_credentials(self, resource: AnyResource, name: str, keys: tuple[str, ...]) -> int:
        """Create ``resource``'s credentials Secret ``name`` once (:func:`credentials_manifest`); 1 when created."""
        key = ChildRef("v1", "Secret", resource.namespace, name)
        if key in self._credentials:
            return 0
        created = await self.kube.create_secret(credentials_manifest(resource, name, keys))
        if created:
            log.info("created %s", key)
        self._credentials.add(key)
        return int(created)

    async def _remove(self, key: ChildRef) -> int:
        if key not in self.children:
            self.children[key] = await self.kube.annotation(key, SPEC_HASH_ANNOTATION)
        if self.children[key] is None:
            return 0
        log.info("deleting %s, which its resource no longer needs", key)
        await self.kube.delete(key)
        self.children[key] = None
        return 1

    async def _write_status(self, ref: ResourceRef, observed: Observed, status: JsonObject) -> int:
        shown = observed.body.get("status")
        current: JsonObject = dict(shown) if isinstance(shown, Mapping) else {}
        if _canonical(current) == _canonical(status):
            return 0
        # A merge patch keeps keys it does not mention: clear those Kora no longer sets.
        patch: JsonObject = {**{key: None for key in current if key not in status}, **status}
        if await self.kube.write_status(ref.kind, ref.namespace, ref.name, patch):
            # Until the watch brings the new version, remember what was written, so a reconcile in between
            # does not write it again.
            observed.body = {**observed.body, "status": status}
            log.info("%s is %s: %s", ref, status.get("phase"), status.get("message", ""))
            if current.get("phase") != status.get("phase"):
                # The watch event of this write will find the phase already remembered: wake those waiting
                # on this resource now.
                for dependant in self.dependants.get(ref, ()):
                    self.queue.add(dependant)
        return 1


def _pricing(observed: Observed) -> object:
    """A ModelAPI's ``spec.pricing`` (what its agents' environment holds of it); None for other kinds."""
    model = observed.model
    return model.spec.pricing if isinstance(model, ModelAPI) else None


def _bound_store(resource: AnyResource | None) -> str | None:
    """The MemoryStore an Agent with remote memory is bound to (None for other resources and memories)."""
    if not isinstance(resource, Agent):
        return None
    memory = resource.spec.config.memory
    if not memory.enabled or memory.type != "remote":
        return None
    return memory.memory_store


def _owned_by(key: ChildRef, ref: ResourceRef) -> bool:
    return key.namespace == ref.namespace and key.name in {service_name(ref.kind, ref.name), credentials_secret(ref)}


def _generation(body: Mapping[str, object]) -> int | None:
    metadata = body.get("metadata")
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    return generation if isinstance(generation, int) else None


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
