"""kora up's plans: a local-storage MemoryStore's data lives in the state dir, at the same place every run."""

from kora.local.up import plan_local
from kora.resources import load_text
from kora.resources.graph import ResourceRef

MANIFESTS = """
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: mem, namespace: team}
spec: {storage: {type: local}}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: pg-mem, namespace: team}
spec: {storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}}
"""


def test_local_memory_store_data_dir_is_in_the_state_dir_and_stable_across_runs(tmp_path):
    graph = load_text(MANIFESTS)
    first = plan_local(graph, "http://127.0.0.1:8080", tmp_path)
    second = plan_local(graph, "http://127.0.0.1:9090", tmp_path)
    local, external = ResourceRef("MemoryStore", "team", "mem"), ResourceRef("MemoryStore", "team", "pg-mem")
    data_dir = first[local].env_value("MEMORY_SERVICE_DATA_DIR")
    assert data_dir == str(tmp_path / "memory" / "team" / "mem")
    assert second[local].env_value("MEMORY_SERVICE_DATA_DIR") == data_dir
    assert all(entry.name != "MEMORY_SERVICE_DATA_DIR" for entry in first[external].env)
