"""The hosted model's HTTP face over real HTTP, with a stand-in embedder (the model itself is exercised in
test_hosted_minilm.py, which needs the embeddings extra): probes while loading and after a failed load, OpenAI's
request checks and error bodies, and the openai client's base64 default."""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence

import httpx
import openai
import pytest

from kora.hosted.app import Embedder, create_hosted_app
from kora.hosted.embedder import Embeddings
from kora.resources.hosted_models import MINILM
from tests.support.eventually import eventually
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

#: Generous bound for a state change that happens within milliseconds; never a measured duration.
WITHIN_SECONDS = 10.0


class StandInEmbedder:
    """Deterministic unit vectors from a hash of each text; ``tokens`` counts words."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Embeddings:
        self.calls.append(list(texts))
        vectors = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            raw = [byte - 127.5 for byte in digest[:8]]
            norm = math.sqrt(sum(value * value for value in raw))
            vectors.append([value / norm for value in raw])
        return Embeddings(vectors, sum(len(text.split()) for text in texts))


def serve(load: Callable[[], Embedder], **callbacks) -> ThreadedServer:
    return ThreadedServer(create_hosted_app(MINILM, load, **callbacks), name="hosted", lifespan="on")


@pytest.fixture
def embedder() -> StandInEmbedder:
    return StandInEmbedder()


@pytest.fixture
def server(embedder: StandInEmbedder) -> Iterator[ThreadedServer]:
    with serve(lambda: embedder) as running:
        eventually(lambda: httpx.get(running.root_url + "/ready").status_code == 200, "/ready")
        yield running


def test_health_answers_while_the_model_loads_and_ready_waits_for_it(embedder: StandInEmbedder):
    release = threading.Event()
    loaded: list[float] = []

    def slow_load() -> Embedder:
        release.wait(WITHIN_SECONDS)
        return embedder

    with serve(slow_load, on_loaded=loaded.append) as running:
        base = running.root_url
        assert httpx.get(base + "/health").json() == {"status": "ok"}
        ready = httpx.get(base + "/ready")
        assert (ready.status_code, ready.json()) == (
            503,
            {
                "status": "starting",
                "reasons": [f"the model {MINILM.name} is still loading"],
                "details": {"model": MINILM.name},
            },
        )
        early = httpx.post(base + "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "hi"})
        assert early.status_code == 503
        assert early.json()["error"]["code"] == "model_loading"
        assert embedder.calls == []
        release.set()
        eventually(lambda: httpx.get(base + "/ready").status_code == 200, "/ready after the load")
        assert httpx.get(base + "/ready").json() == {"status": "ready", "details": {"model": MINILM.name}}
        assert httpx.post(base + "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "hi"}).status_code == 200
        eventually(lambda: len(loaded) == 1, "the on_loaded call")
        assert loaded[0] >= 0


def test_a_failed_load_is_reported_by_ready_requests_and_the_callback():
    failures: list[str] = []

    def broken_load() -> Embedder:
        raise RuntimeError("weights unreadable\nsecond line")

    with serve(broken_load, on_load_failure=failures.append) as running:
        base = running.root_url
        eventually(lambda: httpx.get(base + "/ready").json()["status"] == "failed", "the failure")
        ready = httpx.get(base + "/ready")
        assert ready.status_code == 503
        assert ready.json()["reasons"] == [f"the model {MINILM.name} failed to load: RuntimeError: weights unreadable"]
        assert httpx.get(base + "/health").status_code == 200
        answer = httpx.post(base + "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "hi"})
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "model_failed"
        assert "RuntimeError: weights unreadable" in answer.json()["error"]["message"]
        eventually(lambda: failures == ["RuntimeError: weights unreadable"], "the on_load_failure call")


def test_models_lists_every_name(server: ThreadedServer):
    body = httpx.get(server.root_url + "/v1/models").json()
    assert body["object"] == "list"
    assert [entry["id"] for entry in body["data"]] == list(MINILM.names)
    assert {entry["owned_by"] for entry in body["data"]} == {"kora-hosted"}


def test_embeddings_in_input_order_with_usage(server: ThreadedServer, embedder: StandInEmbedder):
    texts = ["first text", "second one here", "third"]
    body = httpx.post(server.root_url + "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": texts}).json()
    expected = embedder.embed(texts)
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert [item["embedding"] for item in body["data"]] == expected.vectors
    assert {item["object"] for item in body["data"]} == {"embedding"}
    assert body["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    assert body["model"] == "all-MiniLM-L6-v2"


def test_a_lone_surrogate_reaches_the_model_as_a_replacement_character(
    server: ThreadedServer, embedder: StandInEmbedder
):
    # Valid JSON, no valid UTF-8: the tokenizer refuses such a string (a 500 before), a model reads U+FFFD.
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": ["a\ud800b"]}).encode()
    response = httpx.post(server.root_url + "/v1/embeddings", content=body)
    assert response.status_code == 200, response.text
    assert embedder.calls[-1] == ["a\ufffdb"]


def test_the_openai_client_decodes_its_default_base64_to_the_float_vectors(server: ThreadedServer):
    client = openai.OpenAI(base_url=server.root_url + "/v1", api_key="unused", max_retries=0)
    texts = ["a sentence", "another sentence"]
    as_base64 = client.embeddings.create(model="sentence-transformers/all-MiniLM-L6-v2", input=texts)
    as_floats = client.embeddings.create(
        model="sentence-transformers/all-MiniLM-L6-v2", input=texts, encoding_format="float"
    )
    assert len(as_base64.data) == len(as_floats.data) == 2
    for decoded, sent in zip(as_base64.data, as_floats.data, strict=True):
        # float32 on the wire: equal to the float vector to float32 precision.
        assert decoded.embedding == pytest.approx(sent.embedding, abs=1e-7)
    assert as_base64.model == "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("body", "status", "code", "fragment"),
    [
        (b"{not json", 400, "invalid_json", "Request body is not valid JSON"),
        ({"input": "x"}, 400, "invalid_request", "model: Field required"),
        ({"model": "all-MiniLM-L6-v2", "input": []}, 400, "invalid_request", "input: must not be an empty array"),
        ({"model": "all-MiniLM-L6-v2", "input": [101, 2023]}, 400, "invalid_request", "token-id arrays"),
        (
            {"model": "all-MiniLM-L6-v2", "input": "x", "encoding_format": "int8"},
            400,
            "invalid_request",
            "encoding_format",
        ),
        ({"model": "all-MiniLM-L6-v2", "input": "x", "dimensions": 128}, 400, "invalid_dimensions", "produces 384"),
        ({"model": "text-embedding-3-small", "input": "x"}, 404, "model_not_found", "'text-embedding-3-small'"),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    server: ThreadedServer, embedder: StandInEmbedder, body: object, status: int, code: str, fragment: str
):
    url = server.root_url + "/v1/embeddings"
    answer = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert fragment in error["message"]
    assert embedder.calls == [], "a bad request never reaches the model"


def test_the_openai_client_raises_its_own_errors_for_bad_requests(server: ThreadedServer):
    client = openai.OpenAI(base_url=server.root_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="must not be an empty array"):
        client.embeddings.create(model="all-MiniLM-L6-v2", input=[])
    with pytest.raises(openai.NotFoundError, match="does not exist here"):
        client.embeddings.create(model="nomic-embed-text", input="x")


def test_embeddings_is_post_only(server: ThreadedServer):
    assert httpx.get(server.root_url + "/v1/embeddings").status_code == 405
