"""The streamed chat chunks Kora writes (:class:`~kora.core.openai_wire.ChunkWriter`): the role chunk and a content
delta written by their own paths are byte for byte the general chunk of that delta, for any text (non-ASCII, lone
surrogates, quotes and control characters included), with and without the usage field."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core.openai_wire import ChunkWriter

pytestmark = pytest.mark.unit


@given(text=st.text(st.characters(codec=None)), include_usage=st.booleans(), model=st.text(max_size=20))
def test_a_content_chunk_is_the_general_chunk_of_its_delta(text: str, include_usage: bool, model: str) -> None:
    writer = ChunkWriter("chatcmpl-1", model, 1_700_000_000, include_usage=include_usage)
    assert writer.content(text) == writer.chunk({"content": text})


@given(include_usage=st.booleans(), model=st.text(max_size=20))
def test_the_role_chunk_is_the_general_chunk_of_its_delta(include_usage: bool, model: str) -> None:
    writer = ChunkWriter("chatcmpl-1", model, 1_700_000_000, include_usage=include_usage)
    assert writer.role() == writer.chunk({"role": "assistant", "content": ""})


def test_a_content_chunk_is_one_sse_event_of_openai_s_shape() -> None:
    event = ChunkWriter("chatcmpl-1", "m", 7, include_usage=True).content('say "hi"\n')
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    assert json.loads(event[len(b"data: ") :]) == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": 'say "hi"\n'}, "logprobs": None, "finish_reason": None}],
        "usage": None,
    }
