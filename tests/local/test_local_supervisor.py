"""kora up's supervisor with real processes: dependants start at once but are Ready only once their dependencies
are (``Waiting`` until then), and a first crash restarts at once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from kora.local.orphans import is_workload_of
from kora.local.state import FAILED, READY, WAITING, UpState, WorkloadState
from kora.local.supervisor import LAST_LINE_CHARS, Supervisor
from kora.local.up import plan_local
from kora.resources import load_text
from tests.support.eventually import eventually_async

pytestmark = pytest.mark.integration

MANIFESTS = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: %(model)s}
spec: %(spec)s
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: a}
spec: {modelAPI: %(model)s, model: x}
"""
SCRIPTED = "{mode: Scripted}"
#: A model Kora does not host: Failed at once and never started, so it never becomes Ready.
NEVER_READY = "{mode: Hosted, hostedConfig: {model: llama3}}"


@asynccontextmanager
async def supervised(
    text: str, tmp_path: Path, seen: list[tuple[str, str, str]] | None = None
) -> AsyncIterator[dict[str, WorkloadState]]:
    """Supervise the manifests ``text``; ``seen`` collects every (name, phase, message) the state passed by."""
    graph = load_text(text)
    plans = plan_local(graph, "http://127.0.0.1:1", tmp_path / "state")
    state = UpState(pid=0, gateway_url="http://127.0.0.1:1", started_at=0.0)
    for ref, plan in plans.items():
        log = str(tmp_path / f"{ref.name}.log")
        state.workloads.append(WorkloadState(ref.name, ref.kind, ref.namespace, plan.public_url, plan.direct_url, log))
    environments = {ref: plan.environment(lambda key: "") for ref, plan in plans.items()}
    work_dirs = {ref: tmp_path / "work" / ref.name for ref in plans}

    def record() -> None:
        if seen is not None:
            seen.extend(
                (w.name, w.phase, w.message) for w in state.workloads if (w.name, w.phase, w.message) not in seen
            )

    supervisor = Supervisor(plans, environments, state, work_dirs, on_change=record, grace_seconds=10)
    running = asyncio.create_task(supervisor.run())
    try:
        yield {w.name: w for w in state.workloads}
    finally:
        supervisor.stop()
        await running


async def test_an_agent_starts_at_once_but_is_not_ready_while_its_model_is_not(tmp_path: Path):
    async with supervised(MANIFESTS % {"model": "m", "spec": NEVER_READY}, tmp_path) as workloads:
        agent, model = workloads["a"], workloads["m"]
        await eventually_async(lambda: agent.pid is not None, "started")
        assert model.phase == FAILED
        # Its own readiness probe answers 200 ...
        async with httpx.AsyncClient(trust_env=False) as client:

            async def probe_ok() -> bool:
                try:
                    return (await client.get(agent.direct_url + "/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually_async(probe_ok, "the agent's /ready answering 200")
        # ... yet the agent shows Waiting, naming what it waits for.
        await eventually_async(lambda: agent.message.startswith("waiting for ModelAPI/m"), "waiting for its model")
        assert agent.phase == WAITING
        assert agent.message == "waiting for ModelAPI/m (Failed)"


async def test_a_first_crash_restarts_at_once(tmp_path: Path):
    seen: list[tuple[str, str, str]] = []
    async with supervised(MANIFESTS % {"model": "m", "spec": SCRIPTED}, tmp_path, seen) as workloads:
        agent, model = workloads["a"], workloads["m"]
        await eventually_async(lambda: agent.phase == READY and model.phase == READY, "all Ready")
        first = model.pid
        assert first is not None
        # Marked as a workload of this state dir (a later kora up stops it should this one die unclean).
        assert is_workload_of(first, tmp_path)
        assert agent.pid is not None
        assert is_workload_of(agent.pid, tmp_path)
        assert not is_workload_of(first, tmp_path / "elsewhere")
        os.kill(first, signal.SIGKILL)
        await eventually_async(lambda: model.restarts == 1, "restart counted")
        await eventually_async(lambda: model.phase == READY and model.pid not in (None, first), "Ready again")
        assert ("m", FAILED, "exited with code -9; restarting now (see m log)") in seen
        # Its dependant was told while the model was away, and is Ready again with it.
        assert any(name == "a" and phase == WAITING and "ModelAPI/m" in message for name, phase, message in seen)
        await eventually_async(lambda: agent.phase == READY, "agent Ready again")


BROKEN_TOOLS = """
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  type: python-runtime
  config:
    toolsString: |
      raise RuntimeError("these tools never load")
"""


async def test_a_workload_that_exits_by_itself_is_failed_with_its_log_s_last_line(tmp_path: Path):
    # The reason is in the table (kora status, kora up's own lines), not only in the log.
    async with supervised(BROKEN_TOOLS, tmp_path) as workloads:
        tools = workloads["tools"]
        await eventually_async(lambda: tools.phase == FAILED and tools.restarts >= 1, "Failed")
        assert tools.message.startswith("exited with code ")
        reason = tools.message.split(": ", 1)[1].rsplit("; restarting", 1)[0]
        assert "these tools never load" in reason, tools.message
        assert len(reason) <= LAST_LINE_CHARS
        assert tools.message.endswith("(see tools log)")


async def test_an_agent_whose_tool_server_failed_names_it_as_what_it_waits_for(tmp_path: Path):
    # The agent's own probe may never answer without its tools: its message names the tool server all the same.
    manifests = (MANIFESTS % {"model": "m", "spec": SCRIPTED}).replace("model: x}", "model: x, mcpServers: [tools]}")
    async with supervised(manifests + "---" + BROKEN_TOOLS, tmp_path) as workloads:
        agent, tools = workloads["a"], workloads["tools"]
        await eventually_async(
            lambda: tools.phase == FAILED and agent.pid is not None, "the tool server Failed, the agent up"
        )
        await eventually_async(
            lambda: agent.message == "waiting for MCPServer/tools (Failed)", "waiting for its tool server"
        )
        assert agent.phase == WAITING
