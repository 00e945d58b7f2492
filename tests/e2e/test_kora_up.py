"""`kora up` as a user runs it: real processes, the local gateway, a real openai client, `kora down`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from kora.core.net import free_port
from kora.local.credentials import read_credentials
from kora.local.orphans import workload_mark
from kora.local.state import UpState, WorkloadState, process_alive, read_state, write_state
from kora.local.up import MEMORY_DIR
from tests.support.access import USER, agent_callers, store_callers, walk_agent_table, walk_store_table
from tests.support.eventually import eventually
from tests.support.memory import servers_of
from tests.support.processes import SLEEPER, abandoned, group_members, process_gone

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def kora(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kora.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class Up:
    process: subprocess.Popen[str]
    state_dir: Path
    gateway: str

    def state(self) -> UpState:
        return read_state(self.state_dir)

    def wait(self, predicate, within: float = 60.0, what: str = "condition") -> UpState:

        def reached() -> UpState | None:
            assert self.process.poll() is None, f"kora up exited: {self.output()}"
            state = self.state()
            return state if predicate(state) else None

        return eventually(
            reached,
            what,
            within=within,
            every=0.1,
            tolerate=(FileNotFoundError, ValueError),
            explain=lambda: f"state: {self.state()}",
        )

    def all_ready(self, within: float = 180.0) -> UpState:
        # Generous: an embedded Postgres's first start on a loaded 2-core machine took over a minute.
        return self.wait(
            lambda s: s.workloads and all(w.phase == "Ready" for w in s.workloads), within=within, what="all Ready"
        )

    def output(self) -> str:
        return (self.state_dir.parent / "up.out").read_text()

    def agent(self, name: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway}/default/agent/{name}/v1", api_key="unused", max_retries=0)

    def token(self, name: str) -> str:
        """The operator token of workload ``name``, as ``kora token`` prints it."""
        command = [sys.executable, "-m", "kora.cli", "token", name, "--state-dir", str(self.state_dir)]
        printed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        return printed.stdout.strip()

    def events(self, agent: str, session_id: str | None = None, headers: dict[str, str] | None = None) -> list[dict]:
        """The agent's events (of ``session_id``), read with its operator token unless ``headers`` say who asks."""
        params = {"session_id": session_id} if session_id else {}
        headers = headers or {"Authorization": f"Bearer {self.token(agent)}"}
        url = f"{self.gateway}/default/agent/{agent}/memory/events"
        response = httpx.get(url, params=params, headers=headers, timeout=10)
        response.raise_for_status()
        return response.json()["events"]


def start_up(example: str, tmp_path: Path, *options: str, state_dir: Path | None = None) -> Up:
    port = free_port()
    state_dir = state_dir or tmp_path / ".kora"
    out = open(tmp_path / "up.out", "w")  # noqa: SIM115 - lives as long as the process
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_"))}
    command = [sys.executable, "-m", "kora.cli", "up", str(ROOT / example), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--state-dir", str(state_dir), *options],
        cwd=tmp_path,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    return Up(process, state_dir, f"http://127.0.0.1:{port}")


def workload_pids(state: UpState) -> list[int]:
    return [w.pid for w in state.workloads if w.pid is not None]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(up: Up) -> None:
    if up.process.poll() is None:
        up.process.send_signal(signal.SIGTERM)
        up.process.wait(timeout=30)


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[Up]:
    up = start_up("examples/quickstart", tmp_path)
    try:
        up.all_ready()
        yield up
    finally:
        stop(up)


def test_quickstart_tool_call_end_to_end_through_the_gateway(quickstart: Up):
    output = quickstart.output()
    assert "scripted (offline)" in output
    assert f"{quickstart.gateway}/default/agent/assistant" in output
    client = quickstart.agent("assistant")
    reply = client.chat.completions.with_raw_response.create(
        model="assistant", messages=[{"role": "user", "content": "what is 2 plus 3"}]
    )
    session = reply.headers["x-session-id"]
    assert reply.parse().choices[0].message.content == "2 plus 3 is 5."
    types = [event["event_type"] for event in quickstart.events("assistant", session)]
    assert "tool_call" in types
    assert "tool_result" in types
    # Streaming passes through the gateway chunk by chunk, in the same session.
    stream = client.chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "what is 4 plus 5"}],
        stream=True,
        extra_headers={"X-Session-ID": session},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "4 plus 5 is 9."
    # The agent tells clients the gateway URL, not its loopback port.
    assert quickstart.state().workload("assistant").gateway_url == f"{quickstart.gateway}/default/agent/assistant"


def test_status_logs_and_chat_commands(quickstart: Up):
    cwd = quickstart.state_dir.parent
    status = kora("status", "--state-dir", str(quickstart.state_dir), cwd=cwd)
    assert status.returncode == 0
    assert "running" in status.stdout
    assert "assistant" in status.stdout
    logs = kora("logs", "scripted", "--state-dir", str(quickstart.state_dir), cwd=cwd)
    assert logs.returncode == 0
    assert "scripted offline model" in logs.stdout
    chat = subprocess.run(
        [sys.executable, "-m", "kora.cli", "chat", "assistant", "--state-dir", str(quickstart.state_dir)],
        input="what is 2 plus 3\nwhat is 1 plus 1\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    assert "assistant > 2 plus 3 is 5." in chat.stdout
    assert "assistant > 1 plus 1 is 2." in chat.stdout
    # One session for the whole chat.
    sessions_url = f"{quickstart.gateway}/default/agent/assistant/memory/sessions"
    # An anonymous caller lists no one's sessions; the operator (kora token) lists every one.
    assert httpx.get(sessions_url, timeout=10).json()["total"] == 0
    operator = {"Authorization": f"Bearer {quickstart.token('assistant')}"}
    sessions = httpx.get(sessions_url, headers=operator, timeout=10).json()
    assert sessions["total"] == 1
    # The promised error paths: unknown workload (2), chat with a non-agent (2), no kora up state (1).
    unknown = kora("logs", "nobody", "--state-dir", str(quickstart.state_dir), cwd=cwd)
    assert unknown.returncode == 2
    assert "nobody" in unknown.stderr
    not_agent = kora("chat", "tools", "--state-dir", str(quickstart.state_dir), cwd=cwd)
    assert not_agent.returncode == 2
    assert "is not an Agent" in not_agent.stderr
    nothing = kora("status", "--state-dir", str(quickstart.state_dir.parent / "no-such-state"), cwd=cwd)
    assert nothing.returncode == 1
    assert "no kora up state" in nothing.stderr


def test_a_killed_workload_is_detected_and_recovers(quickstart: Up):
    old = quickstart.state().workload("tools")
    assert old.pid is not None
    os.kill(old.pid, signal.SIGKILL)
    quickstart.wait(lambda s: s.workload("tools").restarts >= 1, within=10, what="restart counted")
    state = quickstart.all_ready()
    assert state.workload("tools").pid not in (None, old.pid)
    assert "tools" in quickstart.output()
    assert "Failed" in quickstart.output()
    reply = quickstart.agent("assistant").chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "what is 20 plus 22"}]
    )
    assert reply.choices[0].message.content == "20 plus 22 is 42."


def test_multi_agent_delegation_and_kora_down_leaves_nothing(tmp_path: Path):
    up = start_up("examples/multi-agent", tmp_path)
    try:
        state = up.all_ready()
        reply = up.agent("coordinator").chat.completions.with_raw_response.create(
            model="coordinator", messages=[{"role": "user", "content": "what is 6 plus 7"}]
        )
        assert reply.parse().choices[0].message.content == "The math specialist says: 6 plus 7 is 13."
        events = up.events("coordinator", reply.headers["x-session-id"])
        requests = [e for e in events if e["event_type"] == "delegation_request"]
        assert requests, events
        assert requests[0]["content"]["agent"] == "math"
        assert "delegation_response" in [e["event_type"] for e in events]
        assert "task_delegation_received" in [e["event_type"] for e in up.events("math")]
        pids = workload_pids(state)
        assert len(pids) == len(state.workloads) == 6
        down = kora("down", "--state-dir", str(up.state_dir), cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert up.process.wait(timeout=30) == 0
        assert not any(process_alive(pid) or group_alive(pid) for pid in pids)
        assert up.state().stopped
        after = kora("status", "--state-dir", str(up.state_dir), cwd=tmp_path)
        assert after.returncode == 1
        assert "nothing runs" in after.stderr
        assert "Ready" not in after.stdout
    finally:
        stop(up)


def test_budgets_example_stops_a_looping_turn_at_its_tool_call_budget(tmp_path: Path):
    up = start_up("examples/budgets", tmp_path)
    try:
        up.all_ready()
        reply = up.agent("sleepy").chat.completions.with_raw_response.create(
            model="sleepy", messages=[{"role": "user", "content": "count sheep"}]
        )
        choice = reply.parse().choices[0]
        assert choice.finish_reason == "length"
        assert (choice.message.content or "").startswith("budget_exhausted: tool_calls")
        events = up.events("sleepy", reply.headers["x-session-id"])
        results = [e["content"]["content"] for e in events if e["event_type"] == "tool_result"]
        assert results == ["one more sheep"] * 3
        assert events[-1]["content"]["error_type"] == "budget_exhausted"
    finally:
        stop(up)


def test_sigterm_stops_every_child(quickstart: Up):
    pids = workload_pids(quickstart.state())
    quickstart.process.send_signal(signal.SIGTERM)
    assert quickstart.process.wait(timeout=30) == 0
    assert not any(process_alive(pid) or group_alive(pid) for pid in pids)


def test_invalid_manifest_prints_the_loader_message_and_exits_2(tmp_path: Path):
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        "apiVersion: kora.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {model: m, modelAPI: missing}\n"
    )
    done = kora("up", str(manifest), "--port", str(free_port()), "--state-dir", str(tmp_path / ".kora"), cwd=tmp_path)
    assert done.returncode == 2
    assert "invalid manifests" in done.stderr
    assert "bad.yaml" in done.stderr
    assert "missing" in done.stderr


BROKEN_TOOLS = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: scripted}
spec: {mode: Scripted}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  type: python-runtime
  config:
    toolsString: |
      raise RuntimeError("these tools never load")
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: assistant}
spec: {modelAPI: scripted, model: scripted, mcpServers: [tools]}
"""


def test_the_gateway_sends_nothing_to_an_agent_that_is_not_ready(tmp_path: Path):
    # Its tool server fails: the agent runs but is not Ready, so (as a Service without a ready endpoint on a
    # cluster) the gateway answers for it, 503 with the reason, instead of letting it answer without its tools.
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(BROKEN_TOOLS)
    up = start_up(str(manifest), tmp_path)
    try:

        def agent_up_tools_failed(s: UpState) -> bool:
            phases = {w.name: w for w in s.workloads}
            return phases["tools"].phase == "Failed" and phases["assistant"].pid is not None

        state = up.wait(agent_up_tools_failed, what="the tool server Failed, the agent running")
        agent = next(w for w in state.workloads if w.name == "assistant")
        assert agent.phase == "Waiting"
        question = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        # The agent itself would answer (without its tools) ...

        def answers_directly() -> bool:
            try:
                return httpx.post(f"{agent.direct_url}/v1/chat/completions", json=question, timeout=30).is_success
            except httpx.TransportError:  # still starting
                return False

        eventually(answers_directly, "the agent answering directly", within=60)
        # ... the gateway does not ask it.
        with pytest.raises(openai.APIStatusError) as raised:
            up.agent("assistant").chat.completions.create(**question)
        assert raised.value.status_code == 503
        error = raised.value.body
        assert isinstance(error, dict)
        assert error["code"] == "not_ready"
        assert error["message"].startswith("Agent/assistant is not Ready (Waiting: ")
        assert "kora logs assistant" in error["message"]
    finally:
        stop(up)


# Runs kora's command line with a real Ctrl-C (SIGINT to itself) sent once, as ``import MODULE`` begins: a point of
# kora up's start-up chosen by what it imports there, the same on a fast machine and a loaded one. SIGINT is given
# Python's own handler first, as in a terminal: a test run started in the background of a non-interactive shell
# inherits SIGINT ignored, and Python then installs no handler, so the Ctrl-C would be ignored as such a shell asks.
_CTRL_C_AT_IMPORT = """
import builtins, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
module = sys.argv.pop(1)
real_import = builtins.__import__
def import_after_ctrl_c(name, *args, **kwargs):
    if name == module and builtins.__import__ is import_after_ctrl_c:
        builtins.__import__ = real_import
        print("test: Ctrl-C", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = import_after_ctrl_c
sys.argv[0] = "kora"
runpy.run_module("kora.cli", run_name="__main__")
"""


def ctrl_c_at_import(module: str, tmp_path: Path) -> tuple[int, list[str]]:
    """Run ``kora up examples/quickstart`` with a Ctrl-C as it imports ``module``; returns the exit code and what
    it said on stderr (the Ctrl-C's own line first)."""
    command = [sys.executable, "-c", _CTRL_C_AT_IMPORT, module, "up", str(ROOT / "examples/quickstart")]
    done = subprocess.run(
        [*command, "--port", str(free_port()), "--state-dir", str(tmp_path / ".kora")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    assert said[:1] == ["test: Ctrl-C"], done.stderr
    return done.returncode, said[1:]


def test_a_ctrl_c_while_kora_up_still_imports_is_one_line_not_a_traceback(tmp_path: Path):
    # uvicorn comes among the imports of kora up's module, before kora up has any handler of its own.
    code, said = ctrl_c_at_import("uvicorn", tmp_path)
    assert (code, said) == (130, ["kora up: interrupted"])


def test_a_ctrl_c_before_the_workloads_start_stops_kora_up_before_it_starts_any(tmp_path: Path):
    # uvloop is imported as kora up makes its event loop: after it took over Ctrl-C, before it serves or starts
    # anything. Ctrl-C there once made asyncio cancel the run part-way through starting (a traceback, or kora up
    # running on and deaf to that Ctrl-C).
    code, said = ctrl_c_at_import("uvloop", tmp_path)
    assert (code, said) == (130, ["kora up: interrupted"])
    state_dir = tmp_path / ".kora"
    assert not (state_dir / "logs").exists() or not any((state_dir / "logs").iterdir())


def test_a_secret_in_neither_the_manifests_nor_the_shell_is_one_message_saying_how_to_give_it(tmp_path: Path):
    manifest = tmp_path / "real.yaml"
    manifest.write_text(
        "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: llm}\nspec:\n  mode: Proxy\n"
        "  proxyConfig:\n    apiBase: 'http://127.0.0.1:9/v1'\n"
        "    apiKey: {valueFrom: {secretKeyRef: {name: openai, key: k}}}\n"
    )
    up = ["up", str(manifest), "--port", str(free_port()), "--state-dir", str(tmp_path / ".kora")]
    done = kora(*up, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "kora up: ModelAPI/llm: Secret default/openai key 'k' is not in the manifests; add a v1 Secret document "
        "'openai' with that key (stringData), or give it from your shell: kora up --secret-env openai/k=VARIABLE "
        "(docs/local.md, 'Secrets')"
    ]
    unset = kora(*up, "--secret-env", "openai/k=KORA_TEST_UNSET_KEY", cwd=tmp_path)
    assert unset.returncode == 2
    assert unset.stderr.splitlines() == [
        "kora up: --secret-env openai/k=KORA_TEST_UNSET_KEY: the variable KORA_TEST_UNSET_KEY is not set (or empty) "
        "in this shell"
    ]


@pytest.mark.embeddings
def test_a_hosted_minilm_serves_embeddings_through_the_gateway(tmp_path: Path):
    manifest = tmp_path / "embedder.yaml"
    manifest.write_text(
        "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: embedder}\n"
        "spec: {mode: Hosted, hostedConfig: {model: all-MiniLM-L6-v2}}\n"
    )
    up = start_up(str(manifest), tmp_path)
    try:
        # Ready only once the weights have loaded (its readiness probe is /ready).
        state = up.wait(lambda s: s.workloads and s.workloads[0].phase == "Ready", within=180, what="Ready")
        assert state.workloads[0].note == "hosted: all-MiniLM-L6-v2 (embeddings)"
        client = openai.OpenAI(base_url=f"{up.gateway}/default/modelapi/embedder/v1", api_key="unused", max_retries=0)
        response = client.embeddings.create(model="all-MiniLM-L6-v2", input=["memory", "recall"])
        assert [len(item.embedding) for item in response.data] == [384, 384]
    finally:
        stop(up)


def test_hosted_model_api_is_failed_with_what_is_missing(tmp_path: Path):
    manifest = tmp_path / "hosted.yaml"
    manifest.write_text(
        "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: local}\n"
        "spec: {mode: Hosted, hostedConfig: {model: llama3}}\n"
    )
    up = start_up(str(manifest), tmp_path)
    try:
        state = up.wait(lambda s: s.workloads and s.workloads[0].phase == "Failed", within=30, what="Failed")
        assert "Hosted is not supported for model 'llama3'" in state.workloads[0].message
        assert "inference server" in state.workloads[0].message
        assert state.workloads[0].note == "hosted: not supported"
    finally:
        stop(up)


async def test_the_a2a_sdk_client_reaches_the_agent_through_the_gateway(quickstart: Up):
    from a2a.types.a2a_pb2 import TaskState

    from tests.support.a2a import sdk_client, user_message

    agent_url = f"{quickstart.gateway}/default/agent/assistant"
    card = httpx.get(f"{agent_url}/.well-known/agent.json", timeout=10).json()
    assert card["url"].rstrip("/") == agent_url, "the card must name the gateway URL clients can reach"
    client = await sdk_client(agent_url)
    (response,) = [r async for r in client.send_message(user_message("what is 20 plus 22", context_id="a2a-ctx"))]
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert response.task.artifacts[0].parts[0].text == "20 plus 22 is 42."
    types = [event["event_type"] for event in quickstart.events("assistant", "a2a-ctx")]
    assert types == ["user_message", "tool_call", "tool_result", "agent_response"]


#: The user examples/memory's agent trusts, in the header its README sends.
MEMORY_USER = {"X-Forwarded-User": "ana"}


def ask_in_a_new_session(up: Up, question: str, headers: dict[str, str]) -> str:
    reply = up.agent("assistant").chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": question}], extra_headers=headers
    )
    return reply.choices[0].message.content or ""


def test_memory_example_recalls_across_sessions_and_keeps_its_data_across_kora_up(tmp_path: Path):
    # What the example's header and README promise: tell it something, then in a new session ask.
    up = start_up("examples/memory", tmp_path)
    try:
        up.all_ready()
        client = up.agent("assistant")
        first = client.chat.completions.with_raw_response.create(
            model="scripted",
            messages=[{"role": "user", "content": "Hello! I live in Lisbon."}],
            extra_headers=MEMORY_USER,
        )
        session = first.headers["x-session-id"]
        store = f"{up.gateway}/default/memorystore/memory"
        admin = {"Authorization": f"Bearer {up.token('memory')}"}
        assert httpx.get(f"{store}/v1/facts", timeout=10).status_code == 401  # the store is private by default

        def facts() -> list[str]:
            return [fact["text"] for fact in httpx.get(f"{store}/v1/facts", headers=admin, timeout=10).json()["facts"]]

        eventually(
            lambda: facts() == ["I live in Lisbon."], "the fact extracted", every=0.2, explain=lambda: str(facts())
        )
        events = up.events("assistant", session, MEMORY_USER)
        assert [e["event_type"] for e in events] == ["user_message", "agent_response"]
        assert ask_in_a_new_session(up, "Where do I live?", MEMORY_USER).startswith("From my memory: - (")
        assert "I live in Lisbon." in ask_in_a_new_session(up, "Where do I live?", MEMORY_USER)
        # Another user, and an anonymous request, recall nothing of ana's.
        assert "Lisbon" not in ask_in_a_new_session(up, "Where do I live?", {"X-Forwarded-User": "bo"})
        assert "Lisbon" not in ask_in_a_new_session(up, "Where do I live?", {})
    finally:
        stop(up)
    # The store's data lives in kora up's state directory: a new kora up finds it.
    again = start_up("examples/memory", tmp_path)
    try:
        # The state file of the first run still says Ready: wait for this run's store to answer through its gateway.
        again.wait(lambda s: s.pid == again.process.pid, what="this run's state")
        again.all_ready()
        url = f"{again.gateway}/default/memorystore/memory/v1/facts"

        def answered() -> httpx.Response | None:
            response = httpx.get(url, headers=admin, timeout=10)  # the token is kept across runs
            return response if response.status_code == 200 else None

        response = eventually(answered, "the store back", every=0.2, tolerate=(httpx.HTTPError,))
        assert [fact["text"] for fact in response.json()["facts"]] == ["I live in Lisbon."]
        assert "I live in Lisbon." in ask_in_a_new_session(again, "Where do I live?", MEMORY_USER)
    finally:
        stop(again)


def test_a_memory_store_killed_with_its_postgres_comes_back_with_its_data(tmp_path: Path):
    up = start_up("examples/memory", tmp_path)
    try:
        up.all_ready()
        client = up.agent("assistant")
        reply = client.chat.completions.with_raw_response.create(
            model="scripted", messages=[{"role": "user", "content": "Hello! I live in Lisbon."}]
        )
        session = reply.headers["x-session-id"]
        facts_url = f"{up.gateway}/default/memorystore/memory/v1/facts"
        admin = {"Authorization": f"Bearer {up.token('memory')}"}

        def facts() -> list[str]:
            try:
                response = httpx.get(facts_url, headers=admin, timeout=10)
            except httpx.HTTPError:
                return []
            return [fact["text"] for fact in response.json()["facts"]] if response.status_code == 200 else []

        eventually(lambda: facts() == ["I live in Lisbon."], "the fact extracted", within=60)
        events = [(e["event_type"], e["content"]) for e in up.events("assistant", session)]
        pgdata = up.state_dir / MEMORY_DIR / "default" / "memory" / "pgdata"
        servers = servers_of(pgdata)
        assert servers, f"no embedded Postgres runs in {pgdata}"
        old = up.state().workload("memory")
        assert old.pid is not None
        # As a container kill does: the service's process group and its Postgres (a session of its own) at once.
        os.killpg(old.pid, signal.SIGKILL)
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        up.wait(lambda s: s.workload("memory").restarts >= 1, within=60, what="the store restarted")
        up.all_ready()
        assert up.state().workload("memory").pid not in (None, old.pid)
        eventually(lambda: facts() == ["I live in Lisbon."], "the fact back after the kill", within=120)
        assert [(e["event_type"], e["content"]) for e in up.events("assistant", session)] == events
    finally:
        stop(up)


def test_a_memory_store_killed_at_the_stop_leaves_no_postgres_running(tmp_path: Path):
    # A memory service that cannot stop within the grace period is killed and never lets go of its embedded
    # Postgres (a session of its own): kora up stops that server itself.
    up = start_up("examples/memory", tmp_path, "--grace", "1")
    try:
        up.all_ready()
        pgdata = up.state_dir / MEMORY_DIR / "default" / "memory" / "pgdata"
        assert servers_of(pgdata), f"no embedded Postgres runs in {pgdata}"
        memory = up.state().workload("memory").pid
        assert memory is not None
        os.kill(memory, signal.SIGSTOP)  # deaf to SIGTERM until SIGKILL ends it
    finally:
        stop(up)
    assert up.process.returncode == 0, up.output()
    eventually(lambda: not servers_of(pgdata), "the embedded Postgres stopped", within=60)


def test_a_kora_up_killed_with_sigkill_leaves_no_workload_running(quickstart: Up):
    # Linux: the kernel sends each workload SIGTERM when kora up dies (PR_SET_PDEATHSIG); it stops as on kora down.
    state = quickstart.state()
    pids = workload_pids(state)
    assert len(pids) == len(state.workloads)
    quickstart.process.kill()
    quickstart.process.wait(timeout=30)
    eventually(
        lambda: all(process_gone(pid) and not group_members(pid) for pid in pids),
        f"every workload of {pids} (and what it started) gone",
        within=60,
    )


def test_kora_up_stops_the_workloads_a_killed_kora_up_left_behind(tmp_path: Path):
    # What a kora up killed without the parent-death signal (not Linux) leaves: a workload still running, in its
    # working directory, recorded in the state file with the dead kora up's pid.
    state_dir = tmp_path / ".kora"
    work = state_dir / "work" / "default-agent-assistant"
    work.mkdir(parents=True)
    up_pid, [leftover] = abandoned((work, [sys.executable, "-c", SLEEPER], workload_mark(work)))
    try:
        previous = UpState(pid=up_pid, gateway_url="http://127.0.0.1:1", started_at=time.time())
        previous.workloads.append(WorkloadState("assistant", "Agent", "default", "", "", "", "", "Ready", "", leftover))
        write_state(state_dir, previous)
        up = start_up("examples/quickstart", tmp_path)
        try:
            mine = up.process.pid
            up.wait(lambda s: s.pid == mine and all(w.phase == "Ready" for w in s.workloads), what="the new run Ready")
            assert process_gone(leftover)
            assert f"stopping 1 workload(s) left running by a kora up that is gone (pid {up_pid})" in up.output()
            assert f"Agent/assistant (pid {leftover})" in up.output()
        finally:
            stop(up)
    finally:
        if not process_gone(leftover):
            os.killpg(leftover, signal.SIGKILL)


def test_the_access_tables_hold_through_kora_ups_gateway(tmp_path: Path):
    # examples/memory, its agent told who its users are by a trusted header (docs/identity.md).
    manifest = (ROOT / "examples" / "memory" / "kora.yaml").read_text(encoding="utf-8")
    manifest = manifest.replace(
        "    memory:\n      enabled: true",
        f"    env: [{{name: AUTH_TRUSTED_USER_HEADER, value: {USER}}}]\n    memory:\n      enabled: true",
    )
    assert USER in manifest
    (tmp_path / "memory.yaml").write_text(manifest, encoding="utf-8")
    up = start_up(str(tmp_path / "memory.yaml"), tmp_path)
    try:
        up.all_ready()
        tokens = read_credentials(up.state_dir)
        assert oct((up.state_dir / "credentials.json").stat().st_mode & 0o777) == "0o600"
        store_admin = tokens["default/memorystore-memory-credentials/admin-token"]
        store_agent = tokens["default/memorystore-memory-credentials/agent-token"]
        assert up.token("memory") == store_admin
        walk_agent_table(f"{up.gateway}/default/agent/assistant", agent_callers(up.token("assistant"), store_agent))
        walk_store_table(f"{up.gateway}/default/memorystore/memory", store_callers(store_admin, store_agent))
    finally:
        stop(up)


def test_approvals_example_pauses_a_deletion_until_it_is_approved(tmp_path: Path):
    up = start_up("examples/approvals", tmp_path)
    try:
        up.all_ready()
        client = up.agent("janitor")
        ask = [{"role": "user", "content": "delete notes.txt"}]
        reply = client.chat.completions.with_raw_response.create(model="janitor", messages=ask)
        session = reply.headers["x-session-id"]
        message = reply.parse().choices[0].message
        assert reply.parse().choices[0].finish_reason == "tool_calls"
        [call] = message.tool_calls
        assert call.model_dump()["kora_approval"]["target"] == "files/delete_file"
        listed = httpx.get(f"{up.gateway}/default/agent/janitor/approvals", params={"session_id": session}, timeout=10)
        [approval] = listed.json()["approvals"]
        assert approval["arguments"] == {"name": "notes.txt"}

        decision = {"role": "tool", "tool_call_id": call.id, "content": '{"decision": "approve"}'}
        done = client.chat.completions.create(
            model="janitor",
            messages=[*ask, message.model_dump(exclude_none=True), decision],
            extra_headers={"X-Session-ID": session},
        )
        assert done.choices[0].message.content == "About notes.txt: deleted notes.txt"
        events = up.events("janitor", session)
        assert [e["content"]["content"] for e in events if e["event_type"] == "tool_result"] == ["deleted notes.txt"]

        # A tool no pattern names runs at once.
        listing = client.chat.completions.create(model="janitor", messages=[{"role": "user", "content": "list files"}])
        assert listing.choices[0].message.content == "Files: notes.txt, todo.txt"
    finally:
        stop(up)


def test_kora_chat_shows_a_call_waiting_for_approval_and_how_to_decide_it(tmp_path: Path):
    """docs/approvals.md's example as a user runs it: ``kora chat janitor`` shows the paused turn's call (tool,
    arguments, approval id), the session and the REST route that decides it; once approved there, the chat goes on.
    A message the agent refuses (the session still waits) is printed on stderr and the chat exits 1."""
    up = start_up("examples/approvals", tmp_path)
    try:
        up.all_ready()
        command = [sys.executable, "-m", "kora.cli", "chat", "janitor", "--state-dir", str(up.state_dir)]
        chat = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
        )
        watchdog = threading.Timer(120, chat.kill)  # a chat that never shows the call fails the test, not hangs it
        watchdog.start()
        try:
            assert chat.stdin is not None
            assert chat.stdout is not None
            chat.stdin.write("delete notes.txt\n")
            chat.stdin.flush()
            lines = []
            while not lines or "waiting for approval" not in lines[-1]:
                line = chat.stdout.readline()
                assert line, f"kora chat ended: {lines}"
                lines.append(line)
            shown = re.fullmatch(r"  waiting for approval: delete_file\((.*)\) \[(appr_\w+)\]\n", lines[-1])
            assert shown is not None, lines
            assert json.loads(shown.group(1)) == {"name": "notes.txt"}
            approval = shown.group(2)
            agent_url = f"{up.gateway}/default/agent/janitor"
            decided = httpx.post(f"{agent_url}/approvals/{approval}", json={"decision": "approve"}, timeout=60)
            assert decided.status_code == 200, decided.text
            assert decided.json()["turn"]["text"] == "About notes.txt: deleted notes.txt"
            out, err = chat.communicate("list files\n", timeout=60)
        finally:
            watchdog.cancel()
        assert chat.returncode == 0, err
        assert "janitor > Files: notes.txt, todo.txt" in out
        [session] = re.findall(r"kora chat: session (\S+) \(kora chat janitor --session", err)
        assert f"{agent_url}/approvals?session_id={session}" in err
        assert f"curl -s -X POST {agent_url}/approvals/{approval} " in err
        events = up.events("janitor", session)
        assert [e["content"]["content"] for e in events if e["event_type"] == "tool_result"] == [
            "deleted notes.txt",
            "notes.txt, todo.txt",
        ]

        # Piped on without a decision: the second message is refused (the session waits), said, and the exit is 1.
        refused = subprocess.run(
            command, input="delete todo.txt\nlist files\n", capture_output=True, text=True, timeout=60, check=False
        )
        assert refused.returncode == 1, refused.stderr
        assert "waiting for approval: delete_file" in refused.stdout
        assert "(approval_pending)" in refused.stderr
        assert "Files:" not in refused.stdout
    finally:
        stop(up)


async def test_kora_up_keeps_a_sharing_agents_tasks_in_its_memory_stores_embedded_postgres(tmp_path: Path):
    # examples/memory with its agent asking for the shared task store and naming no database of its own.
    import psycopg
    from a2a.types.a2a_pb2 import GetTaskRequest, TaskState

    from kora.resources.wiring import embedded_postgres_url
    from tests.support.a2a import sdk_client, user_message

    example = tmp_path / "shared-tasks"
    example.mkdir()
    manifest = (ROOT / "examples/memory/kora.yaml").read_text()
    config = "  config:\n    description:"
    sharing = manifest.replace(config, "  config:\n    taskStoreType: postgres\n    description:")
    assert sharing != manifest
    (example / "kora.yaml").write_text(sharing)
    # The agent reaches the embedded Postgres over its unix socket in the state dir, whose path must fit a unix
    # socket's 107 bytes: pytest's tmp_path is too deep on some machines, so the state dir is a short one.
    state_dir = Path(tempfile.mkdtemp(prefix="kora-", dir="/tmp"))
    up = start_up(str(example), tmp_path, state_dir=state_dir)
    try:
        up.all_ready()
        async with httpx.AsyncClient(timeout=30, headers=MEMORY_USER) as http:
            client = await sdk_client(f"{up.gateway}/default/agent/assistant", http=http, version="1.0")
            (sent,) = [r async for r in client.send_message(user_message("Hello! I live in Lisbon."))]
            assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
            got = await client.get_task(GetTaskRequest(id=sent.task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
        # The task is a row of the store's own Postgres (schema kora_a2a), next to the memory service's tables.
        database = embedded_postgres_url(up.state_dir / MEMORY_DIR / "default" / "memory")
        with psycopg.connect(database) as conn:
            row = conn.execute("SELECT status->>'state' FROM kora_a2a.tasks WHERE id = %s", (sent.task.id,))
            assert row.fetchone() == ("TASK_STATE_COMPLETED",)
            assert conn.execute("SELECT to_regclass('public.sessions')").fetchone() != (None,)
    finally:
        stop(up)
        shutil.rmtree(state_dir, ignore_errors=True)
