"""Helpers for the MCP tool server tests: a real server on 127.0.0.1 and the official MCP client."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from kora.mcp.app import create_app
from kora.mcp.settings import load_mcp_settings
from tests.support.eventually import eventually
from tests.support.threaded import ThreadedServer

REPO_ROOT = Path(__file__).resolve().parents[2]


def running_mcp(environ: Mapping[str, str]) -> ThreadedServer:
    """``kora mcp``'s app for ``environ`` (settings as environment variables), to serve in-process. It answers
    as soon as it is entered; its tool workers may still be starting (see :func:`wait_until_ready`)."""
    return ThreadedServer(create_app(load_mcp_settings(dict(environ))), name="kora-mcp", lifespan="on")


def wait_until_ready(base_url: str, timeout: float = 60) -> None:
    """Poll ``/ready`` until it answers 200 (every tool worker runs); ``AssertionError`` after ``timeout`` s."""
    eventually(
        lambda: httpx.get(f"{base_url}/ready", timeout=5).status_code == 200, f"{base_url} ready", within=timeout
    )


@asynccontextmanager
async def mcp_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """An initialized official-SDK client session on ``url`` (the ``/mcp`` endpoint)."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def start_cli(args: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """``kora mcp ARGS`` as a subprocess with ``env`` added to this process's environment."""
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "mcp", *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(args: list[str], env: Mapping[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``kora mcp ARGS`` to completion (start-up failures exit on their own)."""
    process = start_cli(args, env)
    stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def wait_ready(base_url: str, process: subprocess.Popen[str], timeout: float = 30) -> None:
    """Poll ``/ready`` until it answers 200; ``AssertionError`` at once if the process exits, or after ``timeout``
    seconds."""

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(
                f"kora mcp exited with {process.returncode}: {process.stderr.read() if process.stderr else ''}"
            )
        return httpx.get(f"{base_url}/ready", timeout=1).status_code == 200

    eventually(ready, "kora mcp answering /ready", within=timeout, every=0.1, tolerate=(httpx.HTTPError,))
