"""Writing long-term facts without duplicates, and superseding contradicted ones.

A new fact is compared with the valid facts it would be recalled beside (the same user's across agents when the
user is known, else the same session's):

1. **Exact duplicate**: the same normalised text (case, spacing and final punctuation aside): skipped.
2. **Near duplicate**: a fact with high cosine similarity (>= :data:`NEAR_COSINE`, when both have embeddings) *and*
   a high share of the same words (Jaccard >= :data:`NEAR_OVERLAP`): skipped. Both are needed, so "lives in
   Paris" and "lives in Lyon" (similar vectors, half their words differ) are two facts, not one.
   **Unless it is a correction** (:func:`kora.memory_service.corrections.correction`: the words that differ
   include a negation, a number, a date or time, or the same words swap roles): then the new fact is stored, and
   without a model to judge the conflict (``supersede_corrections``) it supersedes the older one at once, reason
   ``corrected (<what differs>)``; with a model, the conflict check the caller queues decides.
3. Otherwise the fact is stored (a ``created`` history row), and a conflict check may later **supersede** older
   facts it contradicts (:func:`supersede`): they get ``invalidated_at`` and ``superseded_by``, recall skips them,
   and a ``superseded`` history row records the old text, the new text and why. Nothing is deleted but by erasure.

Writes of one dedupe scope are serialised by a transaction-scoped advisory lock, so two writers (a ``save_memory``
and an extraction, or two replicas) that store the same fact at the same moment keep one, not two.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pgvector import Vector
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, JsonValue

from kora.memory import query_terms, words
from kora.memory.wire import Fact
from kora.memory_service import vectors
from kora.memory_service.corrections import correction
from kora.memory_service.database import Conn

#: Cosine similarity above which two facts may be the same fact said twice.
NEAR_COSINE = 0.9
#: Share of shared words (Jaccard) above which two similar facts are the same fact said twice.
NEAR_OVERLAP = 0.8
#: Similar facts shown to the conflict check.
CONFLICT_CANDIDATES = 5
#: Without embeddings, a fact is a conflict candidate only when more than this share of the content words of the
#: shorter of the two facts is in both ("The user lives in Paris" and "The user lives in Lyon": 2 of 3; "The user
#: has a dog" and "The user lives in Paris": 1 of 2, "user", which every fact about the user has).
CONFLICT_MIN_SHARED = 0.5

#: Namespace of the advisory locks serialising fact writes per dedupe scope (the second key hashes the scope).
_FACT_WRITE_LOCK_SPACE = 7302

_SPACE = re.compile(r"\s+")
_FACT_COLUMNS = (
    "fact_id, body AS text, app_name, user_id, session_id, origin, attribution, source_event_ids, created_at, "
    "invalidated_at, superseded_by"
)


def new_fact_id() -> str:
    """A fresh fact id: ``fact_`` and 32 hex digits."""
    return f"fact_{uuid.uuid4().hex}"


def normalised(text: str) -> str:
    """``text`` lower-cased, with runs of spaces made one and final punctuation and spaces dropped."""
    return _SPACE.sub(" ", text.lower()).strip().rstrip(".!?;, ")


def text_hash(text: str) -> str:
    """SHA-256 of :func:`normalised` ``text`` (hex): equal for facts that differ only in case or punctuation."""
    return hashlib.sha256(normalised(text).encode()).hexdigest()


def overlap(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of ``a`` and ``b``, in ``[0, 1]``."""
    wa, wb = words(a), words(b)
    return len(wa & wb) / len(wa | wb) if wa or wb else 1.0


@dataclass(frozen=True)
class Owner:
    """Whose fact it is: the agent (``app_name``), the verified user (None: anonymous) and the session it came from."""

    app_name: str
    user_id: str | None
    session_id: str | None

    def lock_key(self) -> str:
        """The text naming this owner's dedupe scope, hashed into the advisory lock that serialises its writes."""
        if self.user_id is not None:
            return f"user\x1f{self.user_id}"
        return f"session\x1f{self.app_name}\x1f{self.session_id}"

    def dedupe_scope(self, alias: str = "f") -> tuple[str, dict[str, object]]:
        """The facts a new fact of this owner is compared with: the user's (any agent), else the session's."""
        if self.user_id is not None:
            return f"{alias}.user_id = %(o_user)s", {"o_user": self.user_id}
        return (
            f"{alias}.user_id IS NULL AND {alias}.app_name = %(o_app)s AND {alias}.session_id = %(o_session)s",
            {"o_app": self.app_name, "o_session": self.session_id},
        )


@dataclass(frozen=True)
class WriteResult:
    """``fact_id`` of the stored fact (``stored``) or of the fact it duplicates (``duplicate``); ``superseded``:
    the older facts a stored correction replaced at once (``supersede_corrections``)."""

    fact_id: str
    status: str
    superseded: tuple[str, ...] = ()


async def write_fact(
    conn: Conn,
    text: str,
    owner: Owner,
    origin: str,
    embedding: list[float] | None,
    attribution: dict[str, JsonValue] | None = None,
    source_event_ids: Sequence[str] = (),
    *,
    supersede_corrections: bool = False,
) -> WriteResult:
    """Store ``text`` as a fact of ``owner`` unless it duplicates a valid one (see the module docstring); with
    ``supersede_corrections`` (no model will check conflicts), a stored correction of a near duplicate supersedes
    it at once.

    Must run inside the caller's transaction: the scope's lock is held until it commits.
    """
    await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_FACT_WRITE_LOCK_SPACE, owner.lock_key()))
    condition, params = owner.dedupe_scope()
    digest = text_hash(text)
    cur = await conn.execute(
        f"SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL AND f.body_hash = %(hash)s AND {condition} "
        f"LIMIT 1",
        params | {"hash": digest},
    )
    if (row := await cur.fetchone()) is not None:
        return WriteResult(str(row[0]), "duplicate")
    corrected: dict[str, str] = {}
    for candidate in await similar_facts(conn, text, owner, embedding, exclude=None):
        close_enough = candidate.cosine is None or candidate.cosine >= NEAR_COSINE
        if close_enough and overlap(text, candidate.text) >= NEAR_OVERLAP:
            change = correction(candidate.text, text)
            if change is None:
                return WriteResult(candidate.fact_id, "duplicate")
            corrected[candidate.fact_id] = change
    fact_id = new_fact_id()
    await conn.execute(
        "INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, session_id, origin, attribution, "
        "source_event_ids, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            fact_id,
            text,
            digest,
            owner.app_name,
            owner.user_id,
            owner.session_id,
            origin,
            Jsonb(attribution or {}),
            list(source_event_ids),
            embedding,
        ),
    )
    await conn.execute(
        "INSERT INTO fact_history (fact_id, action, new_text, reason, app_name, user_id, session_id) "
        "VALUES (%s, 'created', %s, %s, %s, %s, %s)",
        (fact_id, text, origin, owner.app_name, owner.user_id, owner.session_id),
    )
    superseded: list[str] = []
    if supersede_corrections:
        for old_id, change in corrected.items():
            if await supersede(conn, [old_id], fact_id, f"corrected ({change}) by a newer fact"):
                superseded.append(old_id)
    return WriteResult(fact_id, "stored", tuple(superseded))


@dataclass(frozen=True)
class Similar:
    """A valid fact like another: its id, text and cosine similarity (None when either side has no embedding)."""

    fact_id: str
    text: str
    cosine: float | None


async def similar_facts(
    conn: Conn, text: str, owner: Owner, embedding: list[float] | None, exclude: str | None
) -> list[Similar]:
    """Up to :data:`CONFLICT_CANDIDATES` valid facts of ``owner``'s dedupe scope most like ``text``: nearest by
    embedding when there is one, else sharing the most words (full text). With ``exclude`` (the fact ``text`` is),
    only facts stored before it: a conflict check that runs late never lets an older fact supersede a newer one."""
    condition, params = owner.dedupe_scope()
    condition += (
        " AND f.created_at < COALESCE((SELECT x.created_at FROM facts x WHERE x.fact_id = %(exclude)s), 'infinity')"
    )
    params |= {"exclude": exclude, "limit": CONFLICT_CANDIDATES}
    if embedding is not None:
        params["emb"] = vectors.parameter(embedding)
        indexed = await vectors.use_index(conn, condition, params, CONFLICT_CANDIDATES)
        order = vectors.distance_order("f.embedding", "%(emb)s::vector", len(embedding), indexed)
        statement = (
            f"SELECT f.fact_id, f.body, 1 - (f.embedding <=> %(emb)s::vector) AS cosine FROM facts f "
            f"WHERE f.invalidated_at IS NULL AND f.embedding IS NOT NULL AND {condition} "
            f"AND f.fact_id IS DISTINCT FROM %(exclude)s "
            f"ORDER BY {order} LIMIT %(limit)s"
        )
    else:
        params["q"] = " or ".join(words(text))
        statement = (
            f"SELECT f.fact_id, f.body, NULL::float8 AS cosine FROM facts f "
            f"WHERE f.invalidated_at IS NULL AND {condition} AND f.fact_id IS DISTINCT FROM %(exclude)s "
            f"AND f.search @@ websearch_to_tsquery('english', %(q)s) "
            f"ORDER BY ts_rank_cd(f.search, websearch_to_tsquery('english', %(q)s)) DESC LIMIT %(limit)s"
        )
    cur = await conn.execute(statement, params)
    return [
        Similar(str(row[0]), str(row[1]), None if row[2] is None else float(str(row[2])))
        for row in await cur.fetchall()
    ]


def shared_share(a: str, b: str) -> float:
    """Share of the content words (:func:`~kora.memory.text.query_terms`) of the shorter of ``a`` and ``b`` that
    both contain, in ``[0, 1]`` (0 when either has none)."""
    ta, tb = query_terms(a), query_terms(b)
    return len(ta & tb) / min(len(ta), len(tb)) if ta and tb else 0.0


async def conflict_candidates(
    conn: Conn, text: str, owner: Owner, embedding: list[float] | None, exclude: str | None
) -> list[Similar]:
    """The valid facts a new fact ``text`` may contradict, for the conflict check: the nearest by embedding when it
    has one; without, only the full-text matches sharing more than :data:`CONFLICT_MIN_SHARED` of their content
    words, since every fact about the user matches on "user" alone and each would cost a model request."""
    candidates = await similar_facts(conn, text, owner, embedding, exclude)
    if embedding is not None:
        return candidates
    return [candidate for candidate in candidates if shared_share(text, candidate.text) > CONFLICT_MIN_SHARED]


async def supersede(conn: Conn, old_fact_ids: Sequence[str], new_fact_id: str, reason: str) -> int:
    """Mark the valid facts ``old_fact_ids`` superseded by ``new_fact_id`` (with history rows); how many were."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "UPDATE facts SET invalidated_at = now(), superseded_by = %s "
            "WHERE fact_id = ANY(%s) AND invalidated_at IS NULL AND fact_id <> %s "
            "RETURNING fact_id, body, app_name, user_id, session_id",
            (new_fact_id, list(old_fact_ids), new_fact_id),
        )
        superseded = await cur.fetchall()
        new_row = await (await cur.execute("SELECT body FROM facts WHERE fact_id = %s", (new_fact_id,))).fetchone()
    new_text = None if new_row is None else str(new_row["body"])
    for row in superseded:
        await conn.execute(
            "INSERT INTO fact_history (fact_id, action, old_text, new_text, new_fact_id, reason, app_name, user_id, "
            "session_id) VALUES (%s, 'superseded', %s, %s, %s, %s, %s, %s, %s)",
            (
                row["fact_id"],
                row["body"],
                new_text,
                new_fact_id,
                reason,
                row["app_name"],
                row["user_id"],
                row["session_id"],
            ),
        )
    return len(superseded)


async def list_facts(
    conn: Conn,
    condition: str,
    params: dict[str, object],
    include_invalid: bool,
    limit: int,
) -> list[Fact]:
    """Facts matching ``condition`` (a scope filter on alias ``f``), newest first."""
    validity = "" if include_invalid else "AND f.invalidated_at IS NULL"
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_FACT_COLUMNS} FROM facts f WHERE {condition} {validity} "
            f"ORDER BY created_at DESC LIMIT %(limit)s",
            params | {"limit": limit},
        )
        return [Fact.model_validate(row) for row in await cur.fetchall()]


async def fact_owner(conn: Conn, fact_id: str) -> tuple[Owner, str, list[float] | None] | None:
    """The owner, text and embedding of a valid fact, or None when it is gone or superseded."""
    cur = await conn.execute(
        "SELECT app_name, user_id, session_id, body, embedding FROM facts "
        "WHERE fact_id = %s AND invalidated_at IS NULL",
        (fact_id,),
    )
    row = await cur.fetchone()
    if row is None:
        return None
    embedding = None if row[4] is None else [float(x) for x in row[4].to_list()]
    return (
        Owner(str(row[0]), None if row[1] is None else str(row[1]), None if row[2] is None else str(row[2])),
        str(row[3]),
        embedding,
    )


#: The valid facts waiting for an embedding, their own or their contextual one (found through the partial index
#: ``facts_unembedded``).
_UNEMBEDDED = "FROM facts f WHERE (f.embedding IS NULL OR f.context_embedding IS NULL) AND f.invalidated_at IS NULL"

#: How much of the fact before it a fact's contextual embedding reads: its last characters (a model truncates its
#: input; the fact itself comes last and must not be what is cut).
CONTEXT_CHARS = 500


def context_text(previous: str, text: str) -> str:
    """What a fact's contextual embedding embeds: the end of the ``previous`` fact of its owner, then ``text``."""
    return f"{previous[-CONTEXT_CHARS:]}\n{text}"


@dataclass(frozen=True)
class Unembedded:
    """A valid fact waiting for a vector: ``embedded`` when it has its own already (it waits for its contextual
    one); ``previous`` is the text of the valid fact its owner stored just before it (None: it is the first)."""

    fact_id: str
    text: str
    embedded: bool
    previous: str | None

    def texts(self) -> list[tuple[str, bool]]:
        """The texts to embed for it, in order, each with whether its end matters more than its start (where a
        model that refuses it whole is given a cut, :func:`~kora.memory_service.jobs.embed`): its own (unless
        ``embedded``; its start kept), then its :func:`context_text` (unless it has no ``previous``: its contextual
        embedding is then its own; its end, the fact's text, kept)."""
        own = [] if self.embedded else [(self.text, False)]
        return own if self.previous is None else [*own, (context_text(self.previous, self.text), True)]


async def unembedded(conn: Conn, limit: int) -> list[Unembedded]:
    """Up to ``limit`` valid facts waiting for a vector, by fact id (a stable order, so a batch cut short by a
    crash is the next one again), each with the text of the fact before it (one probe of ``facts_neighbours``)."""
    cur = await conn.execute(
        """SELECT f.fact_id, f.body, f.embedding IS NOT NULL, p.body
            FROM facts f LEFT JOIN LATERAL (
                SELECT m.body FROM facts m
                WHERE m.invalidated_at IS NULL AND m.app_name = f.app_name
                  AND coalesce(m.user_id, '') = coalesce(f.user_id, '')
                  AND coalesce(m.session_id, '') = coalesce(f.session_id, '')
                  AND (m.created_at, m.fact_id) < (f.created_at, f.fact_id)
                ORDER BY m.created_at DESC, m.fact_id DESC LIMIT 1
            ) AS p ON true
            WHERE (f.embedding IS NULL OR f.context_embedding IS NULL) AND f.invalidated_at IS NULL
            ORDER BY f.fact_id LIMIT %s""",
        (limit,),
    )
    return [
        Unembedded(str(row[0]), str(row[1]), bool(row[2]), None if row[3] is None else str(row[3]))
        for row in await cur.fetchall()
    ]


async def unembedded_count(conn: Conn) -> int:
    """How many valid facts wait for a vector (an index-only count of ``facts_unembedded``)."""
    row = await (await conn.execute(f"SELECT count(*) {_UNEMBEDDED}")).fetchone()
    return int(row[0]) if row else 0


async def set_embeddings(conn: Conn, embeddings: Sequence[tuple[str, list[float] | None, list[float] | None]]) -> None:
    """Store ``(fact_id, embedding, context_embedding)`` on the facts, each vector only where the fact has none
    (a fact erased meanwhile is gone, and one embedded by another worker keeps its vectors: both are the same
    model's). ``embedding`` None: the fact has its own already; ``context_embedding`` None: it is its owner's
    first fact, whose contextual embedding is its own."""
    async with conn.cursor() as cur:
        await cur.executemany(
            "UPDATE facts SET embedding = coalesce(embedding, %(own)s::vector), "
            "context_embedding = coalesce(context_embedding, %(context)s::vector, %(own)s::vector, embedding) "
            "WHERE fact_id = %(id)s AND (embedding IS NULL OR context_embedding IS NULL)",
            [{"id": fact_id, "own": _vector(own), "context": _vector(context)} for fact_id, own, context in embeddings],
        )


def _vector(embedding: list[float] | None) -> Vector | None:
    return None if embedding is None else vectors.parameter(embedding)


class HistoryEntry(BaseModel):
    """One event in a fact's life: ``created`` (``new_text``; ``reason`` is its origin) or ``superseded``
    (``old_text`` replaced by ``new_text``, the fact ``new_fact_id``; ``reason`` says why)."""

    action: str
    old_text: str | None
    new_text: str | None
    new_fact_id: str | None
    reason: str
    created_at: datetime


async def history(conn: Conn, fact_id: str) -> list[HistoryEntry]:
    """The history rows of ``fact_id``, oldest first (empty when there is no such fact, or it was erased)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT action, old_text, new_text, new_fact_id, reason, created_at FROM fact_history "
            "WHERE fact_id = %s ORDER BY id",
            (fact_id,),
        )
        return [HistoryEntry.model_validate(row) for row in await cur.fetchall()]
