"""The OpenAI embeddings wire format (``POST /embeddings``), both sides: the request as a server reads it, the
response as a server writes it and as a client reads it.

Request (:class:`EmbeddingRequest`, parsed by :func:`parse_embedding_request` from the body's bytes or by
:func:`embedding_request` from decoded JSON): ``model`` (required, unless the server names a default), ``input``
(one string or an array of 1..:data:`MAX_INPUTS` strings, none empty, each at most :data:`MAX_INPUT_CHARS`
characters; OpenAI's token-id arrays are refused, since token ids only mean something to the tokenizer they came
from), ``encoding_format`` (``float``, the default, also when ``null``, or ``base64``: little-endian float32, which
the ``openai`` Python client asks for when the caller names no format), ``dimensions`` (optional, a positive
integer; checked by the server against its model) and ``user`` (accepted and ignored, as are other unknown fields).
A malformed request is a :class:`~kora.core.errors.RequestError` whose message names the field.

Response (:func:`embedding_response_body`; read back by :class:`EmbeddingResponse`)::

    {"object": "list", "model": "<name>", "usage": {"prompt_tokens": N, "total_tokens": N},
     "data": [{"object": "embedding", "index": 0, "embedding": [0.01, ...] | "<base64>"}, ...]}

Pure functions and data, no I/O.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictInt, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from kora.core.errors import InvalidJSON, RequestError
from kora.core.openai_wire import JSONObject, invalid_request_message

__all__ = [
    "MAX_INPUTS",
    "MAX_INPUT_CHARS",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingVector",
    "embedding_request",
    "embedding_response_body",
    "float32_base64",
    "parse_embedding_request",
]

#: Most strings one request may carry (OpenAI's limit).
MAX_INPUTS: Final = 2048
#: Most characters of one input: about OpenAI's limit of 8192 tokens per input.
MAX_INPUT_CHARS: Final = 32_768


class EmbeddingRequest(BaseModel):
    """A checked ``POST /embeddings`` body; :attr:`texts` is ``input`` as a list."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(default=None, ge=1)

    # Both fields are checked by hand ("plain" validators): pydantic's own str check refuses a lone surrogate
    # ("\ud800", valid JSON) that a text or a model name may hold, and its message for a failed
    # ``str | list[str]`` names both union branches.
    @field_validator("model", mode="plain")
    @classmethod
    def _model_name(cls, value: object) -> str:
        if not isinstance(value, str):
            raise PydanticCustomError("string_type", "Input should be a valid string")
        if not value:
            raise PydanticCustomError("string_too_short", "String should have at least 1 character")
        return value

    @field_validator("input", mode="plain")
    @classmethod
    def _strings(cls, value: object) -> str | list[str]:
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise PydanticCustomError(
                "invalid_input", "must be a string or an array of strings (token-id arrays are not accepted)"
            )
        if not texts:
            raise PydanticCustomError("invalid_input", "must not be an empty array")
        if len(texts) > MAX_INPUTS:
            raise PydanticCustomError("invalid_input", f"at most {MAX_INPUTS} strings per request, got {len(texts)}")
        if any(text == "" for text in texts):
            raise PydanticCustomError("invalid_input", "must not contain an empty string")
        if longest := max((len(text) for text in texts if len(text) > MAX_INPUT_CHARS), default=0):
            raise PydanticCustomError(
                "invalid_input", f"at most {MAX_INPUT_CHARS} characters per string, got {longest}"
            )
        return value if isinstance(value, str) else list(texts)

    @field_validator("encoding_format", mode="before")
    @classmethod
    def _float_when_null(cls, value: object) -> object:
        return "float" if value is None else value

    @property
    def texts(self) -> list[str]:
        """``input`` as a list of strings (a single string becomes a list of one)."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


def embedding_request(data: object, default_model: str | None = None) -> EmbeddingRequest:
    """Check a decoded request body; ``default_model`` stands for an absent or ``null`` ``model`` (``None``:
    ``model`` is required, as OpenAI requires it).

    Raises :class:`~kora.core.errors.RequestError` (400) for anything malformed, the message naming the field.
    """
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    if default_model is not None and data.get("model") is None:
        data = {**data, "model": default_model}
    try:
        return EmbeddingRequest.model_validate(data)
    except ValidationError as error:
        raise RequestError(invalid_request_message(error.errors(include_url=False))) from None


def parse_embedding_request(raw: bytes, default_model: str | None = None) -> EmbeddingRequest:
    """Parse and check a request body (see :func:`embedding_request`).

    Raises :class:`~kora.core.errors.InvalidJSON` (400) for a body that is not JSON and
    :class:`~kora.core.errors.RequestError` (400) for anything else malformed, the message naming the field.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as error:  # RecursionError: arrays nested thousands deep
        raise InvalidJSON(f"Request body is not valid JSON: {error}") from None
    return embedding_request(data, default_model)


def float32_base64(vector: Sequence[float]) -> str:
    """``vector`` as little-endian float32 bytes in base64 (what OpenAI sends for ``encoding_format: base64``)."""
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def embedding_response_body(
    vectors: Sequence[Sequence[float]],
    model: str,
    prompt_tokens: int,
    encoding_format: Literal["float", "base64"] = "float",
) -> JSONObject:
    """The response for ``vectors`` (one per input, in input order) computed by ``model`` from ``prompt_tokens``
    tokens, each vector as a list of floats or, for ``base64``, as :func:`float32_base64` text."""
    data: list[JsonValue] = [
        {
            "object": "embedding",
            "index": index,
            "embedding": float32_base64(vector) if encoding_format == "base64" else list(vector),
        }
        for index, vector in enumerate(vectors)
    ]
    usage: JSONObject = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


class EmbeddingVector(BaseModel):
    """One entry of a response's ``data`` as a client reads it (asked with ``encoding_format: float``)."""

    model_config = ConfigDict(extra="ignore")

    index: int
    embedding: list[float]


class EmbeddingResponse(BaseModel):
    """A response as a client reads it: its vectors (other fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    data: list[EmbeddingVector]
