"""kora up --watch: which workloads a change of the manifests restarts, and which files count as a change."""

from __future__ import annotations

from pathlib import Path

import pytest
from watchfiles import Change

from kora.local.supervisor import start_gates
from kora.local.up import plan_local
from kora.local.watch import ManifestWatch, PlanDiff, diff_plans
from kora.resources import ResourceGraph, SecretKeyRef, WorkloadPlan, load_text
from kora.resources.graph import ResourceRef

pytestmark = pytest.mark.unit

Plans = dict[ResourceRef, WorkloadPlan]

MODEL = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m}
spec:
  mode: Proxy
  proxyConfig: {apiBase: 'http://127.0.0.1:9/v1', apiKey: {valueFrom: {secretKeyRef: {name: s, key: k}}}}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {k: KEY}
"""


def agent(name: str, instructions: str, timeout: str = "2m") -> str:
    return f"""
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {{name: {name}}}
spec: {{modelAPI: m, model: x, instructions: '{instructions}', gatewayRoute: {{timeout: {timeout}}}}}
"""


def resolved(graph: ResourceGraph, plans: Plans) -> dict[ResourceRef, dict[str, str]]:
    def secret(key: SecretKeyRef) -> str:
        if key.name.endswith("-credentials"):  # a generated token (kora.local.credentials): any stable value
            return f"token-of-{key.name}"
        value = graph.secret_value(key.name, key.key, "default")
        assert value is not None
        return value

    return {ref: plan.environment(secret) for ref, plan in plans.items()}


def reload(old_text: str, new_text: str, tmp_path: Path) -> tuple[Plans, Plans, PlanDiff]:
    """Plan both texts as kora up does (the second keeping the first's ports) and diff them."""
    old_graph, new_graph = load_text(old_text), load_text(new_text)
    old = plan_local(old_graph, "http://127.0.0.1:8080", tmp_path)
    new = plan_local(new_graph, "http://127.0.0.1:8080", tmp_path, {ref: plan.port for ref, plan in old.items()})
    return old, new, diff_plans(old, resolved(old_graph, old), new, resolved(new_graph, new))


A, B, M = (
    ResourceRef("Agent", "default", "a"),
    ResourceRef("Agent", "default", "b"),
    ResourceRef("ModelAPI", "default", "m"),
)


def test_new_instructions_restart_only_that_agent_and_ports_are_kept(tmp_path: Path):
    old, new, diff = reload(
        MODEL + agent("a", "one") + agent("b", "two"), MODEL + agent("a", "ONE") + agent("b", "two"), tmp_path
    )
    assert diff.restarted == (A,)
    assert diff.kept == (M, B)
    assert (diff.added, diff.removed) == ((), ())
    assert {ref: plan.port for ref, plan in new.items()} == {ref: plan.port for ref, plan in old.items()}
    assert diff.summary() == "restarted Agent/a"


def test_added_and_removed_workloads(tmp_path: Path):
    _, _, diff = reload(MODEL + agent("a", "one"), MODEL + agent("b", "two"), tmp_path)
    assert (diff.added, diff.removed, diff.restarted, diff.kept) == ((B,), (A,), (), (M,))
    assert diff.summary() == "started Agent/b; stopped Agent/a"


def test_a_route_timeout_alone_restarts_nothing(tmp_path: Path):
    _, new, diff = reload(MODEL + agent("a", "one"), MODEL + agent("a", "one", timeout="5m"), tmp_path)
    assert diff.empty
    assert diff.summary() == "no workload changed"
    assert new[A].route_timeout_seconds == 300


def test_a_changed_secret_value_restarts_the_workload_reading_it(tmp_path: Path):
    _, _, diff = reload(MODEL + agent("a", "one"), MODEL.replace("KEY", "OTHER") + agent("a", "one"), tmp_path)
    assert diff.restarted == (M,)
    assert diff.kept == (A,)


def test_a_folder_watch_counts_its_manifest_files_only(tmp_path: Path):
    watch = ManifestWatch.of(tmp_path)
    assert watch.folder == tmp_path.resolve()
    assert watch.counts(Change.modified, str(tmp_path.resolve() / "kora.yaml"))
    assert watch.counts(Change.added, str(tmp_path.resolve() / "more.yml"))
    assert not watch.counts(Change.modified, str(tmp_path.resolve() / "notes.txt"))
    assert not watch.counts(Change.modified, str(tmp_path.resolve() / "sub" / "kora.yaml"))


def test_a_file_watch_counts_that_file_only(tmp_path: Path):
    manifest = tmp_path / "kora.yaml"
    manifest.write_text(MODEL)
    watch = ManifestWatch.of(manifest)
    assert watch.folder == tmp_path.resolve()
    assert watch.counts(Change.added, str(manifest.resolve()))  # an editor's save by rename
    assert not watch.counts(Change.modified, str(tmp_path.resolve() / "other.yaml"))


def test_only_a_bound_memory_store_gates_an_agents_start(tmp_path: Path):
    text = (
        MODEL
        + agent("a", "one")
        + """
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: mem}
spec: {storage: {type: local}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: r}
spec: {modelAPI: m, model: x, config: {memory: {enabled: true, type: remote, memoryStore: mem}}}
"""
    )
    plans = plan_local(load_text(text), "http://127.0.0.1:8080", tmp_path)
    store = ResourceRef("MemoryStore", "default", "mem")
    assert start_gates(plans[ResourceRef("Agent", "default", "r")]) == (store,)
    assert start_gates(plans[A]) == ()
    assert start_gates(plans[store]) == ()
