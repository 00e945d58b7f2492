"""README's first command, run as a user would: it must hold a conversation in which a tool is called."""

import os
import subprocess
from pathlib import Path

import pytest

from kora.core.net import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_runs_offline_and_shows_a_tool_call(tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_"))}
    env |= {"KORA_QUICKSTART_EXIT": "1", "KORA_GATEWAY_PORT": str(free_port()), "KORA_STATE_DIR": str(state)}
    done = subprocess.run(
        ["bash", "scripts/quickstart.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SCRIPTED model" in done.stdout
    assert "agent > 2 plus 3 is 5." in done.stdout
    assert "tool_call        {'tool_name': 'add', 'args': {'a': 2, 'b': 3}" in done.stdout
    assert "tool_result" in done.stdout
    assert "scripted (offline)" in done.stdout


@pytest.mark.slow
def test_quickstart_talks_to_any_openai_compatible_endpoint_when_given_one(tmp_path):
    from tests.support.scripted_server import ScriptedModelServer

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_"))}
    with ScriptedModelServer(model_name="external-llm") as backend:
        env |= {
            "KORA_QUICKSTART_EXIT": "1",
            "KORA_GATEWAY_PORT": str(free_port()),
            "KORA_STATE_DIR": str(tmp_path / "state"),
            "MODEL_API_URL": backend.url,
            "MODEL_NAME": "external-llm",
            "MODEL_API_KEY": "sk-test",
        }
        done = subprocess.run(
            ["bash", "scripts/quickstart.sh"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Using the real model 'external-llm'" in done.stdout
        # The backend has no script: it echoes, proving the turn went through the Proxy ModelAPI to it.
        assert "agent > You said: What is 2 plus 3?" in done.stdout
        assert backend.requests
        assert backend.requests[0]["model"] == "external-llm"
