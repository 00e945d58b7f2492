"""OpenAI error bodies, both ways: what Kora writes for a :class:`~kora.core.errors.KoraError` and what its clients
(the agent's model client, delegation, the remote memory) read from any OpenAI-compatible server."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core.errors import RequestError
from kora.core.openai_wire import ErrorObject, error_body, parse_error_body

pytestmark = pytest.mark.unit


def test_what_kora_writes_it_reads_back():
    written = error_body(RequestError("Invalid request: model: Field required", param="model"))
    assert parse_error_body(json.dumps(written)) == ErrorObject(
        "Invalid request: model: Field required", "invalid_request_error", "invalid_request", "model"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b'{"error": {"message": "slow down", "type": "rate_limit_error", "code": null}}',
            ErrorObject("slow down", "rate_limit_error"),
        ),
        (
            b'{"object": "error", "message": "bad model", "type": "NotFoundError", "code": 404}',
            ErrorObject("bad model", "NotFoundError", "404"),
        ),
        (b'{"error": {"message": 42}}', ErrorObject("42")),
    ],
)
def test_openai_and_bare_error_objects_are_read(content: bytes, expected: ErrorObject):
    assert parse_error_body(content) == expected


@pytest.mark.parametrize(
    "content",
    [b"", b"Bad Gateway", b"<html>502</html>", b"[1, 2]", b'{"error": "text"}', b'{"detail": "x"}', b"[" * 100_000],
)
def test_anything_else_is_none_for_the_caller_to_describe(content: bytes):
    assert parse_error_body(content) is None


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_are_none(content: bytes):
    parsed = parse_error_body(content)
    assert parsed is None or isinstance(parsed.message, str)
