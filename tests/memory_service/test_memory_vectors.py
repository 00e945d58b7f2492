"""Vector search within a scope, on a real Postgres with pgvector: exact or through the HNSW index, whichever the
scope's size makes cheaper, with the same nearest facts either way.

The facts and their vectors are written with SQL and the read path is called in process with a query vector, so
no embedding model is involved (the service's own use of one is tested where a model serves embeddings).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest

from kora.memory_service import facts, recall, schema, vectors
from kora.memory_service.database import Conn, Database
from kora.memory_service.schema import ensure_embedding_model
from kora.memory_service.settings import load_memory_service_settings
from tests.support.memory import service_env

pytestmark = pytest.mark.integration

DIMENSION = 8
APP = "assistant"


def unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


@pytest.mark.parametrize(
    ("rows", "total", "wanted", "exact"),
    [
        (900, 100_000, 10, True),  # a user with 0.9% of the facts: sorting 900 rows beats ~100k/90 graph visits
        (10_000, 100_000, 10, False),  # a user with 10%: the index
        (5, 5, 10, True),  # fewer rows than wanted
        # A table never analysed has no size estimate: taken as the filter's rows (a lower bound).
        (150, -1, 10, True),
        (200, -1, 10, False),
        (100_000, 100_000, 10, False),
    ],
)
def test_exact_search_is_chosen_while_it_is_cheaper(rows: int, total: int, wanted: int, exact: bool) -> None:
    assert vectors.exact_is_cheaper(rows, total, wanted) is exact


@pytest.fixture
async def conn(memory_db: str) -> AsyncIterator[Conn]:
    """A connection of the service's own pool (pgvector registered, iterative index scans) on a store with 3 000
    facts: 300 of user ``small``, 2 700 of user ``big``, random unit vectors, an HNSW index."""
    database = Database(load_memory_service_settings(service_env(memory_db)))
    await database.open()
    assert database.pool is not None
    rng = random.Random(3)
    async with database.pool.connection() as connection:
        await ensure_embedding_model(connection, "test-vectors", DIMENSION)
        async with connection.cursor() as cur:
            await cur.executemany(
                "INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, origin, embedding) "
                "VALUES (%s, %s, %s, %s, %s, 'saved', %s)",
                [
                    (
                        f"fact_{n}",
                        f"The user noted thing {n}.",
                        f"h{n}",
                        APP,
                        "small" if n % 10 == 0 else "big",
                        unit([rng.gauss(0, 1) for _ in range(DIMENSION)]),
                    )
                    for n in range(3000)
                ],
            )
        await connection.execute("ANALYZE facts")
        yield connection
    await database.close()


async def _vector_of(conn: Conn, fact_id: str) -> list[float]:
    row = await (await conn.execute("SELECT embedding FROM facts WHERE fact_id = %s", (fact_id,))).fetchone()
    assert row is not None
    return [float(x) for x in row[0].to_list()]


async def test_a_small_scope_is_searched_exactly_a_large_one_through_the_index(conn: Conn) -> None:
    small, _ = recall.scope_filter("user", APP, "small", None, "user").sql("f")
    big, _ = recall.scope_filter("user", APP, "big", None, "user").sql("f")
    params: dict[str, object] = {"s_app": APP, "s_session": None}
    assert await vectors.use_index(conn, small, params | {"s_user": "small"}, 10) is False  # 300 of 3000
    assert await vectors.use_index(conn, big, params | {"s_user": "big"}, 10) is True  # 2700 of 3000


@pytest.mark.parametrize(("user", "fact"), [("small", "fact_1230"), ("big", "fact_1231")])
async def test_recall_by_vector_finds_the_nearest_fact_of_the_scope_only(conn: Conn, user: str, fact: str) -> None:
    vector = await _vector_of(conn, fact)
    where = recall.scope_filter("user", APP, user, None, "user")
    hits = await recall.recall_facts(conn, where, "unrelated words", vector, top_k=5, threshold=0.0)
    assert hits[0].id == fact
    owners = await (
        await conn.execute("SELECT DISTINCT user_id FROM facts WHERE fact_id = ANY(%s)", ([h.id for h in hits],))
    ).fetchall()
    assert owners == [(user,)]
    # The index and the exact search agree on the nearest facts of the scope.
    condition, params = where.sql("f")
    nearest = {}
    for indexed in (True, False):
        order = vectors.distance_order("f.embedding", "%(emb)s::vector", DIMENSION, indexed)
        cur = await conn.execute(
            f"SELECT f.fact_id FROM facts f WHERE {condition} ORDER BY {order} LIMIT 3", params | {"emb": vector}
        )
        nearest[indexed] = [row[0] for row in await cur.fetchall()]
    assert nearest[True][0] == nearest[False][0] == fact


async def test_near_duplicates_by_vector_and_words_are_kept_once(conn: Conn) -> None:
    owner = facts.Owner(APP, "small", "s1")
    base = await _vector_of(conn, "fact_1230")
    nearby = unit([x + 0.01 for x in base])
    first = await facts.write_fact(conn, "The user keeps three bees in Lyon.", owner, "saved", base)
    assert first.status == "stored"
    # Close vectors and the same words but one: the same fact said twice.
    again = await facts.write_fact(conn, "The user keeps three bees in Lyon now.", owner, "saved", nearby)
    assert again == facts.WriteResult(first.fact_id, "duplicate")
    # Close vectors, but the words say something else: another fact.
    other = await facts.write_fact(conn, "The user keeps three cats in Paris.", owner, "saved", nearby)
    assert other.status == "stored"


async def test_a_neighbour_outside_the_candidates_lifts_its_candidate_by_its_words(conn: Conn) -> None:
    # User nina, oldest first. Candidates (top_k 1: 2 per way): by vector nina_2 (the query's vector) and nina_3;
    # by words the two facts with both query words (in another session: no neighbours of the others). nina_1 is
    # neither but, stored just before nina_2, lifts it by its own score: its words alone (its vector is orthogonal
    # to the query's).
    q, e1, e2 = ([1.0 if i == axis else 0.0 for i in range(DIMENSION)] for axis in (0, 1, 2))
    rows = [
        ("nina_0a", "Nina fired pottery in the kiln.", [-x for x in q], "other"),
        ("nina_0b", "The kiln cracked her pottery.", [-x for x in q], "other"),
        ("nina_1", "Nina bought pottery supplies.", e1, None),
        ("nina_2", "Nina cleaned the studio.", q, None),
        (
            "nina_3",
            "Nina painted the fence.",
            unit([0.1 * a + math.sqrt(0.99) * b for a, b in zip(q, e2, strict=True)]),
            None,
        ),
    ]
    await _insert(conn, "nina", rows)
    where = recall.scope_filter("user", APP, "nina", None, "user")
    (hit,) = await recall.recall_facts(conn, where, "pottery kiln", q, top_k=1, threshold=0.0)
    # Word weights over the scope's 5 valid facts: pottery in 3, kiln in 2.
    pottery, kiln = (math.log(1 + (5 - df + 0.5) / (df + 0.5)) for df in (3, 2))
    neighbour = recall.own_score(0.0, pottery / (pottery + kiln))
    assert hit.id == "nina_2"
    assert hit.score == pytest.approx(recall.blend(1.0, 0.0, neighbour), abs=1e-4)


async def _insert(conn: Conn, user: str, rows: list[tuple[str, str, list[float], str | None]]) -> None:
    """Facts ``(fact_id, body, vector, session_id)`` of ``user``, stored one second apart in this order."""
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, session_id, origin, embedding, "
            "created_at) VALUES (%s, %s, %s, %s, %s, %s, 'saved', %s, now() + make_interval(secs => %s))",
            [
                (fact_id, body, fact_id, APP, user, session, vector, n)
                for n, (fact_id, body, vector, session) in enumerate(rows)
            ],
        )


async def test_a_reply_next_to_a_candidate_is_recalled_through_it(conn: Conn) -> None:
    # User omar. The reply omar_1 shares no word with the query and its vector is nearly orthogonal to the
    # query's (cosine 0.05); five facts of another session are nearer by vector (0.1), so it is no candidate by
    # either list. Stored just after the question it answers (omar_0, the best match), it is recalled through it:
    # a neighbour of a candidate is a candidate. omar_2, as far from the query but opposed to it (no own score at
    # all), is not recalled for its neighbour alone.
    q, e1, e2 = ([1.0 if i == axis else 0.0 for i in range(DIMENSION)] for axis in (0, 1, 2))

    def at(cosine: float, other: list[float]) -> list[float]:
        return unit([cosine * a + math.sqrt(1 - cosine**2) * b for a, b in zip(q, other, strict=True)])

    rows = [
        ("omar_0", "Omar asked whether the pottery kiln was mended.", q, "s1"),
        ("omar_1", "Yes, last Friday.", at(0.05, e1), "s1"),
        ("omar_2", "Anything else?", at(-0.05, e1), "s1"),
        *((f"omar_f{n}", f"Omar painted fence number {n}.", at(0.1, e2), "s2") for n in range(5)),
    ]
    await _insert(conn, "omar", rows)
    where = recall.scope_filter("user", APP, "omar", None, "user")
    # top_k 3: 6 candidates by vector (omar_0 and the five fences), omar_0 by words; omar_1 only as a neighbour.
    first, second, third = await recall.recall_facts(conn, where, "pottery kiln", q, top_k=3, threshold=0.0)
    assert first.id == "omar_0"
    assert first.score == pytest.approx(1.0, abs=1e-4)
    assert second.id == "omar_1"
    assert second.score == pytest.approx(recall.blend(0.05, 0.0, 1.0), abs=1e-4)
    # Lifted, omar_2 would score as much as omar_1; a fact of the other session is third.
    assert third.id.startswith("omar_f")


async def test_a_neighbour_lifts_from_two_places_away_and_no_further(conn: Conn) -> None:
    # User pia, one session: only pia_0 matches the query. pia_2 (two places after it) is lifted by it, pia_3
    # (three places) is not, whatever its vector.
    q, e1 = ([1.0 if i == axis else 0.0 for i in range(DIMENSION)] for axis in (0, 1))
    rows = [
        ("pia_0", "Pia mended the pottery kiln.", q, "s1"),
        ("pia_1", "Great.", e1, "s1"),
        ("pia_2", "Thanks.", e1, "s1"),
        ("pia_3", "Bye.", e1, "s1"),
    ]
    await _insert(conn, "pia", rows)
    where = recall.scope_filter("user", APP, "pia", None, "user")
    hits = await recall.recall_facts(conn, where, "pottery kiln", q, top_k=4, threshold=0.0)
    scores = {hit.id: hit.score for hit in hits}
    assert scores["pia_2"] == pytest.approx(recall.blend(0.0, 0.0, 1.0), abs=1e-4)
    assert scores.get("pia_3", 0.0) == 0.0


async def test_a_neighbour_is_never_another_apps_fact_nor_a_superseded_one(conn: Conn) -> None:
    # User ria, session s1 of APP, recalled at agent scope (APP's facts of ria; user scope would read every agent's):
    # ria_0 matches the query partly. Stored just after it, under the same user and session id: a fact of another
    # agent (app) and a superseded fact of APP, both matching the query fully. As neighbours they would be recalled
    # and lift ria_0; they are neither.
    q, e1 = ([1.0 if i == axis else 0.0 for i in range(DIMENSION)] for axis in (0, 1))
    near = unit([0.6 * a + 0.8 * b for a, b in zip(q, e1, strict=True)])
    await _insert(conn, "ria", [("ria_0", "Ria asked about the pottery.", near, "s1")])
    where = recall.scope_filter("agent", APP, "ria", None, "user")
    [alone] = await recall.recall_facts(conn, where, "pottery kiln", q, top_k=3, threshold=0.0)
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, session_id, origin, embedding, "
            "created_at, invalidated_at) VALUES (%s, %s, %s, %s, 'ria', 's1', 'saved', %s, "
            "now() + make_interval(secs => %s), %s)",
            [
                ("ria_other_app", "Ria mended the pottery kiln.", "h1", "other-agent", q, 1, None),
                ("ria_superseded", "Ria mended the pottery kiln.", "h2", APP, q, 2, datetime.now(UTC)),
            ],
        )
    hits = await recall.recall_facts(conn, where, "pottery kiln", q, top_k=3, threshold=0.0)
    assert [(hit.id, hit.score) for hit in hits] == [("ria_0", pytest.approx(alone.score, abs=1e-6))]


async def _plan(conn: Conn, statement: str, params: dict[str, object]) -> str:
    row = await (await conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params)).fetchone()
    assert row is not None
    return json.dumps(row[0])


async def test_the_indexed_order_goes_through_the_half_precision_index_and_the_exact_one_does_not(
    conn: Conn,
) -> None:
    where = recall.scope_filter("user", APP, "big", None, "user")
    condition, params = where.sql("f")
    params |= {"emb": await _vector_of(conn, "fact_1")}
    plans = {}
    for indexed in (True, False):
        order = vectors.distance_order("f.embedding", "%(emb)s::vector", DIMENSION, indexed)
        plans[indexed] = await _plan(
            conn, f"SELECT f.fact_id FROM facts f WHERE {condition} ORDER BY {order} LIMIT 10", params
        )
    assert '"Index Name": "facts_embedding"' in plans[True]
    assert "facts_embedding" not in plans[False]
    definition = await (
        await conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'facts_embedding'")
    ).fetchone()
    assert definition is not None
    assert f"((embedding)::halfvec({DIMENSION})) halfvec_cosine_ops" in definition[0]
    # The column keeps full precision: what recall scores the candidates with.
    assert await (
        await conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'facts'::regclass AND attname = 'embedding'"
        )
    ).fetchone() == (f"vector({DIMENSION})",)


async def test_a_store_with_a_full_precision_index_gets_the_half_precision_one(memory_db: str) -> None:
    """Schema version 4 rebuilds the HNSW index of a store made at version 3 (a ``vector`` index) over
    ``halfvec``, keeping every vector."""
    async with await psycopg.AsyncConnection.connect(memory_db, autocommit=True) as conn:
        await conn.execute("CREATE TABLE kora_schema_version (version integer PRIMARY KEY, applied_at timestamptz)")
        for version, migration in enumerate(schema.MIGRATIONS[:3], start=1):
            await conn.execute(psycopg.sql.SQL(migration))
            await conn.execute("INSERT INTO kora_schema_version VALUES (%s, now())", (version,))
        await conn.execute(f"ALTER TABLE facts ALTER COLUMN embedding TYPE vector({DIMENSION})")
        await conn.execute("CREATE INDEX facts_embedding ON facts USING hnsw (embedding vector_cosine_ops)")
        await conn.execute("INSERT INTO store_meta VALUES ('embedding_dimension', %s)", (str(DIMENSION),))
        await conn.execute(
            "INSERT INTO facts (fact_id, body, body_hash, app_name, origin, embedding) "
            "VALUES ('fact_1', 'x', 'h', 'a', 'saved', %s::vector)",
            (str(unit([1.0] * DIMENSION)),),
        )
        assert await schema.migrate(conn) == 3
        row = await (
            await conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'facts_embedding'")
        ).fetchone()
        assert row is not None
        assert "halfvec_cosine_ops" in row[0]
        assert await (await conn.execute("SELECT embedding IS NOT NULL FROM facts")).fetchone() == (True,)
