"""The local gateway's path rewriting: /{namespace}/{segment}/{name}/<rest> -> <upstream>/<rest>."""

import pytest

from kora.local.gateway import GatewayRoute, match_route, routes_from_plans
from kora.local.supervisor import backoff_delays, child_environment
from kora.resources import Loopback, load_text, plan_workloads

pytestmark = pytest.mark.unit

ROUTES = {
    "/default/agent/a": GatewayRoute("/default/agent/a", "http://127.0.0.1:1", 120),
    "/default/mcp/tools": GatewayRoute("/default/mcp/tools", "http://127.0.0.1:2", 30),
    "/team/modelapi/m": GatewayRoute("/team/modelapi/m", "http://127.0.0.1:3", 120),
}


@pytest.mark.parametrize(
    ("path", "prefix", "rest"),
    [
        ("/default/agent/a/v1/chat/completions", "/default/agent/a", "/v1/chat/completions"),
        ("/default/agent/a/", "/default/agent/a", "/"),
        ("/default/agent/a", "/default/agent/a", "/"),
        ("/default/mcp/tools/mcp", "/default/mcp/tools", "/mcp"),
        ("/team/modelapi/m/v1/models", "/team/modelapi/m", "/v1/models"),
        ("/default/agent/a/memory/events/x/y", "/default/agent/a", "/memory/events/x/y"),
    ],
)
def test_prefix_is_stripped(path, prefix, rest):
    matched = match_route(ROUTES, path)
    assert matched is not None
    assert matched[0].prefix == prefix
    assert matched[1] == rest


@pytest.mark.parametrize(
    "path",
    ["/", "", "/default", "/default/agent", "/default/agent/ab/v1", "/default/agent/b", "/other/agent/a/v1", "x/a/b/c"],
)
def test_unknown_paths_do_not_match(path):
    assert match_route(ROUTES, path) is None


def test_routes_come_from_the_plans_with_their_timeouts():
    graph = load_text(
        """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m}
spec: {mode: Scripted, gatewayRoute: {timeout: 7s}}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: t, namespace: team}
spec: {type: python-runtime, config: {toolsString: "def f() -> int:\\n    return 1\\n"}}
""",
        "inline.yaml",
    )
    ports = {("ModelAPI", "default", "m"): 5001, ("MCPServer", "team", "t"): 5002}
    routes = routes_from_plans(plan_workloads(graph, Loopback(ports)).values())
    assert routes == {
        "/default/modelapi/m": GatewayRoute("/default/modelapi/m", "http://127.0.0.1:5001", 7.0),
        "/team/mcp/t": GatewayRoute("/team/mcp/t", "http://127.0.0.1:5002", 30.0),
    }


def test_a_first_crash_restarts_at_once_and_repeated_ones_back_off_up_to_30_seconds():
    assert backoff_delays() == [0, 1, 2, 4, 8, 16, 30]


def test_children_get_only_their_plan_kora_settings():
    env = child_environment({"PATH": "/bin", "AGENT_NAME": "leak", "MODEL_API_URL": "x"}, {"AGENT_NAME": "a"})
    assert env == {"PATH": "/bin", "AGENT_NAME": "a", "PYTHONUNBUFFERED": "1"}
