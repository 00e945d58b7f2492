"""The in-process embedder (:class:`kora.hosted.embedder.MiniLMEmbedder`) against sentence-transformers' own
``encode``: the traced transformer and the batching around it give encode's unit vectors and its token count,
for texts alone, padded in one batch, over one batch and past the model's 256 word pieces; a model whose
configuration names a default prompt gets it, as encode gives it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kora.hosted.embedder import BATCH_SIZE, MiniLMEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.embeddings]

#: Largest difference from encode allowed per coordinate (float32 rounding of the same sums is ~1e-7).
TOLERANCE = 1e-5

TEXTS = [
    "",
    "x",
    "Where does Emma work?",
    "The user's sister Emma moved to Lyon in May and works as a nurse at the city hospital.",
    " ".join(["memory"] * 400),  # past 256 word pieces: truncated alike
    *[f"fact number {n}: the meeting moved to room {n % 7}" for n in range(BATCH_SIZE + 9)],  # over one batch
]


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder.load()


def assert_close(got: Sequence[Sequence[float]], expected: Sequence[Sequence[float]]) -> None:
    assert len(got) == len(expected)
    worst = max(abs(a - b) for g, e in zip(got, expected, strict=True) for a, b in zip(g, e, strict=True))
    assert worst <= TOLERANCE, worst


def test_the_traced_embedder_gives_encodes_vectors_and_token_count(embedder: MiniLMEmbedder) -> None:
    model = embedder._model
    assert embedder._transformer is not None  # the packaged model traces; else this would test the eager path
    for texts in (TEXTS, TEXTS[2:3], TEXTS[:4]):
        expected = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True).tolist()
        got = embedder.embed(texts)
        assert_close(got.vectors, expected)
        assert got.tokens == int(model.preprocess(list(texts))["attention_mask"].sum())


def test_a_models_default_prompt_is_put_before_each_text_as_encode_does(embedder: MiniLMEmbedder) -> None:
    model = embedder._model
    model.prompts, model.default_prompt_name = {"query": "query: "}, "query"
    try:
        prompted = MiniLMEmbedder(model)  # what load makes of a model whose configuration names the prompt
        texts = TEXTS[1:5]
        expected = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True).tolist()
        assert_close(prompted.embed(texts).vectors, expected)
        unprompted = model.encode(list(texts), prompt="", normalize_embeddings=True, convert_to_numpy=True).tolist()
        assert max(abs(a - b) for a, b in zip(expected[2], unprompted[2], strict=True)) > 1e-3  # the prompt counts
    finally:
        model.prompts, model.default_prompt_name = {}, None
