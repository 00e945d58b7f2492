"""What the memory service asks of the scripted model, over real HTTP on 127.0.0.1 with the ``openai``
client: embeddings (similarity, determinism across processes, bad input) and structured output (rules on
the response format, the default facts, conflicts and summaries)."""

import json
import math
import os
import signal
import subprocess
import sys

import httpx
import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kora.scripted import load_script
from tests.support.memory import EXTRACTED_FACTS_FORMAT
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

CONFLICTS_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "fact_conflicts",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"contradicted": {"type": "array", "items": {"type": "string"}}},
            "required": ["contradicted"],
            "additionalProperties": False,
        },
    },
}
EXTRACT_SYSTEM = "Extract durable facts about the user from the conversation. Answer as JSON."


@pytest.fixture(scope="module")
def server():
    with ScriptedModelServer() as running:
        yield running


@pytest.fixture
def client(server):
    server.reset()
    return server.openai_client(max_retries=0)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def extract(client, turn):
    messages = [{"role": "system", "content": EXTRACT_SYSTEM}, {"role": "user", "content": turn}]
    answer = client.chat.completions.create(model="summary", messages=messages, response_format=EXTRACTED_FACTS_FORMAT)
    return answer.choices[0].message.content


# -- embeddings ----------------------------------------------------------------------------------


def test_openai_client_gets_one_unit_vector_per_input_with_usage(client, server):
    texts = ["I live in Paris", "Where do I live?", "The quarterly report is due on Friday"]
    response = client.embeddings.create(model="embedder", input=texts)  # the client asks for base64
    assert response.model == "embedder"
    assert [item.index for item in response.data] == [0, 1, 2]
    vectors = [item.embedding for item in response.data]
    assert all(len(vector) == 384 for vector in vectors)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-5) for v in vectors)
    assert response.usage.prompt_tokens == response.usage.total_tokens == 4 + 4 + 7
    assert cosine(vectors[0], vectors[1]) > 0.5  # shared word: live
    assert abs(cosine(vectors[0], vectors[2])) < 0.15  # nothing in common
    assert server.embedding_requests[0]["encoding_format"] == "base64"
    assert "embedder" in [model.id for model in client.models.list()]


def test_float_vectors_match_base64_ones_and_dimensions_is_honoured(client):
    as_float = client.embeddings.create(model="e", input="my dog is called Rex", encoding_format="float")
    as_base64 = client.embeddings.create(model="e", input="my dog is called Rex")
    assert as_float.data[0].embedding == pytest.approx(as_base64.data[0].embedding, abs=1e-6)
    short = client.embeddings.create(model="e", input="my dog is called Rex", dimensions=32, encoding_format="float")
    assert len(short.data[0].embedding) == 32


def test_the_server_default_dimensions():
    with ScriptedModelServer(embedding_dimensions=48) as small:
        response = small.openai_client(max_retries=0).embeddings.create(model="e", input=["a", "b"])
    assert [len(item.embedding) for item in response.data] == [48, 48]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"input": []}, "empty array"),
        ({"input": [""]}, "empty string"),
        ({"input": ["x"] * 2049}, "at most 2048"),
        ({"input": "word " * 10_000}, "characters"),
        ({"input": [[1, 2, 3]]}, "token-id"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ],
)
def test_bad_input_is_a_400_openai_error(client, kwargs, words):
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="e", **kwargs)
    assert caught.value.status_code == 400
    assert caught.value.body["type"] == "invalid_request_error"
    assert words in caught.value.body["message"]


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"{nope", "invalid_json"), (b"[" * 100_000, "invalid_json"), (b'{"input": 3}', "invalid_request")],
)
def test_malformed_bodies_are_400s(server, content, code):
    response = httpx.post(f"{server.url}/embeddings", content=content)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_the_same_text_gets_the_same_vector_in_another_process(server):
    """``kora model`` in a subprocess with another hash seed answers bit for bit what this process does."""
    texts = ["I live in Paris", "Ünïcödé façade ☕", "?!"]
    here = httpx.post(f"{server.url}/embeddings", json={"input": texts, "dimensions": 64}).json()
    process = subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "model", "--port", "0", "--embedding-dimensions", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "12345"},
    )
    try:
        url = process.stdout.readline().rsplit(" ", 1)[-1].strip()
        there = httpx.post(f"{url}/embeddings", json={"input": texts}).json()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        process.stdout.close()
        process.stderr.close()
    assert [item["embedding"] for item in there["data"]] == [item["embedding"] for item in here["data"]]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)
hostile_text = st.text(
    st.characters(categories=["Cs"])  # lone surrogates: valid in JSON text as escapes
    | st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs"])  # control and format characters, separators
    | st.characters(),
    max_size=40,
)
hostile_bodies = st.one_of(
    st.fixed_dictionaries(
        {
            "input": st.one_of(
                hostile_text,
                st.lists(hostile_text, min_size=1, max_size=5),
                st.lists(hostile_text | json_values, max_size=5),
                json_values,
            )
        },
        optional={
            "model": hostile_text | json_values,
            "dimensions": st.integers(min_value=-10, max_value=10_000) | json_values,
            "encoding_format": st.sampled_from(["float", "base64"]) | hostile_text | json_values,
        },
    ),
    json_values,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=hostile_bodies)
def test_hostile_embedding_requests_get_answers_or_4xx_never_5xx(server, body):
    response = httpx.post(f"{server.url}/embeddings", content=json.dumps(body).encode())
    assert response.status_code in (200, 400), response.text
    payload = response.json()
    if response.status_code == 400:
        assert payload["error"]["type"] == "invalid_request_error"
        assert payload["error"]["message"]
    else:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        assert [item["index"] for item in payload["data"]] == list(range(len(inputs)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(hostile_text.filter(bool), min_size=1, max_size=4), model=hostile_text.filter(bool))
@example(texts=["\ud800"], model="\ud800")  # a lone surrogate: valid JSON, no valid UTF-8
def test_any_characters_in_valid_requests_get_vectors(server, texts, model):
    """Surrogates, control characters and the like in the texts or the model name: still a 200."""
    body = {"input": texts, "model": model, "encoding_format": "float"}
    response = httpx.post(f"{server.url}/embeddings", content=json.dumps(body).encode())
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["model"] == model
    assert [len(item["embedding"]) for item in payload["data"]] == [384] * len(texts)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64))
def test_arbitrary_bytes_get_a_4xx(server, content):
    assert httpx.post(f"{server.url}/embeddings", content=content).status_code == 400


# -- structured output ---------------------------------------------------------------------------


def test_rules_script_fact_extraction_including_an_invalid_answer(client, server):
    server.load_script(
        load_script(
            [
                {"when": {"response_format": "extracted_facts", "user_matches": "Paris"}, "reply": "{oops", "times": 1},
                {
                    "when": {"response_format": "extracted_facts", "user_matches": "Paris"},
                    "reply": {"json": {"facts": ["The user lives in Paris"]}},
                },
            ]
        )
    )
    turn = "user: I moved to Paris last year\nassistant: How exciting!"
    first = extract(client, turn)
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)
    assert json.loads(extract(client, turn)) == {"facts": ["The user lives in Paris"]}
    # A turn the rules do not match gets the default facts.
    assert json.loads(extract(client, "user: I have a dog called Rex")) == {"facts": ["I have a dog called Rex"]}
    assert server.requests[0]["response_format"] == EXTRACTED_FACTS_FORMAT


async def test_default_facts_conflicts_and_json_object_with_the_async_client(server):
    server.reset()
    client = server.async_openai_client(max_retries=0)
    turn = "user: Hello! I'm allergic to peanuts. What should I cook?\nassistant: I suggest a curry.\nuser: ok"
    facts = await client.chat.completions.create(
        model="summary", messages=[{"role": "user", "content": turn}], response_format=EXTRACTED_FACTS_FORMAT
    )
    assert json.loads(facts.choices[0].message.content) == {"facts": ["I'm allergic to peanuts."]}
    assert facts.choices[0].finish_reason == "stop"
    conflicts = await client.chat.completions.create(
        model="summary",
        messages=[{"role": "user", "content": "new: I live in Berlin\nf-1: I live in Paris"}],
        response_format=CONFLICTS_FORMAT,
    )
    assert json.loads(conflicts.choices[0].message.content) == {"contradicted": []}
    anything = await client.chat.completions.create(
        model="summary", messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
    )
    assert json.loads(anything.choices[0].message.content) == {}


def test_an_unscripted_schema_is_a_400_naming_it(client):
    other = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="s", messages=[{"role": "user", "content": "x"}], response_format=other)
    assert caught.value.body["code"] == "no_scripted_rule"
    assert "invoice" in caught.value.body["message"]


@pytest.mark.parametrize(
    "response_format",
    [{"type": "xml"}, "json", {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"name": ""}}],
)
def test_malformed_response_formats_are_400s(server, response_format):
    body = {"model": "s", "messages": [{"role": "user", "content": "x"}], "response_format": response_format}
    response = httpx.post(f"{server.url}/chat/completions", json=body)
    assert response.status_code == 400
    assert "response_format" in response.json()["error"]["message"]


async def test_streamed_structured_output_and_the_default_summary(server):
    server.reset()
    client = server.async_openai_client(max_retries=0)
    stream = await client.chat.completions.create(
        model="s",
        messages=[{"role": "user", "content": "user: my name is Ada"}],
        response_format=EXTRACTED_FACTS_FORMAT,
        stream=True,
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert json.loads(text) == {"facts": ["my name is Ada"]}

    summary = await client.chat.completions.create(
        model="s",
        messages=[
            {"role": "system", "content": "Summarize the conversation so far in at most 400 tokens."},
            {"role": "user", "content": "user: I live in Paris\nassistant: Lovely city."},
        ],
    )
    assert summary.choices[0].message.content == "Summary:\n- user: I live in Paris\n- assistant: Lovely city."


def test_a_lone_surrogate_is_echoed_not_a_crash(server):
    server.reset()
    body = {"model": "s", "messages": [{"role": "user", "content": "a\ud800b"}]}
    response = httpx.post(f"{server.url}/chat/completions", content=json.dumps(body))  # "\ud800" escaped: valid JSON
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "You said: a\ud800b"
    assert httpx.get(f"{server.root_url}/_script/requests").json()["requests"] == [body]
