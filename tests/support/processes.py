"""Kora's commands as real processes on 127.0.0.1, for tests that need a whole process (its own event loop,
its own memory to measure): ``kora model``, ``kora agent``, ``kora mcp``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
KORA = [sys.executable, "-m", "kora.cli"]

#: Prefixes of the settings Kora's commands read: a test's process gets none of the invoking shell's.
SETTING_PREFIXES = ("AGENT_", "MODEL_", "MCP_", "MEMORY_", "A2A_", "TASK_", "DELEGATION_", "OTEL_")


def kora_environ(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without Kora's settings, plus ``env``, with the repository importable."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return clean | dict(env)


def wait_healthy(url: str, process: subprocess.Popen[bytes], within: float = 60) -> None:
    """Poll ``url`` (a health endpoint) until it answers 200; ``AssertionError`` if the process exits first or
    after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode} before {url} answered")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        time.sleep(0.02)
    raise AssertionError(f"{url} did not answer 200 within {within} s")


@contextlib.contextmanager
def kora_process(args: list[str], env: Mapping[str, str], health_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``kora ARGS`` with ``env`` (see :func:`kora_environ`), yielded once ``health_url`` answers 200; terminated
    (killed after 10 s) on exit. Its output is discarded: the tests look at what it serves."""
    process = subprocess.Popen(
        [*KORA, *args], env=kora_environ(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(health_url, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` of ``/proc/<pid>/status``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
