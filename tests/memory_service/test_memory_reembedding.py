"""Re-embedding in the background: facts whose embeddings were cleared because the embedding model changed (its
dimension or only its name), and facts stored while it could not be reached, get vectors again through ``embed``
jobs, and are recalled by full text until then; every fact gets its contextual embedding from those jobs, a store
made before contextual embeddings too (``kora memory`` on a real Postgres with pgvector; the embedding
models are scripted ones, whose vectors are deterministic feature hashes: :mod:`kora.scripted.embedding`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from kora.memory_service.facts import context_text
from kora.memory_service.schema import MIGRATIONS, embedding_dimension, embedding_model, ensure_embedding_model
from kora.scripted.embedding import embed
from tests.support.memory import ADMIN, MemoryProcess, eventually, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

APP = "assistant"
USER = "alice"
CELLO = "The user plays violoncello."
FACTS = [CELLO, "The user lives in Lyon.", "The user has a dog named Rex.", "The user works as a nurse."]
#: The contextual texts of :data:`FACTS` stored in that order (the first has none: its own embedding stands).
CONTEXTS = [context_text(before, text) for before, text in itertools.pairwise(FACTS)]
#: Shares no word with any fact (so full text finds nothing), but most of its trigrams with :data:`CELLO`.
MISSPELT = "violoncelo"


def embedder_env(database_url: str, embedder: ScriptedModelServer, **extra: str) -> dict[str, str]:
    """The service on ``database_url`` with ``embedder`` as its embedding model (and no summary model)."""
    return service_env(database_url, embedding_model_api_url=embedder.url, embedding_model=embedder.model_name, **extra)


@asynccontextmanager
async def client_of(env: dict[str, str]) -> AsyncIterator[httpx.AsyncClient]:
    """The memory service with ``env``, and a client of it."""
    async with memory_service(env) as url, httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
        yield client


async def save(client: httpx.AsyncClient, *texts: str) -> None:
    for text in texts:
        body = {"content": text, "app_name": APP, "user_id": USER, "session_id": "s1"}
        response = await client.post("/v1/facts", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "stored"


async def recalled(client: httpx.AsyncClient, query: str) -> list[str]:
    body = {"query": query, "scope": "user", "app_name": APP, "user_id": USER, "top_k": 5}
    response = await client.post("/v1/recall", json=body)
    assert response.status_code == 200, response.text
    return [hit["text"] for hit in response.json()["hits"]]


async def embeddings(database_url: str) -> dict[str, list[float] | None]:
    """Every fact's text and its stored vector (None: none)."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        rows = await (await conn.execute("SELECT body, embedding::text FROM facts")).fetchall()
    return {
        str(body): None if vector is None else [float(x) for x in vector.strip("[]").split(",")]
        for body, vector in rows
    }


def embedded_batches(server: ScriptedModelServer) -> list[list[str]]:
    """The texts of each embeddings request ``server`` received that embedded facts of :data:`FACTS` or their
    :data:`CONTEXTS` (not a query or the service's dimension probe)."""
    batches = [request["input"] for request in server.embedding_requests if isinstance(request, dict)]
    return [list(batch) for batch in batches if isinstance(batch, list) and set(batch) <= {*FACTS, *CONTEXTS}]


async def context_embeddings(database_url: str) -> dict[str, list[float] | None]:
    """Every fact's text and its stored contextual vector (None: none yet)."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        rows = await (await conn.execute("SELECT body, context_embedding::text FROM facts")).fetchall()
    return {
        str(body): None if vector is None else [float(x) for x in vector.strip("[]").split(",")]
        for body, vector in rows
    }


async def waiting(client: httpx.AsyncClient) -> int:
    """``facts_without_embedding`` of ``/ready`` (0 when absent)."""
    body = (await client.get("/ready")).json()
    assert body["status"] == "ready", body
    return int(body["details"].get("facts_without_embedding", 0))


def assert_embedded_by(stored: dict[str, list[float] | None], dimension: int) -> None:
    """Every fact holds the scripted model's vector of its text at ``dimension``."""
    assert set(stored) == set(FACTS)
    for text, vector in stored.items():
        assert vector == pytest.approx(embed(text, dimension), abs=1e-6), text


def assert_in_context(stored: dict[str, list[float] | None], dimension: int) -> None:
    """Every fact of :data:`FACTS` (stored in that order) holds the scripted model's vector of its contextual text
    at ``dimension`` as its contextual embedding, the first its own vector."""
    assert set(stored) == set(FACTS)
    for text, context in zip(FACTS, [FACTS[0], *CONTEXTS], strict=True):
        assert stored[text] == pytest.approx(embed(context, dimension), abs=1e-6), text


async def test_a_model_of_another_dimension_re_embeds_the_old_facts_in_the_background(memory_db: str) -> None:
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8) as model_a:
        async with client_of(embedder_env(memory_db, model_a)) as client:
            await save(client, *FACTS)
            assert (await recalled(client, MISSPELT))[0] == CELLO
    assert_embedded_by(await embeddings(memory_db), 8)

    async with ScriptedModelServer(model_name="embed-b", embedding_dimensions=32) as model_b:
        # No worker: the change is made (A's vectors cleared) and the facts wait, recalled by full text meanwhile.
        async with client_of(embedder_env(memory_db, model_b, workers="0")) as client:
            assert await waiting(client) == len(FACTS)
            assert set((await context_embeddings(memory_db)).values()) == {None}
            assert await recalled(client, "violoncello") == [CELLO]
            assert await recalled(client, MISSPELT) == []
            listed = (await client.get("/v1/jobs")).json()["jobs"]
            assert [(job["kind"], job["status"], job["session_id"]) for job in listed] == [("embed", "queued", None)]
        assert set((await embeddings(memory_db)).values()) == {None}
        async with await psycopg.AsyncConnection.connect(memory_db) as conn:
            assert (await embedding_model(conn), await embedding_dimension(conn)) == ("embed-b", 32)

        # With a worker, batches of 3 facts: two embed jobs, each one request for the facts' own and contextual
        # texts, and recall by vector works again without anyone asking.
        async with client_of(embedder_env(memory_db, model_b, workers="1", embed_batch="3")) as client:
            await eventually(lambda: _no_backlog(client), "every fact embedded by B")
            assert (await recalled(client, MISSPELT))[0] == CELLO
            assert (await client.get("/v1/jobs")).json()["jobs"] == []
        batches = embedded_batches(model_b)
        assert len(batches) == 2
        assert sorted(text for batch in batches for text in batch) == sorted([*FACTS, *CONTEXTS])
    assert_embedded_by(await embeddings(memory_db), 32)
    assert_in_context(await context_embeddings(memory_db), 32)


async def _no_backlog(client: httpx.AsyncClient) -> bool:
    return await waiting(client) == 0


async def test_a_model_of_the_same_dimension_but_another_name_re_embeds_too(memory_db: str) -> None:
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8) as model_a:
        async with client_of(embedder_env(memory_db, model_a)) as client:
            await save(client, *FACTS)
    async with ScriptedModelServer(model_name="embed-c", embedding_dimensions=8) as model_c:
        async with client_of(embedder_env(memory_db, model_c, workers="1")) as client:
            await eventually(lambda: _no_backlog(client), "every fact embedded by C")
            assert (await recalled(client, MISSPELT))[0] == CELLO
        assert sorted(text for batch in embedded_batches(model_c) for text in batch) == sorted([*FACTS, *CONTEXTS])
        async with await psycopg.AsyncConnection.connect(memory_db) as conn:
            assert (await embedding_model(conn), await embedding_dimension(conn)) == ("embed-c", 8)
        # The same model again: nothing is cleared or embedded again.
        model_c.reset()
        async with client_of(embedder_env(memory_db, model_c, workers="1")) as client:
            assert await waiting(client) == 0
        assert model_c.embedding_requests == [{"model": "embed-c", "input": ["dimension probe"]}]
    assert_embedded_by(await embeddings(memory_db), 8)
    assert_in_context(await context_embeddings(memory_db), 8)


async def test_facts_stored_while_the_model_was_unreachable_are_embedded_once_it_is_back(memory_db: str) -> None:
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8) as model_a:
        async with client_of(embedder_env(memory_db, model_a, workers="1")) as client:
            await save(client, *FACTS[1:])
            await eventually(lambda: _no_backlog(client), "the facts' contextual embeddings")
            await asyncio.to_thread(model_a.stop)  # the same server comes back on the same port below
            await save(client, CELLO)
            stored = await embeddings(memory_db)
            assert stored[CELLO] is None
            assert await waiting(client) == 1
            assert await recalled(client, "violoncello") == [CELLO]
            kinds = {job["kind"] for job in (await client.get("/v1/jobs")).json()["jobs"]}
            assert kinds == {"embed"}
            await asyncio.to_thread(model_a.start)
            await eventually(lambda: _no_backlog(client), "the fact stored while the model was away, embedded")
            assert (await recalled(client, MISSPELT))[0] == CELLO
            assert (await client.get("/v1/jobs")).json()["jobs"] == []
    assert_embedded_by(await embeddings(memory_db), 8)


async def test_a_store_from_before_model_names_keeps_its_vectors(memory_db: str) -> None:
    """A store that recorded only its dimension keeps its vectors when the model has that dimension, and takes the
    model's name; another dimension clears them."""
    async with client_of(service_env(memory_db)):
        pass  # migrated
    async with await psycopg.AsyncConnection.connect(memory_db, autocommit=True) as conn:
        await ensure_embedding_model(conn, "old", 8)
        await conn.execute(
            "INSERT INTO facts (fact_id, body, body_hash, app_name, origin, embedding) "
            "VALUES ('fact_1', 'x', 'h', 'a', 'saved', %s::vector)",
            (str(embed("x", 8)),),
        )
        await conn.execute("DELETE FROM store_meta WHERE key = 'embedding_model'")
        assert not await ensure_embedding_model(conn, "new", 8)
        assert await embedding_model(conn) == "new"
        assert not await ensure_embedding_model(conn, "new", 8)
        assert await ensure_embedding_model(conn, "new", 16)
        row = await (await conn.execute("SELECT embedding FROM facts")).fetchone()
        assert row == (None,)


@pytest.mark.slow
async def test_re_embedding_cut_by_kill_9_resumes_after_a_restart(memory_db: str, tmp_path: Path) -> None:
    """``kora memory`` as a process, killed (SIGKILL) while the re-embedding is halfway: the batches committed
    stay, the claimed one runs again once its lease has passed, and every fact ends with the new model's vector."""
    texts = [f"The user keeps notebook {n} about topic{n}." for n in range(150)]
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8) as model_a:
        async with client_of(embedder_env(memory_db, model_a)) as client:
            for start in range(0, len(texts), 10):
                await asyncio.gather(*(save(client, text) for text in texts[start : start + 10]))
    async with ScriptedModelServer(model_name="embed-b", embedding_dimensions=32) as model_b:
        env = embedder_env(memory_db, model_b, workers="1", embed_batch="1", job_lease_seconds="2")
        log = tmp_path / "memory.log"
        service = MemoryProcess(env, log)
        await asyncio.to_thread(service.start)
        try:

            async def halfway() -> int | None:
                left = sum(vector is None for vector in (await embeddings(memory_db)).values())
                return left if 0 < left < len(texts) - 10 else None

            await eventually(halfway, "some facts re-embedded, not all")
        finally:
            service.kill()
        left = sum(vector is None for vector in (await embeddings(memory_db)).values())
        assert 0 < left < len(texts), "killed halfway"
        await asyncio.to_thread(service.start)
        try:
            async with httpx.AsyncClient(base_url=service.url, headers=ADMIN, timeout=30.0) as client:
                await eventually(lambda: _no_backlog(client), "every fact embedded after the restart")
                assert (await client.get("/v1/jobs", params={"status": "failed"})).json()["jobs"] == []
        finally:
            service.kill()
    stored = await embeddings(memory_db)
    assert set(stored) == set(texts)
    for text, vector in stored.items():
        assert vector == pytest.approx(embed(text, 32), abs=1e-6), text


async def scores(client: httpx.AsyncClient, query: str) -> dict[str, float]:
    """The recalled facts' texts and scores for ``query`` at user scope."""
    body = {"query": query, "scope": "user", "app_name": APP, "user_id": USER, "top_k": 5}
    response = await client.post("/v1/recall", json=body)
    assert response.status_code == 200, response.text
    return {hit["text"]: hit["score"] for hit in response.json()["hits"]}


async def test_a_reply_is_lifted_by_its_contextual_embedding(memory_db: str) -> None:
    """A reply sharing no word with the query scores higher once the embed job has embedded it after the question
    it answers (its contextual embedding); until then its cosine is its own embedding's alone."""
    question, reply = "Did you adopt the puppy from the shelter?", "Yes, we brought her home last Friday."
    query = "When did they adopt the shelter puppy?"
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=64) as model:
        async with client_of(embedder_env(memory_db, model, workers="0", score_threshold="0")) as client:
            await save(client, question, reply)
            assert await waiting(client) == 2  # both have their own embedding, neither its contextual one yet
            before = await scores(client, query)
        async with client_of(embedder_env(memory_db, model, workers="1", score_threshold="0")) as client:
            await eventually(lambda: _no_backlog(client), "the contextual embeddings")
            after = await scores(client, query)
        assert [request["input"] for request in model.embedding_requests if request["input"] != [query]][-1] == [
            context_text(question, reply)
        ]
    assert after[reply] > before.get(reply, 0.0)
    assert after[question] == pytest.approx(before[question], abs=1e-4)  # the first fact: its own vector stands


async def test_a_store_from_before_contextual_embeddings_gets_them_without_re_embedding_its_facts(
    memory_db: str,
) -> None:
    """A store at schema version 7 (facts with their own embeddings, no contextual ones) is migrated at start-up,
    recalls by its own vectors meanwhile, and the embed jobs then embed each fact's contextual text only: no own
    vector is computed again or changed."""
    async with await psycopg.AsyncConnection.connect(memory_db, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE kora_schema_version "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, migration in enumerate(MIGRATIONS[:7], start=1):
            await conn.execute(psycopg.sql.SQL(migration))
            await conn.execute("INSERT INTO kora_schema_version (version) VALUES (%s)", (version,))
        await conn.execute("ALTER TABLE facts ALTER COLUMN embedding TYPE vector(8)")
        await conn.execute(
            "INSERT INTO store_meta (key, value) VALUES ('embedding_dimension', '8'), ('embedding_model', 'embed-a')"
        )
        for n, text in enumerate(FACTS):
            await conn.execute(
                "INSERT INTO facts (fact_id, body, body_hash, app_name, user_id, session_id, origin, created_at, "
                "embedding) VALUES (%s, %s, %s, %s, %s, 's1', 'saved', now() + %s * interval '1 second', %s::vector)",
                (f"fact_{n}", text, f"hash_{n}", APP, USER, n, str(embed(text, 8))),
            )
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8) as model_a:
        async with client_of(embedder_env(memory_db, model_a, workers="0")) as client:
            assert await waiting(client) == len(FACTS)
            assert (await recalled(client, MISSPELT))[0] == CELLO
        async with client_of(embedder_env(memory_db, model_a, workers="1")) as client:
            await eventually(lambda: _no_backlog(client), "every fact's contextual embedding")
            assert (await recalled(client, MISSPELT))[0] == CELLO
        assert sorted(text for batch in embedded_batches(model_a) for text in batch) == sorted(CONTEXTS)
    assert_embedded_by(await embeddings(memory_db), 8)
    assert_in_context(await context_embeddings(memory_db), 8)
    async with await psycopg.AsyncConnection.connect(memory_db) as conn:
        row = await (await conn.execute("SELECT max(version) FROM kora_schema_version")).fetchone()
        assert row == (len(MIGRATIONS),)


def fitted(text: str, keep_end: bool, max_chars: int) -> str:
    """``text`` as the ``embed`` jobs give it to a model that takes at most ``max_chars`` characters: halved, its
    start (or its end, ``keep_end``) kept, until it fits."""
    while len(text) > max_chars:
        cut = len(text) // 2
        text = text[-cut:] if keep_end else text[:cut]
    return text


async def test_a_fact_too_long_for_the_model_is_embedded_cut_and_holds_up_no_other(memory_db: str) -> None:
    """An embedding server that does not truncate refuses a text over its context length with a 400: the fact is
    embedded cut to what the model takes (its own text's start, its contextual text's end), and the facts queued
    after it are embedded too, instead of every job waiting on the same refused batch."""
    limit = 300
    long_fact = "The user keeps a diary. " + " ".join(f"Day {day}: walked by the river." for day in range(40))
    facts = [FACTS[1], long_fact, FACTS[2], FACTS[3]]
    async with ScriptedModelServer(model_name="embed-a", embedding_dimensions=8, embedding_max_chars=limit) as model:
        async with client_of(embedder_env(memory_db, model, workers="1")) as client:
            await save(client, *facts)
            await eventually(lambda: _no_backlog(client), "every fact's vectors, the long one's cut")
            assert (await client.get("/v1/jobs")).json()["jobs"] == []
            assert (await recalled(client, "diary"))[0] == long_fact
        refused = [
            request
            for request in model.embedding_requests
            if isinstance(request, dict) and any(len(text) > limit for text in request["input"])
        ]
        assert refused, "the model was never asked for the long text whole"
    own = await embeddings(memory_db)
    contextual = await context_embeddings(memory_db)
    assert len(long_fact) > limit
    for text in facts:
        assert own[text] == pytest.approx(embed(fitted(text, False, limit), 8), abs=1e-6), text
    for before, text in itertools.pairwise(facts):
        expected = embed(fitted(context_text(before, text), True, limit), 8)
        assert contextual[text] == pytest.approx(expected, abs=1e-6), text
