"""README's first command, run as a user would: it must hold a conversation in which a tool is called."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kora.core.net import free_port
from tests.support.eventually import eventually
from tests.support.processes import HeaderRecorder

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_runs_offline_and_shows_a_tool_call(tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_"))}
    env |= {"KORA_QUICKSTART_EXIT": "1", "KORA_STATE_DIR": str(state)}
    done = _quickstart("--port", str(free_port()), env=env)
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
    key = f"sk-test-{uuid.uuid4().hex}"
    state = tmp_path / "state"
    backend = ScriptedModelServer(model_name="external-llm")
    recorder = backend.app = HeaderRecorder(backend.app)
    with backend:
        env |= {
            "KORA_QUICKSTART_EXIT": "1",
            "KORA_GATEWAY_PORT": str(free_port()),
            "KORA_STATE_DIR": str(state),
            "MODEL_API_URL": backend.url,
            "MODEL_NAME": "external-llm",
            "MODEL_API_KEY": key,
        }
        done = _quickstart(env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Using the real model 'external-llm'" in done.stdout
        # The backend has no script: it echoes, proving the turn went through the Proxy ModelAPI to it.
        assert "agent > You said: What is 2 plus 3?" in done.stdout
        assert backend.requests
        assert backend.requests[0]["model"] == "external-llm"
    # The key reached the backend, and no file the quickstart left holds it (kora up read it from the environment).
    # (kora up's reachability probe, GET /models, sends none)
    assert {headers.get("authorization") for headers in recorder.headers} - {None} == {f"Bearer {key}"}
    holding = [path for path in state.rglob("*") if path.is_file() and key.encode() in path.read_bytes()]
    assert holding == []


def _quickstart(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/quickstart.sh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_quickstart_fails_loudly_when_its_own_kora_up_cannot_start(tmp_path):
    # Another kora up already runs on `port` with state dir `state`: the quickstart must neither talk to it
    # nor call its run a success, whether it picks the same port or the same state dir.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_", "KORA_"))}
    port, state = free_port(), tmp_path / "state"
    other = subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "up", "examples/quickstart", "--port", str(port), "--state-dir", str(state)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def written() -> bool:
            assert other.poll() is None
            return (state / "state.json").exists()

        eventually(written, "the other kora up's state file", every=0.1)
        env_same_port = env | {"KORA_QUICKSTART_EXIT": "1", "KORA_STATE_DIR": str(tmp_path / "mine")}
        taken = _quickstart("--port", str(port), env=env_same_port)
        assert taken.returncode == 1, taken.stdout
        assert f"kora up: cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert "quickstart: kora up did not start (exit code 2" in taken.stderr
        assert "bash scripts/quickstart.sh --port" in taken.stderr
        assert "agent >" not in taken.stdout, "the demo must not run against the other kora up"

        env_same_state = env | {"KORA_QUICKSTART_EXIT": "1", "KORA_STATE_DIR": str(state)}
        running = _quickstart("--port", str(free_port()), env=env_same_state)
        assert running.returncode == 1, running.stdout
        assert "kora up: already running" in running.stderr
        assert f"kora down --state-dir {state}" in running.stderr
        assert "agent >" not in running.stdout
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=30)


@pytest.mark.slow
def test_quickstart_rejects_an_unknown_option():
    done = _quickstart("--prot", "1", env=dict(os.environ))
    assert done.returncode == 2
    assert "usage: bash scripts/quickstart.sh [--port N]" in done.stderr


@pytest.mark.slow
def test_an_unreachable_model_backend_is_shown_and_answered_with_a_502_not_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_", "KORA_"))}
    backend = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    env |= {
        "KORA_QUICKSTART_EXIT": "1",
        "KORA_STATE_DIR": str(tmp_path / "state"),
        "MODEL_API_URL": backend,
        "MODEL_NAME": "llm",
    }
    done = _quickstart("--port", str(free_port()), env=env)
    assert done.returncode == 1, done.stdout
    assert f"proxy -> {backend} (unreachable: ConnectError" in done.stdout  # kora up's table
    assert "ModelAPI/scripted: backend unreachable" in done.stdout
    assert "quickstart: the agent answered HTTP 502: The model API answered HTTP 502: upstream unreachable" in (
        done.stderr
    )
    assert "Traceback" not in done.stdout + done.stderr
