"""The official ``openai`` npm SDK (6.30.1, the last line for Node 20) against a real agent: models, a client-tool
round trip, a streamed answer and Responses turns continued by ``previous_response_id``. The package is installed
once into a cache by ``scripts/openai-node/install-openai-node.sh``; a machine without Node or the package fails
with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kora.scripted import Match, Rule, ToolCall, ToolCallReply
from tests.support.agent import served_agent
from tests.support.node_client import run_node_client
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "tests" / "data" / "openai_node_client.mjs"
INSTALL = REPO / "scripts" / "openai-node" / "install-openai-node.sh"


def test_the_openai_npm_client_against_an_agent():
    rule = Rule(
        Match(user_matches=r"weather in (?P<city>\w+)", tool_available="get_weather", after_tool=False),
        ToolCallReply([ToolCall("get_weather", {"city": "{city}"})]),
    )
    with ScriptedModelServer() as model:
        model.load_script([rule])
        with served_agent(model, "helper") as agent:
            out = run_node_client(INSTALL, CLIENT, f"{agent.url}/v1")
    seen = json.loads(out)
    assert seen["models"] == ["helper"]
    assert seen["finish"] == "tool_calls"
    assert (seen["call"]["name"], json.loads(seen["call"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert seen["answer"] == "Tool result: sunny in Paris"
    assert seen["streamed"] == "You said: hello"
    assert seen["responses"] == ["You said: hello there", "You said: again"]
