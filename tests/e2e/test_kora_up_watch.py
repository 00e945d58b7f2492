"""`kora up --watch` as a user runs it: real processes; manifests edited on disk while it runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kora.local.state import UpState, process_alive
from tests.e2e.test_kora_up import Up, group_alive, kora, start_up, stop
from tests.support.eventually import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODEL = """\
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: scripted}
spec:
  mode: Scripted
  scriptedConfig:
    script:
      - when: {system_matches: 'Persona: (?P<persona>\\w+)', user_matches: '(?i)who are you'}
        reply: {kind: text, text: "I am a {persona}."}
"""


def agent(name: str, persona: str) -> str:
    return (
        "apiVersion: kora.dev/v1alpha1\nkind: Agent\n"
        f"metadata: {{name: {name}}}\n"
        f"spec: {{modelAPI: scripted, model: scripted, instructions: 'Persona: {persona}'}}\n"
    )


TOOLS = """\
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  type: python-runtime
  config:
    toolsString: |
      def add(a: int, b: int) -> int:
          \"\"\"Add two integers.\"\"\"
          return a + b
"""


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Up, Path]]:
    """``kora up --watch`` on a folder: model.yaml, agents.yaml (alpha the pirate, beta the robot)."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "model.yaml").write_text(MODEL)
    (folder / "agents.yaml").write_text(agent("alpha", "pirate") + "---\n" + agent("beta", "robot"))
    up = start_up(str(folder), tmp_path, "--watch")
    try:
        up.all_ready()
        yield up, folder
    finally:
        stop(up)


def pids(state: UpState) -> dict[str, int | None]:
    return {w.name: w.pid for w in state.workloads}


def ask(up: Up, name: str) -> str | None:
    reply = up.agent(name).chat.completions.create(model=name, messages=[{"role": "user", "content": "who are you?"}])
    return reply.choices[0].message.content


def reloads(up: Up) -> int:
    return up.output().count("manifests changed:") + up.output().count("manifests not applied")


def wait_reload(up: Up, seen: int) -> None:
    """Wait until kora up has handled one more change of the files than ``seen``."""

    def reloaded() -> bool:
        assert up.process.poll() is None, up.output()
        return reloads(up) > seen

    eventually(reloaded, "a reload", within=30, every=0.1, explain=up.output)


def write_agents(up: Up, folder: Path, text: str, restarted: str, old_pid: int | None) -> UpState:
    """Save agents.yaml as ``text``; wait until kora up says it restarted Agent ``restarted`` and that agent is
    Ready again with another pid than ``old_pid``."""
    seen = reloads(up)
    (folder / "agents.yaml").write_text(text)
    wait_reload(up, seen)
    assert f"restarted Agent/{restarted}" in up.output()
    return up.wait(
        lambda s: s.workload(restarted).pid not in (None, old_pid) and s.workload(restarted).phase == "Ready",
        what=f"{restarted} restarted and Ready",
    )


def test_editing_an_agent_restarts_only_that_agent(watched: tuple[Up, Path]):
    up, folder = watched
    before = pids(up.state())
    assert ask(up, "alpha") == "I am a pirate."
    state = write_agents(
        up, folder, agent("alpha", "parrot") + "---\n" + agent("beta", "robot"), "alpha", before["alpha"]
    )
    after = pids(state)
    assert after["beta"] == before["beta"]
    assert after["scripted"] == before["scripted"]
    assert not process_alive(before["alpha"])
    assert ask(up, "alpha") == "I am a parrot."
    assert ask(up, "beta") == "I am a robot."


def test_an_added_resource_starts_and_a_removed_one_stops(watched: tuple[Up, Path]):
    up, folder = watched
    before = pids(up.state())
    seen = reloads(up)
    (folder / "tools.yaml").write_text(TOOLS)
    wait_reload(up, seen)
    assert "started MCPServer/tools" in up.output()
    state = up.all_ready()
    assert [w.name for w in state.workloads] == ["scripted", "tools", "alpha", "beta"]
    tools_pid = state.workload("tools").pid
    assert tools_pid is not None
    status = kora("status", "--state-dir", str(up.state_dir), cwd=folder)
    assert "/default/mcp/tools" in status.stdout, status.stdout
    assert {name: pid for name, pid in pids(state).items() if name != "tools"} == before
    seen = reloads(up)
    (folder / "tools.yaml").unlink()
    wait_reload(up, seen)
    assert "stopped MCPServer/tools" in up.output()
    state = up.wait(lambda s: "tools" not in [w.name for w in s.workloads], what="tools gone from the state")
    assert not process_alive(tools_pid)
    assert not group_alive(tools_pid)
    assert pids(state) == before
    assert all(w.phase == "Ready" for w in state.workloads)
    status = kora("status", "--state-dir", str(up.state_dir), cwd=folder)
    assert status.returncode == 0
    assert "/default/mcp/tools" not in status.stdout
    assert "/default/agent/alpha" in status.stdout


def test_an_invalid_manifest_is_reported_and_nothing_stops_until_it_is_fixed(watched: tuple[Up, Path]):
    up, folder = watched
    before = pids(up.state())
    seen = reloads(up)
    # beta names a ModelAPI that does not exist: the loader's message, as `kora up` prints it at start.
    (folder / "agents.yaml").write_text(
        agent("alpha", "pirate") + "---\n" + agent("beta", "robot").replace("modelAPI: scripted", "modelAPI: nowhere")
    )
    wait_reload(up, seen)
    output = up.output()
    assert "invalid manifests" in output
    assert "agents.yaml" in output
    assert "nowhere" in output
    assert "manifests not applied; the workloads keep running" in output
    state = up.state()
    assert pids(state) == before
    assert all(w.phase == "Ready" for w in state.workloads)
    assert ask(up, "beta") == "I am a robot."
    # Fixed (with a new persona for beta): applied.
    state = write_agents(up, folder, agent("alpha", "pirate") + "---\n" + agent("beta", "poet"), "beta", before["beta"])
    assert state.workload("alpha").pid == before["alpha"]
    assert ask(up, "beta") == "I am a poet."
