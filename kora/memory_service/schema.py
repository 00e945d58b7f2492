"""The memory service's database schema and its versioned migrations (one SQL code path for both storage modes).

:func:`migrate` brings any Postgres with the ``vector`` extension to :data:`SCHEMA_VERSION`, holding an advisory
lock so that replicas starting together migrate once. Each migration runs in its own transaction and is recorded
in ``kora_schema_version``; a database newer than this build is refused rather than guessed at.

Tables: ``sessions`` (a session id is the client's, unique per agent (``app_name``), so sessions have a surrogate
key ``sid``; owner: ``app_name`` and, when verified, ``user_id``), ``events`` (verbatim, with a plain-text
``body`` and its token estimate, full-text indexed), ``summaries`` (rolling summaries, versioned per session),
``facts`` (long-term facts with their embedding, full-text indexed, superseded facts kept with
``invalidated_at``), ``fact_history`` (created / superseded rows: old text, new text and why), ``jobs`` (the
durable background queue; a claimed job has a lease, ``locked_until``), ``erasures`` (one row per erasure, which
agents replay on their own copies) and ``store_meta`` (the embedding model's name and dimension in use, the store's
random ``store_id``). A session keeps the window its client asked for last (``window_events``,
``window_tokens``; None: the store's bounds), which decides what the rolling summary folds, and the ``metadata``
its agent set (a conversation's).

The vector column's dimension follows the embedding model (:func:`ensure_embedding_model`); until one is known
the column has no dimension and no vector index.
"""

from __future__ import annotations

import logging

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from kora.core.errors import SchemaTooNew

log = logging.getLogger("kora.memory")

#: An arbitrary constant: the advisory lock that serialises migrations across replicas.
_MIGRATION_LOCK = 7_301_551_017

_V1 = """
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE sessions (
    sid bigserial PRIMARY KEY,
    session_id text NOT NULL,
    app_name text NOT NULL,
    user_id text,
    rolling_summary boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    event_count integer NOT NULL DEFAULT 0,
    UNIQUE (app_name, session_id)
);
CREATE INDEX sessions_id ON sessions (session_id);
CREATE INDEX sessions_app ON sessions (app_name, created_at);
CREATE INDEX sessions_user ON sessions (user_id) WHERE user_id IS NOT NULL;

CREATE TABLE events (
    seq bigserial PRIMARY KEY,
    event_id text NOT NULL,
    sid bigint NOT NULL REFERENCES sessions ON DELETE CASCADE,
    event_type text NOT NULL,
    ts timestamptz NOT NULL,
    content jsonb,
    metadata jsonb NOT NULL DEFAULT '{}',
    body text NOT NULL,
    tokens integer NOT NULL,
    search tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED,
    UNIQUE (sid, event_id)
);
CREATE INDEX events_session ON events (sid, seq);
CREATE INDEX events_search ON events USING gin (search);

CREATE TABLE summaries (
    sid bigint NOT NULL REFERENCES sessions ON DELETE CASCADE,
    version integer NOT NULL,
    body text NOT NULL,
    through_seq bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sid, version)
);

CREATE TABLE facts (
    fact_id text PRIMARY KEY,
    body text NOT NULL,
    body_hash text NOT NULL,
    app_name text NOT NULL,
    user_id text,
    session_id text,
    origin text NOT NULL,
    attribution jsonb NOT NULL DEFAULT '{}',
    source_event_ids text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    invalidated_at timestamptz,
    superseded_by text,
    embedding vector,
    search tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED
);
CREATE INDEX facts_user ON facts (user_id, app_name) WHERE invalidated_at IS NULL;
CREATE INDEX facts_session ON facts (session_id, app_name);
CREATE INDEX facts_hash ON facts (body_hash);
CREATE INDEX facts_search ON facts USING gin (search);

CREATE TABLE fact_history (
    id bigserial PRIMARY KEY,
    fact_id text NOT NULL,
    action text NOT NULL,
    old_text text,
    new_text text,
    new_fact_id text,
    reason text NOT NULL,
    app_name text NOT NULL,
    user_id text,
    session_id text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fact_history_fact ON fact_history (fact_id);
CREATE INDEX fact_history_user ON fact_history (user_id);
CREATE INDEX fact_history_session ON fact_history (session_id);

CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    sid bigint NOT NULL REFERENCES sessions ON DELETE CASCADE,
    payload jsonb NOT NULL DEFAULT '{}',
    status text NOT NULL DEFAULT 'queued',
    attempts integer NOT NULL DEFAULT 0,
    run_after timestamptz NOT NULL DEFAULT now(),
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_queued ON jobs (run_after, id) WHERE status = 'queued';
CREATE INDEX jobs_session ON jobs (sid);

CREATE TABLE store_meta (key text PRIMARY KEY, value text NOT NULL);
"""

#: Version 2: the client's window per session (the medium tier folds what leaves *that* window, so the summary and
#: the window a turn sees leave no gap), and job leases (a job is claimed for a while, not held in a transaction).
_V2 = """
ALTER TABLE sessions ADD COLUMN window_events integer, ADD COLUMN window_tokens integer;
ALTER TABLE jobs ADD COLUMN locked_until timestamptz, ADD COLUMN locked_by text;
"""

#: Version 3: re-embedding in the background. A job may be about no session (``embed`` is about the store's facts),
#: and the facts still waiting for an embedding are found (and counted, for ``/ready``) through a partial index
#: that is empty once every fact has one.
_V3 = """
ALTER TABLE jobs ALTER COLUMN sid DROP NOT NULL;
CREATE INDEX facts_unembedded ON facts (fact_id) WHERE embedding IS NULL AND invalidated_at IS NULL;
"""

#: Version 5: the erasure log (:mod:`kora.memory_service.erasures`): one row per ``forget``, so agents learn what
#: to drop from their own copies, and ``store_id``, which tells a store whose log started again from another.
_V5 = """
CREATE TABLE erasures (
    seq bigserial PRIMARY KEY,
    user_id text,
    session_id text,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX erasures_user ON erasures (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX erasures_session ON erasures (session_id) WHERE session_id IS NOT NULL;
INSERT INTO store_meta (key, value) VALUES ('store_id', gen_random_uuid()::text) ON CONFLICT (key) DO NOTHING;
"""

#: Version 6: a session's metadata (a conversation's, as the agents' ``/v1/conversations`` set it), erased with it.
_V6 = """
ALTER TABLE sessions ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
"""

#: Version 7: a fact's neighbours, the facts stored just before and after it by the same owner (app, user,
#: session): recall reads them for every candidate (:mod:`kora.memory_service.recall`), one index probe each.
_V7 = """
CREATE INDEX facts_neighbours ON facts (app_name, coalesce(user_id, ''), coalesce(session_id, ''), created_at, fact_id)
    WHERE invalidated_at IS NULL;
"""

#: Version 8: contextual embeddings. ``context_embedding`` is the embedding of a fact read after the fact stored
#: just before it by the same owner (:mod:`kora.memory_service.recall` scores with both vectors). Existing facts
#: have none: the background ``embed`` jobs compute them (a fact is waiting for embedding until it has both
#: vectors, so ``facts_unembedded`` covers either missing).
_V8 = """
ALTER TABLE facts ADD COLUMN context_embedding vector;
DROP INDEX facts_unembedded;
CREATE INDEX facts_unembedded ON facts (fact_id)
    WHERE (embedding IS NULL OR context_embedding IS NULL) AND invalidated_at IS NULL;
"""

#: Most dimensions pgvector's HNSW index takes for ``halfvec`` (for ``vector``: 2 000).
HNSW_MAX_DIMENSIONS = 4000

#: The HNSW index of ``facts.embedding`` (``{}``: its dimension). It holds the vectors in half precision: at 100k
#: 384-d facts 112 MB instead of 195 MB for a ``vector`` index (within the embedded Postgres's 128 MB of shared
#: buffers), and a graph visit a third cheaper (bench/bench_memory_service.py); the column keeps full precision for
#: exact searches and for scoring the candidates. MiniLM cosines move by < 1e-4 in half precision.
#: Queries reach it through :func:`index_expression` (pgvector >= 0.7: an expression index on ``halfvec``).
_VECTOR_INDEX = "CREATE INDEX facts_embedding ON facts USING hnsw ((embedding::halfvec({})) halfvec_cosine_ops)"

#: Version 4: the HNSW index over half-precision vectors (:data:`_VECTOR_INDEX`), rebuilt in place of the ``vector``
#: one when the store has a dimension (this takes as long as building an index: ~40 s at 100k 384-d facts).
_V4 = f"""
DROP INDEX IF EXISTS facts_embedding;
DO $$
DECLARE dimension integer;
BEGIN
    SELECT value::integer INTO dimension FROM store_meta WHERE key = 'embedding_dimension';
    IF dimension IS NOT NULL AND dimension <= {HNSW_MAX_DIMENSIONS} THEN
        EXECUTE format('{_VECTOR_INDEX.replace("{}", "%s")}', dimension);
    END IF;
END $$;
"""

#: Migrations in order: ``MIGRATIONS[i]`` brings the schema from version ``i`` to ``i + 1``.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)


def index_expression(value: str, dimension: int) -> str:
    """``value`` (SQL: the column or a parameter) as the HNSW index holds it, ``value::halfvec(dimension)``: a
    distance between two such expressions is what the index can order by."""
    return f"{value}::halfvec({int(dimension)})"


SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(conn: AsyncConnection[TupleRow]) -> int:
    """Apply the migrations ``conn``'s database lacks; returns the version it was at before.

    ``conn`` must be in autocommit mode. Raises :class:`SchemaTooNew` when the database is ahead of this build,
    and psycopg's errors when the database refuses (e.g. no ``vector`` extension available).
    """
    await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS kora_schema_version "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = await (await conn.execute("SELECT coalesce(max(version), 0) FROM kora_schema_version")).fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"the memory database is at schema version {current}, newer than this build's {SCHEMA_VERSION}"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            async with conn.transaction():
                await conn.execute(sql.SQL(MIGRATIONS[version - 1]))
                await conn.execute("INSERT INTO kora_schema_version (version) VALUES (%s)", (version,))
            log.info("memory schema migrated to version %d", version)
        return current
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))


async def create_vector_index(conn: AsyncConnection[TupleRow], dimension: int) -> None:
    """Build the HNSW index over ``facts.embedding`` of ``dimension`` (:data:`_VECTOR_INDEX`); none above
    :data:`HNSW_MAX_DIMENSIONS`, which pgvector cannot index (every search is then exact)."""
    if dimension > HNSW_MAX_DIMENSIONS:
        log.warning("%d-dimensional embeddings cannot be indexed: vector searches are exact", dimension)
        return
    await conn.execute(sql.SQL(_VECTOR_INDEX).format(sql.Literal(dimension)))


async def _meta(conn: AsyncConnection[TupleRow], key: str) -> str | None:
    row = await (await conn.execute("SELECT value FROM store_meta WHERE key = %s", (key,))).fetchone()
    return None if row is None else str(row[0])


async def _set_meta(conn: AsyncConnection[TupleRow], key: str, value: str) -> None:
    await conn.execute(
        "INSERT INTO store_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


async def embedding_dimension(conn: AsyncConnection[TupleRow]) -> int | None:
    """The dimension of ``facts.embedding`` now, None while it has none."""
    value = await _meta(conn, "embedding_dimension")
    return None if value is None else int(value)


async def embedding_model(conn: AsyncConnection[TupleRow]) -> str | None:
    """The name of the embedding model whose vectors ``facts.embedding`` holds, None while none was recorded."""
    return await _meta(conn, "embedding_model")


async def ensure_embedding_model(conn: AsyncConnection[TupleRow], model: str, dimension: int) -> bool:
    """Make ``facts.embedding`` hold ``model``'s vectors: a ``vector(dimension)`` with an HNSW cosine index (over
    half-precision copies: :data:`_VECTOR_INDEX`), and
    ``model`` recorded in ``store_meta``; True when the embeddings were cleared.

    Vectors of two models cannot be compared, whether their dimensions differ or not: when the model changed (its
    name or its dimension) the old embeddings are cleared, those facts are recalled by full text only until the
    background ``embed`` jobs give them new ones (:mod:`kora.memory_service.jobs`), and the index is rebuilt. A
    store that recorded only a dimension (before model names were) and matches it keeps its vectors and takes
    ``model`` as their name: clearing them would re-embed every fact on upgrade for what is most likely the same
    model. Runs under the migration lock, so replicas agree.
    """
    await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
    try:
        recorded_dimension, recorded_model = await embedding_dimension(conn), await embedding_model(conn)
        if recorded_dimension == dimension and recorded_model in {model, None}:
            if recorded_model is None:
                await _set_meta(conn, "embedding_model", model)
            return False
        async with conn.transaction():
            await conn.execute("DROP INDEX IF EXISTS facts_embedding")
            await conn.execute(
                "UPDATE facts SET embedding = NULL, context_embedding = NULL "
                "WHERE embedding IS NOT NULL OR context_embedding IS NOT NULL"
            )
            await conn.execute(
                sql.SQL("ALTER TABLE facts ALTER COLUMN embedding TYPE vector({})").format(sql.Literal(dimension))
            )
            await create_vector_index(conn, dimension)
            await _set_meta(conn, "embedding_dimension", str(dimension))
            await _set_meta(conn, "embedding_model", model)
        log.info("fact embeddings are now %s's, %d-dimensional", model, dimension)
        return True
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
