"""kora up's plans: a local-storage MemoryStore's data lives in the state dir, at the same place every run."""

import pytest

from kora.local.up import plan_local
from kora.resources import load_text
from kora.resources.graph import ResourceRef

pytestmark = pytest.mark.unit

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


def test_a_workload_gets_a_minimal_environment_and_only_the_variables_named_on_top():
    from kora.local.supervisor import child_environment

    shell = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TMPDIR": "/tmp/x",
        "XDG_CACHE_HOME": "/home/u/.cache",
        "HF_HUB_OFFLINE": "1",
        "OPENAI_API_KEY": "sk-shell",
        "HF_TOKEN": "hf-secret",
        "MODEL_NAME": "stray",
        "HTTPS_PROXY": "http://proxy:3128",
    }
    env = child_environment(shell, {"MODEL_NAME": "planned", "AGENT_NAME": "a"})
    kept = {k: v for k, v in shell.items() if k not in {"OPENAI_API_KEY", "HF_TOKEN", "MODEL_NAME", "HTTPS_PROXY"}}
    assert env == kept | {"MODEL_NAME": "planned", "AGENT_NAME": "a", "PYTHONUNBUFFERED": "1"}
    passed = child_environment(shell, {"MODEL_NAME": "planned"}, ["HTTPS_PROXY", "MODEL_NAME", "NOT_SET"])
    assert passed["HTTPS_PROXY"] == "http://proxy:3128"
    assert passed["MODEL_NAME"] == "planned"  # the plan's setting wins over a passed one
    assert "OPENAI_API_KEY" not in passed
    assert "NOT_SET" not in passed
