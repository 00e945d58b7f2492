"""The OpenAI embeddings wire format (``POST /embeddings``), as a server reads and writes it.

Request (:class:`EmbeddingRequest`, parsed by :func:`parse_embedding_request`): ``model`` (required),
``input`` (one string or an array of 1..:data:`MAX_INPUTS` strings, none empty; OpenAI's token-id arrays are
refused, since token ids only mean something to the tokenizer they came from), ``encoding_format``
(``float``, the default, or ``base64``: little-endian float32, which the ``openai`` Python client asks for when
the caller names no format), ``dimensions`` (optional; checked by the server against its model) and ``user``
(accepted and ignored, as are other unknown fields).

Response (:func:`embedding_response_body`)::

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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from kora.core.errors import InvalidJSON, RequestError
from kora.core.openai_wire import JSONObject, invalid_request_message

__all__ = [
    "MAX_INPUTS",
    "EmbeddingRequest",
    "embedding_response_body",
    "float32_base64",
    "parse_embedding_request",
]

#: Most strings one request may carry (OpenAI's limit).
MAX_INPUTS = 2048


class EmbeddingRequest(BaseModel):
    """A checked ``POST /embeddings`` body; :attr:`texts` is ``input`` as a list."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)

    @field_validator("input", mode="before")
    @classmethod
    def _strings(cls, value: object) -> object:
        # Checked by hand: pydantic's own message for a failed ``str | list[str]`` names both union branches.
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
        return value

    @property
    def texts(self) -> list[str]:
        """``input`` as a list of strings (a single string becomes a list of one)."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


def parse_embedding_request(raw: bytes) -> EmbeddingRequest:
    """Parse and check a request body.

    Raises :class:`~kora.core.errors.InvalidJSON` (400) for a body that is not JSON and
    :class:`~kora.core.errors.RequestError` (400) for anything else malformed, the message naming the field.
    """
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidJSON(f"Request body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    try:
        return EmbeddingRequest.model_validate(data)
    except ValidationError as error:
        raise RequestError(invalid_request_message(error.errors(include_url=False))) from None


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
