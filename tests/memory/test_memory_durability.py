"""The real ``kora memory`` command as a subprocess: what survives ``kill -9`` and restarts. A fact extraction cut
short by ``kill -9`` (its model request in flight) has written nothing and runs again after a restart, once the dead
worker's lease on it has passed, so the turn's facts still appear. With ``local`` storage the embedded Postgres and
its data outlive the service: a clean stop, a ``kill -9`` and a start again find everything stored before, and a
clean stop after a crash still stops the embedded Postgres. Killed as a container is (the service and its Postgres
at once, mid-write), a restart in a new container whose processes took the dead server's pid comes back ready by
itself, with every acknowledged write; killed so during its first ``initdb``, it initialises again and serves.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from kora.core.net import free_port
from kora.scripted.script import Match, Rule, TextReply
from tests.support.eventually import eventually_async
from tests.support.memory import (
    ADMIN,
    CREDENTIALS,
    eventually,
    model_env,
    servers_of,
    service_env,
    start_memory_cli,
    wait_until_ready,
)
from tests.support.pidns import kill_namespace, start_in_pid_namespace
from tests.support.processes import KORA, kora_environ
from tests.support.scripted_server import ScriptedModelServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APP = "assistant"
TURN = {
    "app_name": APP,
    "user_id": "alice",
    "events": [
        {"event_type": "user_message", "content": "I live in Paris."},
        {"event_type": "agent_response", "content": "Lovely."},
    ],
}
PARIS = TextReply('{"facts": ["The user lives in Paris."]}')


@contextmanager
def running(env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``kora memory`` on a free port, ready; stopped with SIGTERM at the end unless the test killed it."""
    port = free_port()
    process = start_memory_cli(port, env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, timeout=120.0)
        yield process, url
    except BaseException:
        print(log.read_text(errors="replace"))
        raise
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


async def facts_of(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
        response = await client.get("/v1/facts", params={"scope": "user", "user_id": "alice"})
        assert response.status_code == 200, response.text
        return [fact["text"] for fact in response.json()["facts"]]


async def test_an_extraction_cut_by_kill_9_runs_again_after_restart(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    # The first extraction's answer never comes in time: the process is killed while it waits for it.
    model.enqueue(TextReply(PARIS.text, delay_seconds=120.0))
    model.load_script(
        [Rule(Match(user_matches="^New fact: "), TextReply('{"contradicted": []}')), Rule(Match(), PARIS)]
    )
    # A short lease: the job claimed by the killed process is due again 3 s after its last renewal.
    env = service_env(memory_db, **model_env(model.url), workers="1", job_lease_seconds="3")
    log = tmp_path / "memory.log"
    with running(env, log) as (process, url):
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            response = await client.post("/v1/sessions/s1/events", json=TURN)
            assert response.status_code == 200, response.text
        assert await asyncio.to_thread(model.model.wait_for_requests, 1, 60.0)
        process.kill()
        process.wait(timeout=30)
    async with await psycopg.AsyncConnection.connect(memory_db) as conn:
        rows = await (await conn.execute("SELECT kind, status, attempts FROM jobs")).fetchall()
        facts_stored = await (await conn.execute("SELECT count(*) FROM facts")).fetchone()
    # The claim died with the process: the job is still queued, not counted as tried, and it stored nothing; it is
    # due again once its lease has passed.
    assert rows == [("extract", "queued", 0)]
    assert facts_stored == (0,)
    with running(env, log) as (_, url):
        assert await eventually(lambda: facts_of(url), "the fact, extracted after the restart") == [
            "The user lives in Paris."
        ]
    extractions = [r for r in model.requests if r.get("response_format", {}).get("json_schema", {}).get("name")]
    assert len([r for r in extractions if r["response_format"]["json_schema"]["name"] == "extracted_facts"]) == 2


def _postgres_pid(pgdata: Path) -> int | None:
    """The pid of the embedded Postgres running on ``pgdata``, or None when none runs."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


async def test_local_storage_keeps_its_data_across_stops_and_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"MEMORY_SERVICE_STORAGE_MODE": "local", "MEMORY_SERVICE_DATA_DIR": str(data), **CREDENTIALS}
    log = tmp_path / "memory.log"

    async def stored(url: str) -> tuple[list[object], list[str]]:
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            events = (await client.get("/v1/sessions/s1/events", params={"app_name": APP})).json()["events"]
        return [e["content"] for e in events], await facts_of(url)

    try:
        with running(env, log) as (_, url):
            async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
                assert (await client.post("/v1/sessions/s1/events", json=TURN)).status_code == 200
                fact = {"content": "The user lives in Paris.", "app_name": APP, "user_id": "alice"}
                assert (await client.post("/v1/facts", json=fact)).status_code == 200
        # A clean stop stops the embedded Postgres too.
        assert _postgres_pid(data / "pgdata") is None
        with running(env, log) as (process, url):
            assert await stored(url) == (["I live in Paris.", "Lovely."], ["The user lives in Paris."])
            process.kill()
            process.wait(timeout=30)
        # Killed, the service could not stop Postgres; the next start joins it, and finds the data.
        assert _postgres_pid(data / "pgdata") is not None
        with running(env, log) as (_, url):
            assert await stored(url) == (["I live in Paris.", "Lovely."], ["The user lives in Paris."])
        # And a clean stop after a crash still stops it.
        assert _postgres_pid(data / "pgdata") is None
    finally:
        if (pid := _postgres_pid(data / "pgdata")) is not None:  # a failed test must not leave it running
            os.kill(pid, signal.SIGTERM)


async def test_local_storage_comes_back_after_a_container_kill_mid_write(tmp_path: Path) -> None:
    data = tmp_path / "data"
    pgdata = data / "pgdata"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*KORA, "memory", "--host", "127.0.0.1", "--port", str(port)]
    env = kora_environ({"MEMORY_SERVICE_STORAGE_MODE": "local", "MEMORY_SERVICE_DATA_DIR": str(data), **CREDENTIALS})
    log = tmp_path / "memory.log"
    containers = [start_in_pid_namespace(command, env, log)]
    try:
        await asyncio.to_thread(wait_until_ready, url, 120.0)
        acknowledged: list[str] = []
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            fact = {"content": "The user lives in Paris.", "app_name": APP, "user_id": "alice"}
            assert (await client.post("/v1/facts", json=fact)).status_code == 200

            async def write() -> None:
                for n in itertools.count():
                    event = {"event_type": "user_message", "content": f"event {n}"}
                    try:
                        response = await client.post(
                            "/v1/sessions/s1/events", json={"app_name": APP, "user_id": "alice", "events": [event]}
                        )
                    except httpx.HTTPError:
                        return  # the container is gone
                    assert response.status_code == 200, response.text
                    acknowledged.append(event["content"])

            writer = asyncio.create_task(write())

            async def enough_written() -> bool:
                assert not writer.done(), writer
                return len(acknowledged) >= 20

            await eventually(enough_written, "20 acknowledged events")
            # The whole container at once, a write in flight: the service, Postgres' postmaster and its backends.
            kill_namespace(containers[0])
            await writer
        await eventually_async(
            lambda: not servers_of(pgdata),
            "Postgres gone with its container",
            every=0.1,
            explain=lambda: f"still running: {servers_of(pgdata)}",
        )
        # The dead server's lock stays behind, naming a pid that a process of the new container takes.
        stale_pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        containers.append(start_in_pid_namespace(command, env, log, occupy_pid=stale_pid))
        await asyncio.to_thread(wait_until_ready, url, 120.0)
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            response = await client.get("/v1/sessions/s1/events", params={"app_name": APP})
            assert response.status_code == 200, response.text
            stored = [event["content"] for event in response.json()["events"]]
        # Every acknowledged event, in order; the one in flight at the kill may or may not have been kept.
        assert stored[: len(acknowledged)] == acknowledged
        assert len(stored) - len(acknowledged) in (0, 1)
        assert await facts_of(url) == ["The user lives in Paris."]
    except BaseException:
        print(log.read_text(errors="replace"))
        raise
    finally:
        for container in containers:
            if container.poll() is None:
                kill_namespace(container)


async def test_local_storage_comes_back_after_a_container_kill_during_initdb(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*KORA, "memory", "--host", "127.0.0.1", "--port", str(port)]
    env = kora_environ({"MEMORY_SERVICE_STORAGE_MODE": "local", "MEMORY_SERVICE_DATA_DIR": str(data), **CREDENTIALS})
    log = tmp_path / "memory.log"
    containers = [start_in_pid_namespace(command, env, log)]
    try:
        # Killed while initdb writes the first data directory (it has begun: PG_VERSION is there).
        await eventually_async(lambda: any(data.glob("*/PG_VERSION")), "initdb started", every=0.01)
        kill_namespace(containers[0])
        assert not (data / "pgdata" / "PG_VERSION").exists()  # nothing half-made where the server looks
        containers.append(start_in_pid_namespace(command, env, log))
        await asyncio.to_thread(wait_until_ready, url, 120.0)
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            assert (await client.post("/v1/sessions/s1/events", json=TURN)).status_code == 200
            events = (await client.get("/v1/sessions/s1/events", params={"app_name": APP})).json()["events"]
        assert [event["content"] for event in events] == ["I live in Paris.", "Lovely."]
    except BaseException:
        print(log.read_text(errors="replace"))
        raise
    finally:
        for container in containers:
            if container.poll() is None:
                kill_namespace(container)
