"""Kora's commands as real processes on 127.0.0.1, for tests that need a whole process (its own event loop, its own
memory to measure, its own telemetry): a clean environment, ``kora <command>`` run until healthy and stopped
cleanly, request headers recorded in front of an ASGI app, ``/metrics`` parsed, RSS read."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.eventually import eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
KORA = [sys.executable, "-m", "kora.cli"]

#: Prefixes of the settings Kora's commands read: a test's process gets none of the invoking shell's.
SETTING_PREFIXES = ("AGENT_", "MODEL_", "MCP_", "MEMORY_", "A2A_", "TASK_", "DELEGATION_", "OTEL_", "PEER_")
#: Short export delays so spans and metrics arrive within a test's waits (milliseconds).
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300"}


def kora_environ(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without Kora's settings, plus ``env``, with the repository importable."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return clean | dict(env)


def clean_env(**env: str) -> dict[str, str]:
    """:func:`kora_environ` with the settings as keyword arguments."""
    return kora_environ(env)


def wait_healthy(
    url: str,
    process: subprocess.Popen[bytes],
    within: float = 60,
    explain: Callable[[], str] | None = None,
    every: float = 0.02,
) -> None:
    """Poll ``url`` (a health or readiness endpoint) every ``every`` seconds until it answers 200;
    ``AssertionError`` if the process exits first or after ``within`` seconds, followed by what ``explain``
    returns then (the process's log, say)."""

    def healthy() -> bool:
        if process.poll() is not None:
            exited = f"{process.args} exited with {process.returncode} before {url} answered"
            raise AssertionError(f"{exited}\n{explain()}" if explain is not None else exited)
        return httpx.get(url, timeout=2).status_code == 200

    eventually(
        healthy, f"{url} answering 200", within=within, every=every, tolerate=(httpx.HTTPError,), explain=explain
    )


@contextlib.contextmanager
def kora_process(args: list[str], env: Mapping[str, str], health_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``kora ARGS`` with ``env`` (its settings; the rest of the environment as :func:`kora_environ` makes it),
    yielded once ``health_url`` answers 200; stopped with SIGTERM (a clean stop, which flushes telemetry), killed
    after 20 s. Its output goes to a temporary file, shown when it fails to become healthy."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen([*KORA, *args], env=kora_environ(env), stdout=output, stderr=subprocess.STDOUT)
        try:
            try:
                wait_healthy(health_url, process)
            except AssertionError as error:
                output.seek(0)
                raise AssertionError(f"{error}; its output:\n{output.read().decode(errors='replace')}") from None
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` of ``/proc/<pid>/status``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


class HeaderRecorder:
    """ASGI wrapper keeping the headers of every HTTP request (lower-case names) before ``app`` answers."""

    def __init__(self, app) -> None:
        self.app = app
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.headers.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


def prometheus(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``GET url`` parsed with prometheus_client's parser: sample name -> [(labels, value)]."""
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def process_gone(pid: int) -> bool:
    """No process ``pid``, or only its zombie (a process reparented to an init that has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return False


def group_members(pgid: int) -> list[int]:
    """The pids of the live (not zombie) processes of process group ``pgid`` (Linux ``/proc``)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(stat.parent.name))
    return members


#: A program that says it runs (an empty file ``running`` in its working directory), then sleeps until killed: a
#: stand-in for a workload. Until a started process runs its own code, its ``/proc/PID/environ`` may still be
#: empty (the kernel fills it in late in ``execve``, after the parent already saw the exec succeed), so a test
#: that reads a process's environment waits for :func:`wait_running` first.
SLEEPER = "open('running', 'w').close()\nimport time\nwhile True: time.sleep(1)"
#: :data:`SLEEPER` deaf to SIGTERM (a workload stuck in a tool): only SIGKILL ends it.
DEAF_SLEEPER = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + SLEEPER


def wait_running(work_dir: Path, within: float = 60) -> None:
    """Wait until a :data:`SLEEPER` started in ``work_dir`` runs; ``AssertionError`` after ``within`` seconds."""
    eventually((work_dir / "running").exists, f"a program started in {work_dir} running", within=within, every=0.02)


#: A parent that starts each child of its JSON argument ([working directory, argv, extra environment] each) in a
#: session of its own, prints their pids and exits without stopping them: what a ``kora up`` killed
#: with SIGKILL leaves behind.
_ABANDON = """
import json, os, subprocess, sys
for cwd, argv, env in json.loads(sys.argv[1]):
    child = subprocess.Popen(argv, cwd=cwd, env=os.environ | env, stdout=subprocess.DEVNULL, start_new_session=True)
    print(child.pid, flush=True)
"""


def abandoned(*children: tuple[Path, list[str], Mapping[str, str]]) -> tuple[int, list[int]]:
    """Start ``children`` ((working directory, argv, variables added to this environment) each; each argv runs
    :data:`SLEEPER` or :data:`DEAF_SLEEPER`) from a parent that exits at once; returns, once every child runs,
    the dead parent's pid and the children's pids (the caller kills them)."""
    spec = json.dumps([[str(cwd), argv, dict(env)] for cwd, argv, env in children])
    parent = subprocess.Popen([sys.executable, "-c", _ABANDON, spec], stdout=subprocess.PIPE, text=True)
    out, _ = parent.communicate(timeout=60)
    assert parent.returncode == 0, f"the abandoning parent failed: {out}"
    for cwd, _argv, _env in children:
        wait_running(cwd)
    return parent.pid, [int(line) for line in out.split()]
