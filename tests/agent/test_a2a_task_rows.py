"""The shared task store's one-statement hot path (:mod:`kora.agent.a2a.task_rows`) against a real Postgres: the
rows it writes are the SDK's own (the SDK's unmodified store reads them back equal), and it keeps the SDK's
compare-and-swap rules, so a stale or second first write loses."""

from __future__ import annotations

import asyncio
import gc
import json
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import (
    ConcurrentTaskModificationError,
    TaskVersion,
    VersionedDatabaseTaskStore,
    VersionedEvent,
)
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskUpdater
from a2a.server.tasks.database_task_store import DatabaseTaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    Artifact,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InternalError
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg_pool import PoolClosed
from sqlalchemy.ext.asyncio import create_async_engine

from kora.agent.a2a import shared as shared_module
from kora.agent.a2a import task_rows
from kora.agent.a2a.shared import OWNER_STATE, SharedTasks, owner_of
from kora.agent.a2a.shared_handler import SharedRequestHandler
from tests.support.eventually import eventually_async
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _collect_garbage_after() -> Iterator[None]:
    """Collect each test's cyclic garbage when it ends (its event loop, pools and connections).

    Left to a later automatic collection, their finalizers can run inside ``compile()``, and CPython 3.11 before
    3.11.8 can then fail that compile with "AST constructor recursion depth mismatch" (the AST constructor kept its
    depth in shared state while a collection let other code run); it struck pytest's assertion rewriting of
    hypothesis at the summary of a run of this module alone.
    """
    yield
    gc.collect()


@pytest.fixture
async def shared(memory_db: str) -> AsyncIterator[SharedTasks]:
    """A replica's shared task store on the test database (lease 30 s, retention an hour), closed after the test."""
    tasks = SharedTasks.open(memory_db, lease_seconds=30, retention_seconds=3600)
    try:
        yield tasks
    finally:
        await tasks.close()


def _context(owner: str = "alice") -> ServerCallContext:
    return ServerCallContext(state={OWNER_STATE: owner})


def _task(task_id: str, state: TaskState) -> Task:
    task = Task(
        id=task_id,
        context_id="context-" + task_id,
        status=TaskStatus(state=state),
        history=[Message(role=Role.ROLE_USER, message_id="m-" + task_id, parts=[Part(text="hello")])],
    )
    task.status.timestamp.GetCurrentTime()
    return task


def _status(task: Task) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)


async def test_a_task_stored_in_one_statement_reads_back_equal_through_the_sdk_and_its_events_are_logged(shared):
    # The SDK's own store on the same tables (search_path kora_a2a), for reading what Kora wrote.
    sdk = VersionedDatabaseTaskStore(shared.engine, create_table=False, owner_resolver=owner_of)
    await shared.start()
    task_id = str(uuid.uuid4())
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v2 = await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    done = _task(task_id, TaskState.TASK_STATE_COMPLETED)
    done.artifacts.append(Artifact(artifact_id="a1", name="answer", parts=[Part(text="hi")]))
    done.metadata.update({"kora": {"turn": 1}})
    artifact = TaskArtifactUpdateEvent(task_id=task_id, context_id=done.context_id, artifact=done.artifacts[0])
    v3 = await shared.store.save(done, event=artifact, prev_version=v2, context=_context())
    assert [v1, v2, v3] == [TaskVersion(1), TaskVersion(2), TaskVersion(3)]

    for store in (shared.store, sdk):
        stored = await store.get(task_id, _context())
        assert stored is not None
        assert stored.task == done
        assert stored.version == v3
    assert await shared.store.get(task_id, _context("mallory")) is None  # filed per owner
    assert await sdk.get(task_id, _context("mallory")) is None
    assert await shared.store.holds(task_id)

    events = [event async for event in _first(shared, task_id, 3)]
    assert [event.version for event in events] == [v1, v2, v3]
    assert events[2].event == artifact


async def _first(shared: SharedTasks, task_id: str, count: int) -> AsyncIterator[VersionedEvent]:
    """The first ``count`` events of ``task_id``'s log, through the SDK's event stream."""
    stream = shared.events.subscribe(task_id, after=TaskVersion.MISSING)
    try:
        for _ in range(count):
            yield await asyncio.wait_for(anext(stream), timeout=60)
    finally:
        await stream.aclose()


async def test_a_stale_write_and_a_second_first_write_lose_as_in_the_sdk(shared, memory_db):
    task_id = str(uuid.uuid4())
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    with pytest.raises(ConcurrentTaskModificationError):
        await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    failed = _task(task_id, TaskState.TASK_STATE_FAILED)
    with pytest.raises(ConcurrentTaskModificationError):  # written from version 1, which is no longer current
        await shared.store.save(failed, event=_status(failed), prev_version=v1, context=_context())
    with pytest.raises(ConcurrentTaskModificationError):  # another owner's write never lands
        await shared.store.save(working, event=_status(working), prev_version=TaskVersion(2), context=_context("m"))
    stored = await shared.store.get(task_id, _context())
    assert stored is not None
    assert stored.task.status.state == TaskState.TASK_STATE_WORKING
    assert stored.version == TaskVersion(2)
    with psycopg.connect(memory_db) as conn:
        logged = conn.execute("SELECT count(*) FROM kora_a2a.task_events WHERE task_id = %s", (task_id,))
        assert logged.fetchone() == (2,)  # the losers logged nothing


async def test_a_finished_write_drops_the_lease_and_notes_the_push_configurations(shared, memory_db):
    task_id = str(uuid.uuid4())
    await shared.claim(task_id, "alice")
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    assert shared.push._configured == {task_id: False}  # no configuration: its notification reads nothing
    with psycopg.connect(memory_db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kora_a2a.push_notification_configs (task_id, config_id, config_data, owner) "
            "VALUES (%s, 'c1', '\\x00', 'alice')",
            (task_id,),
        )
        done = _task(task_id, TaskState.TASK_STATE_COMPLETED)
        await shared.store.save(done, event=_status(done), prev_version=v1, context=_context())
        assert shared.push._configured == {task_id: True}
        leases = conn.execute("SELECT count(*) FROM kora_a2a.task_leases WHERE task_id = %s", (task_id,))
        assert leases.fetchone() == (0,)


def _event_of(task: Task, kind: str) -> Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent:
    """The change of ``task`` of ``kind``: its status update (``status``), an artifact update (``artifact``), or the
    task written whole (``task``)."""
    if kind == "artifact":
        return TaskArtifactUpdateEvent(task_id=task.id, artifact=Artifact(artifact_id="a"))
    return {"status": _status(task), "task": task}[kind]


@pytest.mark.parametrize(
    ("state", "event_kind", "prev", "durable"),
    [
        (TaskState.TASK_STATE_WORKING, "status", 1, False),  # progress: nothing a client keeps
        (TaskState.TASK_STATE_WORKING, "status", 0, True),  # the task's first write
        (TaskState.TASK_STATE_WORKING, "artifact", 2, True),
        (TaskState.TASK_STATE_WORKING, "task", 2, True),  # a history write (a message added)
        (TaskState.TASK_STATE_INPUT_REQUIRED, "status", 2, True),
        (TaskState.TASK_STATE_COMPLETED, "status", 3, True),
        (TaskState.TASK_STATE_FAILED, "status", 3, True),
    ],
)
def test_only_progress_to_working_commits_without_waiting_for_the_disk(state, event_kind, prev, durable):
    task = _task("t", state)
    event = _event_of(task, event_kind)
    assert task_rows.is_durable(task, event, prev) is durable


@pytest.mark.parametrize(
    ("state", "event_kind", "prev", "durable"),
    [
        (TaskState.TASK_STATE_SUBMITTED, "task", 0, False),  # the task's first write: no one has its id yet
        (TaskState.TASK_STATE_WORKING, "status", 1, False),
        (TaskState.TASK_STATE_WORKING, "artifact", 2, True),  # a client that subscribed may be shown it
        (TaskState.TASK_STATE_INPUT_REQUIRED, "status", 2, True),  # what the blocking send answers with
        (TaskState.TASK_STATE_INPUT_REQUIRED, "task", 3, True),  # the next request's message in the history
        (TaskState.TASK_STATE_AUTH_REQUIRED, "status", 2, True),
        (TaskState.TASK_STATE_COMPLETED, "status", 3, True),
        (TaskState.TASK_STATE_FAILED, "status", 3, True),
        (TaskState.TASK_STATE_REJECTED, "status", 1, True),
    ],
)
def test_a_turn_answered_at_its_end_commits_only_submitted_and_working_without_the_disk(
    state, event_kind, prev, durable
):
    task = _task("t", state)
    event = _event_of(task, event_kind)
    assert task_rows.is_durable(task, event, prev, answered_at_end=True) is durable


@pytest.mark.parametrize(
    ("state", "event_kind", "previous", "answer"),
    [
        (TaskState.TASK_STATE_INPUT_REQUIRED, "status", TaskState.TASK_STATE_WORKING, True),
        (TaskState.TASK_STATE_COMPLETED, "status", TaskState.TASK_STATE_WORKING, True),
        # The SDK's history write at the start of a decision's turn: the task still in the state it waited in.
        (TaskState.TASK_STATE_INPUT_REQUIRED, "task", TaskState.TASK_STATE_INPUT_REQUIRED, False),
        (TaskState.TASK_STATE_FAILED, "task", None, True),  # a request that failed before its task existed
        (
            TaskState.TASK_STATE_COMPLETED,
            "task",
            TaskState.TASK_STATE_WORKING,
            True,
        ),  # a task written whole, at its end
        (TaskState.TASK_STATE_WORKING, "status", TaskState.TASK_STATE_INPUT_REQUIRED, False),
        (TaskState.TASK_STATE_SUBMITTED, "task", None, False),
        (TaskState.TASK_STATE_WORKING, "artifact", TaskState.TASK_STATE_WORKING, False),
    ],
)
def test_the_answer_is_told_by_the_change_not_by_the_tasks_state(state, event_kind, previous, answer):
    task = _task("t", state)
    event = _event_of(task, event_kind)
    assert task_rows.carries_answer(event, previous) is answer


def _request(method: str | None, configuration: SendMessageConfiguration | None) -> RequestContext:
    state = {} if method is None else {"method": method}
    message = Message(role=Role.ROLE_USER, message_id="m", parts=[Part(text="hi")])
    request = SendMessageRequest(message=message)
    if configuration is not None:
        request.configuration.CopyFrom(configuration)
    return RequestContext(ServerCallContext(state=state), request, task_id="t", context_id="c")


@pytest.mark.parametrize(
    ("method", "configuration", "answered_at_end"),
    [
        ("SendMessage", None, True),  # blocking by default
        ("SendMessage", SendMessageConfiguration(history_length=2), True),
        ("SendMessage", SendMessageConfiguration(return_immediately=True), False),  # answered with its first state
        (
            "SendMessage",
            SendMessageConfiguration(task_push_notification_config=TaskPushNotificationConfig(url="http://x")),
            False,  # every change is announced to the receiver
        ),
        ("SendStreamingMessage", None, False),  # every change is streamed to the client
        ("message/send", None, False),  # 0.3: not told apart here, so every change waits for the disk
        (None, None, False),  # the REST binding names no method
    ],
)
def test_only_a_blocking_send_without_push_configuration_is_answered_at_its_end(method, configuration, answered_at_end):
    assert task_rows.answers_at_end(_request(method, configuration)) is answered_at_end


async def test_a_change_of_a_task_with_push_configurations_always_waits_for_the_disk(shared, memory_db):
    task_id = str(uuid.uuid4())
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    working = _task(task_id, TaskState.TASK_STATE_WORKING)

    async def save(task: Task, prev: int, durable: bool) -> task_rows.Saved | None:
        return await shared.run(
            lambda connection: task_rows.save(
                connection,
                task_rows.RowCodec(),
                task,
                owner="alice",
                event=_status(task),
                prev_version=prev,
                finished=False,
                durable=durable,
            )
        )

    first = await save(submitted, 0, durable=False)
    assert first is not None
    assert (first.has_push_configs, first.durable) == (False, False)
    with psycopg.connect(memory_db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kora_a2a.push_notification_configs (task_id, config_id, config_data, owner) "
            "VALUES (%s, 'c1', '\\x00', 'alice')",
            (task_id,),
        )
    second = await save(working, first.version, durable=False)
    assert second is not None
    assert (second.has_push_configs, second.durable) == (True, True)  # announced to the receiver: on disk first


async def _held_first_change(shared: SharedTasks, *, leased: bool = True) -> tuple[str, Task, TaskVersion]:
    """A new task of this replica, answered at its end, whose first change (``submitted``) the store holds: its id,
    that change and the version it was given (1). ``leased``: its turn's lease is waiting to be taken as well."""
    task_id = str(uuid.uuid4())
    shared.store.new_id(task_id)
    shared.note_answered_at_end(task_id, True)
    if leased:
        shared.unclaimed[task_id] = task_rows.Lease(shared.replica, 30)
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    return task_id, submitted, v1


async def test_a_turn_answered_at_its_end_stores_its_first_change_with_its_next_one(shared, memory_db):
    sdk = VersionedDatabaseTaskStore(shared.engine, create_table=False, owner_resolver=owner_of)
    task_id, submitted, v1 = await _held_first_change(shared)
    assert v1 == TaskVersion(1)
    # Held: no one knows the id yet, and every replica still reads it absent.
    assert not await shared.store.holds(task_id)
    assert await shared.store.get(task_id, _context()) is None
    assert await sdk.get(task_id, _context()) is None
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v2 = await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    assert v2 == TaskVersion(2)
    # From the turn's working on, the task is on every replica, with its lease and both events in the log.
    stored = await sdk.get(task_id, _context())
    assert stored is not None
    assert (stored.task, stored.version) == (working, v2)
    events = [event async for event in _first(shared, task_id, 2)]
    assert [(event.version, event.event) for event in events] == [(v1, submitted), (v2, _status(working))]
    with psycopg.connect(memory_db) as conn:
        lease = conn.execute("SELECT replica FROM kora_a2a.task_leases WHERE task_id = %s", (task_id,))
        assert lease.fetchone() == (shared.replica,)
    assert shared.store._first == {}


async def _working_after_its_turn_ended(shared: SharedTasks) -> tuple[str, Task, Task, TaskVersion]:
    """A new task of this replica, answered at its end, whose turn ended before the SDK stored its ``working``
    change (as when its executor answers at once): its id, its first two changes and the version of the second
    (2), both held (the guarded request handler counts no request watching it)."""
    shared.guarded = True
    task_id, submitted, v1 = await _held_first_change(shared, leased=False)
    shared.note_turn_ended(task_id)
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v2 = await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    return task_id, submitted, working, v2


async def test_the_working_change_of_a_turn_that_ended_is_stored_with_its_answer_in_one_statement(
    shared, memory_db, monkeypatch
):
    statements: list[int] = []
    save = task_rows.save

    async def counted(*args, **kwargs):
        statements.append(1)
        return await save(*args, **kwargs)

    monkeypatch.setattr(task_rows, "save", counted)
    task_id, submitted, working, v2 = await _working_after_its_turn_ended(shared)
    assert v2 == TaskVersion(2)
    # Held: never stored working once its turn ended (a crash would leave it so without a lease).
    assert await asyncio.to_thread(_stored_row, memory_db, working.context_id) is None
    working.artifacts.append(Artifact(artifact_id="a1", name="answer", parts=[Part(text="hi")]))
    artifact = TaskArtifactUpdateEvent(task_id=task_id, context_id=working.context_id, artifact=working.artifacts[0])
    v3 = await shared.store.save(working, event=artifact, prev_version=v2, context=_context())
    done = _task(task_id, TaskState.TASK_STATE_COMPLETED)
    done.artifacts.append(working.artifacts[0])
    v4 = await shared.store.save(done, event=_status(done), prev_version=v3, context=_context())
    assert (v3, v4) == (TaskVersion(3), TaskVersion(4))
    assert len(statements) == 1
    assert await asyncio.to_thread(_stored_row, memory_db, done.context_id) == (task_id, "TASK_STATE_COMPLETED", 1, 4)
    events = [event async for event in _first(shared, task_id, 4)]
    assert [(event.version, event.event) for event in events] == [
        (TaskVersion(1), submitted),
        (v2, _status(working)),
        (v3, artifact),
        (v4, _status(done)),
    ]
    assert shared.store._first == {}


async def test_a_request_that_may_subscribe_stores_a_held_working_change_first(shared, memory_db):
    task_id, submitted, working, v2 = await _working_after_its_turn_ended(shared)
    async with shared.watch(task_id):
        assert await asyncio.to_thread(_stored_row, memory_db, working.context_id) == (
            task_id,
            "TASK_STATE_WORKING",
            0,
            2,
        )
    events = [event async for event in _first(shared, task_id, 2)]
    assert [(event.version, event.event) for event in events] == [(TaskVersion(1), submitted), (v2, _status(working))]
    assert shared.store._first == {}


async def test_the_working_change_of_a_running_turn_is_stored_at_once(shared, memory_db):
    shared.guarded = True
    task_id, _, v1 = await _held_first_change(shared)
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    assert await asyncio.to_thread(_stored_row, memory_db, working.context_id) == (task_id, "TASK_STATE_WORKING", 0, 2)


async def test_a_cancel_stores_a_held_first_change_before_it(shared):
    task_id, submitted, v1 = await _held_first_change(shared, leased=False)
    canceled = _task(task_id, TaskState.TASK_STATE_CANCELED)
    v2 = await shared.store.save(canceled, event=_status(canceled), prev_version=v1, context=_context())
    assert v2 == TaskVersion(2)
    stored = await shared.store.get(task_id, _context())
    assert stored is not None
    assert (stored.task.status.state, stored.version) == (TaskState.TASK_STATE_CANCELED, v2)
    events = [event async for event in _first(shared, task_id, 2)]
    assert [event.event for event in events] == [submitted, _status(canceled)]


async def test_an_id_this_replica_generated_reads_absent_without_a_query_until_its_first_write(shared):
    sdk = VersionedDatabaseTaskStore(shared.engine, create_table=False, owner_resolver=owner_of)
    task_id = str(uuid.uuid4())
    shared.store.new_id(task_id)
    # Written behind the store's back (no replica could have the id): the note answers, not the database.
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    await sdk.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    assert await shared.store.get(task_id, _context()) is None
    # Its first write through the store drops the note (here it loses to the row above, as any second first
    # write does); from then on reads ask the database.
    with pytest.raises(ConcurrentTaskModificationError):
        await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    stored = await shared.store.get(task_id, _context())
    assert stored is not None
    assert stored.task == submitted
    # The notes are bounded: the oldest go first.
    for _ in range(shared_module.MAX_NEW_IDS + 1):
        shared.store.new_id(str(uuid.uuid4()))
    assert len(shared.store._new) == shared_module.MAX_NEW_IDS


async def test_after_close_the_store_refuses_at_once_and_never_reopens_its_pool(memory_db):
    shared = SharedTasks.open(memory_db, lease_seconds=30, retention_seconds=3600)

    async def one(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> object:
        row = await (await connection.execute("SELECT 1")).fetchone()
        return row[0] if row else None

    assert await shared.run(one) == 1  # the first use opens the pool (start() has not run)
    await shared.close()
    # A closed psycopg pool cannot be reused: refused once, not retried, and the pool stays closed.
    with pytest.raises(PoolClosed, match="shared task store is closed"):
        await shared.run(one)
    assert shared.pool.closed


def test_the_row_codec_writes_the_sdks_columns_and_converts_each_message_once():
    task = _task("t", TaskState.TASK_STATE_WORKING)
    task.artifacts.append(Artifact(artifact_id="a1", name="answer", parts=[Part(text="hi")]))
    task.metadata.update({"kora": {"turn": 1}})
    # The SDK's own conversion, on a store that never connects.
    model = DatabaseTaskStore(create_async_engine("postgresql+psycopg://unused@127.0.0.1:1/x"))._to_orm(task, "alice")
    codec = task_rows.RowCodec(max_chars=10_000)
    status, artifacts, history, metadata = codec.columns(task)
    assert json.loads(status) == model.status
    assert json.loads(artifacts) == model.artifacts
    assert json.loads(history) == model.history
    assert metadata is not None
    assert json.loads(metadata) == model.task_metadata
    # The history message and the artifact are remembered, the most recent kept within the bound.
    assert len(codec._known) == 2
    for n in range(200):
        codec.item(Message(role=Role.ROLE_USER, message_id=f"m{n}", parts=[Part(text="x" * 100)]))
    assert codec._chars <= 10_000
    assert len(codec._known) < 200


_STRUCT_VALUES = st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    state=st.sampled_from([*TaskState.values(), 99]),  # 99: a state of a later protocol version
    text=st.none() | st.text(max_size=20),
    metadata=st.dictionaries(st.text(max_size=8), _STRUCT_VALUES, max_size=3),
    timestamp=st.none() | st.tuples(st.integers(0, 253402300799), st.integers(0, 999_999_999)),
)
def test_the_row_codec_converts_a_status_as_message_to_dict_does(state, text, metadata, timestamp):
    status = TaskStatus(state=state)
    if text is not None:
        status.message.CopyFrom(Message(role=Role.ROLE_AGENT, message_id="m", parts=[Part(text=text)]))
        status.message.metadata.update(metadata)
    if timestamp is not None:
        status.timestamp.seconds, status.timestamp.nanos = timestamp
    codec = task_rows.RowCodec()
    converted = codec.status(status)
    # The SDK's conversion, member for member and in its order.
    assert list(json.loads(converted).items()) == list(MessageToDict(status).items())
    assert codec.status(status) == converted
    if text is not None:  # the message is remembered: the history converts it no more on the task's next turn
        assert (Message.DESCRIPTOR.full_name, status.message.SerializeToString(deterministic=True)) in codec._known


async def test_a_turns_first_write_takes_its_lease_in_the_same_statement(shared, memory_db):
    task_id = str(uuid.uuid4())
    shared.unclaimed[task_id] = task_rows.Lease(shared.replica, 30.0)
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    assert task_id not in shared.unclaimed
    with psycopg.connect(memory_db) as conn:
        lease = conn.execute(
            "SELECT owner, replica, expires_at > now() FROM kora_a2a.task_leases WHERE task_id = %s", (task_id,)
        ).fetchone()
    assert lease == ("alice", shared.replica, True)


async def test_the_history_write_of_a_decisions_turn_keeps_the_turn_answered_at_its_end(shared):
    task_id = str(uuid.uuid4())
    waiting = _task(task_id, TaskState.TASK_STATE_INPUT_REQUIRED)
    v1 = await shared.store.save(waiting, event=waiting, prev_version=TaskVersion.MISSING, context=_context())
    # The decision's turn: noted answered at its end, then the SDK writes the decision into the history.
    shared.note_answered_at_end(task_id, True)
    waiting.history.append(Message(role=Role.ROLE_USER, message_id="decision", parts=[Part(text="approve")]))
    v2 = await shared.store.save(waiting, event=waiting, prev=waiting, prev_version=v1, context=_context())
    assert task_id in shared.answered_at_end  # still the turn's: its working commits without the disk
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v3 = await shared.store.save(working, event=_status(working), prev=waiting, prev_version=v2, context=_context())
    assert task_id in shared.answered_at_end
    done = _task(task_id, TaskState.TASK_STATE_COMPLETED)
    await shared.store.save(done, event=_status(done), prev=working, prev_version=v3, context=_context())
    assert task_id not in shared.answered_at_end  # the answered state's write ends it


@pytest.mark.parametrize("loss", ["rows deleted", "version older"])
async def test_a_write_after_the_database_lost_acknowledged_changes_is_an_error_the_sdk_does_not_retry(
    shared, memory_db, loss
):
    task_id = str(uuid.uuid4())
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v2 = await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    # What a crash of Postgres before its asynchronous commits reached the disk leaves.
    with psycopg.connect(memory_db, autocommit=True) as conn:
        if loss == "rows deleted":
            for table in ("task_versions", "tasks", "task_events"):
                column = "id" if table == "tasks" else "task_id"
                conn.execute(f"DELETE FROM kora_a2a.{table} WHERE {column} = %s", (task_id,))
        else:
            conn.execute("UPDATE kora_a2a.task_versions SET version = 1 WHERE task_id = %s", (task_id,))
    done = _task(task_id, TaskState.TASK_STATE_COMPLETED)
    with pytest.raises(InternalError, match="lost changes"):
        await shared.store.save(done, event=_status(done), prev=working, prev_version=v2, context=_context())
    stored = await shared.store.get(task_id, _context())
    assert stored is None if loss == "rows deleted" else stored.version == v1  # nothing written over it


async def test_a_write_that_another_writer_won_still_raises_the_retried_error(shared):
    task_id = str(uuid.uuid4())
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    with pytest.raises(ConcurrentTaskModificationError):  # the version moved on: the SDK reloads and retries
        await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())


async def test_a_pair_statement_that_fails_leaves_the_first_change_held_for_the_failed_write(shared, monkeypatch):
    task_id, submitted, v1 = await _held_first_change(shared)
    run = shared.run
    calls = 0

    async def fails_once(work):  # the database unreachable for the pair statement (retries exhausted)
        nonlocal calls
        calls += 1
        if calls == 1:
            raise psycopg.OperationalError("connection refused")
        return await run(work)

    monkeypatch.setattr(shared, "run", fails_once)
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    with pytest.raises(psycopg.OperationalError):
        await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    assert await shared.store.get(task_id, _context()) is None  # still not stored, still read without a query
    # The SDK then writes failed onto the task as it knows it (submitted, v1): both are stored.
    failed = _task(task_id, TaskState.TASK_STATE_FAILED)
    v2 = await shared.store.save(failed, event=_status(failed), prev=submitted, prev_version=v1, context=_context())
    assert v2 == TaskVersion(2)
    stored = await shared.store.get(task_id, _context())
    assert stored is not None
    assert (stored.task.status.state, stored.version) == (TaskState.TASK_STATE_FAILED, v2)
    events = [event async for event in _first(shared, task_id, 2)]
    assert [event.event for event in events] == [submitted, _status(failed)]


class _GatedExecutor(AgentExecutor):
    """A turn that publishes its task, works, waits for ``gate``, adds an artifact, waits for ``answer_gate`` (open
    unless a test closes it), then completes."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.answer_gate = asyncio.Event()
        self.answer_gate.set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        history = [context.message] if context.message is not None else []
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
        )
        await updater.start_work()
        await self.gate.wait()
        await updater.add_artifact([Part(text="answer")], name="answer")
        await self.answer_gate.wait()
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


async def test_a_blocking_send_whose_stored_changes_the_database_lost_is_answered_with_an_error(shared, memory_db):
    executor = _GatedExecutor()
    handler = DefaultRequestHandler(
        agent_executor=shared.wrap(executor),
        task_store=shared.store,
        agent_card=AgentCard(name="gated"),
        event_stream=shared.events,
        push_config_store=shared.push_configs,
        push_sender=shared.push,
    )
    context_id = str(uuid.uuid4())
    message = Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id, parts=[Part(text="hello")]
    )
    call = ServerCallContext(state={OWNER_STATE: "alice", "method": "SendMessage"})
    await shared.start()
    sending = asyncio.create_task(handler.on_message_send(SendMessageRequest(message=message), call))

    def stored_working() -> bool:
        with psycopg.connect(memory_db) as conn:
            found = conn.execute(
                "SELECT 1 FROM kora_a2a.tasks WHERE context_id = %s AND status->>'state' = 'TASK_STATE_WORKING'",
                (context_id,),
            )
            return found.fetchone() is not None

    await eventually_async(lambda: asyncio.to_thread(stored_working), "the turn's task stored working")
    with psycopg.connect(memory_db, autocommit=True) as conn:  # what a crash of Postgres may leave
        row = conn.execute("SELECT id FROM kora_a2a.tasks WHERE context_id = %s", (context_id,)).fetchone()
        assert row is not None
        for table, column in (("task_versions", "task_id"), ("task_events", "task_id"), ("tasks", "id")):
            conn.execute(f"DELETE FROM kora_a2a.{table} WHERE {column} = %s", (row[0],))
    executor.gate.set()
    with pytest.raises(InternalError, match="lost changes"):  # a JSON-RPC error, not a task
        await asyncio.wait_for(sending, 60)
    with psycopg.connect(memory_db) as conn:  # nothing completed without its request
        found = conn.execute("SELECT status->>'state' FROM kora_a2a.tasks WHERE context_id = %s", (context_id,))
        assert found.fetchall() == []


async def test_one_expired_task_that_cannot_be_failed_does_not_strand_the_others(shared, memory_db, monkeypatch):
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for task_id in ids:
        shared.unclaimed[task_id] = task_rows.Lease(shared.replica, 30.0)
        working = _task(task_id, TaskState.TASK_STATE_WORKING)
        await shared.store.save(working, event=working, prev_version=TaskVersion.MISSING, context=_context())
    with psycopg.connect(memory_db, autocommit=True) as conn:  # their replica stopped renewing them
        conn.execute(
            "UPDATE kora_a2a.task_leases SET expires_at = now() - interval '1 second' WHERE task_id = ANY(%s)",
            (ids,),
        )
    fail_abandoned = shared._fail_abandoned

    async def first_raises(task_id: str, owner: str) -> None:
        if task_id == ids[0]:
            raise InternalError(message="lost changes")  # as a write after a crash of the database
        await fail_abandoned(task_id, owner)

    monkeypatch.setattr(shared, "_fail_abandoned", first_raises)
    await shared._expire()  # the leases are gone once read: every task is ended in this pass or never
    states = [(await shared.store.get(task_id, _context())).task.status.state for task_id in ids]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_FAILED]


def _gated_handler(shared: SharedTasks, executor: _GatedExecutor) -> SharedRequestHandler:
    card = AgentCard(name="gated", capabilities=AgentCapabilities(streaming=True, push_notifications=True))
    return SharedRequestHandler(shared, agent_executor=shared.wrap(executor), agent_card=card)


async def _turn_held_before_its_answer(
    shared: SharedTasks, *, adds_artifact: bool = True
) -> tuple[_GatedExecutor, SharedRequestHandler, str]:
    """A started store whose gated turns wait before their answer (and, unless ``adds_artifact``, before their
    artifact): the executor, its request handler and a fresh context id."""
    executor = _GatedExecutor()
    if adds_artifact:
        executor.gate.set()
    executor.answer_gate.clear()
    handler = _gated_handler(shared, executor)
    await shared.start()
    return executor, handler, str(uuid.uuid4())


def _blocking_send(handler: SharedRequestHandler, context_id: str) -> asyncio.Task[Message | Task]:
    """A blocking JSON-RPC ``SendMessage`` of a new task in context ``context_id``, running."""
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id, parts=[Part(text="hi")])
    call = ServerCallContext(state={OWNER_STATE: "alice", "method": "SendMessage"})
    return asyncio.create_task(handler.on_message_send(SendMessageRequest(message=message), call))


def _stored_row(database_url: str, context_id: str) -> tuple[str, str, int, int] | None:
    """The task of ``context_id`` as stored: (id, state, artifacts, version), or None."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT t.id, t.status->>'state', json_array_length(t.artifacts), v.version FROM kora_a2a.tasks t "
            "JOIN kora_a2a.task_versions v ON v.task_id = t.id WHERE t.context_id = %s",
            (context_id,),
        ).fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


async def _held_artifact(shared: SharedTasks, database_url: str, context_id: str) -> str:
    """Wait until the turn of ``context_id`` holds its artifact; its task id."""

    def held() -> str | None:
        row = _stored_row(database_url, context_id)
        return row[0] if row is not None and row[0] in shared.store._first else None

    return await eventually_async(lambda: asyncio.to_thread(held), "the turn's artifact held")


async def test_a_blocking_sends_artifact_is_stored_with_its_answer_in_one_statement(shared, memory_db):
    executor, handler, context_id = await _turn_held_before_its_answer(shared)
    sending = _blocking_send(handler, context_id)
    task_id = await _held_artifact(shared, memory_db, context_id)
    # Told to no one yet, so not stored yet: the task is as its working change left it.
    assert await asyncio.to_thread(_stored_row, memory_db, context_id) == (task_id, "TASK_STATE_WORKING", 0, 2)
    executor.answer_gate.set()
    answer = await asyncio.wait_for(sending, 60)
    assert isinstance(answer, Task)
    assert answer.status.state == TaskState.TASK_STATE_COMPLETED
    assert [artifact.parts[0].text for artifact in answer.artifacts] == ["answer"]
    assert await asyncio.to_thread(_stored_row, memory_db, context_id) == (task_id, "TASK_STATE_COMPLETED", 1, 4)
    events = [event async for event in _first(shared, task_id, 4)]
    assert [event.version for event in events] == [TaskVersion(n) for n in (1, 2, 3, 4)]
    assert isinstance(events[2].event, TaskArtifactUpdateEvent)
    assert events[2].event.artifact == answer.artifacts[0]
    assert isinstance(events[3].event, TaskStatusUpdateEvent)
    assert events[3].event.status.state == TaskState.TASK_STATE_COMPLETED
    assert shared.store._first == {}


@pytest.mark.parametrize("subscribes", ["before the artifact", "while the artifact is held"])
async def test_a_subscriber_on_this_replica_is_told_the_artifact_only_once_it_is_stored(shared, memory_db, subscribes):
    executor, handler, context_id = await _turn_held_before_its_answer(shared, adds_artifact=False)
    sending = _blocking_send(handler, context_id)
    if subscribes == "before the artifact":

        def working() -> str | None:
            row = _stored_row(memory_db, context_id)
            return row[0] if row is not None and row[1] == "TASK_STATE_WORKING" else None

        task_id = await eventually_async(lambda: asyncio.to_thread(working), "the turn's task stored working")
    else:
        executor.gate.set()
        task_id = await _held_artifact(shared, memory_db, context_id)
    subscription = handler.on_subscribe_to_task(SubscribeToTaskRequest(id=task_id), _context())
    # Each event as the subscriber was told it (the SDK goes on changing a task it yielded), and the task as stored
    # at that moment.
    told: list[tuple[str, int, tuple[str, str, int, int] | None]] = []

    async def tell(event: object) -> None:
        artifacts = len(event.artifacts) if isinstance(event, Task) else int(isinstance(event, TaskArtifactUpdateEvent))
        told.append((type(event).__name__, artifacts, await asyncio.to_thread(_stored_row, memory_db, context_id)))

    try:
        await tell(await asyncio.wait_for(anext(subscription), 60))  # the task as this replica knows it
        executor.gate.set()
        if subscribes == "before the artifact":
            await tell(await asyncio.wait_for(anext(subscription), 60))
            assert task_id not in shared.store._first  # a subscriber watches: nothing held
        executor.answer_gate.set()
        async for event in subscription:
            await tell(event)
    finally:
        await subscription.aclose()
    answer = await asyncio.wait_for(sending, 60)
    assert isinstance(answer, Task)
    assert answer.status.state == TaskState.TASK_STATE_COMPLETED
    # Whenever the subscriber was told the artifact (in the task, or as its event), it was stored.
    for kind, artifacts, stored in told:
        assert stored is not None
        assert stored[2] >= artifacts, (kind, artifacts, stored)
    if subscribes == "while the artifact is held":
        assert told[0] == ("Task", 1, (task_id, "TASK_STATE_WORKING", 1, 3))  # stored on its own before it
    else:
        assert told[1] == ("TaskArtifactUpdateEvent", 1, (task_id, "TASK_STATE_WORKING", 1, 3))
    assert await asyncio.to_thread(_stored_row, memory_db, context_id) == (task_id, "TASK_STATE_COMPLETED", 1, 4)
    events = [event async for event in _first(shared, task_id, 4)]
    assert [type(event.event).__name__ for event in events] == [
        "Task",
        "TaskStatusUpdateEvent",
        "TaskArtifactUpdateEvent",
        "TaskStatusUpdateEvent",
    ]


async def test_a_read_on_this_replica_stores_a_held_artifact_first(shared, memory_db):
    executor, handler, context_id = await _turn_held_before_its_answer(shared)
    sending = _blocking_send(handler, context_id)
    task_id = await _held_artifact(shared, memory_db, context_id)
    stored = await shared.store.get(task_id, _context("mallory"))  # any reader: the change is stored as its owner's
    assert stored is None
    assert await asyncio.to_thread(_stored_row, memory_db, context_id) == (task_id, "TASK_STATE_WORKING", 1, 3)
    read = await shared.store.get(task_id, _context())
    assert read is not None
    assert (len(read.task.artifacts), read.version) == (1, TaskVersion(3))
    executor.answer_gate.set()
    answer = await asyncio.wait_for(sending, 60)
    assert isinstance(answer, Task)
    assert answer.status.state == TaskState.TASK_STATE_COMPLETED
    assert await asyncio.to_thread(_stored_row, memory_db, context_id) == (task_id, "TASK_STATE_COMPLETED", 1, 4)


async def test_a_push_configuration_set_while_an_artifact_is_held_is_told_the_artifact_then_the_answer(
    shared, memory_db
):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    received: list[dict[str, object]] = []

    async def hook(request: Request) -> Response:
        received.append(await request.json())
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    executor, handler, context_id = await _turn_held_before_its_answer(shared)
    async with ThreadedServer(app, name="push-receiver", lifespan="off") as receiver:
        sending = _blocking_send(handler, context_id)
        task_id = await _held_artifact(shared, memory_db, context_id)
        config = TaskPushNotificationConfig(task_id=task_id, id="c1", url=f"{receiver.root_url}/hook")
        await shared.push_configs.set_info(task_id, config, _context())
        executor.answer_gate.set()
        answer = await asyncio.wait_for(sending, 60)
        assert isinstance(answer, Task)
        await eventually_async(lambda: len(received) >= 2, "the artifact's and the answer's notifications")
    kinds = [next(iter(body)) for body in received]
    assert kinds == ["artifactUpdate", "statusUpdate"]
    assert received[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]


async def test_a_cancel_stores_a_held_artifact_before_it(shared, memory_db):
    shared.guarded = True  # as under the shared request handler, with no request watching the task
    task_id = str(uuid.uuid4())
    shared.note_answered_at_end(task_id, True)
    submitted = _task(task_id, TaskState.TASK_STATE_SUBMITTED)
    v1 = await shared.store.save(submitted, event=submitted, prev_version=TaskVersion.MISSING, context=_context())
    working = _task(task_id, TaskState.TASK_STATE_WORKING)
    v2 = await shared.store.save(working, event=_status(working), prev_version=v1, context=_context())
    working.artifacts.append(Artifact(artifact_id="a1", name="answer", parts=[Part(text="hi")]))
    artifact = TaskArtifactUpdateEvent(task_id=task_id, context_id=working.context_id, artifact=working.artifacts[0])
    v3 = await shared.store.save(working, event=artifact, prev_version=v2, context=_context())
    assert v3 == TaskVersion(3)
    assert task_id in shared.store._first  # held: the database is still at version 2
    assert await asyncio.to_thread(_stored_row, memory_db, working.context_id) == (task_id, "TASK_STATE_WORKING", 0, 2)
    canceled = _task(task_id, TaskState.TASK_STATE_CANCELED)
    canceled.artifacts.append(working.artifacts[0])
    v4 = await shared.store.save(canceled, event=_status(canceled), prev=working, prev_version=v3, context=_context())
    assert v4 == TaskVersion(4)
    events = [event async for event in _first(shared, task_id, 4)]
    assert [(event.version, type(event.event).__name__) for event in events] == [
        (v1, "Task"),
        (v2, "TaskStatusUpdateEvent"),
        (v3, "TaskArtifactUpdateEvent"),
        (v4, "TaskStatusUpdateEvent"),
    ]
    assert await asyncio.to_thread(_stored_row, memory_db, working.context_id) == (
        task_id,
        "TASK_STATE_CANCELED",
        1,
        4,
    )
