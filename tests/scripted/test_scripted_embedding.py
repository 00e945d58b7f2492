"""The scripted model's embeddings: vectors (length, determinism, similarity) and its ``/v1/embeddings`` answers
(requests are read by :mod:`kora.core.openai_wire.embeddings`, tested in ``test_openai_wire_embeddings.py``)."""

import base64
import math
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core.errors import RequestError
from kora.scripted import ScriptedModel, embed
from kora.scripted.embedding import DEFAULT_DIMENSIONS, MAX_DIMENSIONS

pytestmark = pytest.mark.unit


def cosine(a, b):
    return sum(x * y for x, y in zip(embed(a), embed(b), strict=True))


# -- vectors -------------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=200), st.integers(min_value=1, max_value=64))
def test_every_vector_has_unit_length_and_the_asked_dimensions(text, dimensions):
    vector = embed(text, dimensions)
    assert len(vector) == dimensions
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-9)


def test_the_default_is_384_dimensions_and_the_same_text_gives_the_same_vector():
    assert len(embed("I live in Paris")) == DEFAULT_DIMENSIONS == 384
    assert embed("I live in Paris") == embed("I live in Paris")
    assert embed("I LIVE in Paris!") == embed("i live in paris")  # case and punctuation do not count


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I live in Paris", "Where do I live?"),
        ("My favourite colour is blue", "what is my favourite colour"),
        ("The user lives in Paris", "user living in paris"),  # trigrams: live / lives / living
    ],
)
def test_texts_sharing_words_are_similar(a, b):
    assert cosine(a, b) > 0.4


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I like cats", "The weather is nice today"),
        ("I am allergic to peanuts", "Paris is the capital of France"),
        ("I live in Paris", "I moved to Berlin"),  # only function words in common
    ],
)
def test_unrelated_texts_are_close_to_orthogonal(a, b):
    assert abs(cosine(a, b)) < 0.15


def test_texts_of_function_words_or_punctuation_only_still_get_distinct_vectors():
    assert cosine("what is it", "what is it") == pytest.approx(1.0)
    assert cosine("what is it", "who are you") < 0.5
    assert cosine("?!", "...") < 0.5
    assert len({tuple(embed(text, 32)) for text in ("   ", "?!", "\ud800", "\x00")}) == 4


def test_embed_rejects_non_positive_dimensions():
    with pytest.raises(ValueError, match="positive"):
        embed("x", 0)


# -- answers -------------------------------------------------------------------------------------


def test_response_shape_usage_and_base64_vectors():
    model = ScriptedModel()
    response = model.embeddings({"input": ["one two", "three"], "model": "emb", "dimensions": 8})
    assert response["object"] == "list"
    assert response["model"] == "emb"
    assert response["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert [(item["object"], item["index"]) for item in response["data"]] == [("embedding", 0), ("embedding", 1)]
    assert response["data"][0]["embedding"] == embed("one two", 8)

    encoded = model.embeddings({"input": "one two", "encoding_format": "base64", "dimensions": 8})
    decoded = array("f", base64.b64decode(encoded["data"][0]["embedding"])).tolist()  # little-endian float32
    assert decoded == pytest.approx(embed("one two", 8), abs=1e-6)


def test_dimensions_beyond_the_largest_served_are_refused_naming_the_field():
    with pytest.raises(RequestError, match=f"dimensions: at most {MAX_DIMENSIONS}"):
        ScriptedModel().embeddings({"input": "x", "dimensions": MAX_DIMENSIONS + 1})


def test_the_model_uses_its_dimensions_records_requests_and_lists_the_name():
    model = ScriptedModel(embedding_dimensions=16, max_recorded=2)
    assert len(model.embeddings({"input": "x", "model": "emb"})["data"][0]["embedding"]) == 16
    assert len(model.embeddings({"input": "x", "dimensions": 4})["data"][0]["embedding"]) == 4
    with pytest.raises(RequestError):
        model.embeddings({"input": []})
    assert model.embedding_requests == [{"input": "x", "dimensions": 4}, {"input": []}]  # bad ones too, capped
    assert model.model_names == ["scripted", "emb"]
    assert model.requests == []  # chat records stay apart
    model.reset()
    assert model.embedding_requests == []
    with pytest.raises(ValueError, match="positive"):
        ScriptedModel(embedding_dimensions=0)
