"""kora.operator.status: phases, messages and conditions as a table; transition times kept when unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kora.operator.reachability import memory_problem, pod_address
from kora.operator.status import (
    CONDITION_SESSIONS_SPLIT,
    CONDITION_TASKS_SPLIT,
    Dependency,
    DeploymentState,
    compute_status,
    failed_status,
    parse_status,
    pod_failure,
    status_body,
)
from kora.resources.graph import ResourceRef
from kora.resources.models import Agent, ModelAPI, Phase

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)


def _agent(**spec: object) -> Agent:
    return Agent.model_validate(
        {
            "metadata": {"name": "helper", "namespace": "team", "generation": 3},
            "spec": {"modelAPI": "m", "model": "gpt", **spec},
        }
    )


MODEL = ResourceRef("ModelAPI", "team", "m")
TOOLS = ResourceRef("MCPServer", "team", "tools")
PEER = ResourceRef("Agent", "team", "peer")
STORE = ResourceRef("MemoryStore", "team", "store")
AVAILABLE = DeploymentState.of({"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]}, 1)


@pytest.mark.parametrize(
    ("dependencies", "workload", "phase", "message"),
    [
        ([Dependency(MODEL, Phase.READY)], AVAILABLE, Phase.READY, "1/1 replicas ready"),
        (
            [Dependency(MODEL, None)],
            DeploymentState(exists=False),
            Phase.WAITING,
            "waiting for ModelAPI m does not exist",
        ),
        (
            [Dependency(MODEL, Phase.PENDING), Dependency(TOOLS, Phase.FAILED)],
            DeploymentState(exists=False),
            Phase.WAITING,
            "waiting for ModelAPI m is Pending; MCPServer tools is Failed",
        ),
        (
            [Dependency(MODEL, Phase.READY), Dependency(PEER, Phase.READY, exposed=False)],
            DeploymentState(exists=False),
            Phase.FAILED,
            "Agent peer does not set agentNetwork.expose: true",
        ),
        (
            [Dependency(MODEL, Phase.READY)],
            DeploymentState.of({}, 1),
            Phase.PENDING,
            "waiting for the Deployment: 0/1 replicas ready",
        ),
        ([Dependency(MODEL, Phase.READY)], DeploymentState.of({}, 0), Phase.PENDING, "scaled to 0 replicas"),
        (
            [Dependency(MODEL, Phase.READY)],
            DeploymentState.of(
                {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}, 1
            ),
            Phase.FAILED,
            "the Deployment failed: ProgressDeadlineExceeded",
        ),
    ],
)
def test_phase_and_message(dependencies, workload, phase, message):
    status = compute_status(_agent(), endpoint="http://e", dependencies=dependencies, workload=workload, now=T0)
    assert (status.phase, status.message) == (phase, message)
    assert status.observed_generation == 3
    assert status.endpoint == "http://e"
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == ("True" if phase is Phase.READY else "False")


def test_memory_degraded_follows_the_bound_store():
    degraded = compute_status(
        _agent(), endpoint="e", dependencies=[], workload=AVAILABLE, memory_store=Dependency(STORE, Phase.PENDING)
    )
    condition = next(c for c in degraded.conditions if c.type == "MemoryDegraded")
    assert (condition.status, condition.reason) == ("True", "MemoryStoreNotReady")
    assert "MemoryStore store is Pending" in condition.message
    healthy = compute_status(
        _agent(), endpoint="e", dependencies=[], workload=AVAILABLE, memory_store=Dependency(STORE, Phase.READY)
    )
    assert next(c for c in healthy.conditions if c.type == "MemoryDegraded").status == "False"


def _memory_degraded(agent: Agent, store: Phase, workload: DeploymentState, unreachable: str | None = None):
    status = compute_status(
        agent,
        endpoint="e",
        dependencies=[],
        workload=workload,
        memory_store=Dependency(STORE, store),
        memory_unreachable=unreachable,
    )
    return next(c for c in status.conditions if c.type == "MemoryDegraded")


STRICT = {"memory": {"enabled": True, "type": "remote", "memoryStore": "store", "failureMode": "strict"}}


@pytest.mark.parametrize(
    ("config", "store", "workload", "unreachable", "reason", "says"),
    [
        # Not running yet: neither the short-term window nor refusals, only that it does not run.
        ({}, Phase.PENDING, DeploymentState(exists=False), None, "MemoryStoreNotReady", "the agent does not run yet"),
        ({}, Phase.PENDING, AVAILABLE, None, "MemoryStoreNotReady", "short-term window only"),
        (STRICT, Phase.PENDING, AVAILABLE, None, "MemoryStoreNotReady", "refuses turns"),
        # The store is Ready, but the agent's pods say they cannot reach it.
        ({}, Phase.READY, AVAILABLE, "ConnectTimeout", "MemoryUnreachable", "short-term window only"),
        (STRICT, Phase.READY, DeploymentState.of({}, 1), "refused", "MemoryUnreachable", "JSON-RPC error on A2A"),
    ],
)
def test_memory_degraded_says_what_it_means_for_the_agent(config, store, workload, unreachable, reason, says):
    condition = _memory_degraded(_agent(config=config) if config else _agent(), store, workload, unreachable)
    assert (condition.status, condition.reason) == ("True", reason)
    assert says in condition.message
    if unreachable:
        assert f"the agent cannot reach MemoryStore store: {unreachable}" in condition.message
    else:
        assert "short-term" not in condition.message or workload.exists


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"status": "ready"}, None),
        (
            {"status": "ready", "details": {"memory": "degraded: ConnectError: x; serving the short-term window"}},
            "ConnectError: x",
        ),
        ({"status": "not_ready", "reasons": ["memory store unreachable: refused"]}, "refused"),
        ({"status": "not_ready", "reasons": ["agent runtime is still loading"]}, None),
        ({"details": {"memory_dropped_writes": "3"}}, None),
        ("not json object", None),
        ({"details": "x", "reasons": "y"}, None),
    ],
)
def test_memory_problem_reads_the_agents_ready_answer(body, problem):
    assert memory_problem(body) == problem


def test_pod_address_is_the_running_pods_http_port():
    pod = {
        "spec": {
            "containers": [
                {"ports": [{"name": "metrics", "containerPort": 9}, {"name": "http", "containerPort": 8000}]}
            ]
        },
        "status": {"phase": "Running", "podIP": "10.0.0.7"},
    }
    assert pod_address(pod) == "http://10.0.0.7:8000"
    assert pod_address({**pod, "status": {"phase": "Pending", "podIP": "10.0.0.7"}}) is None
    assert pod_address({**pod, "status": {"phase": "Running", "podIP": "fd00::7"}}) == "http://[fd00::7]:8000"


def test_replicas_with_local_memory_are_reported():
    agent = _agent(replicas=3, config={"memory": {"enabled": True, "type": "local"}})
    status = compute_status(agent, endpoint="e", dependencies=[], workload=AVAILABLE)
    split = next(c for c in status.conditions if c.type == CONDITION_SESSIONS_SPLIT)
    assert split.status == "True"
    assert split.reason == "PodLocalMemory"
    single = compute_status(_agent(), endpoint="e", dependencies=[], workload=AVAILABLE)
    assert all(c.type != CONDITION_SESSIONS_SPLIT for c in single.conditions)


def test_replicas_with_pod_local_tasks_are_reported_until_the_tasks_are_shared():
    remote = {"enabled": True, "type": "remote", "memoryStore": "store"}
    local_tasks = compute_status(
        _agent(replicas=2, config={"memory": remote}), endpoint="e", dependencies=[], workload=AVAILABLE
    )
    split = next(c for c in local_tasks.conditions if c.type == CONDITION_TASKS_SPLIT)
    assert (split.status, split.reason) == ("True", "PodLocalTasks")
    assert "taskStoreType: postgres" in split.message
    url = {"name": "TASK_STORE_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}}
    shared = _agent(replicas=2, config={"memory": remote, "taskStoreType": "postgres", "env": [url]})
    status = compute_status(shared, endpoint="e", dependencies=[], workload=AVAILABLE)
    assert all(c.type not in {CONDITION_TASKS_SPLIT, CONDITION_SESSIONS_SPLIT} for c in status.conditions)
    single = compute_status(_agent(), endpoint="e", dependencies=[], workload=AVAILABLE)
    assert all(c.type != CONDITION_TASKS_SPLIT for c in single.conditions)


def test_an_unchanged_condition_keeps_its_transition_time_so_a_resync_writes_nothing():
    first = compute_status(_agent(), endpoint="e", dependencies=[], workload=AVAILABLE, now=T0)
    again = compute_status(_agent(), endpoint="e", dependencies=[], workload=AVAILABLE, previous=first, now=T1)
    assert status_body(again) == status_body(first)
    changed = compute_status(
        _agent(), endpoint="e", dependencies=[], workload=DeploymentState.of({}, 1), previous=first, now=T1
    )
    assert changed.conditions[0].last_transition_time == T1


def test_status_body_is_camel_case_without_empty_strings_and_round_trips():
    body = status_body(failed_status("spec.mode: bad", 2))
    assert body["phase"] == "Failed"
    assert body["observedGeneration"] == 2
    assert "endpoint" not in body
    for condition in body["conditions"]:
        assert "" not in condition.values()
    assert parse_status({"status": body}) == parse_status({"status": status_body(parse_status({"status": body}))})


def test_parse_status_tolerates_what_it_cannot_read():
    assert parse_status({}) is None
    assert parse_status({"status": "nonsense"}) is None
    assert parse_status({"status": {"phase": "Sleeping"}}) is None
    model = ModelAPI.model_validate({"metadata": {"name": "m"}, "spec": {"mode": "Scripted"}})
    status = compute_status(model, endpoint="e", dependencies=[], workload=AVAILABLE)
    assert parse_status({"status": status_body(status)}) is not None


CRASHED_TOOLS = {
    "containerStatuses": [
        {
            "name": "kora",
            "ready": False,
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            "lastState": {
                "terminated": {
                    "exitCode": 2,
                    "reason": "Error",
                    "message": "starting tools\nkora mcp: ModuleNotFoundError: No module named 'x'\n",
                }
            },
        }
    ]
}


@pytest.mark.parametrize(
    ("pod_status", "expected"),
    [
        (
            CRASHED_TOOLS,
            "CrashLoopBackOff (exit code 2), last output: kora mcp: ModuleNotFoundError: No module named 'x'",
        ),
        (
            {
                "containerStatuses": [
                    {
                        "ready": False,
                        "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image kora:9 is not present"}},
                    }
                ]
            },
            "ErrImageNeverPull, last output: image kora:9 is not present",
        ),
        (
            {"containerStatuses": [{"ready": False, "state": {"terminated": {"exitCode": 1, "message": "boom"}}}]},
            "exited with code 1, last output: boom",
        ),
        (
            {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient memory.",
                    }
                ]
            },
            "unschedulable: 0/1 nodes are available: 1 Insufficient memory.",
        ),
        # Starting, running, or not ready yet without failing: nothing to report.
        ({"containerStatuses": [{"ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]}, None),
        ({"containerStatuses": [{"ready": False, "state": {"running": {}}}]}, None),
        ({"containerStatuses": [{"ready": True, "state": {"running": {}}}]}, None),
        ({}, None),
        ({"containerStatuses": "garbage"}, None),
    ],
)
def test_pod_failure_names_what_stops_a_pod_with_its_last_output(pod_status: dict, expected: str | None) -> None:
    assert pod_failure(pod_status) == expected


def test_a_long_last_line_is_cut() -> None:
    crashed = {"containerStatuses": [{"ready": False, "state": {"terminated": {"exitCode": 1, "message": "x" * 1000}}}]}
    failure = pod_failure(crashed)
    assert failure is not None
    assert len(failure) < 400
    assert failure.endswith("...")


def test_a_failing_pod_is_named_in_its_resources_status_and_in_the_agent_waiting_for_it() -> None:
    failure = pod_failure(CRASHED_TOOLS)
    workload = DeploymentState.of({"readyReplicas": 0, "conditions": []}, 1, failure)
    tools = compute_status(_agent(), endpoint="http://x", dependencies=[], workload=workload, now=T0)
    assert tools.phase is Phase.PENDING
    assert tools.message == f"waiting for the Deployment: 0/1 replicas ready; a pod is failing: {failure}"
    agent = compute_status(
        _agent(),
        endpoint="http://x",
        dependencies=[Dependency(TOOLS, Phase.PENDING, failure=failure)],
        workload=DeploymentState.of(None, 1),
        now=T0,
    )
    assert agent.phase is Phase.WAITING
    assert agent.message == f"waiting for MCPServer tools is Pending: {failure}"
    # Once Ready, a stale failure is not reported.
    assert Dependency(TOOLS, Phase.READY, failure=failure).problem() is None
