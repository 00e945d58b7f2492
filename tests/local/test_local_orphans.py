"""Workloads never outlive their kora up (kora.local.orphans) with real processes: the kernel's parent-death
signal, the race where the parent is gone before it is set, and the sweep of a killed run's leftovers."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kora.local.orphans import die_with_parent, is_workload_of, leftovers, stop_leftovers, workload_mark
from kora.local.state import UpState, WorkloadState, read_state, write_state
from tests.support.eventually import eventually
from tests.support.processes import DEAF_SLEEPER, SLEEPER, abandoned, process_gone, wait_running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")

#: A child for the parent-death tests: sleeps (it runs in the test's working directory, so leaves no file).
WORKLOAD = "import time\nwhile True: time.sleep(1)"


def run_python(
    code: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``python -c code args`` with the repository importable and ``env`` added to this environment."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=os.environ | {"PYTHONPATH": path} | (env or {}),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids a test started outside its own children; each still running at the end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if not process_gone(pid):
            os.killpg(pid, signal.SIGKILL)


# A parent that starts a child with die_with_parent (as the supervisor does), prints the child's pid and waits.
PARENT = """
import subprocess, sys, time
from kora.local.orphans import die_with_parent
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]], preexec_fn=die_with_parent(), start_new_session=True, stdout=subprocess.DEVNULL
)
print(child.pid, flush=True)
time.sleep(600)
"""


@linux_only
def test_a_child_gets_sigterm_when_its_parent_is_killed(started: list[int]):
    parent = run_python(PARENT, WORKLOAD)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    started.append(child)
    assert not process_gone(child)
    parent.kill()  # SIGKILL: the parent runs no clean-up code
    parent.wait()
    eventually(lambda: process_gone(child), f"child {child} gone after its parent was killed", within=30)


# The race: a child whose parent is already gone when it sets the signal exits instead of running on.
RACE = """
import os
from kora.local.orphans import die_with_parent
hook = die_with_parent()  # records this process as the parent
if (middle := os.fork()) == 0:
    if (grandchild := os.fork()) == 0:
        hook()  # its parent is `middle`, not the recorded one: as if the recorded one had died already
        os._exit(0)
    os._exit(os.waitstatus_to_exitcode(os.waitpid(grandchild, 0)[1]))
print(os.waitstatus_to_exitcode(os.waitpid(middle, 0)[1]), flush=True)
"""


@linux_only
def test_a_child_whose_parent_is_already_gone_exits():
    process = run_python(RACE)
    out, _ = process.communicate(timeout=60)
    assert out.strip() == "1"


@linux_only
def test_the_hook_keeps_a_child_whose_parent_lives():
    probe = "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)"
    out = subprocess.run(
        [sys.executable, "-c", probe], preexec_fn=die_with_parent(), capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(int(signal.SIGTERM))  # PR_GET_PDEATHSIG: kept across exec


def leave_behind(state_dir: Path, *workloads: tuple[str, list[str]], marked: bool = True) -> UpState:
    """Run a kora up that exits leaving ``workloads`` ((name, argv running SLEEPER) each) running in their
    working directories under ``state_dir``, with kora up's mark in their environment unless not ``marked``;
    write and return its state."""
    children = []
    for name, argv in workloads:
        work = state_dir / "work" / f"default-agent-{name}"
        work.mkdir(parents=True, exist_ok=True)
        children.append((work, argv, workload_mark(work) if marked else {}))
    up_pid, pids = abandoned(*children)
    state = UpState(pid=up_pid, gateway_url="http://127.0.0.1:1", started_at=time.time())
    for (name, _argv), pid in zip(workloads, pids, strict=True):
        state.workloads.append(WorkloadState(name, "Agent", "default", "", "", "", phase="Ready", pid=pid))
    write_state(state_dir, state)
    return read_state(state_dir)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_leftovers_of_a_dead_kora_up_are_stopped_and_said_so(tmp_path: Path, started: list[int]):
    previous = leave_behind(tmp_path, ("a", python(SLEEPER)), ("b", python(DEAF_SLEEPER)))
    pids = [w.pid for w in previous.workloads if w.pid is not None]
    started.extend(pids)
    assert [w.name for w in leftovers(previous, tmp_path)] == ["a", "b"]
    err = io.StringIO()
    stopped = stop_leftovers(tmp_path, previous, grace=0.5, err=err)
    assert [w.name for w in stopped] == ["a", "b"]
    # b only by SIGKILL, after the grace period
    eventually(lambda: all(process_gone(pid) for pid in pids), "leftovers gone", within=30)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(
        f"kora up: stopping 2 workload(s) left running by a kora up that is gone (pid {previous.pid})"
    )
    assert f"Agent/a (pid {pids[0]})" in lines[0]
    assert lines[1] == "kora up: stopped 2 leftover workload(s)"


def test_a_reused_pid_that_is_no_kora_workload_is_left_alone(tmp_path: Path, started: list[int]):
    # Another program got the pid: one whose command line names kora (any program of a checkout or venv under a
    # directory named kora, the default clone's), even working in the state dir, but without kora up's mark; or a
    # Kora workload of another state dir.
    clone = tmp_path / "kora" / ".venv" / "bin"
    clone.mkdir(parents=True)
    (clone / "python").symlink_to(sys.executable)
    state_dir = tmp_path / "state"
    previous = leave_behind(state_dir, ("a", [str(clone / "python"), "-c", SLEEPER, "kora"]), marked=False)
    other_work = tmp_path / "other" / "work" / "default-agent-c"
    other_work.mkdir(parents=True)
    elsewhere = run_python(SLEEPER, cwd=other_work, env=workload_mark(other_work))
    wait_running(other_work)
    started.extend([*(w.pid for w in previous.workloads if w.pid is not None), elsewhere.pid])
    previous.workloads.append(WorkloadState("c", "Agent", "default", "", "", "", pid=elsewhere.pid))
    err = io.StringIO()
    assert stop_leftovers(state_dir, previous, grace=0.5, err=err) == []
    assert err.getvalue() == ""
    assert not any(process_gone(pid) for pid in started)
    assert not is_workload_of(elsewhere.pid, state_dir)
    assert is_workload_of(elsewhere.pid, tmp_path / "other")


@linux_only
def test_the_suite_s_orphan_tests_pass_in_a_checkout_whose_path_names_kora(tmp_path: Path):
    # README's test command in a default clone (`git clone ... kora`): the checkout and its venv's python both
    # live under a path naming kora, so every process the tests start has kora in its command line.
    checkout = tmp_path / "kora"
    checkout.symlink_to(ROOT, target_is_directory=True)
    venv = tmp_path / "kora-venv"
    venv.symlink_to(sys.prefix, target_is_directory=True)
    interpreter = venv / Path(sys.executable).relative_to(sys.prefix)
    test = "tests/local/test_local_orphans.py"
    run = subprocess.run(
        [str(interpreter), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not checkout_whose_path", test],
        cwd=checkout,
        env=os.environ | {"PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout


def test_nothing_is_stopped_while_the_recorded_kora_up_runs(tmp_path: Path, started: list[int]):
    previous = leave_behind(tmp_path, ("a", python(SLEEPER)))
    started.extend(w.pid for w in previous.workloads if w.pid is not None)
    previous.pid = os.getpid()  # alive: that kora up owns its workloads
    assert leftovers(previous, tmp_path) == []
    assert stop_leftovers(tmp_path, previous, grace=0.5, err=io.StringIO()) == []
