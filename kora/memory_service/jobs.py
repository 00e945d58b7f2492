"""The durable background queue: fact extraction, summary folds and conflict checks, off the response path.

Why a table with ``SELECT ... FOR UPDATE SKIP LOCKED`` rather than procrastinate or pgqueuer: a job must be queued
in the *same transaction* as the events it is about, so that an accepted write always has its jobs (the service
may be killed the moment after it answers), and the three job kinds are short functions of this service run by
its own workers. The table and the claim query are a dozen lines; a queue library would add its own schema,
worker process model and migrations for what one indexed table does here.

How a job runs, in three steps so that no transaction stays open across a model request (an erasure would wait
for it):

1. **Claim**, one short statement: the oldest due job without a live lease (``FOR UPDATE SKIP LOCKED``) gets a
   lease, ``locked_until`` = now + ``job_lease_seconds``, and the claim's token in ``locked_by``. While the job runs
   the worker renews the lease every third of that time.
2. **Work**: the job reads what it needs (short reads), then calls the models with no connection held.
3. **Commit**, one short transaction: it locks the job's session (share lock; an erasure locks the sessions it
   removes first, so one waits for the other) and checks the job is still its own; then the job's writes and the
   job's removal commit together. A session erased meanwhile, or a job whose lease another worker took over, drops
   the results.

If the process dies mid-job, nothing of the job was written, and the job is due again once its lease has
passed: nothing is lost and nothing is half-done. A model that cannot be reached makes the job wait and try
again (back-off up to 5 minutes, for :data:`MAX_ATTEMPTS` tries); an answer that stays invalid after
``extraction_attempts`` requests is recorded as ``failed`` with its reason (``GET /v1/jobs``), never dropped silently.

Kinds (payloads): ``extract`` (``{"first_seq", "last_seq"}``: events of one write), ``fold`` (``{}``: summarise the
events that left the window), ``reconcile`` (``{"fact_id"}``: supersede the facts a new fact contradicts), ``embed``
(``{}``, about no session: give the next ``embed_batch`` facts without an embedding one, then queue the next batch;
queued when the embedding model changed and at start-up while facts lack one, and when a fact is stored without one
because the model could not be reached).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Protocol, TypeVar

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import AfterValidator, BaseModel, Field, JsonValue

from kora.core.errors import InvalidAnswer, JobFailed, JobRetry, ModelRefused, ModelUnreachable
from kora.core.events import EventType, MemoryEvent
from kora.memory import event_text
from kora.memory.wire import MAX_TEXT_CHARS, check_storable_json, strip_unstorable
from kora.memory_service import facts, schema, store
from kora.memory_service.database import Conn, Database
from kora.memory_service.models import MemoryModelClient
from kora.memory_service.settings import MemoryServiceSettings


class JobHost(Protocol):
    """What a job needs of the service that runs it (:class:`kora.memory_service.runtime.MemoryRuntime`, which
    starts the workers): stated here so that this module does not import the service that imports it."""

    settings: MemoryServiceSettings
    db: Database
    #: The summary model's client; None without a summary model.
    summary: MemoryModelClient | None
    #: The embedding model's client; None without an embedding model.
    embedder: MemoryModelClient | None

    async def embed_texts(self, texts: Sequence[str]) -> list[list[float] | None]: ...

    async def embed_batch(self, texts: Sequence[str]) -> list[list[float]]: ...

    def wake_workers(self) -> None: ...


log = logging.getLogger("kora.memory")

ShapeT = TypeVar("ShapeT", bound=BaseModel)

#: Tries of a job whose model API cannot be reached before it is recorded as failed.
MAX_ATTEMPTS = 20
#: Seconds an idle worker sleeps before looking for due jobs again (a write in this process wakes it at once).
POLL_SECONDS = 1.0
#: Events folded into a summary at most per fold.
FOLD_BATCH = 200
#: Characters of the shortest cut of a text the embedding model refused (:func:`embed`).
MIN_CUT_CHARS = 64

EXTRACTION_SYSTEM = (
    "You extract durable facts about the user from a conversation, to remember them in later conversations. "
    "A fact is one short, self-contained sentence in the third person about the user: who they are, where they "
    "live or work, their family, preferences, plans, possessions and constraints (for example 'The user lives in "
    "Paris.'). Keep only what the user said about themselves or asked to be remembered; skip greetings, questions, "
    "the assistant's own statements and anything that will not matter later. Answer with JSON "
    '{"facts": [...]}; an empty list when there is nothing worth remembering.'
)
CONFLICT_SYSTEM = (
    "You keep a user's memory consistent. Given a new fact and existing facts about the same user, list the ids of "
    "the existing facts that the new fact contradicts: they cannot both be true now (an address, a job or a "
    "preference that changed). Facts that are merely related, or that can both hold, are not contradicted. Answer "
    'with JSON {"contradicted": [...]}, an empty list when none is contradicted.'
)
FOLD_SYSTEM = (
    "Summarize the conversation so far for the assistant's own memory: the previous summary, if any, followed by "
    "the conversation's next lines. Keep names, facts, decisions, open questions and what the user wants; drop "
    "small talk. Write plain prose in at most {words} words."
)


def _string_list_schema(key: str) -> dict[str, object]:
    """The strict JSON schema of ``{key: [str, ...]}`` (the wire form of the memory contract's answers)."""
    return {
        "type": "object",
        "properties": {key: {"type": "array", "items": {"type": "string"}}},
        "required": [key],
        "additionalProperties": False,
    }


EXTRACTED_FACTS_SCHEMA = _string_list_schema("facts")
FACT_CONFLICTS_SCHEMA = _string_list_schema("contradicted")


def _storable(text: str) -> str:
    check_storable_json(text)
    return text


#: A fact as the model may state it: storable text of at most :data:`~kora.memory.wire.MAX_TEXT_CHARS`.
ModelFact = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_storable)]


class ExtractedFacts(BaseModel):
    """The answer of a fact extraction (``response_format`` name ``extracted_facts``, :data:`EXTRACTED_FACTS_SCHEMA`);
    an answer with more than 50 facts, a fact over the length limit or text Postgres cannot store is invalid."""

    facts: list[ModelFact] = Field(max_length=50)


class FactConflicts(BaseModel):
    """The answer of a conflict check (``response_format`` name ``fact_conflicts``, :data:`FACT_CONFLICTS_SCHEMA`)."""

    contradicted: list[str] = Field(max_length=50)


@dataclass(frozen=True)
class Job:
    """A claimed job: its row ``id``, ``kind``, session row ``sid`` (None: about no session), ``payload`` and tries
    so far."""

    id: int
    kind: str
    sid: int | None
    payload: dict[str, object]
    attempts: int


#: The writes of a job, run in its commit transaction on the connection given.
Commit = Callable[[Conn], Awaitable[None]]


async def queue_embedding(conn: Conn) -> None:
    """Queue an ``embed`` job when a valid fact waits for a vector (its own or its contextual one) and no ``embed``
    job waits unclaimed (one that is running may have read its batch before the fact was stored). Inside the
    caller's transaction, if any."""
    await conn.execute(
        "INSERT INTO jobs (kind, sid) SELECT 'embed', NULL WHERE EXISTS "
        "(SELECT 1 FROM facts WHERE (embedding IS NULL OR context_embedding IS NULL) AND invalidated_at IS NULL) "
        "AND NOT EXISTS "
        "(SELECT 1 FROM jobs WHERE kind = 'embed' AND status = 'queued' AND locked_by IS NULL)"
    )


async def enqueue(conn: Conn, kind: str, sid: int | None, payload: dict[str, object] | None = None) -> None:
    """Queue a job (inside the caller's transaction, with the write it is about; ``sid`` None: a job of no
    session, such as the conflict check of a fact saved without one). A ``fold`` already queued for the session is
    not queued twice."""
    if kind == "fold":
        # A fold already running (claimed) read the session before this write: queue another one after it.
        await conn.execute(
            "INSERT INTO jobs (kind, sid, payload) SELECT 'fold', %s, '{}' WHERE NOT EXISTS "
            "(SELECT 1 FROM jobs WHERE kind = 'fold' AND sid = %s AND status = 'queued' AND locked_by IS NULL)",
            (sid, sid),
        )
        return
    await conn.execute("INSERT INTO jobs (kind, sid, payload) VALUES (%s, %s, %s)", (kind, sid, Jsonb(payload or {})))


class JobInfo(BaseModel):
    """A background job as ``GET /v1/jobs`` lists it; ``session_id`` and ``app_name`` are None for a job about no
    session (``embed``)."""

    id: int
    kind: str
    session_id: str | None
    app_name: str | None
    status: str
    attempts: int
    last_error: str | None


async def list_jobs(conn: Conn, status: str | None, limit: int) -> list[JobInfo]:
    """Jobs of ``status`` (``queued`` or ``failed``; all when None), oldest first, at most ``limit``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT j.id, j.kind, s.session_id, s.app_name, j.status, j.attempts, j.last_error "
            "FROM jobs j LEFT JOIN sessions s USING (sid) WHERE %(status)s::text IS NULL OR j.status = %(status)s "
            "ORDER BY j.id LIMIT %(limit)s",
            {"status": status, "limit": limit},
        )
        return [JobInfo.model_validate(row) for row in await cur.fetchall()]


async def run_one(service: JobHost) -> bool:
    """Claim and run the oldest due job (module docstring); False when none was due."""
    assert service.db.pool is not None
    token = uuid.uuid4().hex
    lease = service.settings.job_lease_seconds
    async with service.db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "UPDATE jobs SET locked_until = now() + make_interval(secs => %(lease)s), locked_by = %(token)s "
            "WHERE id = (SELECT id FROM jobs WHERE status = 'queued' AND run_after <= now() "
            "AND (locked_until IS NULL OR locked_until < now()) ORDER BY run_after, id LIMIT 1 "
            "FOR UPDATE SKIP LOCKED) RETURNING id, kind, sid, payload, attempts",
            {"lease": lease, "token": token},
        )
        row = await cur.fetchone()
    if row is None:
        return False
    job = Job(**row)
    renewing = asyncio.create_task(_renew(service, job, token), name=f"memory-job-{job.id}-lease")
    try:
        handler = HANDLERS.get(job.kind)
        if handler is None:
            raise JobFailed(f"unknown job kind {job.kind!r}")
        await _commit(service, job, token, await handler(service, job))
    except JobFailed as failure:
        log.warning("memory job %s %d failed: %s", job.kind, job.id, failure)
        await _record(service, job, token, "failed", str(failure), 0)
    except (JobRetry, ModelUnreachable) as error:
        await _retry(service, job, token, str(error))
    except Exception as error:  # a bug or a database error: keep the job, try later, say so
        log.exception("memory job %s %d raised", job.kind, job.id)
        await _retry(service, job, token, f"{type(error).__name__}: {error}")
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewing
    return True


async def _renew(service: JobHost, job: Job, token: str) -> None:
    """Extend the job's lease every third of its length while it runs (a failed renewal is tried again)."""
    assert service.db.pool is not None
    lease = service.settings.job_lease_seconds
    while True:
        await asyncio.sleep(lease / 3)
        try:
            async with service.db.pool.connection() as conn:
                await conn.execute(
                    "UPDATE jobs SET locked_until = now() + make_interval(secs => %s) WHERE id = %s AND locked_by = %s",
                    (lease, job.id, token),
                )
        except Exception as error:  # the database is away: the commit will tell whether the job is still ours
            log.warning("memory job %s %d: cannot renew its lease: %s", job.kind, job.id, error)


async def _commit(service: JobHost, job: Job, token: str, commit: Commit | None) -> None:
    """The job's writes and its removal, in one short transaction, if its session still exists and the job is
    still this claim's; otherwise the results are dropped."""
    assert service.db.pool is not None
    async with service.db.pool.connection() as conn, conn.transaction():
        # Session first, then the job: erasure locks in that order too.
        if job.sid is not None and await store.session_by_sid(conn, job.sid, lock=True) is None:
            log.info("memory job %s %d: its session was erased meanwhile; results dropped", job.kind, job.id)
            return
        cur = await conn.execute("SELECT 1 FROM jobs WHERE id = %s AND locked_by = %s FOR UPDATE", (job.id, token))
        if await cur.fetchone() is None:
            log.warning("memory job %s %d: its lease passed to another worker; results dropped", job.kind, job.id)
            return
        if commit is not None:
            await commit(conn)
        await conn.execute("DELETE FROM jobs WHERE id = %s", (job.id,))


async def _retry(service: JobHost, job: Job, token: str, reason: str) -> None:
    if job.attempts + 1 >= MAX_ATTEMPTS:
        log.warning("memory job %s %d failed after %d tries: %s", job.kind, job.id, job.attempts + 1, reason)
        await _record(service, job, token, "failed", reason, 0)
        return
    await _record(service, job, token, "queued", reason, min(2.0**job.attempts, 300.0))


async def _record(service: JobHost, job: Job, token: str, status: str, reason: str, delay: float) -> None:
    """Release the claim with the job's new status, its reason and when it is due again."""
    assert service.db.pool is not None
    async with service.db.pool.connection() as conn:
        await conn.execute(
            "UPDATE jobs SET status = %s, attempts = attempts + 1, last_error = %s, locked_until = NULL, "
            "locked_by = NULL, run_after = now() + make_interval(secs => %s) WHERE id = %s AND locked_by = %s",
            (status, reason[:2000], delay, job.id, token),
        )


async def worker(service: JobHost, wake: asyncio.Event) -> None:
    """Run due jobs until cancelled; sleep up to :data:`POLL_SECONDS` (or until ``wake`` is set) when idle."""
    while True:
        try:
            ran = await run_one(service)
        except Exception as error:  # the database went away: wait and try again
            log.warning("memory worker cannot reach the database: %s", error)
            ran = False
        if not ran:
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), POLL_SECONDS)


# -- the job kinds --------------------------------------------------------------------------------------------


def _sid(job: Job) -> int:
    """The session row a session's job is about (every kind but ``embed`` is)."""
    if job.sid is None:
        raise JobFailed(f"a {job.kind} job names no session")
    return job.sid


async def _session_of(conn: Conn, sid: int | None) -> store.Session:
    session = None if sid is None else await store.session_by_sid(conn, sid)
    if session is None:
        raise JobFailed("the session no longer exists")
    return session


async def extract(service: JobHost, job: Job) -> Commit | None:
    """Extract facts from the events of one write; the commit stores them (deduplicated), queueing a conflict check
    for each new one."""
    assert service.db.pool is not None
    async with service.db.pool.connection() as conn:
        session = await _session_of(conn, job.sid)
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT event_id, ts AS timestamp, event_type, content, metadata FROM events "
                "WHERE sid = %s AND seq BETWEEN %s AND %s AND event_type = ANY(%s) ORDER BY seq",
                (session.sid, job.payload["first_seq"], job.payload["last_seq"], list(store.CONVERSATION_TYPES)),
            )
            rows = await cur.fetchall()
    events = [MemoryEvent.model_validate(row) for row in rows]
    if not events:
        return None
    lines = "\n".join(f"{_speaker(event.event_type)}: {event_text(event)}" for event in events)
    answer = await _ask_json(
        service, EXTRACTION_SYSTEM, lines, "extracted_facts", EXTRACTED_FACTS_SCHEMA, ExtractedFacts
    )
    texts = [text.strip() for text in answer.facts if text.strip()]
    if not texts:
        return None
    vectors = await service.embed_texts(texts)
    owner = facts.Owner(session.app_name, session.user_id, session.session_id)
    source_ids = [event.event_id for event in events]
    attribution: dict[str, JsonValue] = {
        "agent": session.app_name,
        "session_id": session.session_id,
        "user_id": session.user_id,
    }

    async def commit(conn: Conn) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            written = await facts.write_fact(
                conn,
                text,
                owner,
                "extracted",
                vector,
                attribution,
                source_ids,
                supersede_corrections=not service.settings.has_summary_model,
            )
            if written.status == "stored" and service.settings.has_summary_model:
                await enqueue(conn, "reconcile", session.sid, {"fact_id": written.fact_id})
        if service.embedder is not None:
            await queue_embedding(conn)  # their contextual embeddings (and their own where the model failed)
        service.wake_workers()

    return commit


def _speaker(event_type: str) -> str:
    return "assistant" if event_type == EventType.AGENT_RESPONSE else "user"


async def embed(service: JobHost, job: Job) -> Commit | None:
    """Embed the next ``embed_batch`` valid facts waiting for a vector, each with its own text (if it has no
    embedding yet) and read after the fact before it (its contextual embedding, :func:`facts.context_text`), all
    in one batch; the commit stores the vectors (if the store still holds this model's) and queues the next batch
    while facts are left. An unreachable model makes the job wait and try again; an answer that is not one vector
    per text, of the store's dimension, fails it. A text the model refuses (:class:`ModelRefused`: longer than it
    takes, say) is embedded cut to half its length, again until the model takes it (its start kept for a fact's own
    text, its end for a contextual one), so that one over-long fact does not hold up every fact queued after it; a
    model that refuses even :data:`MIN_CUT_CHARS` characters refuses more than a length, and the job waits as for
    an unreachable one."""
    assert service.db.pool is not None
    if service.embedder is None:
        raise JobFailed("no embedding model is configured")
    async with service.db.pool.connection() as conn:
        batch = await facts.unembedded(conn, service.settings.embed_batch)
    if not batch:
        return None
    try:
        answer = iter(await _embed_cut_to_fit(service, [text for fact in batch for text in fact.texts()]))
        found = [
            (
                fact.fact_id,
                None if fact.embedded else next(answer),
                None if fact.previous is None else next(answer),
            )
            for fact in batch
        ]
    except InvalidAnswer as error:
        raise JobFailed(str(error)) from error
    except StopIteration as error:
        raise JobFailed("the embedding model answered fewer vectors than texts") from error
    model = service.embedder.model

    async def commit(conn: Conn) -> None:
        if await schema.embedding_model(conn) != model:
            # Another replica moved the store to another model meanwhile; it queued its own embed jobs.
            log.info("memory job embed %d: the store's embedding model changed; results dropped", job.id)
            return
        await facts.set_embeddings(conn, found)
        await queue_embedding(conn)
        service.wake_workers()

    return commit


async def _embed_cut_to_fit(service: JobHost, texts: Sequence[tuple[str, bool]]) -> list[list[float]]:
    """A vector for each of ``texts`` (a text, and whether to keep its end rather than its start when it is cut), in
    order: the texts in one request, and when the model refuses it, each half of them apart, down to each refused
    text alone, which is cut to half its length until taken. Raises :class:`ModelRefused` when a text of at most
    :data:`MIN_CUT_CHARS` characters is refused, what :meth:`JobHost.embed_batch` raises otherwise."""
    try:
        return await service.embed_batch([text for text, _ in texts])
    except ModelRefused:
        if len(texts) > 1:
            half = len(texts) // 2
            return [
                *await _embed_cut_to_fit(service, texts[:half]),
                *await _embed_cut_to_fit(service, texts[half:]),
            ]
        ((text, keep_end),) = texts
        if len(text) <= MIN_CUT_CHARS:
            raise
        cut = len(text) // 2
        log.info("memory job embed: the embedding model refused a text of %d characters; cut to %d", len(text), cut)
        return await _embed_cut_to_fit(service, [(text[-cut:] if keep_end else text[:cut], keep_end)])


async def reconcile(service: JobHost, job: Job) -> Commit | None:
    """Ask the summary model which older facts a new fact contradicts; the commit supersedes them. Without a
    candidate (:func:`~kora.memory_service.facts.conflict_candidates`) no model request is made."""
    assert service.db.pool is not None
    fact_id = str(job.payload["fact_id"])
    async with service.db.pool.connection() as conn:
        found = await facts.fact_owner(conn, fact_id)
        if found is None:
            return None
        owner, text, embedding = found
        candidates = await facts.conflict_candidates(conn, text, owner, embedding, exclude=fact_id)
    if not candidates:
        return None
    listing = "\n".join(f"{candidate.fact_id}: {candidate.text}" for candidate in candidates)
    question = f"New fact: {text}\nExisting facts:\n{listing}"
    answer = await _ask_json(service, CONFLICT_SYSTEM, question, "fact_conflicts", FACT_CONFLICTS_SCHEMA, FactConflicts)
    known = {candidate.fact_id for candidate in candidates}
    contradicted = [old for old in answer.contradicted if old in known]
    if not contradicted:
        return None

    async def commit(conn: Conn) -> None:
        await facts.supersede(conn, contradicted, fact_id, "contradicted by a newer fact")

    return commit


async def fold(service: JobHost, job: Job) -> Commit | None:
    """Fold the events that left the session's window into new versions of its rolling summary, oldest first,
    :data:`FOLD_BATCH` events per model request, until every event out of the window is summarised. Each version
    commits on its own (in a short transaction that checks the session still exists)."""
    assert service.db.pool is not None
    if service.summary is None:
        raise JobFailed("no summary model is configured")
    async with service.db.pool.connection() as conn:
        # One fold per session at a time, across replicas: two would both write "version n + 1" of the same summary.
        # A session-level lock on this connection (no transaction is open across the model requests); a process
        # that dies lets go of it with its connection.
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_FOLD_LOCK_SPACE, _sid(job) % _INT4))
        locked = await cur.fetchone()
        if not locked or not locked[0]:
            raise JobRetry("another replica is folding this session")
        try:
            await _fold_locked(service, conn, job)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_FOLD_LOCK_SPACE, _sid(job) % _INT4))
    return None


async def _fold_locked(service: JobHost, conn: Conn, job: Job) -> None:
    assert service.summary is not None
    settings = service.settings
    while True:
        session = await _session_of(conn, job.sid)
        cap, budget = session.window_bounds(settings)
        newest = await store.newest_events(conn, session, 0, cap)
        in_window = store.window_size(newest, cap, budget)
        # Events older than the window's oldest are out of it; with nothing in the window (one event over the token
        # budget), every event is.
        window_start = newest[in_window - 1].seq if in_window else (newest[0].seq + 1 if newest else 0)
        previous = await store.latest_summary(conn, session)
        through = previous[1] if previous else 0
        leaving = await store.oldest_events(conn, session, through, window_start, FOLD_BATCH)
        if not leaving:
            return
        lines = "\n".join(f"{_speaker(row.event.event_type)}: {event_text(row.event)}" for row in leaving)
        prior = f"Previous summary:\n{previous[0]}\n\n" if previous else ""
        words = max(settings.compaction_target * 3 // 4, 12)
        try:
            answer = await service.summary.chat_text(FOLD_SYSTEM.format(words=words), f"{prior}Conversation:\n{lines}")
        except InvalidAnswer as error:
            raise JobFailed(str(error)) from error
        summary = strip_unstorable(answer).strip()
        if not summary:
            raise JobFailed("the summary model answered no storable text")
        async with conn.transaction():
            if await store.session_by_sid(conn, _sid(job), lock=True) is None:
                raise JobFailed("the session no longer exists")
            await _store_summary(conn, _sid(job), summary, leaving[-1].seq, settings.digest_retention)


async def _store_summary(conn: Conn, sid: int, body: str, through_seq: int, retention: int) -> None:
    """Add the session's next summary version, keeping the newest ``retention`` versions."""
    row = await (
        await conn.execute("SELECT coalesce(max(version), 0) + 1 FROM summaries WHERE sid = %s", (sid,))
    ).fetchone()
    version = int(str(row[0])) if row else 1
    await conn.execute(
        "INSERT INTO summaries (sid, version, body, through_seq) VALUES (%s, %s, %s, %s)",
        (sid, version, body, through_seq),
    )
    await conn.execute("DELETE FROM summaries WHERE sid = %s AND version <= %s", (sid, version - retention))


#: Namespace of the per-session advisory locks of folds (the second key is the session's row id, modulo 2**31).
_FOLD_LOCK_SPACE = 7301
_INT4 = 2**31


async def _ask_json(
    service: JobHost, system: str, user: str, name: str, schema: dict[str, object], shape: type[ShapeT]
) -> ShapeT:
    """Ask the summary model for ``shape``; up to ``extraction_attempts`` requests while answers are invalid."""
    if service.summary is None:
        raise JobFailed("no summary model is configured")
    problem = ""
    for _ in range(service.settings.extraction_attempts):
        try:
            return await service.summary.chat_json(system, user, name, schema, shape)
        except InvalidAnswer as error:
            problem = str(error)
    raise JobFailed(f"{service.settings.extraction_attempts} answers were not valid {name} JSON; last: {problem}")


#: The job kinds: each does its reads and model requests, and returns its writes for the commit (None: nothing).
HANDLERS: dict[str, Callable[[JobHost, Job], Awaitable[Commit | None]]] = {
    "extract": extract,
    "reconcile": reconcile,
    "fold": fold,
    "embed": embed,
}
