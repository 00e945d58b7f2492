"""The edges of the resource graph the console draws: which resources each one uses, as ``kora up`` keeps them
in its state file, and where the graph page places them."""

import re
from pathlib import Path

import pytest

from kora.console.layout import NODE_HEIGHT, NODE_WIDTH, layout
from kora.console.sources import ConsoleResource
from kora.local.state import Link, UpState, WorkloadState, read_state, write_state
from kora.local.up import links
from kora.resources.graph import ResourceRef
from kora.resources.loader import load_path, load_text

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

SWITCHED_OFF = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m}
spec: {mode: Scripted}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: t}
spec: {type: python-runtime, config: {toolsString: "def f() -> int:\\n    return 1\\n"}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: peer}
spec: {modelAPI: m, model: m}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: quiet}
spec:
  modelAPI: m
  model: m
  mcpServers: [t]
  agentNetwork: {access: [peer]}
  config: {agenticLoop: {enableTools: false, enableDelegation: false}}
"""


def test_the_multi_agent_example_links_the_coordinator_to_its_peers_and_each_peer_to_its_tools():
    graph = load_path(ROOT / "examples" / "multi-agent")
    assert links(graph, ResourceRef("Agent", "default", "coordinator")) == [
        Link("model", "ModelAPI", "scripted"),
        Link("delegates", "Agent", "math"),
        Link("delegates", "Agent", "clock"),
    ]
    assert links(graph, ResourceRef("Agent", "default", "math")) == [
        Link("model", "ModelAPI", "scripted"),
        Link("tools", "MCPServer", "calculator"),
    ]
    assert links(graph, ResourceRef("ModelAPI", "default", "scripted")) == []


def test_tools_and_peers_an_agent_switched_off_are_no_edges():
    graph = load_text(SWITCHED_OFF)
    assert links(graph, ResourceRef("Agent", "default", "quiet")) == [Link("model", "ModelAPI", "m")]


def test_links_survive_the_state_file(tmp_path: Path):
    workload = WorkloadState("a", "Agent", "default", "http://g/a", "http://d", "a.log")
    workload.links = [Link("delegates", "Agent", "b"), Link("model", "ModelAPI", "m")]
    write_state(tmp_path, UpState(pid=1, gateway_url="http://g", started_at=0.0, workloads=[workload]))
    assert read_state(tmp_path).workloads[0].links == workload.links


def _resource(kind: str, name: str, *uses: Link) -> ConsoleResource:
    return ConsoleResource(kind, "default", name, "Ready", "", f"/default/{kind.lower()}/{name}", "http://d", uses)


def test_the_drawing_puts_a_peer_right_of_its_delegator_and_models_last():
    coordinator = _resource("Agent", "coordinator", Link("delegates", "Agent", "math"), Link("model", "ModelAPI", "m"))
    math = _resource("Agent", "math", Link("tools", "MCPServer", "calc"), Link("model", "ModelAPI", "m"))
    drawn = layout([_resource("ModelAPI", "m"), _resource("MCPServer", "calc"), math, coordinator])
    x = {node.resource.name: node.x for node in drawn.nodes}
    assert x["coordinator"] < x["math"] < x["calc"] < x["m"]
    assert sorted((e.source.resource.name, e.relation, e.target.resource.name) for e in drawn.edges) == [
        ("coordinator", "delegates", "math"),
        ("coordinator", "model", "m"),
        ("math", "model", "m"),
        ("math", "tools", "calc"),
    ]
    assert all(0 <= n.x < drawn.width and 0 <= n.y < drawn.height for n in drawn.nodes)
    # The coordinator's model is two columns away: its edge goes around, no corner of it inside a node.
    (around,) = [e for e in drawn.edges if (e.source.resource.name, e.target.resource.name) == ("coordinator", "m")]
    points = [tuple(int(v) for v in pair.split(",")) for pair in re.findall(r"-?\d+,-?\d+", around.path)]
    for x, y in points[1:-1]:
        assert not any(n.x <= x <= n.x + NODE_WIDTH and n.y <= y <= n.y + NODE_HEIGHT for n in drawn.nodes), (x, y)
    assert max(y for _, y in points) < drawn.height


def test_a_cycle_of_delegations_is_drawn_and_ends():
    a = _resource("Agent", "a", Link("delegates", "Agent", "b"))
    b = _resource("Agent", "b", Link("delegates", "Agent", "a"))
    drawn = layout([a, b])
    assert len(drawn.nodes) == 2
    assert {(e.source.resource.name, e.target.resource.name) for e in drawn.edges} == {("a", "b"), ("b", "a")}
