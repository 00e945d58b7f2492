"""Recall by relevance within one scope: the long-term tier's read path (docs/memory.md "Recall").

Candidates come from two indexes, each filtered by the scope *inside* the query: the nearest facts by pgvector
cosine distance when the store has an embedding model (through the HNSW index, or exactly when the scope is small
enough for that to be cheaper: :mod:`kora.memory.service.vectors`), and the facts matching any word of the query
in Postgres full-text search (English stemming). Each candidate is scored in ``[0, 1]``:

* with embeddings: ``0.8 * cosine + 0.2 * text``;
* without (no embedding model, or a fact the background ``embed`` jobs have not reached yet: stored before the
  model was configured or changed, or while it was unreachable): ``text``;

where ``text`` is the share of the query's (stemmed, non-stop) words the fact contains. So recall works with no
embedding model and improves with one. Age is no part of the score: it only breaks ties (of scores equal to 4
decimals, the newer first), so evidence from months ago is ranked by its relevance like yesterday's. What is out
of date is superseded (:mod:`kora.memory.service.facts`), not buried. Superseded facts (``invalidated_at`` set)
are never candidates. Stored events can be searched too (full text only).

Scope filters: ``session``: this agent's session (its anonymous rows and the asking user's); ``agent``: this agent
and this user, across sessions; ``user``: this user, across agents; ``store``: everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import dict_row

from kora.core.errors import Forbidden, RequestError
from kora.memory.service import vectors
from kora.memory.service.database import Conn
from kora.memory.wire import MEMORY_TOOL_NAMES, USER_SCOPES, RecallHit, Scope, scope_rank

_WORD = re.compile(r"\w+")
#: Candidates taken from each index before scoring, per hit asked for. Two are enough for the blend (a top hit is
#: near the top of the vector or of the text ranking) and keep an HNSW scan short: it runs until enough rows pass
#: the scope's filter, so at 100k facts, for a user with 10% of them, 20 candidates cost ~19 ms and 10 ~10 ms
#: (bench/bench_memory_service.py).
CANDIDATES_PER_HIT = 2


@dataclass(frozen=True)
class ScopeFilter:
    """Who asks and how wide: the owner keys a scope compares, checked by :func:`scope_filter`."""

    scope: Scope
    app_name: str
    user_id: str | None
    session_id: str | None

    def sql(self, alias: str = "") -> tuple[str, dict[str, object]]:
        """The ``WHERE`` condition selecting the rows (facts or sessions) this scope may read, and its parameters."""
        a = f"{alias}." if alias else ""
        params: dict[str, object] = {"s_app": self.app_name, "s_user": self.user_id, "s_session": self.session_id}
        match self.scope:
            case "session":
                # The ownership rule (kora.memory.base.check_owner) in SQL: a session's rows that belong to another
                # user stay theirs, even once the session row is gone (its facts outlive it).
                return (
                    f"{a}app_name = %(s_app)s AND {a}session_id = %(s_session)s "
                    f"AND ({a}user_id IS NULL OR {a}user_id = %(s_user)s)",
                    params,
                )
            case "agent":
                return f"{a}app_name = %(s_app)s AND {a}user_id = %(s_user)s", params
            case "user":
                return f"{a}user_id = %(s_user)s", params
            case _:
                return "true", params


def scope_filter(scope: Scope, app_name: str, user_id: str | None, session_id: str | None, ceiling: str) -> ScopeFilter:
    """The filter for a read at ``scope``; raises :class:`~kora.core.errors.Forbidden` above the store's
    ``ceiling`` (``store`` is reserved to administrators, who read it through the admin routes) and
    :class:`~kora.core.errors.RequestError` when the scope's key is missing (``agent``/``user`` need a verified
    ``user_id``, ``session`` a ``session_id``)."""
    if scope == "store" or scope_rank(scope) > scope_rank(ceiling):
        raise Forbidden(f"scope {scope!r} is above this memory store's ceiling {ceiling!r}")
    if scope in USER_SCOPES and user_id is None:
        raise RequestError(f"scope {scope!r} needs a verified user_id; without one, memory stays within the session")
    if scope == "session" and session_id is None:
        raise RequestError("scope 'session' needs a session_id")
    return ScopeFilter(scope, app_name, user_id, session_id)


def or_query(query: str) -> str:
    """``query`` as a web-search query matching any of its words (``websearch_to_tsquery`` never fails to parse)."""
    return " or ".join(_WORD.findall(query))


def blend(cosine: float | None, text: float) -> float:
    """A candidate's score in ``[0, 1]`` (see the module docstring)."""
    if cosine is None:
        return text
    return 0.8 * max(cosine, 0.0) + 0.2 * text


async def recall_facts(
    conn: Conn,
    where: ScopeFilter,
    query: str,
    embedding: list[float] | None,
    top_k: int,
    threshold: float,
) -> list[RecallHit]:
    """The facts within ``where`` that best match ``query`` (and its ``embedding``, if any), best first."""
    condition, params = where.sql("f")
    pool = top_k * CANDIDATES_PER_HIT
    params |= {"q": or_query(query), "raw": query, "pool": pool, "emb": embedding}
    if embedding is not None:
        indexed = await vectors.use_index(conn, condition, params, pool)
        order = vectors.distance_order("f.embedding", "%(emb)s::vector", len(embedding), indexed)
        vector_candidates = (
            f"SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL AND f.embedding IS NOT NULL "
            f"AND {condition} ORDER BY {order} LIMIT %(pool)s"
        )
    else:
        vector_candidates = "SELECT NULL::text AS fact_id WHERE false"
    statement = f"""
        WITH q AS (
            SELECT websearch_to_tsquery('english', %(q)s) AS tsq,
                   tsvector_to_array(to_tsvector('english', %(raw)s)) AS lexemes
        ),
        candidates AS (
            ({vector_candidates})
            UNION
            (SELECT f.fact_id FROM facts f, q WHERE f.invalidated_at IS NULL AND {condition} AND f.search @@ q.tsq
             ORDER BY ts_rank_cd(f.search, q.tsq) DESC LIMIT %(pool)s)
        )
        SELECT f.fact_id AS id, f.body AS text, f.session_id, f.created_at AS timestamp,
               {"1 - (f.embedding <=> %(emb)s::vector)" if embedding is not None else "NULL::float8"} AS cosine,
               CASE WHEN cardinality(q.lexemes) = 0 THEN 0.0 ELSE
                   cardinality(ARRAY(SELECT unnest(tsvector_to_array(f.search)) INTERSECT SELECT unnest(q.lexemes)))
                   ::float8 / cardinality(q.lexemes) END AS text_share
        FROM facts f, q WHERE f.fact_id IN (SELECT c.fact_id FROM candidates c)
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, params)
        rows = await cur.fetchall()
    return _best(rows, "fact", top_k, threshold)


#: Events that carry information (:func:`recall_events`); ``e`` is the event, ``%(memory_tools)s`` the names.
_INFORMATIVE = """
    e.event_type IN ('user_message', 'task_delegation_received', 'agent_response', 'tool_result',
                     'delegation_response')
    AND NOT (e.event_type = 'tool_result' AND e.content->>'tool_name' = ANY(%(memory_tools)s))
    AND NOT EXISTS (
        SELECT 1 FROM events t
        WHERE t.sid = e.sid AND t.event_type = 'tool_call' AND t.content->>'tool_name' = 'search_memory'
          AND CASE WHEN e.event_type = 'agent_response' THEN t.seq < e.seq
                   WHEN e.event_type IN ('user_message', 'task_delegation_received') THEN t.seq > e.seq
                   ELSE false END
          AND NOT EXISTS (
              SELECT 1 FROM events u
              WHERE u.sid = e.sid AND u.seq > least(t.seq, e.seq) AND u.seq < greatest(t.seq, e.seq)
                AND u.event_type IN ('user_message', 'task_delegation_received')))
"""


async def recall_events(conn: Conn, where: ScopeFilter, query: str, top_k: int, threshold: float) -> list[RecallHit]:
    """Stored events within ``where`` matching ``query`` by full text, best first: what was said (user messages,
    delegated tasks, answers) and what tools and peers answered, never Kora's own calls (``tool_call``,
    ``delegation_request``), errors, results of its memory tools (:data:`~kora.memory.wire.MEMORY_TOOL_NAMES`),
    nor the question and the answer of a turn that called ``search_memory`` (a question to memory, and an answer
    quoting a recall): those would come back on every later search, ranked above the facts they repeat."""
    condition, params = where.sql("s")
    params |= {
        "q": or_query(query),
        "raw": query,
        "pool": top_k * CANDIDATES_PER_HIT,
        "memory_tools": list(MEMORY_TOOL_NAMES),
    }
    statement = f"""
        WITH q AS (
            SELECT websearch_to_tsquery('english', %(q)s) AS tsq,
                   tsvector_to_array(to_tsvector('english', %(raw)s)) AS lexemes
        )
        SELECT e.event_id AS id, e.body AS text, s.session_id, e.ts AS timestamp, NULL::float8 AS cosine,
               CASE WHEN cardinality(q.lexemes) = 0 THEN 0.0 ELSE
                   cardinality(ARRAY(SELECT unnest(tsvector_to_array(e.search)) INTERSECT SELECT unnest(q.lexemes)))
                   ::float8 / cardinality(q.lexemes) END AS text_share
        FROM events e JOIN sessions s USING (sid), q
        WHERE {condition} AND e.search @@ q.tsq AND {_INFORMATIVE}
        ORDER BY ts_rank_cd(e.search, q.tsq) DESC, e.seq DESC LIMIT %(pool)s
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, params)
        rows = await cur.fetchall()
    return _best(rows, "event", top_k, threshold)


def _best(rows: list[dict[str, object]], source: str, top_k: int, threshold: float) -> list[RecallHit]:
    hits = []
    for row in rows:
        cosine = row["cosine"]
        timestamp = row["timestamp"]
        assert isinstance(timestamp, datetime)
        score = blend(float(str(cosine)) if cosine is not None else None, float(str(row["text_share"])))
        if score >= threshold:
            hits.append(
                RecallHit(
                    id=str(row["id"]),
                    text=str(row["text"]),
                    score=round(min(max(score, 0.0), 1.0), 4),
                    source=source,
                    session_id=None if row["session_id"] is None else str(row["session_id"]),
                    timestamp=timestamp,
                )
            )
    hits.sort(key=lambda hit: (hit.score, hit.timestamp), reverse=True)  # recency breaks ties only
    return hits[:top_k]


def merge(first: list[RecallHit], second: list[RecallHit], top_k: int) -> list[RecallHit]:
    """The ``top_k`` best of two hit lists (of equal scores, the newer first)."""
    return sorted([*first, *second], key=lambda hit: (hit.score, hit.timestamp), reverse=True)[:top_k]
