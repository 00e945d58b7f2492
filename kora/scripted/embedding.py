"""Deterministic text embeddings for the scripted model, and OpenAI's embeddings request and response.

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

Requests (:func:`parse_request`) follow OpenAI's ``POST /v1/embeddings``: ``input`` a string or a list
of 1..:data:`MAX_INPUTS` strings, each non-empty and at most :data:`MAX_INPUT_CHARS` characters;
``model`` optional (the server's name when absent); ``dimensions`` 1..:data:`MAX_DIMENSIONS`;
``encoding_format`` ``float`` (default) or ``base64``; other fields (``user``) are ignored. Token-id
arrays are refused. Usage counts whitespace-separated words, like the chat endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import sys
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

__all__ = [
    "DEFAULT_DIMENSIONS",
    "MAX_DIMENSIONS",
    "MAX_INPUTS",
    "MAX_INPUT_CHARS",
    "STOPWORDS",
    "EmbeddingRequest",
    "EmbeddingRequestError",
    "embed",
    "embedding_response",
    "parse_request",
]

DEFAULT_DIMENSIONS: Final = 384
MAX_DIMENSIONS: Final = 8192
MAX_INPUTS: Final = 2048  # OpenAI's limit on the number of inputs per request
MAX_INPUT_CHARS: Final = 32_768  # about OpenAI's 8192 tokens per input

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


class EmbeddingRequestError(ValueError):
    """An embeddings request OpenAI would refuse; ``param`` names the offending field (``input``, ...)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class EmbeddingRequest:
    """A valid embeddings request: ``inputs`` (1..MAX_INPUTS non-empty strings), the ``model`` name to
    answer with (``None``: the server's), ``dimensions`` (``None``: the server's) and whether vectors go
    out as ``base64``."""

    inputs: list[str]
    model: str | None
    dimensions: int | None
    base64: bool


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_request(body: object) -> EmbeddingRequest:
    """Validate a decoded ``POST /v1/embeddings`` body; raises :class:`EmbeddingRequestError` saying what
    is wrong (not an object; ``input`` missing, empty, too many, too long, not strings, token ids;
    ``model``, ``dimensions`` or ``encoding_format`` malformed)."""
    if not isinstance(body, dict):
        raise EmbeddingRequestError("the request body must be a JSON object")
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list):
        if not raw:
            raise EmbeddingRequestError("'input' must not be an empty list", "input")
        if len(raw) > MAX_INPUTS:
            raise EmbeddingRequestError(f"'input' has {len(raw)} items; at most {MAX_INPUTS} are allowed", "input")
        if all(isinstance(item, int | list) for item in raw):
            raise EmbeddingRequestError("token-id arrays are not supported by the scripted model: send text", "input")
        for index, item in enumerate(raw):
            if not isinstance(item, str):
                raise EmbeddingRequestError(f"'input[{index}]' must be a string, got {_json_type(item)}", "input")
        inputs = raw
    elif raw is None:
        raise EmbeddingRequestError("'input' is required: a string or a list of strings", "input")
    else:
        raise EmbeddingRequestError(f"'input' must be a string or a list of strings, got {_json_type(raw)}", "input")
    for index, text in enumerate(inputs):
        if not text:
            raise EmbeddingRequestError(f"'input[{index}]' must not be empty", "input")
        if len(text) > MAX_INPUT_CHARS:
            raise EmbeddingRequestError(
                f"'input[{index}]' has {len(text)} characters; at most {MAX_INPUT_CHARS} are allowed", "input"
            )
    model = body.get("model")
    if model is not None and not (isinstance(model, str) and model):
        raise EmbeddingRequestError("'model' must be a non-empty string", "model")
    dimensions = body.get("dimensions")
    if dimensions is not None and not (_positive_int(dimensions) and dimensions <= MAX_DIMENSIONS):
        raise EmbeddingRequestError(f"'dimensions' must be an integer from 1 to {MAX_DIMENSIONS}", "dimensions")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64", None):
        raise EmbeddingRequestError("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    return EmbeddingRequest(inputs, model, dimensions, encoding == "base64")


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


def _base64(vector: list[float]) -> str:
    packed = array("f", vector)
    if sys.byteorder != "little":  # OpenAI's base64 embeddings are little-endian float32
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def embedding_response(request: EmbeddingRequest, model: str, dimensions: int) -> dict[str, Any]:
    """OpenAI's embeddings response for ``request``: ``{"object": "list", "data": [{"object": "embedding",
    "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``, the vectors of
    ``dimensions`` floats (or base64 strings), ``model`` the name to report."""
    data = []
    for index, text in enumerate(request.inputs):
        vector = embed(text, dimensions)
        data.append({"object": "embedding", "index": index, "embedding": _base64(vector) if request.base64 else vector})
    tokens = sum(len(text.split()) for text in request.inputs)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
