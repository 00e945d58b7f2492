"""OpenAI's embeddings wire format as Kora's servers (the hosted and the scripted model) read and write it, and
as the memory service reads the answers."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from kora.core.errors import InvalidJSON, RequestError
from kora.core.openai_wire.embeddings import (
    MAX_INPUT_CHARS,
    MAX_INPUTS,
    EmbeddingResponse,
    embedding_request,
    embedding_response_body,
    float32_base64,
    parse_embedding_request,
)

pytestmark = pytest.mark.unit


def parse(body: object):
    return parse_embedding_request(json.dumps(body).encode())


def test_a_string_or_a_list_of_strings_is_a_list_of_texts():
    assert parse({"model": "m", "input": "one"}).texts == ["one"]
    assert parse({"model": "m", "input": ["one", "two"]}).texts == ["one", "two"]


def test_a_server_default_model_stands_for_an_absent_or_null_one():
    assert embedding_request({"input": "x"}, default_model="scripted").model == "scripted"
    assert embedding_request({"input": "x", "model": None}, default_model="scripted").model == "scripted"
    assert embedding_request({"input": "x", "model": "emb"}, default_model="scripted").model == "emb"
    with pytest.raises(RequestError, match="model:"):
        embedding_request({"input": "x", "model": ""}, default_model="scripted")


def test_a_null_encoding_format_is_float():
    assert parse({"model": "m", "input": "x", "encoding_format": None}).encoding_format == "float"


def test_defaults_and_ignored_fields():
    request = parse({"model": "m", "input": "x", "user": "u-1", "something_new": True})
    assert request.encoding_format == "float"
    assert request.dimensions is None
    assert parse({"model": "m", "input": "x", "encoding_format": "base64", "dimensions": 384}).dimensions == 384


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"input": "x"}, "Invalid request: model: Field required"),
        ({"model": "", "input": "x"}, "Invalid request: model:"),
        ({"model": "m"}, "Invalid request: input: Field required"),
        ({"model": "m", "input": []}, "input: must not be an empty array"),
        ({"model": "m", "input": ""}, "input: must not contain an empty string"),
        ({"model": "m", "input": ["a", ""]}, "input: must not contain an empty string"),
        ({"model": "m", "input": [1, 2, 3]}, "input: must be a string or an array of strings (token-id arrays"),
        ({"model": "m", "input": [[1, 2]]}, "token-id arrays are not accepted"),
        ({"model": "m", "input": None}, "input: must be a string or an array of strings"),
        ({"model": "m", "input": ["a"] * (MAX_INPUTS + 1)}, f"at most {MAX_INPUTS} strings per request, got 2049"),
        ({"model": "m", "input": "x", "encoding_format": "int8"}, "Invalid request: encoding_format:"),
        ({"model": "m", "input": "x", "dimensions": 0}, "Invalid request: dimensions:"),
        ({"model": "m", "input": "x", "dimensions": True}, "Invalid request: dimensions:"),
        ({"model": "m", "input": "x", "dimensions": 8.0}, "Invalid request: dimensions:"),
        ({"model": 3, "input": "x"}, "Invalid request: model:"),
        ({"model": "m", "input": ["a", None]}, "input: must be a string or an array of strings"),
        ({"model": "m", "input": 42}, "input: must be a string or an array of strings"),
        ({"model": "m", "input": {"text": "a"}}, "input: must be a string or an array of strings"),
        ({"model": "m", "input": "x" * (MAX_INPUT_CHARS + 1)}, f"at most {MAX_INPUT_CHARS} characters per string"),
    ],
)
def test_malformed_requests_are_request_errors_naming_the_field(body: object, fragment: str):
    with pytest.raises(RequestError) as caught:
        parse(body)
    assert caught.value.status == 400
    assert fragment in caught.value.message


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe", b"[" * 100_000])
def test_a_body_that_is_not_json_is_invalid_json(raw: bytes):
    with pytest.raises(InvalidJSON, match="not valid JSON"):
        parse_embedding_request(raw)


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(RequestError, match="must be a JSON object") as caught:
        parse_embedding_request(b"[1, 2]")
    assert caught.value.code == "invalid_json"


def test_base64_is_little_endian_float32():
    vector = [0.5, -1.25, 3.0]
    raw = base64.b64decode(float32_base64(vector))
    assert struct.unpack("<3f", raw) == (0.5, -1.25, 3.0)


def test_response_body_has_openai_shape():
    body = embedding_response_body([[0.6, 0.8], [1.0, 0.0]], "all-MiniLM-L6-v2", 7)
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.6, 0.8]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "all-MiniLM-L6-v2",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }


def test_response_body_in_base64():
    body = embedding_response_body([[0.5, 0.25]], "m", 1, "base64")
    data = body["data"]
    assert isinstance(data, list)
    first = data[0]
    assert isinstance(first, dict)
    assert first["embedding"] == float32_base64([0.5, 0.25])


def test_a_client_reads_back_what_a_server_writes():
    body = embedding_response_body([[0.6, 0.8], [1.0, 0.0]], "m", 2)
    read = EmbeddingResponse.model_validate_json(json.dumps(body))
    assert [(item.index, item.embedding) for item in read.data] == [(0, [0.6, 0.8]), (1, [1.0, 0.0])]
