"""The shared task store (``TASK_STORE_TYPE=postgres``): A2A tasks of every replica of an agent in one Postgres.

The SDK's cluster mode does most of it: :class:`a2a.server.cluster.VersionedDatabaseTaskStore` keeps tasks (history,
artifacts, status) with a version per task and appends every applied event to a log that
:class:`a2a.server.cluster.DatabaseTaskEventStream` serves to ``SubscribeToTask`` on any replica (it polls the log);
the SDK's request handler writes ``canceled`` for a task another replica runs. Kora adds what the SDK leaves out:

* **Schema**: :func:`prepare_database` (at start-up, synchronously) creates schema ``kora_a2a`` and the SDK's tables
  in it, widens their 36-character id columns to ``text`` (A2A ids and Kora's context ids may be longer) and adds
  Kora's lease table; an advisory lock lets replicas start together. A URL that does not connect is a start-up
  error naming ``TASK_STORE_URL`` (:class:`~kora.core.settings_errors.SettingsError`, the password never shown).
* **Cancel across replicas**: writing ``canceled`` also sends ``NOTIFY kora_a2a_cancel`` with the task id; every
  replica ``LISTEN``\\ s (:meth:`SharedTasks.start`) and cancels the turn it runs for that id at once, instead of
  when the turn next saves (the SDK's own remote cancel). A cancel announced while a replica's listener was
  reconnecting is found in the store by its lease loop, within a third of the lease.
* **Leases**: the replica running a task holds a lease row (``kora_a2a.task_leases``) for it, taken by the turn's
  first write (in its statement), renewed every third of ``TASK_LEASE_SECONDS``; a terminal save drops it. Every
  replica looks for leases that ran out (their replica died) and ends their tasks ``failed`` with the reason in the
  status message: a turn is not resumed elsewhere, because its model and tool calls may have had effects that a
  second run would repeat.
* **Retention**: finished tasks are deleted ``TASK_RETENTION_SECONDS`` after their last change, in the background
  (with their versions, events and push configurations), so the store's size is bounded by what a retention period
  brings; so are paused turns whose calls expired longer than that (an hour at least) ago (of a deleted Agent: no
  replica of theirs resumed them at their expiry). Any agent process on the database deletes them, whichever
  agent they belong to.
* **Ownership** as in the local store: tasks are filed per owner (the call context's user) and a task id is unique
  across owners (the version table's key is the task id alone), so a client-chosen id must be free for all.

Every state change is stored (one transaction: task row, version, event log) before the SDK announces it to
subscribers; the commit waits for the disk for what a client is told (:mod:`kora.agent.a2a.task_rows`,
Durability).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, TypeVar

import psycopg
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import (
    ConcurrentTaskModificationError,
    DatabaseTaskEventStream,
    StoredTask,
    TaskVersion,
    VersionedDatabaseTaskStore,
)
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.models import Base, PushNotificationConfigModel, TaskEventModel, TaskModel, TaskVersionModel
from a2a.server.tasks.database_push_notification_config_store import DatabasePushNotificationConfigStore
from a2a.types.a2a_pb2 import (
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InternalError
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from kora.agent.a2a import task_rows
from kora.agent.a2a.executor import OWNER_STATE, owner_of
from kora.agent.a2a.push import BackgroundPushSender
from kora.agent.a2a.store import FINISHED_STATES, is_finished
from kora.core import env as envnames
from kora.core.settings_errors import SettingsError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from sqlalchemy.engine import Connection

log = logging.getLogger("kora.agent.a2a.shared")

_T = TypeVar("_T")

#: The Postgres schema holding the task store's tables (apart from the memory service's, in the same database).
SCHEMA = "kora_a2a"
#: The paused turns' table (:mod:`kora.agent.a2a.paused_rows`), created with the task store's.
PAUSED_TABLE = """CREATE TABLE IF NOT EXISTS kora_a2a.paused_turns (
    id text PRIMARY KEY,
    agent text NOT NULL,
    session_id text NOT NULL,
    record jsonb NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now()
)"""
#: The index a new turn's look for a paused turn of its session uses (one per turn, :mod:`kora.agent.runtime`).
PAUSED_SESSION_INDEX = (
    "CREATE INDEX IF NOT EXISTS paused_turns_agent_session ON kora_a2a.paused_turns (agent, session_id)"
)
#: The notification channel a ``canceled`` write is announced on (payload: the task id).
CANCEL_CHANNEL = "kora_a2a_cancel"
#: Seconds to wait for the database when connecting.
CONNECT_TIMEOUT_SECONDS = 10
#: Generated task ids not stored yet that a store remembers at most (SharedTaskStore.new_id).
MAX_NEW_IDS = 10_000
#: Attempts of a hot-path statement that meets a lost connection, a deadlock or a serialization failure (the SDK's
#: own count), the n-th retry after n times :data:`_RETRY_DELAY_SECONDS`.
_ATTEMPTS = 5
_RETRY_DELAY_SECONDS = 0.02
#: The advisory lock serializing schema changes of replicas that start together.
_SCHEMA_LOCK = 0x6B6F7261_61326131  # "koraa2a1"
#: The SDK's ``String(36)`` columns that hold ids a client may choose longer.
_ID_COLUMNS = (
    ("tasks", "id"),
    ("tasks", "context_id"),
    ("task_versions", "task_id"),
    ("task_events", "task_id"),
    ("push_notification_configs", "task_id"),
)
_LEASES = f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.task_leases (
    task_id text PRIMARY KEY,
    owner text NOT NULL,
    replica text NOT NULL,
    expires_at timestamptz NOT NULL
)"""
#: The stored names of the terminal states (the SDK stores a status as protobuf JSON).
_FINISHED_NAMES = tuple(TaskState.Name(state) for state in FINISHED_STATES)
#: Deletes the finished tasks last changed more than ``keep`` seconds ago, with their versions, events and push
#: configurations (``last_updated`` is a UTC time without zone).
_RETIRE = f"""WITH gone AS (
    DELETE FROM tasks
    WHERE last_updated < (now() AT TIME ZONE 'UTC') - make_interval(secs => %(keep)s)
      AND status->>'state' IN ({", ".join(f"'{name}'" for name in _FINISHED_NAMES)})
    RETURNING id
), versions AS (
    DELETE FROM task_versions WHERE task_id IN (SELECT id FROM gone)
), events AS (
    DELETE FROM task_events WHERE task_id IN (SELECT id FROM gone)
), configs AS (
    DELETE FROM push_notification_configs WHERE task_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone"""
#: Deletes the paused turns, of every agent of the database, whose last call expired more than ``keep`` seconds
#: ago (``expires_at``: seconds since the epoch, in the record; ``keep`` the retention, at least
#: :data:`PAUSED_RETENTION_FLOOR_SECONDS`). A replica of the turn's agent resumes it when its first call expires, or
#: as it starts when that time passed meanwhile; a turn still kept that long after is no running agent's: its Agent
#: was deleted, or none of its replicas ran for the whole retention.
_RETIRE_PAUSED = f"""DELETE FROM {SCHEMA}.paused_turns AS p
WHERE (SELECT max((a->>'expires_at')::float8) FROM jsonb_array_elements(p.record->'approvals') AS a)
      < extract(epoch FROM now()) - %(keep)s"""
#: Deletes the leases that ran out, returning their tasks' ids and owners.
_EXPIRE = "DELETE FROM task_leases WHERE expires_at < now() RETURNING task_id, owner"
#: The least time paused turns are kept after their calls expired, whatever the retention of finished tasks: a
#: replica of their agent takes an expired turn at once, and a short retention must not delete it first.
PAUSED_RETENTION_FLOOR_SECONDS = 3600.0
#: The status message of a task whose replica stopped while it ran.
LEASE_EXPIRED_REASON = (
    "The agent replica running this task stopped before it finished (its lease expired); the task was not resumed."
)


def _sqlalchemy_url(url: str) -> URL:
    """``url`` (``postgresql://``) as SQLAlchemy's URL for psycopg 3."""
    return make_url(url).set(drivername="postgresql+psycopg")


def _connect_args() -> dict[str, object]:
    return {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "options": f"-c search_path={SCHEMA}"}


def _without_secret(message: str, url: str) -> str:
    """``message`` with the URL's password removed (drivers may quote the connection string)."""
    password = make_url(url).password
    return message.replace(str(password), "***") if password else message


def prepare_database(url: str) -> None:
    """Create or migrate the task store's tables in the database of ``url`` (idempotent; safe when replicas start
    together). Raises :class:`SettingsError` naming ``TASK_STORE_URL`` when the database cannot be reached or
    refuses (the reason as the driver states it, without the password)."""
    engine = create_engine(_sqlalchemy_url(url), connect_args=_connect_args(), poolclass=None)
    try:
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
            connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
            _create_tables(connection)
    except SQLAlchemyError as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        raise SettingsError(
            "kora agent", [f"{envnames.TASK_STORE_URL}: cannot use the database: {_without_secret(reason, url)}"]
        ) from None
    finally:
        engine.dispose()


def _create_tables(connection: Connection) -> None:
    tables = [model.__table__ for model in (TaskModel, TaskVersionModel, TaskEventModel, PushNotificationConfigModel)]
    Base.metadata.create_all(connection, tables=tables)  # type: ignore[arg-type]
    for table, column in _ID_COLUMNS:
        connection.execute(text(f"ALTER TABLE {SCHEMA}.{table} ALTER COLUMN {column} TYPE text"))
    connection.execute(text(_LEASES))
    connection.execute(text(PAUSED_TABLE))
    connection.execute(text(PAUSED_SESSION_INDEX))
    connection.execute(text(f"CREATE INDEX IF NOT EXISTS tasks_last_updated ON {SCHEMA}.tasks (last_updated)"))


class SharedTaskStore(VersionedDatabaseTaskStore):
    """The SDK's versioned database store, with its hot path in single statements (:mod:`kora.agent.a2a.task_rows`:
    reading a task, storing a change that is not a cancel), which also drops a finished task's lease and announces
    a cancel (to the replicas, and to the task's push-notification receivers when this replica does not run the
    task: the replica running it never processes that cancel). Listing, deleting and canceling are the SDK's."""

    def __init__(self, engine: AsyncEngine, shared: SharedTasks) -> None:
        super().__init__(engine, create_table=False, owner_resolver=owner_of)
        self._engine = engine
        self._shared = shared
        #: Task ids this replica generated and has not stored yet (oldest first), read as absent without a query.
        self._new: OrderedDict[str, None] = OrderedDict()
        #: task id -> its changes held until its next one (task_rows, "The first two changes at once"; an artifact
        #: of a turn answered at its end, "Held artifacts"; "A turn that ended"), oldest first, at most MAX_NEW_IDS.
        self._first: dict[str, task_rows.PendingFirst] = {}
        #: task id -> the write of its held change on its own (settle), while it runs.
        self._settling: dict[str, asyncio.Future[None]] = {}
        #: The SDK's row conversion, each history message and artifact converted once.
        self._codec = task_rows.RowCodec()

    def new_id(self, task_id: str) -> None:
        """Note ``task_id``, a UUID4 this replica just generated for a new task: until the task's first write, no
        task has it, so reading it (the SDK reads a new task three times before writing it) needs no query. At most
        :data:`MAX_NEW_IDS` are kept (a request refused before its task was stored leaves its id)."""
        self._new[task_id] = None
        while len(self._new) > MAX_NEW_IDS:
            self._new.popitem(last=False)

    async def holds(self, task_id: str) -> bool:
        """True when some owner's task has id ``task_id``."""

        async def find(connection: AsyncConnection[TupleRow]) -> bool:
            cursor = await connection.execute("SELECT 1 FROM task_versions WHERE task_id = %s", (task_id,))
            return await cursor.fetchone() is not None

        return await self._shared.run(find)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """The context owner's task ``task_id`` with its version, or None (one statement; none for an id this
        replica generated and has not stored yet)."""
        if task_id in self._new:
            return None
        await self.settle(task_id)
        owner = owner_of(context)
        found = await self._shared.run(lambda connection: task_rows.load(connection, self._db, task_id, owner))
        return None if found is None else StoredTask(found[0], TaskVersion(found[1]))

    async def save(
        self,
        task: Task,
        *,
        event: Event | None = None,
        prev: Task | None = None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        """Store ``task`` and ``event`` as the version after ``prev_version`` (see the SDK's store; raises
        :class:`ConcurrentTaskModificationError` when another writer won); in the same statement, a finished task's
        lease goes, and the first write of a turn this replica started takes the task's lease. A cancel is the SDK's
        write, then announced on :data:`CANCEL_CHANNEL` (after it commits, so a listener reads ``canceled``)."""
        generated = task.id in self._new
        self._new.pop(task.id, None)
        owner = owner_of(context)
        previous = task_rows.number(prev_version)
        held = self._first.get(task.id)
        if (held is None or held.version == previous) and self._holds(task, event, previous):
            # Told to no one before the turn's answer (task_rows, "Held artifacts", "A turn that ended"): stored with
            # the next change, after the changes held before it.
            change = task_rows.PendingFirst.of(task, event, previous, owner) if held is None else held.then(task, event)
            self._hold_again(task.id, change, generated)
            self._shared.push.hold(task.id)
            return TaskVersion(previous + 1)
        settling = self._settling.get(task.id)
        if settling is not None:  # its held change is being stored on its own: this write follows it
            await asyncio.wait({settling})
        first = self._first.pop(task.id, None)
        if first is not None and first.version != previous:  # the SDK's view is not the held changes': apart
            self._hold_again(task.id, first, generated)
            await self.settle(task.id)
            first = None
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            if first is not None:  # the held change goes first: the SDK's write expects it stored
                self._hold_again(task.id, first, generated)
                await self.settle(task.id)
            return await self._save_cancel(task, event=event, prev=prev, prev_version=prev_version, context=context)
        if (
            generated
            and previous == 0
            and event is task
            and task.status.state == TaskState.TASK_STATE_SUBMITTED
            and task.id in self._shared.answered_at_end
        ):
            # Known to no one until stored (task_rows, "The first two changes at once"): stored with the next.
            self._hold_again(task.id, task_rows.PendingFirst.of(task, owner=owner), generated=True)
            self._shared.push.note_configs(task.id, False)  # no one could have set one for it
            return TaskVersion(1)
        # A task that waits for its user (input-required: a tool call waiting for approval) runs nowhere until the
        # next message: it holds no lease, so no replica ends it failed while it waits.
        finished = is_finished(task) or task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        lease = self._shared.unclaimed.pop(task.id, None)
        answered_at_end = task.id in self._shared.answered_at_end
        previous_state = prev.status.state if prev is not None and previous else None
        if answered_at_end and task_rows.carries_answer(event, previous_state):
            self._shared.answered_at_end.pop(task.id, None)  # what follows (a next turn's request) decides anew
        try:
            saved = await self._shared.run(
                lambda connection: task_rows.save(
                    connection,
                    self._codec,
                    task,
                    owner=owner,
                    event=event,
                    prev_version=previous,
                    finished=finished,
                    durable=task_rows.is_durable(task, event, previous, answered_at_end=answered_at_end),
                    lease=lease,
                    first=first,
                )
            )
        except Exception:
            # Nothing was stored: the next write (the SDK's ``failed``) stores the held change and takes the lease.
            # A cancellation (not an Exception) may come after the statement committed: nothing is held again, so
            # the next read asks the database.
            if first is not None:
                self._hold_again(task.id, first, generated)
            if lease is not None and self._shared.runs(task.id):
                self._shared.unclaimed[task.id] = lease
            raise
        if saved is None:
            if lease is not None and self._shared.runs(task.id):
                self._shared.unclaimed[task.id] = lease  # nothing was stored: the next write takes it
            self._shared.push.drop_held(task.id)  # a held artifact's, never stored
            stored = previous if first is None else first.stored
            if stored:
                await self._check_not_lost(task.id, stored)
            raise ConcurrentTaskModificationError(task.id)
        self._shared.push.note_configs(task.id, saved.has_push_configs)
        return TaskVersion(saved.version)

    def _holds(self, task: Task, event: Event | None, previous: int) -> bool:
        """Whether ``event``, a change of ``task`` (at version ``previous``), is held to be stored with the task's
        next change: its turn's client is answered at its end, no subscriber on this replica could be told it before
        (the request handler counts them, :meth:`watch`), and it is an artifact (task_rows, "Held artifacts") or the
        change to ``working`` of a turn that ended already (task_rows, "A turn that ended")."""
        if not (
            previous > 0
            and self._shared.guarded
            and task.id in self._shared.answered_at_end
            and not self._shared.watchers.get(task.id)
            and task.id not in self._settling
        ):
            return False
        if isinstance(event, TaskArtifactUpdateEvent):
            return True
        return (
            isinstance(event, TaskStatusUpdateEvent)
            and event.status.state == TaskState.TASK_STATE_WORKING
            and task.status.state == TaskState.TASK_STATE_WORKING
            and self._shared.answered_at_end.get(task.id, False)
        )

    async def settle(self, task_id: str) -> None:
        """Store ``task_id``'s held change on its own, if it has one (before a read of the task or a subscription
        to it on this replica, and before a blocking ``SendMessage`` is answered), or wait for the one being
        stored; a cancellation of the caller does not stop the write. Raises
        :class:`ConcurrentTaskModificationError` when another writer moved the task on first (the held change is
        dropped: it was never stored, and no one was told it), and what psycopg raises (the change is then still
        held)."""
        settling = self._settling.get(task_id)
        if settling is None:
            held = self._first.pop(task_id, None)
            if held is None:
                return
            self._settling[task_id] = settling = asyncio.ensure_future(self._store_held(task_id, held))
            settling.add_done_callback(lambda _: self._settling.pop(task_id, None))
        await asyncio.shield(settling)

    async def _store_held(self, task_id: str, held: task_rows.PendingFirst) -> None:
        task = held.stored_task()
        # The last held change is the one stored, the others before it (as a write after them would store them).
        before = held._replace(events=held.events[:-1]) if len(held.events) > 1 else None
        try:
            saved = await self._shared.run(
                lambda connection: task_rows.save(
                    connection,
                    self._codec,
                    task,
                    owner=held.owner,
                    event=None,
                    event_data=held.events[-1],
                    prev_version=held.version - 1,
                    finished=False,
                    first=before,
                )
            )
        except Exception:
            self._hold_again(task_id, held, generated=False)
            raise
        self._new.pop(task_id, None)  # stored (or another writer's): reads ask the database
        if saved is None:
            self._shared.push.drop_held(task_id)
            raise ConcurrentTaskModificationError(task_id)
        self._shared.push.note_configs(task_id, saved.has_push_configs)

    def _hold_again(self, task_id: str, first: task_rows.PendingFirst, generated: bool) -> None:
        """Hold ``first`` as ``task_id``'s first change, not stored (at most :data:`MAX_NEW_IDS` held, the oldest
        dropped), its id read as absent again when this replica generated it."""
        self._first[task_id] = first
        while len(self._first) > MAX_NEW_IDS:
            self._first.pop(next(iter(self._first)))
        if generated:
            self.new_id(task_id)  # still absent for reads, as before its first write

    async def _check_not_lost(self, task_id: str, expected: int) -> None:
        """After a write that expected version ``expected`` of ``task_id`` lost: raise :class:`InternalError` (the
        SDK answers the request with it and does not retry) when the task's stored version is missing or older,
        i.e. the database lost commits that had succeeded (task_rows, Durability), rather than another writer
        having moved the task on. Retried, the write would be applied to whatever the database still has (a fresh
        empty task when it has nothing)."""

        async def stored(connection: AsyncConnection[TupleRow]) -> int | None:
            cursor = await connection.execute("SELECT version FROM task_versions WHERE task_id = %s", (task_id,))
            row = await cursor.fetchone()
            return None if row is None else int(row[0])

        version = await self._shared.run(stored)
        if version is None or version < expected:
            log.error(
                "task %s: the database lost changes it had committed (stored version %s, expected %d); "
                "the task is not continued",
                task_id,
                version,
                expected,
            )
            raise InternalError(
                message=f"task {task_id}: the task store lost changes it had acknowledged (the database crashed); "
                "the task cannot continue"
            )

    async def _save_cancel(
        self,
        task: Task,
        *,
        event: Event | None,
        prev: Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        self._shared.push.note_configs(task.id, None)
        version = await super().save(task, event=event, prev=prev, prev_version=prev_version, context=context)
        async with self._engine.begin() as connection:
            await connection.execute(text("DELETE FROM task_leases WHERE task_id = :id"), {"id": task.id})
            await connection.execute(
                text("SELECT pg_notify(:channel, :id)"), {"channel": CANCEL_CHANNEL, "id": task.id}
            )
        if event is not None and not self._shared.runs(task.id):
            await self._shared.push.send_notification(task.id, event)
        return version


class ReplicaExecutor(AgentExecutor):
    """Runs tasks with ``inner`` under a lease of this replica, and knows which asyncio task runs each, so a cancel
    announced by another replica stops it."""

    def __init__(self, inner: AgentExecutor, shared: SharedTasks) -> None:
        self._inner = inner
        self._shared = shared
        #: task id -> the asyncio task running its turn on this replica.
        self.running: dict[str, asyncio.Task[object]] = {}
        #: Tasks being canceled: by this replica (:meth:`cancel`) or by another one (:meth:`stop`; also in _remote).
        self._stopped: set[str] = set()
        self._remote: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the task with the inner executor; its lease is taken by the turn's first write (a turn that
        stores nothing changes nothing another replica would have to end)."""
        assert context.task_id is not None
        task_id = context.task_id
        current = asyncio.current_task()
        assert current is not None
        self.running[task_id] = current
        self._shared.unclaimed[task_id] = task_rows.Lease(self._shared.replica, self._shared.lease_seconds)
        self._shared.note_answered_at_end(task_id, task_rows.answers_at_end(context))
        try:
            await self._inner.execute(context, event_queue)
        except asyncio.CancelledError:
            if task_id not in self._remote:
                raise
            # Canceled by another replica (stop): the task ends here as any canceled task does. Writing 'canceled'
            # finds it stored already, so the SDK reloads it and answers a client waiting here with it.
            current.uncancel()
            await self._inner.cancel(context, event_queue)
        finally:
            self.running.pop(task_id, None)
            self._shared.note_turn_ended(task_id)
            self._shared.unclaimed.pop(task_id, None)
            self._stopped.discard(task_id)
            self._remote.discard(task_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """The inner executor's cancel (a cancel asked of this replica: the SDK then cancels the turn itself, so
        the announcement of this cancel does not stop it a second time)."""
        if context.task_id is not None:
            self._stopped.add(context.task_id)
        await self._inner.cancel(context, event_queue)

    def stop(self, task_id: str) -> bool:
        """Cancel the turn of ``task_id`` if this replica runs it; True when it did."""
        running = self.running.get(task_id)
        if running is None or running.done() or task_id in self._stopped:
            return False
        self._stopped.add(task_id)
        self._remote.add(task_id)
        running.cancel()
        return True


class SharedTasks:
    """The shared task store of one agent process: engine, store, event stream, the executor wrapper, and the
    background work (cancel listener, lease renewal and expiry).

    ``url`` is ``TASK_STORE_URL``; ``lease_seconds`` is ``TASK_LEASE_SECONDS``; ``retention_seconds`` is
    ``TASK_RETENTION_SECONDS``. :func:`prepare_database` must have run (:meth:`open` does both).
    """

    def __init__(self, url: str, lease_seconds: float, retention_seconds: float) -> None:
        self.url = url
        self.lease_seconds = lease_seconds
        self.retention_seconds = retention_seconds
        self.replica = uuid.uuid4().hex
        self.engine = create_async_engine(
            _sqlalchemy_url(url), connect_args=_connect_args(), pool_pre_ping=True, pool_size=10, max_overflow=20
        )
        #: Connections of the hot path (:mod:`kora.agent.a2a.task_rows`): autocommit, no ORM, no ping per use.
        self.pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=10,
            kwargs={"autocommit": True, **_connect_args()},
            open=False,
            timeout=CONNECT_TIMEOUT_SECONDS,
            name="kora-a2a-tasks",
        )
        self.store = SharedTaskStore(self.engine, self)
        self.events = DatabaseTaskEventStream(self.engine, create_table=False)
        self.push_configs = DatabasePushNotificationConfigStore(
            self.engine, create_table=False, owner_resolver=owner_of
        )
        self.push = BackgroundPushSender(self.push_configs)
        self.executor: ReplicaExecutor | None = None
        #: task id -> the lease the next write of that task takes (a turn started here, not stored since).
        self.unclaimed: dict[str, task_rows.Lease] = {}
        #: Tasks whose running turn's only client is answered with its final or interrupted state (oldest first,
        #: at most :data:`MAX_NEW_IDS`; :func:`task_rows.answers_at_end`): their changes before it commit without
        #: waiting for the disk. Kept after the turn's ``execute`` returns (its last changes may be stored after; the
        #: value: True from then on, :meth:`note_turn_ended`); dropped by the answered state's write.
        self.answered_at_end: OrderedDict[str, bool] = OrderedDict()
        #: Set by the request handler that counts :attr:`watchers` (:class:`~.shared_handler.SharedRequestHandler`):
        #: only then may the store hold an artifact (task_rows, "Held artifacts").
        self.guarded = False
        #: task id -> requests on this replica that may subscribe to it or read it now (:meth:`watch`).
        self.watchers: dict[str, int] = {}
        #: Set while the cancel listener is connected and listening.
        self.listening = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        #: Set by :meth:`close`: a closed psycopg pool cannot be opened again, so :meth:`run` refuses from then on.
        self._closed = False

    @classmethod
    def open(cls, url: str, lease_seconds: float, retention_seconds: float) -> SharedTasks:
        """Prepare the database (raises :class:`SettingsError` naming ``TASK_STORE_URL``) and build the pieces."""
        prepare_database(url)
        return cls(url, lease_seconds, retention_seconds)

    def note_answered_at_end(self, task_id: str, answered_at_end: bool) -> None:
        """Note whether the turn starting for ``task_id`` here answers its client only at its end (see
        :attr:`answered_at_end`)."""
        self.answered_at_end.pop(task_id, None)
        if answered_at_end:
            self.answered_at_end[task_id] = False
            while len(self.answered_at_end) > MAX_NEW_IDS:
                self.answered_at_end.popitem(last=False)

    def note_turn_ended(self, task_id: str) -> None:
        """Note that the turn of ``task_id`` that runs here has ended (its executor returned), if its client is
        answered at its end: its change to ``working``, not stored yet, is then held (task_rows, "A turn that
        ended")."""
        if task_id in self.answered_at_end:
            self.answered_at_end[task_id] = True

    @contextlib.asynccontextmanager
    async def watch(self, task_id: str | None) -> AsyncIterator[None]:
        """Around a request that names ``task_id`` (None: none) and may subscribe to it: counted in
        :attr:`watchers` from its start (no artifact of the task is held from then on), its held change stored
        first (:meth:`SharedTaskStore.settle`; one that another writer's change replaced is not the task's)."""
        if not task_id:
            yield
            return
        self.watchers[task_id] = self.watchers.get(task_id, 0) + 1
        try:
            with contextlib.suppress(ConcurrentTaskModificationError):
                await self.store.settle(task_id)
            yield
        finally:
            left = self.watchers.pop(task_id) - 1
            if left:
                self.watchers[task_id] = left

    def runs(self, task_id: str) -> bool:
        """True when this replica runs ``task_id``'s turn."""
        return self.executor is not None and task_id in self.executor.running

    def wrap(self, executor: AgentExecutor) -> ReplicaExecutor:
        """``executor`` run under this replica's leases and cancel listener."""
        self.executor = ReplicaExecutor(executor, self)
        return self.executor

    async def run(self, work: Callable[[AsyncConnection[TupleRow]], Awaitable[_T]]) -> _T:
        """``work`` on a pooled connection (autocommit). A lost connection, a deadlock or a serialization failure is
        retried (:data:`_ATTEMPTS` in all, as the SDK's store does), the pool's idle connections checked first; no
        connection within :data:`CONNECT_TIMEOUT_SECONDS` raises ``PoolTimeout`` at once, and after :meth:`close`
        ``PoolClosed`` at once (neither is retried). The pool is opened by the first use if :meth:`start` has not
        run yet."""
        if self._closed:
            raise PoolClosed("the shared task store is closed (the agent server is shutting down)")
        if self.pool.closed:
            await self.pool.open()
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self.pool.connection() as connection:
                    return await work(connection)
            except (PoolTimeout, PoolClosed):
                raise
            except psycopg.OperationalError:
                if attempt >= _ATTEMPTS:
                    raise
                await self.pool.check()
                await asyncio.sleep(_RETRY_DELAY_SECONDS * attempt)

    async def start(self) -> None:
        """Start the cancel listener and the lease loop (the app's start-up)."""
        await self.pool.open()
        self._background = [
            asyncio.create_task(self._listen(), name="kora-a2a-cancel-listener"),
            asyncio.create_task(self._lease_loop(), name="kora-a2a-leases"),
        ]

    async def close(self) -> None:
        """Stop the background work and close the database connections, for good: :meth:`run` refuses after."""
        self._closed = True
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
        await self.push.close()
        await self.pool.close()
        await self.engine.dispose()

    async def claim(self, task_id: str, owner: str) -> None:
        """Hold ``task_id``'s lease for this replica (taking it over from a replica that ran it before)."""

        async def insert(connection: AsyncConnection[TupleRow]) -> None:
            # Committed without waiting for the disk: the task's next durable write flushes it (task_rows).
            await connection.execute(
                "WITH lease AS (INSERT INTO task_leases (task_id, owner, replica, expires_at) "
                "VALUES (%(id)s, %(owner)s, %(replica)s, now() + make_interval(secs => %(lease)s)) "
                "ON CONFLICT (task_id) DO UPDATE SET replica = excluded.replica, expires_at = excluded.expires_at) "
                "SELECT set_config('synchronous_commit', 'off', true)",
                {"id": task_id, "owner": owner, "replica": self.replica, "lease": self.lease_seconds},
            )

        await self.run(insert)

    async def _listen(self) -> None:
        """``LISTEN`` for cancels and stop the turns this replica runs for them; reconnects with back-off (a cancel
        sent while disconnected still stops the turn at its next save, the SDK's own check)."""
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
                ) as connection:
                    await connection.execute(f"LISTEN {CANCEL_CHANNEL}")
                    self.listening.set()
                    delay = 0.5
                    async for notice in connection.notifies():
                        if self.executor is not None and self.executor.stop(notice.payload):
                            log.info("task %s canceled on another replica: its turn is stopped", notice.payload)
            except psycopg.Error as error:
                self.listening.clear()
                log.warning("task store: cancel listener lost its connection (%s); retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _lease_loop(self) -> None:
        """Every third of the lease: renew the leases of the turns running here, end the tasks whose lease ran out,
        and delete the finished tasks and the paused turns of no running agent past their retention. Each statement
        through :meth:`run` (the hot path's pool, autocommit): a connection lost with a restart of Postgres is
        replaced and the statement tried again, so a lease is renewed in the pass that meets the lost connections."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self._renew()
                await self._stop_canceled()
                await self._expire()
                await self._retire()
            except (psycopg.Error, SQLAlchemyError, OSError) as error:
                log.warning("task store: lease renewal failed (%s); retrying", error)
            except Exception:  # the loop must outlive any one failure: without it, live turns would lose their leases
                log.exception("task store: lease loop pass failed; retrying")

    async def _renew(self) -> None:
        running = list(self.executor.running) if self.executor is not None else []
        if not running:
            return
        await self.run(
            lambda connection: connection.execute(
                "UPDATE task_leases SET expires_at = now() + make_interval(secs => %(lease)s) "
                "WHERE replica = %(replica)s AND task_id = ANY(%(ids)s)",
                {"lease": self.lease_seconds, "replica": self.replica, "ids": running},
            )
        )

    async def _stop_canceled(self) -> None:
        """Stop the turns running here whose task is stored ``canceled``: a cancel whose announcement this replica
        missed (its listener was reconnecting) stops the turn within a third of the lease."""
        running = list(self.executor.running) if self.executor is not None else []
        if not running:
            return
        canceled = await self.run(
            lambda connection: _rows(
                connection,
                "SELECT id FROM tasks WHERE id = ANY(%(ids)s) AND status->>'state' = 'TASK_STATE_CANCELED'",
                {"ids": running},
            )
        )
        for (task_id,) in canceled:
            if self.executor is not None and self.executor.stop(task_id):
                log.info("task %s canceled on another replica (found stored): its turn is stopped", task_id)

    async def _expire(self) -> None:
        expired = await self.run(lambda connection: _rows(connection, _EXPIRE))
        for task_id, owner in expired:  # their leases are gone: each is failed here or by no one
            try:
                await self._fail_abandoned(task_id, owner)
            except Exception:
                log.exception("task %s: its lease expired, and storing it failed raised", task_id)

    async def _retire(self) -> None:
        kept = max(self.retention_seconds, PAUSED_RETENTION_FLOOR_SECONDS)

        async def retire(connection: AsyncConnection[TupleRow]) -> tuple[int, int]:
            async with connection.transaction():
                row = await (await connection.execute(_RETIRE, {"keep": self.retention_seconds})).fetchone()
                paused = (await connection.execute(_RETIRE_PAUSED, {"keep": kept})).rowcount
            return (int(row[0]) if row is not None else 0), paused

        deleted, paused = await self.run(retire)
        if deleted:
            log.info("task store: deleted %d finished tasks past their retention", deleted)
        if paused:
            log.info(
                "task store: deleted %d paused turns expired longer than the retention ago (no agent ran them)", paused
            )

    async def _fail_abandoned(self, task_id: str, owner: str) -> None:
        """End ``task_id`` ``failed`` with :data:`LEASE_EXPIRED_REASON` unless it finished meanwhile."""
        context = ServerCallContext(state={OWNER_STATE: owner})
        for _ in range(3):
            stored = await self.store.get(task_id, context)
            waiting = stored is not None and stored.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            if stored is None or is_finished(stored.task) or waiting:
                return
            failed = Task()
            failed.CopyFrom(stored.task)
            failed.status.CopyFrom(
                TaskStatus(
                    state=TaskState.TASK_STATE_FAILED,
                    message=Message(
                        role=Role.ROLE_AGENT,
                        message_id=str(uuid.uuid4()),
                        task_id=task_id,
                        context_id=failed.context_id,
                        parts=[Part(text=LEASE_EXPIRED_REASON)],
                    ),
                )
            )
            failed.status.timestamp.GetCurrentTime()
            event = TaskStatusUpdateEvent(task_id=task_id, context_id=failed.context_id, status=failed.status)
            try:
                await self.store.save(
                    failed, event=event, prev=stored.task, prev_version=stored.version, context=context
                )
            except (ConcurrentTaskModificationError, InternalError):  # moved on, or lost commits: read it again
                continue
            log.warning("task %s failed: its replica stopped while it ran (lease expired)", task_id)
            await self.push.send_notification(task_id, event)
            return


async def _rows(
    connection: AsyncConnection[TupleRow], statement: str, params: dict[str, object] | None = None
) -> list[TupleRow]:
    """The rows ``statement`` returns on ``connection``."""
    cursor = await connection.execute(statement, params)
    return await cursor.fetchall()
