"""The official ``openai`` npm SDK (6.30.1, the last line for Node 20) against a real agent: models, a client-tool
round trip, a streamed answer and Responses turns continued by ``previous_response_id``. The package is installed
once into a cache by ``scripts/openai-node/install-openai-node.sh``; a machine without Node or the package fails
with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from kora.scripted import Match, Rule, ToolCall, ToolCallReply
from tests.support.agent import served_agent
from tests.support.scripted_server import ScriptedModelServer

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "tests" / "data" / "openai_node_client.mjs"
INSTALL = REPO / "scripts" / "openai-node" / "install-openai-node.sh"


def node_modules() -> Path:
    result = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1])


def test_the_openai_npm_client_against_an_agent():
    assert shutil.which("node"), "Node.js is needed to run the npm client"
    modules = node_modules()
    rule = Rule(
        Match(user_matches=r"weather in (?P<city>\w+)", tool_available="get_weather", after_tool=False),
        ToolCallReply([ToolCall("get_weather", {"city": "{city}"})]),
    )
    with ScriptedModelServer() as model:
        model.load_script([rule])
        with served_agent(model, "helper") as agent:
            # ES modules resolve packages from the script's folder up: run a copy next to the cached node_modules.
            script = modules.parent / CLIENT.name
            script.write_text(CLIENT.read_text())
            run = subprocess.run(
                ["node", str(script), f"{agent.url}/v1"],
                capture_output=True,
                text=True,
                timeout=120,
                env=os.environ | {"NODE_NO_WARNINGS": "1"},
                check=False,
            )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["models"] == ["helper"]
    assert seen["finish"] == "tool_calls"
    assert (seen["call"]["name"], json.loads(seen["call"]["arguments"])) == ("get_weather", {"city": "Paris"})
    assert seen["answer"] == "Tool result: sunny in Paris"
    assert seen["streamed"] == "You said: hello"
    assert seen["responses"] == ["You said: hello there", "You said: again"]
