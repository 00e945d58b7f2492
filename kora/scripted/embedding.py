"""Deterministic text embeddings for the scripted model.

No model and no weights: a text's vector is built by feature hashing, so texts that share words (or
pieces of words) point the same way and unrelated texts are close to orthogonal. That is enough for tests
of semantic recall and for the offline demo; it knows nothing of synonyms ("car" and "automobile" are
unrelated to it).

How a text becomes a vector of ``dimensions`` floats (:func:`embed`):

1. Tokens: the lower-cased runs of letters and digits, apostrophes inside kept (``"I'm in Paris!"``
   -> ``i'm``, ``in``, ``paris``; a typographic apostrophe, U+2019, counts as ``'``). Common English
   function words (``the``, ``in``, ``i``, ``is``, ...; :data:`STOPWORDS`) are dropped unless nothing
   else is left. A text with no token at all (``"?!"``, spaces) is one token: itself, lower-cased.
2. Features of each token: the token itself (weight 1) and its character trigrams with ``#`` marking
   the word's ends (``live`` -> ``#li``, ``liv``, ``ive``, ``ve#``; together weight 1), so ``live`` and
   ``lives`` share most of their features.
3. Each feature is hashed with BLAKE2b (8 bytes; stable across processes and machines, unlike
   ``hash()``): the hash modulo ``dimensions`` picks the coordinate, its top bit the sign (so colliding
   features cancel out on average instead of adding up).
4. The sum is L2-normalised: every vector has length 1, so a dot product is the cosine similarity.

Same text and dimensions, same vector, in every process. Vectors are sent as JSON floats, or as
base64 of little-endian float32 values with ``encoding_format: "base64"`` (what the ``openai`` client
asks for by default and decodes).

The scripted model's ``POST /v1/embeddings`` (:meth:`kora.scripted.model.ScriptedModel.embeddings`) reads
requests and writes answers with :mod:`kora.core.openai_wire.embeddings`; it serves ``dimensions`` up to
:data:`MAX_DIMENSIONS`.
"""

from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache
from typing import Final

__all__ = ["DEFAULT_DIMENSIONS", "MAX_DIMENSIONS", "STOPWORDS", "embed"]

DEFAULT_DIMENSIONS: Final = 384
#: Longest vector the scripted model serves.
MAX_DIMENSIONS: Final = 8192

#: Words too common to say what a text is about; dropped from the features unless a text has nothing else.
_STOPWORDS_TEXT: Final = """
    a about above after again all also am an and any are as at be been before being below between both but by
    can could did do does doing don't down during each few for from further had has have having he her here
    hers herself him himself his how i i'd i'll i'm i've if in into is it it's its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so some
    such than that that's the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you you're your
    yours yourself
"""
STOPWORDS: Final = frozenset(_STOPWORDS_TEXT.split())

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_WORD_WEIGHT: Final = 1.0
_TRIGRAMS_WEIGHT: Final = 1.0  # the L2 weight of all of a token's trigrams together


def _feature(feature: str, weight: float, dimensions: int) -> tuple[int, float]:
    # surrogatepass: a JSON body may carry lone surrogates ("\ud800"); they still hash to a stable value.
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimensions, -weight if value >> 63 else weight


@lru_cache(maxsize=1 << 16)
def _token_features(token: str, dimensions: int) -> tuple[tuple[int, float], ...]:
    """The coordinates and signed weights one token adds to a vector (cached: vocabularies repeat)."""
    marked = f"#{token}#"
    trigrams = [marked[i : i + 3] for i in range(len(marked) - 2)]
    weight = _TRIGRAMS_WEIGHT / math.sqrt(len(trigrams))
    features = [_feature(token, _WORD_WEIGHT, dimensions)]
    features += (_feature(f"3:{trigram}", weight, dimensions) for trigram in trigrams)
    return tuple(features)


def _tokens(text: str) -> list[str]:
    words = _TOKEN.findall(text.lower().replace("\u2019", "'"))  # a typographic apostrophe is an apostrophe
    content = [word for word in words if word not in STOPWORDS]
    return content or words or [text.lower()]


def embed(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit-length vector of ``text`` (``dimensions`` floats; see the module docstring).

    Raises ``ValueError`` if ``dimensions`` is not positive.
    """
    if dimensions <= 0:
        raise ValueError(f"dimensions must be positive, got {dimensions}")
    sums: dict[int, float] = {}
    for token in _tokens(text):
        for index, weight in _token_features(token, dimensions):
            sums[index] = sums.get(index, 0.0) + weight
    norm = math.sqrt(sum(value * value for value in sums.values()))
    if norm == 0.0:  # every feature cancelled out (colliding signs): fall back to the whole text's own
        index, weight = _feature(f"text:{text}", 1.0, dimensions)
        sums, norm = {index: weight}, 1.0
    vector = [0.0] * dimensions
    for index, value in sums.items():
        vector[index] = value / norm
    return vector
