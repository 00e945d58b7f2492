"""The shared task store's hot path: reading a task and storing a task's change, each in one statement.

The SDK's :class:`~a2a.server.cluster.VersionedDatabaseTaskStore` stores a change in one ORM transaction of about
seven round trips (pool ping, ``BEGIN``, the version's compare-and-swap, the ORM's read of the task row, its write,
the event's insert, ``COMMIT``), and a blocking ``SendMessage`` stores four changes. Here each change is one
``INSERT``/``UPDATE`` statement with data-modifying CTEs, in autocommit mode (one implicit transaction, one round
trip), on a psycopg connection pool without the ORM; a read is one ``SELECT``. The rows written are the SDK's
exactly (its own conversion, :meth:`~a2a.server.tasks.DatabaseTaskStore._to_orm`), so the SDK's own reads, its
listing and its event stream work on them unchanged. Semantics are the SDK's:

* a first write (``prev_version`` missing) inserts version 1, and loses (None) when the task's version row
  exists already;
* a later write moves the version from ``prev_version`` to the next one only if it is still ``prev_version``, and
  loses (None) otherwise; the version row is locked before the task row, the SDK's order, so concurrent writers of
  both kinds cannot deadlock;
* the event is appended to the log with the new version, in the same statement.

Kora adds to the same statement: a finished task's lease is dropped, and the statement says whether the task has
push-notification configurations (so a task without any costs no further read per event); a change of a task that
has some always waits for the disk, since it is announced to their receivers.

**Durability.** A commit waits for its WAL to reach the disk (one ``fdatasync``: 13-17 ms on the development
machine's disk, well under 1 ms on a server's SSD). Every change a client may keep is committed so: the task's
first write (a non-blocking send answers with it), artifacts, history writes, interrupted and finished states,
cancels. A change of the status to ``working`` (progress, nothing a client keeps) and the lease claim commit
asynchronously (``synchronous_commit = off`` for that transaction): visible to every replica at once, like any
commit, and on disk within Postgres's ``wal_writer_delay`` (200 ms by default) or with the next durable commit,
whichever comes first, since the WAL is flushed in order. Only a crash of Postgres itself (not a restart, which
flushes the WAL) within that time can lose one.

A turn whose client is a blocking ``SendMessage`` without a push configuration (:func:`answers_at_end`) is
answered only with the task's final or interrupted state: for it, the status changes to ``submitted`` and
``working`` (its first write included) commit asynchronously too; its artifacts, any other history write and the
answered state wait for the disk, which flushes what came before (the WAL is flushed in order). What that client
is answered with, and every artifact any client may be shown (one that found the task through ``ListTasks`` and
subscribed to it, say), is on disk before it is shown. Not guaranteed: a ``submitted`` or ``working`` status
another client read may be lost (the turn then ends in an error: Lost commits, below). A crash of the replica
loses nothing committed.

**Lost commits.** When Postgres crashed after acknowledging asynchronous commits and before they reached the disk,
the running replica's next write of the task finds its version row missing or older than the version it expected
(None from :func:`save`). The store then reads the stored version and, finding it missing or older, raises the
SDK's ``InternalError`` instead of ``ConcurrentTaskModificationError``: the SDK does not retry it (a retry would
reload the task and apply the write to what the database kept, a fresh empty task when it kept nothing, and answer
``completed`` without the request in its history), answers the request with a JSON-RPC internal error, and its
following attempt to store ``failed`` meets the same loss and stores nothing: the task stays as the database kept
it (absent, or at its last durable change, where the lease loop ends it ``failed`` once its lease, if it was kept,
runs out). A version found equal or newer is another writer's: ``ConcurrentTaskModificationError``, and the SDK
reloads the task and applies the write to it.

**The first two changes at once.** Such a turn's new task, with an id this replica generated, is known to no one
before it is stored: no client has its id (it is answered only at the end), so no replica can be asked for it,
cancel it or set its push configurations. Its first change (``submitted``) is held in memory
(:class:`PendingFirst`) and stored with the next one (Kora's executor announces ``working`` right after it), in
one statement (:data:`_SAVE_NEW` at version 2, both events logged with their versions), so the task is on every
replica, with its lease, from the moment its turn works; a cancel asked of this replica meanwhile stores the held
change first.

**Held artifacts.** Such a turn's artifact is told to no one before its answer when no one on this replica can
subscribe to the task meanwhile: the request handler (:class:`~kora.agent.a2a.shared_handler.SharedRequestHandler`)
counts every request that may, from its start, and stores a held change before it goes on; another replica reads
the task only from the database; the blocking client is answered with the state that stores it. So the artifact is
held too (the version after the stored or held one, returned to the SDK at once, as the SDK's event is then handed
to the subscribers of this replica, who are none) and stored with the next change (the answered state) in one statement:
the version moves by two (more with changes held before it), each event logged in its order. Its push notifications
are held with it and go to the configurations the task has when it is stored. A read of the task on this replica, a
request that may subscribe to it, a cancel, and the blocking send's answer itself store a held change first
(:meth:`~kora.agent.a2a.shared.SharedTaskStore.settle`). What a crash of the replica loses with a held change was
told to no one. A cancel asked of *another* replica while an artifact is held cannot settle it: the task ends
``canceled`` without that artifact (which no one was told of), and the turn's next write finds the task moved on
(a concurrent modification, as without holding). A send naming an existing task counts itself as a possible
subscriber, so only a task's first turn holds its artifact.

**A turn that ended.** The SDK stores a turn's changes as its own consumer of the turn's events gets to them,
which is often after the turn has ended (the change to ``working`` of a turn that answers at once is then stored
after its last event was announced by the executor, when the replica no longer runs it and has no lease to take
for it). Such a turn's change to ``working``, when its client is answered at its end and no one on this replica can
subscribe to the task (as for a held artifact), is held too, after the changes held before it, and stored with the
next change (the answered state): the task is never stored ``working`` once its turn ended, where a crash of the
replica would have left it ``working`` without a lease, so forever; and a blocking task whose turn is quick is
stored in one statement, all its events logged in their order. A change to ``working`` while the turn runs is
stored with its lease, as above. One exception: a held change stored on its own (a read of the task on this
replica, a cancel, a possible subscriber) takes no lease; only tasks whose id this replica generated hold such a
change, and no one can name such a task before its answer.

Writes that move a task to ``canceled`` (no version check, read-then-write under row locks) stay with the SDK's
store: they are rare and not on a turn's path.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

from a2a.server.cluster import TaskVersion
from a2a.server.models import TaskModel
from a2a.types.a2a_pb2 import Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from kora.agent.a2a.store import FINISHED_STATES

if TYPE_CHECKING:
    from a2a.server.agent_execution import RequestContext
    from a2a.server.events import Event
    from a2a.server.tasks.database_task_store import DatabaseTaskStore
    from google.protobuf.message import Message as ProtoMessage  # type: ignore[import-untyped]
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow


class Lease(NamedTuple):
    """A task's lease to take with its change: the replica that runs the task, for ``seconds`` from the commit."""

    replica: str
    seconds: float


class PendingFirst(NamedTuple):
    """A task's changes, not stored yet (its first, its ``working`` once its turn ended, an artifact of a turn
    answered at its end): the task as the last left it (serialized), their events in order as the log keeps them
    (the SDK's ``StreamResponse`` bytes), and the version the task has stored (0: none; the changes are the
    versions after it)."""

    task: bytes
    events: tuple[bytes, ...]
    stored: int = 0
    owner: str = ""

    @classmethod
    def of(cls, task: Task, event: Event | None = None, stored: int = 0, owner: str = "") -> PendingFirst:
        """``task``'s change by ``event`` (None: the task is its own event, a first change) after version
        ``stored``, of ``owner``, captured now: the SDK goes on changing the objects."""
        logged = to_stream_response(task if event is None else event).SerializeToString()
        return cls(task.SerializeToString(), (logged,), stored, owner)

    def then(self, task: Task, event: Event | None) -> PendingFirst:
        """These changes followed by ``task``'s change by ``event`` (None: the task is its own event), all held."""
        logged = to_stream_response(task if event is None else event).SerializeToString()
        return self._replace(task=task.SerializeToString(), events=(*self.events, logged))

    @property
    def version(self) -> int:
        """The version the last of these changes makes (the SDK's view of the task)."""
        return self.stored + len(self.events)

    def stored_task(self) -> Task:
        """The task as the change left it."""
        task = Task()
        task.ParseFromString(self.task)
        return task


class Saved(NamedTuple):
    """What :func:`save` stored: the task's new version, whether the task has push configurations, and whether
    its commit waited for the disk."""

    version: int
    has_push_configs: bool
    durable: bool


#: The states a blocking ``SendMessage`` is answered with: final and interrupted ones.
ANSWERED_STATES = FINISHED_STATES | {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
#: The states of a turn's progress: a change to one of them, without an artifact, is not kept by a client that is
#: answered only at the turn's end.
_PROGRESS_STATES = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
#: Characters of converted history messages and artifacts a :class:`RowCodec` keeps at most (keys and JSON).
CODEC_MAX_CHARS = 16 * 1024 * 1024


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


_STATUS_STATE = TaskStatus.DESCRIPTOR.fields_by_name["state"]
#: The fields of a status that :meth:`RowCodec.status` converts one by one (state, message, timestamp) -> the
#: start of their JSON member: the field's JSON name (as ``MessageToDict`` names it) and the colon.
_STATUS_KEYS = {
    field.name: _dumps(field.json_name) + ":"
    for field in TaskStatus.DESCRIPTOR.fields
    if field.name in {"state", "message", "timestamp"}
}


class RowCodec:
    """A task's JSON columns as the SDK stores them (its default conversion,
    :meth:`~a2a.server.tasks.DatabaseTaskStore._to_orm`: ``MessageToDict`` of the status, of each artifact and of
    each history message, the metadata's ``MessageToDict`` or NULL), as JSON text, with each history message,
    artifact and status message converted once: a task's every change stores its whole history and artifacts
    again, and those do not change once added; a turn's answer (its final status's message) moves into the history
    on the task's next turn. They are remembered by their serialized bytes (so an artifact extended by a chunk is
    converted anew), the most recent first, at most :data:`CODEC_MAX_CHARS` of bytes and text in all."""

    def __init__(self, max_chars: int = CODEC_MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._chars = 0
        #: (message type name, serialized bytes) -> its JSON text, least recently used first.
        self._known: OrderedDict[tuple[str, bytes], str] = OrderedDict()
        #: A status's state (its enum number) -> the state's JSON value, as ``MessageToDict`` of the status has it.
        self._states: dict[int, str] = {}

    def item(self, message: ProtoMessage) -> str:
        """``MessageToDict(message)`` as JSON text, converted at most once while remembered."""
        key = (message.DESCRIPTOR.full_name, message.SerializeToString(deterministic=True))
        known = self._known.get(key)
        if known is not None:
            self._known.move_to_end(key)
            return known
        text = _dumps(MessageToDict(message))
        size = len(key[1]) + len(text)
        if size <= self._max_chars:
            self._known[key] = text
            self._chars += size
            while self._chars > self._max_chars:
                (_, old), old_text = self._known.popitem(last=False)
                self._chars -= len(old) + len(old_text)
        return text

    def status(self, status: TaskStatus) -> str:
        """``MessageToDict(status)`` as JSON text: the JSON object of its fields (in field-number order, as
        ``MessageToDict`` has them), each converted on its own by ``MessageToDict``: its message as an :meth:`item`,
        its state once per state, its timestamp each time. A status with a field of another name (a later protocol
        version's) is converted whole."""
        members = []
        for field, value in status.ListFields():
            name = _STATUS_KEYS.get(field.name)
            if name is None:
                return _dumps(MessageToDict(status))
            if field.name == "message":
                text = self.item(value)
            elif field.name == "timestamp":
                text = _dumps(MessageToDict(value))
            else:
                text = self._states.get(value) or self._state(value)
            members.append(name + text)
        return "{" + ",".join(members) + "}"

    def _state(self, state: int) -> str:
        text = _dumps(MessageToDict(TaskStatus(state=state))[_STATUS_STATE.json_name])  # type: ignore[arg-type]
        self._states[state] = text
        return text

    def columns(self, task: Task) -> tuple[str, str, str, str | None]:
        """``task``'s status, artifacts, history and metadata columns (metadata None when it has no fields)."""
        return (
            self.status(task.status),
            "[" + ",".join(self.item(artifact) for artifact in task.artifacts) + "]",
            "[" + ",".join(self.item(message) for message in task.history) + "]",
            _dumps(MessageToDict(task.metadata)) if task.metadata.fields else None,
        )


_TAIL = """, stored AS (
    INSERT INTO tasks (id, context_id, kind, owner, last_updated, status, artifacts, history, protocol_version,
                       metadata)
    SELECT %(id)s::text, %(context_id)s::text, 'task', %(owner)s::text, %(last_updated)s::timestamp,
           %(status)s::json, %(artifacts)s::json, %(history)s::json, '1.0', %(metadata)s::json
    FROM version
    ON CONFLICT (id) DO UPDATE SET context_id = excluded.context_id, kind = excluded.kind, owner = excluded.owner,
        last_updated = excluded.last_updated, status = excluded.status, artifacts = excluded.artifacts,
        history = excluded.history, protocol_version = excluded.protocol_version, metadata = excluded.metadata
), logged AS (
    INSERT INTO task_events (task_id, owner, task_version, event_data)
    SELECT %(id)s::text, %(owner)s::text, version.version - cardinality(%(events)s::bytea[]) + e.n, e.data
    FROM version CROSS JOIN LATERAL unnest(%(events)s::bytea[]) WITH ORDINALITY AS e (data, n)
    ORDER BY e.n
), unleased AS (
    DELETE FROM task_leases WHERE %(finished)s::boolean AND task_id = %(id)s::text AND EXISTS (SELECT FROM version)
), leased AS (
    INSERT INTO task_leases (task_id, owner, replica, expires_at)
    SELECT %(id)s::text, %(owner)s::text, %(replica)s::text, now() + make_interval(secs => %(lease)s::float8)
    FROM version WHERE %(replica)s::text IS NOT NULL
    ON CONFLICT (task_id) DO UPDATE SET replica = excluded.replica, expires_at = excluded.expires_at
)
SELECT (SELECT version.version FROM version), pushed.any,
       set_config('synchronous_commit', CASE WHEN pushed.any THEN 'on' ELSE %(commit)s::text END, true)
FROM (SELECT EXISTS (SELECT FROM push_notification_configs WHERE task_id = %(id)s::text) AS any) AS pushed"""

#: A task's first write, version ``new`` (1; more with changes held before it, :class:`PendingFirst`, every event
#: logged in its order with its version: the event log's order is its rows' sequence), unless some writer made the
#: task's version row first.
_SAVE_NEW = (
    """WITH version AS (
    INSERT INTO task_versions (task_id, owner, version) VALUES (%(id)s::text, %(owner)s::text, %(new)s::bigint)
    ON CONFLICT DO NOTHING
    RETURNING version
)"""
    + _TAIL
)

#: A later write: the compare-and-swap of the version from ``prev`` to ``new`` (``prev + 1``; more with held
#: changes, :class:`PendingFirst`, logged with the versions between).
_SAVE_NEXT = (
    """WITH version AS (
    UPDATE task_versions SET version = %(new)s::bigint
    WHERE task_id = %(id)s::text AND owner = %(owner)s::text AND version = %(prev)s::bigint
    RETURNING version
)"""
    + _TAIL
)

_LOAD = """SELECT t.id, t.context_id, t.kind, t.owner, t.last_updated, t.status, t.artifacts, t.history,
       t.protocol_version, t.metadata, v.version
FROM tasks t LEFT JOIN task_versions v ON v.task_id = t.id AND v.owner = t.owner
WHERE t.id = %(id)s::text AND t.owner = %(owner)s::text"""


async def save(
    connection: AsyncConnection[TupleRow],
    codec: RowCodec,
    task: Task,
    *,
    owner: str,
    event: Event | None,
    prev_version: int,
    finished: bool,
    durable: bool = True,
    lease: Lease | None = None,
    first: PendingFirst | None = None,
    event_data: bytes | None = None,
) -> Saved | None:
    """Store ``task`` of ``owner`` and ``event`` (the change that made it) as the version after ``prev_version``
    (0: the task's first write), dropping its lease when ``finished`` and taking ``lease`` (for its replica, unless
    ``finished``) otherwise; one statement on ``connection`` (autocommit), its commit waiting for the disk unless
    ``durable`` is false and the task has no push configuration.

    With ``first`` (the task's held changes, up to the version ``prev_version``, after the stored ``first.stored``),
    all are stored at once: version ``prev_version + 1``, ``first``'s events logged with the versions before it.
    ``event_data``:
    ``event`` as the log keeps it, already serialized (then ``event`` is None). ``codec`` converts the task to the
    SDK's rows. Returns None when another writer won (the version row exists already, or is no longer at the stored
    version): nothing is stored, the lease not taken. Raises what psycopg raises when the statement fails.
    """
    status, artifacts, history, metadata = codec.columns(task)
    params = {
        "id": task.id,
        "context_id": task.context_id,
        "owner": owner,
        "last_updated": task.status.timestamp.ToDatetime() if task.status.HasField("timestamp") else None,
        "status": status,
        "artifacts": artifacts,
        "history": history,
        "metadata": metadata,
        "finished": finished,
        "commit": "on" if durable else "off",
        "replica": None if lease is None or finished else lease.replica,
        "lease": 0.0 if lease is None else lease.seconds,
    }
    logged = event_data if event is None else to_stream_response(event).SerializeToString()
    params["events"] = [logged] if first is None else [*first.events, logged]
    stored = prev_version if first is None else first.stored
    params["prev"] = stored
    params["new"] = prev_version + 1
    statement = _SAVE_NEW if stored == 0 else _SAVE_NEXT
    cursor = await connection.execute(statement, params, prepare=True)
    row = await cursor.fetchone()
    if row is None or row[0] is None:
        return None
    return Saved(int(row[0]), bool(row[1]), row[2] == "on")


async def load(
    connection: AsyncConnection[TupleRow], db: DatabaseTaskStore, task_id: str, owner: str
) -> tuple[Task, int] | None:
    """``owner``'s task ``task_id`` and its version (0 when it has no version row), or None; one ``SELECT``.

    ``db`` is the SDK's store whose row conversion is used (older protocol versions' rows included).
    """
    cursor = await connection.execute(_LOAD, {"id": task_id, "owner": owner})
    row = await cursor.fetchone()
    if row is None:
        return None
    model = TaskModel(
        id=row[0],
        context_id=row[1],
        kind=row[2],
        owner=row[3],
        last_updated=row[4],
        status=row[5],
        artifacts=row[6],
        history=row[7],
        protocol_version=row[8],
        task_metadata=row[9],
    )
    return db._from_orm(model), int(row[10] or 0)


def is_durable(task: Task, event: Event | None, prev_version: int, *, answered_at_end: bool = False) -> bool:
    """Whether storing ``task`` (changed by ``event`` from ``prev_version``) must wait for the disk: all but a later
    status change to ``working``, and when its turn's client is ``answered_at_end`` (:func:`answers_at_end`), all but
    a status change to ``submitted`` or ``working`` (artifacts, history writes of any other state and the answered
    state wait; see the module's Durability)."""
    if answered_at_end:
        return isinstance(event, TaskArtifactUpdateEvent) or task.status.state not in _PROGRESS_STATES
    return not (
        prev_version
        and isinstance(event, TaskStatusUpdateEvent)
        and event.status.state == TaskState.TASK_STATE_WORKING
        and task.status.state == TaskState.TASK_STATE_WORKING
    )


def carries_answer(event: Event | None, previous_state: TaskState | None) -> bool:
    """Whether ``event`` is the change that carries the state a blocking ``SendMessage`` is answered with (one of
    :data:`ANSWERED_STATES`): a status update to such a state, or a :class:`Task` event (the task written whole)
    whose state is one and differs from ``previous_state``, the task's state before (None for a new task: the SDK
    writes a request that failed before its task existed as a new ``failed`` task). A ``Task`` event in the state
    the task had already is the SDK's write of a next request's message into its history (a decision sent to a task
    waiting in ``input-required``): the start of a turn, not its answer."""
    if isinstance(event, TaskStatusUpdateEvent):
        return event.status.state in ANSWERED_STATES
    if isinstance(event, Task):
        return event.status.state in ANSWERED_STATES and event.status.state != previous_state
    return False


def answers_at_end(context: RequestContext) -> bool:
    """Whether the request running a turn (``context``) announces nothing to its client before the task's final or
    interrupted state: a JSON-RPC ``SendMessage`` (A2A 1.0; neither streamed nor the REST binding, which do not
    name the method in the call context, nor 0.3's ``message/send``) that does not return immediately and sets no
    push configuration (the SDK's request handler answers such a request with the first terminal or interrupted
    state)."""
    if context.call_context.state.get("method") != "SendMessage":
        return False
    configuration = context.configuration
    return configuration is None or not (
        configuration.return_immediately or configuration.HasField("task_push_notification_config")
    )


def number(version: TaskVersion) -> int:
    """The counter ``version`` wraps (0 for :attr:`TaskVersion.MISSING`); raises ``TypeError`` for any other kind."""
    value = version._value  # the SDK's own stores read it so: a version's value is the store's to interpret
    if not isinstance(value, int):
        raise TypeError(f"the shared task store counts versions, got {type(value).__name__}")
    return value
