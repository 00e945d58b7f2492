"""What a resource's ``status`` should say: phase, message, endpoint and conditions (pure functions).

Phases: an Agent is ``Waiting`` while its ModelAPI, MCPServers, peers in
``agentNetwork.access`` or (with ``waitForDependencies``) its bound MemoryStore are not Ready; it reports the
``MemoryDegraded`` condition while its bound MemoryStore is not Ready or its pods cannot reach it. Every kind is
``Pending`` until its Deployment is available, then ``Ready``; ``Failed`` when the resource cannot be run as
written (a spec the models refuse, a peer that is not exposed) or its Deployment gave up
(``ProgressDeadlineExceeded``).

The reconciler (:mod:`kora.operator.reconciler`) gathers the facts (:class:`Dependency`,
:class:`DeploymentState`) and writes :func:`status_body`'s result through the status subresource only when it
differs from what the resource already shows, so an unchanged resource costs no write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kora.core.text import last_line
from kora.resources import (
    CONDITION_MEMORY_DEGRADED,
    CONDITION_READY,
    Agent,
    AnyResource,
    Condition,
    Phase,
    ResourceRef,
    ResourceStatus,
)

#: Agent condition: ``spec.replicas`` above 1 with pod-local memory, so each pod keeps its own sessions.
CONDITION_SESSIONS_SPLIT = "SessionsSplitAcrossReplicas"
#: Agent condition: ``spec.replicas`` above 1 with a pod-local A2A task store, so each pod knows only its own tasks.
CONDITION_TASKS_SPLIT = "TasksSplitAcrossReplicas"

JsonObject = dict[str, object]


@dataclass(frozen=True)
class Dependency:
    """What the operator knows of one resource another waits for. ``phase`` None: it does not exist."""

    ref: ResourceRef
    phase: Phase | None
    exposed: bool = True
    """For a peer Agent: whether it sets ``agentNetwork.expose: true``."""
    failure: str | None = None
    """Why its own workload does not run (:attr:`DeploymentState.pod_failure`), as its status says."""

    def problem(self) -> str | None:
        """Why this dependency holds its dependant back (None when it is Ready)."""
        label = f"{self.ref.kind} {self.ref.name}"
        if self.phase is None:
            return f"{label} does not exist"
        if not self.exposed:
            return f"{label} does not set agentNetwork.expose: true"
        if self.phase is not Phase.READY:
            return f"{label} is {self.phase.value}" + (f": {self.failure}" if self.failure else "")
        return None


@dataclass(frozen=True)
class DeploymentState:
    """The resource's Deployment as its status shows it. ``exists`` False: not created (yet)."""

    exists: bool
    replicas: int = 0
    ready_replicas: int = 0
    available: bool = False
    failure: str | None = None
    """The Deployment's reason for giving up (``ProgressDeadlineExceeded``), if it did."""
    pod_failure: str | None = None
    """Why one of its pods does not run (:func:`pod_failure`), while it is not available."""

    @classmethod
    def of(
        cls, deployment_status: Mapping[str, object] | None, replicas: int, pod_failure: str | None = None
    ) -> DeploymentState:
        """From a Deployment's ``status`` (None: no Deployment); ``replicas`` is the wanted count; ``pod_failure``
        what :func:`pod_failure` found in one of its pods."""
        if deployment_status is None:
            return cls(exists=False, replicas=replicas)
        conditions = deployment_status.get("conditions")
        available = False
        failure = None
        for condition in conditions if isinstance(conditions, list) else []:
            if not isinstance(condition, Mapping):
                continue
            if condition.get("type") == "Available" and condition.get("status") == "True":
                available = True
            if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
                failure = str(condition.get("message") or "ProgressDeadlineExceeded")
        ready = deployment_status.get("readyReplicas")
        ready_count = ready if isinstance(ready, int) else 0
        return cls(
            exists=True,
            replicas=replicas,
            ready_replicas=ready_count,
            # A Deployment scaled to 0 is "available" with nothing to serve; it is not Ready.
            available=(available or ready_count >= 1) and replicas > 0,
            failure=failure,
            pod_failure=pod_failure,
        )


#: Container waiting reasons that mean the container cannot run as it is (not merely starting).
FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
#: Longest last output line quoted from a failed container.
MAX_OUTPUT_CHARS = 300


def pod_failure(pod_status: Mapping[str, object]) -> str | None:
    """Why a workload's pod does not run, from its ``status`` (None while it runs or is merely starting).

    For a container that cannot run (a waiting reason in :data:`FAILING_REASONS`, or exited non-zero) the reason
    and the last line the container wrote before it ended: the kubelet keeps it in ``lastState.terminated.message``
    because every workload's container sets ``terminationMessagePolicy: FallbackToLogsOnError``. For a pod the
    scheduler cannot place, its message. Shape: ``"CrashLoopBackOff, last output: <line>"``.
    """
    statuses = pod_status.get("containerStatuses")
    for container in statuses if isinstance(statuses, list) else []:
        if not isinstance(container, Mapping) or container.get("ready") is True:
            continue
        state = _mapping(container.get("state"))
        waiting, terminated = _mapping(state.get("waiting")), _mapping(state.get("terminated"))
        last = _mapping(_mapping(container.get("lastState")).get("terminated"))
        if waiting.get("reason") in FAILING_REASONS:
            reason = str(waiting["reason"])
            detail = _last_line(last.get("message")) or _last_line(waiting.get("message"))
        elif terminated and terminated.get("exitCode") not in (0, None):
            reason = f"exited with code {terminated['exitCode']}"
            detail = _last_line(terminated.get("message"))
        else:
            continue
        if last.get("exitCode") not in (0, None) and waiting.get("reason") == "CrashLoopBackOff":
            reason = f"{reason} (exit code {last['exitCode']})"
        return f"{reason}, last output: {detail}" if detail else reason
    conditions = pod_status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and (condition.get("type"), condition.get("reason")) == (
            "PodScheduled",
            "Unschedulable",
        ):
            return f"unschedulable: {condition.get('message') or 'no node fits'}"
    return None


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _last_line(text: object) -> str | None:
    return last_line(str(text or ""), MAX_OUTPUT_CHARS)


def _condition(
    type_: str, ok: bool, reason: str, message: str, previous: Sequence[Condition], now: datetime
) -> Condition:
    status = "True" if ok else "False"
    # The transition time moves only when the status does (Kubernetes convention), so an unchanged
    # condition re-computed by a resync does not turn into a write.
    since = next((c.last_transition_time for c in previous if c.type == type_ and c.status == status), None)
    return Condition(type=type_, status=status, reason=reason, message=message, last_transition_time=since or now)


def compute_status(
    resource: AnyResource,
    *,
    endpoint: str,
    dependencies: Sequence[Dependency],
    workload: DeploymentState,
    memory_store: Dependency | None = None,
    memory_unreachable: str | None = None,
    previous: ResourceStatus | None = None,
    now: datetime | None = None,
) -> ResourceStatus:
    """The status ``resource`` should show.

    ``dependencies`` are those that gate it (:func:`kora.resources.graph.dependencies_of`); ``memory_store`` is an
    Agent's bound MemoryStore (remote memory) whether or not it gates, and ``memory_unreachable`` why one of its
    pods says it cannot reach that store (:mod:`kora.operator.reachability`), for ``MemoryDegraded``
    (:func:`memory_condition`); ``previous`` is the status it shows now (transition times are kept for unchanged
    conditions).
    """
    now = now or datetime.now(UTC).replace(microsecond=0)
    before = previous.conditions if previous is not None else []
    problems = [problem for problem in (d.problem() for d in dependencies) if problem is not None]
    unexposed = [d for d in dependencies if d.phase is not None and not d.exposed]
    if unexposed:
        phase, message = Phase.FAILED, "; ".join(p for d in unexposed if (p := d.problem()))
    elif workload.failure is not None:
        phase, message = Phase.FAILED, f"the Deployment failed: {workload.failure}"
    elif problems:
        phase, message = Phase.WAITING, "waiting for " + "; ".join(problems)
    elif not workload.available:
        phase = Phase.PENDING
        message = f"waiting for the Deployment: {workload.ready_replicas}/{workload.replicas} replicas ready"
        if workload.replicas == 0:
            message = "scaled to 0 replicas"
        elif workload.pod_failure is not None:
            message += f"; a pod is failing: {workload.pod_failure}"
    else:
        phase, message = Phase.READY, f"{workload.ready_replicas}/{workload.replicas} replicas ready"
    conditions = [
        _condition(CONDITION_READY, phase is Phase.READY, phase.value, message, before, now),
    ]
    if memory_store is not None and isinstance(resource, Agent):
        conditions.append(memory_condition(resource, memory_store, memory_unreachable, workload, phase, before, now))
    if isinstance(resource, Agent):
        memory = resource.spec.config.memory
        if memory.enabled and memory.type == "local" and resource.spec.replicas > 1:
            conditions.append(
                _condition(
                    CONDITION_SESSIONS_SPLIT,
                    True,
                    "PodLocalMemory",
                    f"{resource.spec.replicas} replicas each keep their own local memory, so a session's history "
                    "is only on the pod that served it; bind a MemoryStore (memory.type: remote) to share it",
                    before,
                    now,
                )
            )
        if resource.spec.replicas > 1 and resource.spec.config.task_store_type != "postgres":
            conditions.append(
                _condition(
                    CONDITION_TASKS_SPLIT,
                    True,
                    "PodLocalTasks",
                    f"{resource.spec.replicas} replicas each keep their own A2A tasks, so GetTask, CancelTask and "
                    "SubscribeToTask find a task only on the pod that made it; set taskStoreType: postgres to share "
                    "them",
                    before,
                    now,
                )
            )
    return ResourceStatus(
        phase=phase,
        message=message,
        endpoint=endpoint,
        observed_generation=resource.metadata.generation,
        conditions=conditions,
    )


#: ``MemoryDegraded`` reasons: the store is not Ready; the agent cannot reach it; neither.
REASON_STORE_NOT_READY = "MemoryStoreNotReady"
REASON_UNREACHABLE = "MemoryUnreachable"
REASON_REACHABLE = "MemoryStoreReady"


def memory_condition(
    agent: Agent,
    store: Dependency,
    unreachable: str | None,
    workload: DeploymentState,
    phase: Phase,
    previous: Sequence[Condition],
    now: datetime,
) -> Condition:
    """``MemoryDegraded`` of an Agent bound to ``store``: True while the store is not Ready
    (``MemoryStoreNotReady``) or one of the agent's pods says it cannot reach it (``MemoryUnreachable``, the
    agent's ``unreachable`` reason quoted). The message says what that means for this agent: with no workload yet,
    that it does not run (and waits, when ``phase`` is ``Waiting``); running in ``soft`` failure mode, that it
    serves the short-term window only; in ``strict``, that it refuses turns until the store is back."""
    problem = store.problem()
    name = store.ref.name
    if problem is None and unreachable is None:
        message = f"MemoryStore {name} is Ready"
        return _condition(CONDITION_MEMORY_DEGRADED, False, REASON_REACHABLE, message, previous, now)
    if problem is not None:
        reason, cause = REASON_STORE_NOT_READY, problem
    else:
        reason, cause = REASON_UNREACHABLE, f"the agent cannot reach MemoryStore {name}: {unreachable}"
    if not workload.exists:
        waits = " and waits for it (waitForDependencies)" if phase is Phase.WAITING else " yet"
        effect = f"the agent does not run{waits}"
    elif agent.spec.config.memory.failure_mode == "strict":
        effect = "the agent refuses turns (failureMode strict: HTTP 503, a JSON-RPC error on A2A) until it is back"
    else:
        effect = "the agent serves the short-term window only (failureMode soft)"
    return _condition(CONDITION_MEMORY_DEGRADED, True, reason, f"{cause}: {effect}", previous, now)


def failed_status(message: str, generation: int | None, previous: ResourceStatus | None = None) -> ResourceStatus:
    """The status of a resource the operator cannot run as written (``message`` says why)."""
    now = datetime.now(UTC).replace(microsecond=0)
    before = previous.conditions if previous is not None else []
    return ResourceStatus(
        phase=Phase.FAILED,
        message=message,
        observed_generation=generation,
        conditions=[_condition(CONDITION_READY, False, Phase.FAILED.value, message, before, now)],
    )


def status_body(status: ResourceStatus) -> JsonObject:
    """``status`` as the JSON the API server stores: camelCase, no nulls and no empty strings (a 1.20 API
    server refuses an empty ``message``)."""
    return _prune(status.model_dump(mode="json", by_alias=True, exclude_none=True))


def _prune(value: object) -> JsonObject:
    assert isinstance(value, dict)
    result: JsonObject = {}
    for key, item in value.items():
        if item == "":
            continue
        if isinstance(item, list):
            result[key] = [_prune(entry) if isinstance(entry, dict) else entry for entry in item]
        elif isinstance(item, dict):
            result[key] = _prune(item)
        else:
            result[key] = item
    return result


def parse_status(body: Mapping[str, object]) -> ResourceStatus | None:
    """The ``status`` of a resource body as Kora's model (None when absent or unreadable)."""
    raw = body.get("status")
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        return ResourceStatus.model_validate(raw)
    except ValueError:
        return None
