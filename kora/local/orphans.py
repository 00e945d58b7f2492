"""Workloads never outlive their ``kora up``: a kernel-side tie while it runs, a sweep when it starts again.

Two layers, because a process killed with SIGKILL (or one that crashes hard) runs no clean-up code:

1. :func:`die_with_parent` (Linux): the ``preexec_fn`` each workload is started with. In the child, between
   fork and exec, it asks the kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``; kept
   across the exec of ``python``), so a ``kora up`` killed from outside takes its workloads with it and each
   stops the way it stops on ``kora down`` (a workload's own SIGTERM handling ends the tool workers it
   started). Then it closes the race where ``kora up`` died before the ``prctl`` ran: the child's parent is
   then no longer the pid it was forked from, and it exits at once. The kernel ties the signal to the
   *thread* that forked, not the process: workloads must be started from the thread that lives as long as
   ``kora up``, its event loop's (the supervisor starts them there). Other systems have no such call:
   :func:`die_with_parent` is None there, and layer 2 is the only one.
2. :func:`stop_leftovers`: at start, ``kora up`` reads the state file its predecessor left in the same state
   dir; when that ``kora up`` is dead but workloads it recorded still run, they are stopped (SIGTERM to each
   workload's process group, SIGKILL after the grace period) before new ones take their ports, and it says
   so on stderr. A recorded pid is only signalled while it still is a Kora workload of that state dir
   (:func:`is_workload_of`): pids are reused, and a stranger's process must never be hit. What makes a process
   one is the mark ``kora up`` puts in each workload's environment (:func:`workload_mark`), not its command
   line: any program started from a checkout or venv whose path names ``kora`` has ``kora`` in its argv.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from kora.local.state import UpState, WorkloadState, process_alive

__all__ = ["WORKLOAD_MARK", "die_with_parent", "is_workload_of", "leftovers", "stop_leftovers", "workload_mark"]

#: The environment variable ``kora up`` sets on every workload it starts: the workload's working directory
#: (absolute, ``<state dir>/work/<slug>``). No other program sets it, so it tells a workload of a state dir
#: from a process that got a recorded pid later.
WORKLOAD_MARK = "KORA_UP_WORK_DIR"

#: ``<linux/prctl.h>``: set the signal a process gets when its parent (the thread that forked it) dies.
_PR_SET_PDEATHSIG = 1
#: Seconds to wait for leftovers that ignored SIGKILL's predecessor to be gone after SIGKILL (they cannot
#: ignore it; this only bounds the wait for the kernel to finish them).
_KILL_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.05


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child receive ``sig`` when the calling process dies; None off Linux.

    Build it in the parent right before starting the child (it records the parent's pid then): in the child it
    calls ``prctl(PR_SET_PDEATHSIG, sig)`` and exits with status 1 when its parent is already gone (the parent
    died between fork and ``prctl``, so no signal would ever come). Raises ``OSError`` in the child (reported
    by ``subprocess`` as a failed start) when ``prctl`` fails."""
    if not sys.platform.startswith("linux"):
        return None
    # Resolved in the parent: the child between fork and exec should do as little as possible.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def in_child() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")
        if os.getppid() != parent:
            os._exit(1)  # reparented already: kora up is dead and the signal will never come

    return in_child


def leftovers(previous: UpState, state_dir: Path) -> list[WorkloadState]:
    """The workloads of ``previous`` (the state file found in ``state_dir``) that still run although their
    ``kora up`` does not; empty while that ``kora up`` runs (it owns them) or when it stopped cleanly."""
    if previous.running:
        return []
    return [w for w in previous.workloads if w.pid is not None and is_workload_of(w.pid, state_dir)]


def stop_leftovers(state_dir: Path, previous: UpState, grace: float, err: TextIO = sys.stderr) -> list[WorkloadState]:
    """Stop :func:`leftovers` of ``previous``: SIGTERM to each one's process group (it leads its own), SIGKILL
    after ``grace`` seconds to what still runs. Writes one line on ``err`` before and one after; returns the
    workloads it stopped (empty when none was left, and then writes nothing)."""
    found = leftovers(previous, state_dir)
    if not found:
        return []
    names = ", ".join(f"{w.kind}/{w.name} (pid {w.pid})" for w in found)
    print(
        f"kora up: stopping {len(found)} workload(s) left running by a kora up that is gone "
        f"(pid {previous.pid}): {names}",
        file=err,
        flush=True,
    )
    pids = [w.pid for w in found if w.pid is not None]
    for pid in pids:
        _signal_workload(pid, signal.SIGTERM)
    remaining = _wait_gone(pids, grace)
    for pid in remaining:
        _signal_workload(pid, signal.SIGKILL)
    remaining = _wait_gone(remaining, _KILL_WAIT_SECONDS)
    if remaining:
        print(f"kora up: could not stop pid(s) {', '.join(map(str, remaining))}", file=err, flush=True)
    else:
        print(f"kora up: stopped {len(found)} leftover workload(s)", file=err, flush=True)
    return found


def workload_mark(work_dir: Path) -> dict[str, str]:
    """The environment entry that marks a process as the workload working in ``work_dir`` (made absolute):
    ``{WORKLOAD_MARK: "/abs/state/work/<slug>"}``; the supervisor adds it to every workload's environment."""
    return {WORKLOAD_MARK: str(work_dir.resolve())}


def is_workload_of(pid: int, state_dir: Path) -> bool:
    """Whether ``pid`` runs a Kora workload of ``state_dir``: its environment holds :data:`WORKLOAD_MARK` naming
    a working directory under ``state_dir/work``. Read from ``/proc/PID/environ`` on Linux, from ``ps -E``
    (BSD, macOS) elsewhere; a zombie, a missing process or one whose environment this user cannot read (another
    user's) is not one."""
    work_root = state_dir.resolve() / "work"
    proc = Path("/proc") / str(pid)
    if proc.is_dir():
        try:
            if _proc_state(proc) == "Z":
                return False
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's process
            return False
        prefix = f"{WORKLOAD_MARK}=".encode()
        marks = [entry[len(prefix) :] for entry in environ if entry.startswith(prefix)]
        return any(Path(os.fsdecode(mark)).is_relative_to(work_root) for mark in marks)
    try:
        listing = subprocess.run(
            ["ps", "-E", "-ww", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    # ps prints the command, then the environment as space-separated NAME=value words.
    return f" {WORKLOAD_MARK}={work_root}{os.sep}" in listing


def _proc_state(proc: Path) -> str:
    # /proc/PID/stat: "pid (comm) S ...": the state letter follows the last ')' (comm may hold one).
    stat = (proc / "stat").read_text(encoding="utf-8", errors="replace")
    return stat.rsplit(")", 1)[1].split()[0]


def _gone(pid: int) -> bool:
    # A zombie (reparented to an init that has not reaped it yet) is gone for this purpose.
    if not process_alive(pid):
        return True
    proc = Path("/proc") / str(pid)
    with contextlib.suppress(OSError, IndexError):
        return proc.is_dir() and _proc_state(proc) == "Z"
    return False


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids of ``pids`` still running after waiting up to ``seconds`` for all to end."""
    deadline = time.monotonic() + seconds
    remaining = [pid for pid in pids if not _gone(pid)]
    while remaining and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        remaining = [pid for pid in remaining if not _gone(pid)]
    return remaining


def _signal_workload(pid: int, sig: signal.Signals) -> None:
    # The workload leads its own process group (the supervisor starts it in a new session): the group also
    # holds what it started (an MCP server's tool workers).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
