"""The AG-UI protocol's own client, ``@ag-ui/client`` 1.0.0 (its ``HttpAgent``, under Node), against a real agent's
``POST /ag-ui``: the client checks every event it reads against the protocol's rules (a run starts and finishes,
each message and tool call starts before its content and ends) and keeps the conversation itself, sending it back
whole on each run. A server tool call with its result, then a frontend tool: the run ends with its call pending,
and the next run, carrying the client's result, answers from it. The package is installed once into a cache by
``scripts/ag-ui-node/install-ag-ui-node.sh``; a machine without Node or the package fails with the reason."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.agent.test_ag_ui import RULES, TOOLS
from tests.support.agent import served_agent
from tests.support.mcp import running_mcp, wait_until_ready
from tests.support.node_client import run_node_client
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "tests" / "data" / "ag_ui_node_client.mjs"
INSTALL = REPO / "scripts" / "ag-ui-node" / "install-ag-ui-node.sh"


def test_the_ag_ui_client_runs_a_server_tool_and_a_frontend_tool_on_one_thread():
    thread = f"node-{uuid.uuid4().hex}"
    with ScriptedModelServer() as model, running_mcp({"MCP_TOOLS_STRING": TOOLS}) as tools:
        wait_until_ready(tools.root_url)
        model.load_script(RULES)
        env = {"MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": tools.root_url}
        with served_agent(model, "helper", **env) as agent:
            seen = json.loads(run_node_client(INSTALL, CLIENT, f"{agent.url}/ag-ui", thread))
            stored = agent.event_types(thread)

    added = seen["added"]
    tool_events = ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert added["types"][:5] == tool_events
    assert added["types"][-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert (added["started"]["threadId"], added["started"]["protocolVersion"]) == (thread, "1.0")
    assert (added["toolCall"], added["result"], added["text"]) == ("add", "5", "Tool result: 5")

    asked = seen["asked"]
    assert asked["types"] == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    call = asked["call"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert asked["outcome"] == {"type": "success", "pendingToolCallIds": [call["id"]]}

    assert seen["answered"]["types"][-1] == "RUN_FINISHED"
    assert seen["answered"]["text"] == "Tool result: sunny, 21 C"
    # The client's own record of the thread, and the agent's: the same three turns under the thread's id.
    assert seen["messages"] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    assert stored == [
        *["user_message", "tool_call", "tool_result", "agent_response"],
        *["user_message", "tool_call", "tool_result", "agent_response"],
    ]
