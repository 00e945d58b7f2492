"""Recall by relevance within one scope: the long-term tier's read path (docs/memory.md "Recall").

Candidates come from two indexes, each filtered by the scope *inside* the query: the nearest facts by pgvector
cosine distance of their own embeddings when the store has an embedding model (through the HNSW index, or exactly
when the scope is small enough for that to be cheaper: :mod:`kora.memory_service.vectors`), and the facts sharing a
word with the query in Postgres full-text search (English stemming, stop words left out), the best of them by
``text`` below. Each candidate is scored in ``[0, 1]``:

* ``text``: the query's (stemmed, non-stop) words the fact contains, each weighted by how rare it is within the
  scope (inverse document frequency, ``ln(1 + (N - n + 0.5) / (n + 0.5))`` for a word in ``n`` of the scope's ``N``
  facts), as a share of the weight of all the query's words. A name or word found in most of a user's facts
  counts little, the one word that singles out the fact counts most;
* ``cosine``: the mean of the query's cosine to the fact's own embedding and to its *contextual* embedding, the
  fact embedded after the end of the fact its owner stored just before it
  (:func:`kora.memory_service.facts.context_text`): a reply ("yes, last Friday") is embedded with what it
  answers. A fact the background ``embed`` jobs have not given its contextual embedding yet (they do so right
  after it is stored, and for the facts of a store made before contextual embeddings) is compared by its own
  embedding alone;
* ``own``: with embeddings, ``0.55 * cosine + 0.45 * text``; without (no embedding model, or a fact the background
  ``embed`` jobs have not reached yet: stored before the model was configured or changed, or while it was
  unreachable), ``text``;
* the score: ``own + 0.5 * context * (1 - own)``, where ``context`` is the best ``own`` of the fact's neighbours,
  the facts stored up to :data:`REACH` (2) places before and after it by the same owner (app, user and session).
  The score stays in ``[0, 1]`` and never falls below the fact's own. The neighbours of each candidate that match
  the query themselves (an own score above 0) are candidates too (a neighbour is within every scope its candidate
  is in: same owner), so a reply ("yes, last Friday") whose words are not the query's is found through the
  question it answers when its vector is not opposed to the query's.

So recall works with no embedding model and improves with one. The weights were chosen on LoCoMo
(``bench/bench_locomo.py``; what each step did to evidence recall is in bench/README.md). Age is no part of the
score: it only breaks ties (of scores equal to 4 decimals, the newer first), so evidence from months ago is ranked
by its relevance like yesterday's. What is out of date is superseded (:mod:`kora.memory_service.facts`), not
buried. Superseded facts (``invalidated_at`` set) are never candidates nor neighbours. Stored events can be
searched too (full text only, ``text`` as the plain share of the query's words).

Scope filters: ``session``: this agent's session (its anonymous rows and the asking user's); ``agent``: this agent
and this user, across sessions; ``user``: this user, across agents; ``store``: everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from psycopg.rows import dict_row

from kora.core.errors import Forbidden, RequestError
from kora.memory.wire import MEMORY_TOOL_NAMES, USER_SCOPES, RecallHit, Scope, scope_rank
from kora.memory_service import vectors
from kora.memory_service.database import Conn

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


#: Weight of the cosine in a candidate's own score with embeddings (the rest is ``text``).
VECTOR_WEIGHT = 0.55
#: Weight of the contextual embedding's cosine in a fact's cosine (the rest is its own embedding's).
CONTEXT_VECTOR_WEIGHT = 0.5
#: Weight of the best neighbour's own score (see the module docstring).
CONTEXT_WEIGHT = 0.5
#: How far a fact's neighbours reach: the facts up to this many places before and after it in its owner's order.
REACH = 2


def own_score(cosine: float | None, text: float) -> float:
    """A fact's own score in ``[0, 1]`` from its ``cosine`` to the query (None: no embedding) and its ``text``
    score (see the module docstring)."""
    if cosine is None:
        return text
    return VECTOR_WEIGHT * max(cosine, 0.0) + (1 - VECTOR_WEIGHT) * text


def blend(cosine: float | None, text: float, context: float = 0.0) -> float:
    """A candidate's score in ``[0, 1]``: its own score lifted by ``context``, the best own score of its
    neighbours (see the module docstring)."""
    own = own_score(cosine, text)
    return own + CONTEXT_WEIGHT * context * (1 - own)


def _neighbours(side: str) -> str:
    """A ``LATERAL`` subquery: the ``2 * REACH`` facts stored just before (``side`` ``before``) or after
    (``after``) candidate ``f`` by its owner, nearest first, as ``(fact_id, pos)`` with ``pos`` their signed
    distance in that owner's order (-1 the one just before); one probe of the ``facts_neighbours`` index."""
    compare, order, sign = ("<", "DESC", "-") if side == "before" else (">", "ASC", "")
    return f"""
        SELECT c.fact_id AS anchor, n.fact_id, {sign}n.rn AS pos
        FROM candidates c JOIN facts f ON f.fact_id = c.fact_id CROSS JOIN LATERAL (
            SELECT m.fact_id, row_number() OVER (ORDER BY m.created_at {order}, m.fact_id {order}) AS rn
            FROM facts m
            WHERE m.invalidated_at IS NULL AND m.app_name = f.app_name
              AND coalesce(m.user_id, '') = coalesce(f.user_id, '')
              AND coalesce(m.session_id, '') = coalesce(f.session_id, '')
              AND (m.created_at, m.fact_id) {compare} (f.created_at, f.fact_id)
            ORDER BY m.created_at {order}, m.fact_id {order} LIMIT {2 * REACH}
        ) AS n"""


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
    params |= {"q": or_query(query), "raw": query, "pool": pool}
    # N of the words' weights, the scope's valid facts: counted once, by the statement unless the choice of
    # vector search has counted them already.
    scope_count = f"SELECT count(*)::float8 AS n FROM facts f WHERE f.invalidated_at IS NULL AND {condition}"
    if embedding is not None:
        valid, total = await vectors.scope_size(conn, condition, params)
        indexed = not vectors.exact_is_cheaper(valid, total, pool)
        params["n"] = float(valid)
        params["emb"] = vectors.parameter(embedding)
        scope_count = "SELECT %(n)s::float8 AS n"
        order = vectors.distance_order("f.embedding", "%(emb)s::vector", len(embedding), indexed)
        vector_candidates = (
            f"SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL AND f.embedding IS NOT NULL "
            f"AND {condition} ORDER BY {order} LIMIT %(pool)s"
        )
        # A fact's cosine reads its contextual embedding too, once the embed jobs have given it one.
        cosine = (
            "CASE WHEN f.context_embedding IS NULL THEN 1 - (f.embedding <=> %(emb)s::vector) "
            f"ELSE 1 - {1 - CONTEXT_VECTOR_WEIGHT} * (f.embedding <=> %(emb)s::vector) "
            f"- {CONTEXT_VECTOR_WEIGHT} * (f.context_embedding <=> %(emb)s::vector) END"
        )
    else:
        vector_candidates = "SELECT NULL::text AS fact_id WHERE false"
        cosine = "NULL::float8"

    # words: each of the query's words as a query of that word alone (quoted: never parsed again). shared: each
    # fact of the scope sharing a word with the query, once per word shared (a lookup in the fact's sorted
    # lexemes per word); a word's document frequency is counted from it (a fact holding the word shares it), N
    # from the scope. windows: each candidate (pos 0) with the facts around it in its owner's order; one row per
    # fact and window.
    statement = f"""
        WITH q AS (
            SELECT websearch_to_tsquery('english', %(q)s) AS tsq,
                   ARRAY(SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', %(raw)s)))) AS lexemes
        ),
        words AS MATERIALIZED (
            SELECT l.lexeme,
                   ('''' || replace(replace(l.lexeme, '\\', '\\\\'), '''', '''''') || '''')::tsquery AS tsq
            FROM q CROSS JOIN unnest(q.lexemes) AS l(lexeme)
        ),
        shared AS MATERIALIZED (
            SELECT f.fact_id, w.lexeme
            FROM facts f CROSS JOIN q JOIN words w ON f.search @@ w.tsq
            WHERE f.invalidated_at IS NULL AND {condition} AND f.search @@ q.tsq
        ),
        weights AS MATERIALIZED (
            SELECT w.lexeme, ln(1 + (total.n - count(s.fact_id) + 0.5) / (count(s.fact_id) + 0.5)) AS idf
            FROM q CROSS JOIN unnest(q.lexemes) AS w(lexeme)
                 CROSS JOIN ({scope_count}) AS total
                 LEFT JOIN shared s ON s.lexeme = w.lexeme
            GROUP BY w.lexeme, total.n
        ),
        scores AS MATERIALIZED (
            SELECT s.fact_id, sum(w.idf) / (SELECT sum(idf) FROM weights) AS text
            FROM shared s JOIN weights w ON w.lexeme = s.lexeme GROUP BY s.fact_id
        ),
        candidates AS MATERIALIZED (
            ({vector_candidates})
            UNION
            (SELECT s.fact_id FROM scores s ORDER BY s.text DESC LIMIT %(pool)s)
        ),
        windows AS MATERIALIZED (
            SELECT c.fact_id AS anchor, c.fact_id, 0 AS pos FROM candidates c
            UNION ALL {_neighbours("before")}
            UNION ALL {_neighbours("after")}
        ),
        seen AS (
            SELECT w.fact_id, min(abs(w.pos)) AS reach, array_agg(w.anchor) AS anchors, array_agg(w.pos) AS places
            FROM windows w GROUP BY w.fact_id
        ),
        texts AS (
            SELECT coalesce(jsonb_object_agg(s.fact_id, s.text), '{{}}') AS of FROM scores s
            WHERE s.fact_id IN (SELECT w.fact_id FROM windows w)
        )
        SELECT v.anchors, v.places, v.reach, f.fact_id AS id, CASE WHEN v.reach <= {REACH} THEN f.body END AS text,
               f.session_id, f.created_at AS timestamp, {cosine} AS cosine,
               coalesce((t.of ->> f.fact_id)::float8, 0.0) AS text_score
        FROM seen v CROSS JOIN texts t JOIN facts f ON f.fact_id = v.fact_id
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, params)
        rows = await cur.fetchall()
    hits, context = _in_context(rows)
    return _best(hits, "fact", top_k, threshold, context)


def _in_context(rows: list[dict[str, object]]) -> tuple[list[dict[str, object]], dict[str, float]]:
    """The hit rows of :func:`recall_facts`'s answer, each with its ``context``: every candidate, and every fact
    within :data:`REACH` of one (``text`` set) that matches the query itself (an own score above 0: a word shared,
    or a vector not opposed to the query's; without an embedding model, a neighbour sharing no word with the query
    is not recalled for its neighbour alone). A fact's context is the best own score among the facts within
    :data:`REACH` of it, read from a window that holds them all (a candidate's, of :data:`REACH` ``* 2`` on each
    side). Returns the hit rows and the context of each fact by id."""
    own = {str(row["id"]): own_score(_float(row["cosine"]), _float(row["text_score"]) or 0.0) for row in rows}
    by_window: dict[str, dict[int, str]] = {}
    for row in rows:
        anchors, places = row["anchors"], row["places"]
        assert isinstance(anchors, list)
        assert isinstance(places, list)
        for anchor, pos in zip(anchors, places, strict=True):
            by_window.setdefault(str(anchor), {})[int(pos)] = str(row["id"])
    context: dict[str, float] = {}
    for window in by_window.values():
        for pos, fact in window.items():
            if -REACH <= pos <= REACH:
                best = max(
                    (own[window[p]] for p in range(pos - REACH, pos + REACH + 1) if p != pos and p in window),
                    default=0.0,
                )
                if best > context.get(fact, 0.0):
                    context[fact] = best
    hits = [row for row in rows if row["text"] is not None and (row["reach"] == 0 or own[str(row["id"])] > 0)]
    return hits, context


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


def _float(value: object) -> float | None:
    """A number column (``float8``, or ``numeric`` as a ``Decimal``) as a float; None stays None."""
    if value is None or isinstance(value, float):
        return value
    return float(str(value))


def _best(
    rows: list[dict[str, object]],
    source: Literal["fact", "event"],
    top_k: int,
    threshold: float,
    context: dict[str, float] | None = None,
) -> list[RecallHit]:
    """The ``top_k`` best ``rows`` at or above ``threshold``, as hits: each scored by :func:`blend` with its
    ``context`` (by id; none for events), best first, recency breaking ties of the rounded score only."""
    ranked: list[tuple[float, datetime, dict[str, object]]] = []
    text_column = "text_share" if source == "event" else "text_score"
    for row in rows:
        timestamp = row["timestamp"]
        assert isinstance(timestamp, datetime)
        lift = context.get(str(row["id"]), 0.0) if context else 0.0
        score = blend(_float(row["cosine"]), _float(row[text_column]) or 0.0, lift)
        if score >= threshold:
            ranked.append((round(min(max(score, 0.0), 1.0), 4), timestamp, row))
    ranked.sort(key=lambda item: (item[0], item[1]), reverse=True)  # stable: as the hits were sorted before
    return [
        RecallHit(
            id=str(row["id"]),
            text=str(row["text"]),
            score=score,
            source=source,
            session_id=None if row["session_id"] is None else str(row["session_id"]),
            timestamp=timestamp,
        )
        for score, timestamp, row in ranked[:top_k]
    ]


def merge(first: list[RecallHit], second: list[RecallHit], top_k: int) -> list[RecallHit]:
    """The ``top_k`` best of two hit lists (of equal scores, the newer first)."""
    return sorted([*first, *second], key=lambda hit: (hit.score, hit.timestamp), reverse=True)[:top_k]
