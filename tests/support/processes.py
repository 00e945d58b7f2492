"""Kora workloads as real processes for end-to-end tests: a clean environment, ``kora <command>`` run until
healthy and stopped cleanly, request headers recorded in front of an ASGI app, and ``/metrics`` parsed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

KORA = [sys.executable, "-m", "kora.cli"]
ROOT = Path(__file__).resolve().parents[2]

#: Short export delays so spans and metrics arrive within a test's waits (milliseconds).
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300"}


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without any Kora or OpenTelemetry setting, plus ``env``."""
    prefixes = ("AGENT_", "MODEL_", "MCP_", "MEMORY_", "OTEL_", "PEER_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    return base | {"PYTHONPATH": str(ROOT)} | env


@contextlib.contextmanager
def kora_process(args: list[str], env: dict[str, str], health_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``kora <args>`` with ``env`` until ``health_url`` answers; SIGTERM (a clean stop, which flushes) after."""
    process = subprocess.Popen([*KORA, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health_url, timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"kora {' '.join(args)} did not become healthy:\n{output}")
            time.sleep(0.05)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
