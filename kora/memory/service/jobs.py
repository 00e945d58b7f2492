"""The durable background queue: fact extraction, summary folds and conflict checks, off the response path.

Why a table with ``SELECT ... FOR UPDATE SKIP LOCKED`` rather than procrastinate or pgqueuer: a job must be queued
in the *same transaction* as the events it is about, so that an accepted write always has its jobs (the service
may be killed the moment after it answers), and the three job kinds are short functions of this service run by
its own workers. The table and the claim query are a dozen lines; a queue library would add its own schema,
worker process model and migrations for what one indexed table does here.

How a job runs: a worker claims the oldest due job with ``FOR UPDATE SKIP LOCKED`` and keeps the row locked in an
open transaction while the job runs; the job's writes and the job's removal commit together. If the process dies
mid-job, its transaction is rolled back and the job is due again, so nothing is lost and nothing is half-done. A
model that cannot be reached makes the job wait and try again (back-off up to 5 minutes, for
:data:`MAX_ATTEMPTS` tries); an answer that stays invalid after ``extraction_attempts`` requests is recorded as
``failed`` with its reason (``GET /v1/jobs``), never dropped silently.

Kinds (payloads): ``extract`` (``{"first_seq", "last_seq"}``: events of one write), ``fold`` (``{}``: summarise the
events that left the window), ``reconcile`` (``{"fact_id"}``: supersede the facts a new fact contradicts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, TypeVar

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import AfterValidator, BaseModel, Field, JsonValue

from kora.core.events import EventType, MemoryEvent
from kora.memory.service import facts, store
from kora.memory.service.database import Conn
from kora.memory.service.models import InvalidAnswer, ModelUnreachable
from kora.memory.text import event_text
from kora.memory.wire import MAX_TEXT_CHARS, check_storable_json, strip_unstorable

if TYPE_CHECKING:
    from kora.memory.service.service import MemoryService

log = logging.getLogger("kora.memory")

ShapeT = TypeVar("ShapeT", bound=BaseModel)

#: Tries of a job whose model API cannot be reached before it is recorded as failed.
MAX_ATTEMPTS = 20
#: Seconds an idle worker sleeps before looking for due jobs again (a write in this process wakes it at once).
POLL_SECONDS = 1.0
#: Events folded into a summary at most per fold.
FOLD_BATCH = 200

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
    """A claimed job: its row ``id``, ``kind``, session row ``sid``, ``payload`` and tries so far."""

    id: int
    kind: str
    sid: int
    payload: dict[str, object]
    attempts: int


class Retry(Exception):
    """The job cannot run now (a model API is unreachable, a fold of the session is running): try again later."""


class Failed(Exception):
    """The job cannot succeed (answers stayed invalid): record it as failed."""


async def enqueue(conn: Conn, kind: str, sid: int, payload: dict[str, object] | None = None) -> None:
    """Queue a job (inside the caller's transaction, with the write it is about). A ``fold`` already queued for
    the session is not queued twice."""
    if kind == "fold":
        await conn.execute(
            "INSERT INTO jobs (kind, sid, payload) SELECT 'fold', %s, '{}' WHERE NOT EXISTS "
            "(SELECT 1 FROM jobs WHERE kind = 'fold' AND sid = %s AND status = 'queued')",
            (sid, sid),
        )
        return
    await conn.execute("INSERT INTO jobs (kind, sid, payload) VALUES (%s, %s, %s)", (kind, sid, Jsonb(payload or {})))


async def run_one(service: MemoryService) -> bool:
    """Claim and run the oldest due job; False when none was due."""
    assert service.db.pool is not None
    async with service.db.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id, kind, sid, payload, attempts FROM jobs WHERE status = 'queued' AND run_after <= now() "
                "ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED"
            )
            row = await cur.fetchone()
        if row is None:
            return False
        job = Job(**row)
        handler = HANDLERS.get(job.kind)
        try:
            if handler is None:
                raise Failed(f"unknown job kind {job.kind!r}")
            async with conn.transaction():  # a savepoint: a failed job's partial writes go, the claim stays
                await handler(service, conn, job)
            await conn.execute("DELETE FROM jobs WHERE id = %s", (job.id,))
        except Failed as failure:
            log.warning("memory job %s %d failed: %s", job.kind, job.id, failure)
            await _record(conn, job, "failed", str(failure), 0)
        except (Retry, ModelUnreachable) as error:
            await _retry(conn, job, str(error))
        except Exception as error:  # a bug or a database error: keep the job, try later, say so
            log.exception("memory job %s %d raised", job.kind, job.id)
            await _retry(conn, job, f"{type(error).__name__}: {error}")
    return True


async def _retry(conn: Conn, job: Job, reason: str) -> None:
    if job.attempts + 1 >= MAX_ATTEMPTS:
        log.warning("memory job %s %d failed after %d tries: %s", job.kind, job.id, job.attempts + 1, reason)
        await _record(conn, job, "failed", reason, 0)
        return
    await _record(conn, job, "queued", reason, min(2.0**job.attempts, 300.0))


async def _record(conn: Conn, job: Job, status: str, reason: str, delay: float) -> None:
    await conn.execute(
        "UPDATE jobs SET status = %s, attempts = attempts + 1, last_error = %s, "
        "run_after = now() + make_interval(secs => %s) WHERE id = %s",
        (status, reason[:2000], delay, job.id),
    )


async def worker(service: MemoryService, wake: asyncio.Event) -> None:
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


async def _session_of(conn: Conn, sid: int) -> store.Session:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT sid, session_id, app_name, user_id, created_at, updated_at, event_count, rolling_summary "
            "FROM sessions WHERE sid = %s",
            (sid,),
        )
        row = await cur.fetchone()
    if row is None:
        raise Failed("the session no longer exists")
    return store.Session(**row)


async def extract(service: MemoryService, conn: Conn, job: Job) -> None:
    """Extract facts from the events of one write and store them (deduplicated), queueing a conflict check each."""
    session = await _session_of(conn, job.sid)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT event_id, ts AS timestamp, event_type, content, metadata FROM events "
            "WHERE sid = %s AND seq BETWEEN %s AND %s AND event_type = ANY(%s) ORDER BY seq",
            (job.sid, job.payload["first_seq"], job.payload["last_seq"], list(store.CONVERSATION_TYPES)),
        )
        rows = await cur.fetchall()
    events = [MemoryEvent.model_validate(row) for row in rows]
    if not events:
        return
    lines = "\n".join(f"{_speaker(event.event_type)}: {event_text(event)}" for event in events)
    answer = await _ask_json(
        service, EXTRACTION_SYSTEM, lines, "extracted_facts", EXTRACTED_FACTS_SCHEMA, ExtractedFacts
    )
    texts = [text.strip() for text in answer.facts if text.strip()]
    if not texts:
        return
    vectors = await service.embed_texts(texts)
    owner = facts.Owner(session.app_name, session.user_id, session.session_id)
    source_ids = [event.event_id for event in events]
    attribution: dict[str, JsonValue] = {
        "agent": session.app_name,
        "session_id": session.session_id,
        "user_id": session.user_id,
    }
    for text, vector in zip(texts, vectors, strict=True):
        written = await facts.write_fact(conn, text, owner, "extracted", vector, attribution, source_ids)
        if written.status == "stored" and service.settings.has_summary_model:
            await enqueue(conn, "reconcile", job.sid, {"fact_id": written.fact_id})
    service.wake_workers()


def _speaker(event_type: str) -> str:
    return "assistant" if event_type == EventType.AGENT_RESPONSE else "user"


async def reconcile(service: MemoryService, conn: Conn, job: Job) -> None:
    """Supersede the older facts that a new fact contradicts, as the summary model judges."""
    fact_id = str(job.payload["fact_id"])
    found = await facts.fact_owner(conn, fact_id)
    if found is None:
        return
    owner, text, embedding = found
    candidates = await facts.similar_facts(conn, text, owner, embedding, exclude=fact_id)
    if not candidates:
        return
    listing = "\n".join(f"{candidate.fact_id}: {candidate.text}" for candidate in candidates)
    question = f"New fact: {text}\nExisting facts:\n{listing}"
    answer = await _ask_json(service, CONFLICT_SYSTEM, question, "fact_conflicts", FACT_CONFLICTS_SCHEMA, FactConflicts)
    known = {candidate.fact_id for candidate in candidates}
    contradicted = [old for old in answer.contradicted if old in known]
    if contradicted:
        await facts.supersede(conn, contradicted, fact_id, "contradicted by a newer fact")


async def fold(service: MemoryService, conn: Conn, job: Job) -> None:
    """Fold the events that left the session's window into new versions of its rolling summary, oldest first,
    :data:`FOLD_BATCH` events per model request, until every event out of the window is summarised."""
    # One fold per session at a time, across replicas: two would both write "version n + 1" of the same summary.
    cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (_FOLD_LOCK_SPACE, job.sid % _INT4))
    locked = await cur.fetchone()
    if not locked or not locked[0]:
        raise Retry("another replica is folding this session")
    if service.summary is None:
        raise Failed("no summary model is configured")
    session = await _session_of(conn, job.sid)
    settings = service.settings
    cap = settings.short_term_hard_event_cap
    newest = await store.newest_events(conn, session, 0, cap)
    in_window = store.window_size(newest, cap, settings.short_term_token_budget)
    # Events older than the window's oldest are out of it; with nothing in the window (one event over the token
    # budget), every event is.
    window_start = newest[in_window - 1].seq if in_window else (newest[0].seq + 1 if newest else 0)
    previous = await store.latest_summary(conn, session)
    while True:
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
            raise Failed(str(error)) from error
        summary = strip_unstorable(answer).strip()
        if not summary:
            raise Failed("the summary model answered no storable text")
        previous = (summary, leaving[-1].seq)
        await _store_summary(conn, job.sid, previous[0], previous[1], settings.digest_retention)


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
    service: MemoryService, system: str, user: str, name: str, schema: dict[str, object], shape: type[ShapeT]
) -> ShapeT:
    """Ask the summary model for ``shape``; up to ``extraction_attempts`` requests while answers are invalid."""
    if service.summary is None:
        raise Failed("no summary model is configured")
    problem = ""
    for _ in range(service.settings.extraction_attempts):
        try:
            return await service.summary.chat_json(system, user, name, schema, shape)
        except InvalidAnswer as error:
            problem = str(error)
    raise Failed(f"{service.settings.extraction_attempts} answers were not valid {name} JSON; last: {problem}")


HANDLERS: dict[str, Callable[[MemoryService, Conn, Job], Awaitable[None]]] = {
    "extract": extract,
    "reconcile": reconcile,
    "fold": fold,
}
