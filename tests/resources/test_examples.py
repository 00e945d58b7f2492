"""The shipped examples parse, validate and wire (examples/)."""

from pathlib import Path

import pytest
import yaml

from kora.resources.loader import load_path
from kora.resources.urls import Loopback
from kora.resources.wiring import plan_workloads

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("folder", ["quickstart", "multi-agent", "budgets"])
def test_example_loads_and_wires(folder):
    graph = load_path(EXAMPLES / folder)
    assert graph.agents
    assert graph.warnings == []
    ports = {ref: 9000 + index for index, ref in enumerate(graph.resources)}
    plans = plan_workloads(graph, Loopback(ports))
    assert set(plans) == set(graph.resources)


def test_quickstart_shape():
    graph = load_path(EXAMPLES / "quickstart")
    agent = graph.agent("assistant")
    assert agent.spec.mcp_servers == ["tools"]
    assert agent.spec.config.memory.type == "local"
    assert graph.model_api("scripted").spec.mode.value == "Scripted"
    tools = graph.mcp_server("tools").spec.config.tools_string or ""
    assert "def add(a: int, b: int) -> int:" in tools
    assert "def get_time() -> str:" in tools


def test_quickstart_tools_run():
    # The inline tools are plain Python: execute them to be sure the example's promise holds.
    source = load_path(EXAMPLES / "quickstart").mcp_server("tools").spec.config.tools_string or ""
    namespace: dict[str, object] = {}
    exec(compile(source, "toolsString", "exec"), namespace)
    assert namespace["add"](2, 3) == 5  # type: ignore[operator]
    assert "T" in namespace["get_time"]()  # type: ignore[operator]


def test_quickstart_script_calls_add_for_a_sum():
    import re

    script = load_path(EXAMPLES / "quickstart").model_api("scripted").spec.scripted_config
    assert script is not None
    assert script.script is not None
    first_fitting = next(
        rule
        for rule in script.script
        if not rule["when"].get("after_tool") and re.search(rule["when"]["user_matches"], "what is 2 plus 3")
    )
    assert first_fitting["reply"]["calls"][0]["name"] == "add"


def test_multi_agent_coordinator_delegates_to_both_specialists():
    graph = load_path(EXAMPLES / "multi-agent")
    coordinator = graph.agent("coordinator")
    assert coordinator.spec.agent_network.access == ["math", "clock"]
    assert all(graph.agent(name).spec.agent_network.expose for name in ("math", "clock"))
    assert graph.agent("math").spec.mcp_servers == ["calculator"]
    assert graph.agent("clock").spec.mcp_servers == ["clock-tools"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")))
def test_example_files_are_plain_yaml(path):
    assert all(doc is None or isinstance(doc, dict) for doc in yaml.safe_load_all(path.read_text()))


def test_budgets_example_bounds_the_turn_and_prices_the_model():
    graph = load_path(EXAMPLES / "budgets")
    budget = graph.agent("sleepy").spec.config.budget
    assert (budget.max_tool_calls, budget.max_cost_usd) == (3, 0.05)
    assert graph.agent("sleepy").spec.config.agentic_loop.max_steps > budget.max_tool_calls + 1
    pricing = graph.model_api("scripted").spec.pricing
    assert pricing is not None
    assert (pricing.input_per_million, pricing.output_per_million) == (3, 15)
