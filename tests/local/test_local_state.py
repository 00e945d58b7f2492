"""How `kora status | logs | chat | down` find the run they act on, and what they say when nothing runs."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kora.cli import main
from kora.local.state import READY, STOPPED, UpState, WorkloadState, locate, write_state

pytestmark = pytest.mark.unit


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid no longer exists
    return child.pid


def _run(state_dir: Path, *, alive: bool, started_at: float = 0.0, stopped: bool = False) -> UpState:
    state = UpState(
        pid=os.getpid() if alive else _dead_pid(),
        gateway_url=f"http://127.0.0.1:{8080 + int(started_at)}",
        started_at=started_at,
        stopped=stopped,
    )
    state.workloads.append(
        WorkloadState("assistant", "Agent", "default", "http://g/a", "http://d", str(state_dir / "a.log"), phase=READY)
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    write_state(state_dir, state)
    return state


def test_the_run_the_quickstart_keeps_in_a_sub_directory_is_found(tmp_path: Path):
    root = tmp_path / ".kora"
    _run(root / "quickstart", alive=True)
    located = locate(None, root)
    assert located.state_dir == root / "quickstart"
    assert located.state.running


def test_the_live_run_wins_over_stopped_ones(tmp_path: Path):
    root = tmp_path / ".kora"
    _run(root, alive=False, started_at=9.0)
    _run(root / "old", alive=True, started_at=1.0, stopped=True)  # marked stopped: its pid is not looked at
    _run(root / "quickstart", alive=True, started_at=5.0)
    assert locate(None, root).state_dir == root / "quickstart"


def test_with_nothing_alive_the_latest_run_is_taken(tmp_path: Path):
    root = tmp_path / ".kora"
    _run(root, alive=False, started_at=1.0)
    _run(root / "quickstart", alive=False, started_at=2.0)
    located = locate(None, root)
    assert located.state_dir == root / "quickstart"
    assert not located.state.running


def test_several_live_runs_are_listed_with_the_option_to_pick_one(tmp_path: Path):
    root = tmp_path / ".kora"
    _run(root, alive=True, started_at=1.0)
    _run(root / "quickstart", alive=True, started_at=2.0)
    with pytest.raises(ValueError, match="2 kora up runs here; pick one with --state-dir") as raised:
        locate(None, root)
    assert f"--state-dir {root / 'quickstart'} (pid {os.getpid()}, http://127.0.0.1:8082)" in str(raised.value)


def test_no_state_anywhere_says_nothing_runs(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nothing runs here"):
        locate(None, tmp_path / ".kora")
    with pytest.raises(FileNotFoundError, match="no kora up state in"):
        locate(tmp_path / "named", tmp_path / ".kora")


def test_a_named_state_dir_is_taken_as_is(tmp_path: Path):
    _run(tmp_path / ".kora", alive=True)
    _run(tmp_path / "elsewhere", alive=False)
    assert locate(tmp_path / "elsewhere", tmp_path / ".kora").state_dir == tmp_path / "elsewhere"


def test_a_stopped_run_shows_every_workload_stopped():
    state = UpState(pid=1, gateway_url="http://g", started_at=0.0, stopped=True)
    state.workloads.append(WorkloadState("a", "Agent", "default", "g", "d", "l", phase=READY, pid=7, message="m"))
    shown = state.as_stopped()
    assert [(w.phase, w.pid, w.message) for w in shown.workloads] == [(STOPPED, None, "")]
    assert state.workloads[0].phase == READY, "the original is left alone"


def test_bare_commands_find_the_run_and_say_when_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / ".kora" / "quickstart", alive=True)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "running" in out
    assert "Ready" in out
    assert ".kora/quickstart" in out
    assert main(["chat", "nobody"]) == 2
    assert "'nobody' is not a workload" in capsys.readouterr().err

    _run(tmp_path / ".kora" / "quickstart", alive=True, stopped=True)  # what kora up writes last
    assert main(["status"]) == 1
    captured = capsys.readouterr()
    assert "kora status: nothing runs (the last kora up" in captured.err
    assert "Ready" not in captured.out
    assert STOPPED in captured.out
    assert main(["down"]) == 1
    assert "kora down: nothing runs" in capsys.readouterr().err
    assert main(["chat", "assistant"]) == 1
    assert "kora chat: nothing runs" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ctrl_d_in_chat_ends_the_prompt_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    _run(tmp_path / ".kora", alive=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", _Terminal(""))  # a terminal at once at end of input: Ctrl-D
    assert main(["chat", "assistant"]) == 0
    assert capsys.readouterr().out == "you > \n"
