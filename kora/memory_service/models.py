"""The memory service's clients of its two ModelAPIs: the summary model (chat completions, structured output)
and the embedding model (``/embeddings``), both OpenAI-compatible.

Errors: :class:`ModelUnreachable` when a model API cannot be reached or answers an error status (the job is
tried again later), :class:`ModelRefused` (one of them) when it refuses the request's input; :class:`InvalidAnswer`
when a chat answer is not the JSON the request's schema asks for (the caller asks again, a bounded number of
times).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from kora.core.errors import InvalidAnswer, ModelRefused, ModelUnreachable
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import ChatCompletion
from kora.core.openai_wire.embeddings import EmbeddingResponse

ModelT = TypeVar("ModelT", bound=BaseModel)

#: Seconds to wait for a model API's answer.
MODEL_TIMEOUT_SECONDS = 60.0
#: Most texts sent in one embeddings request.
EMBED_BATCH = 256
#: The statuses by which a model API refuses a request's input (:class:`ModelRefused`); any other error status,
#: an authentication or a rate limit one included, is :class:`ModelUnreachable`: the same request may pass later.
REFUSED_STATUSES = frozenset({400, 413, 422})


def json_schema_format(name: str, schema: Mapping[str, object]) -> dict[str, object]:
    """OpenAI's ``response_format`` asking for JSON matching ``schema`` (strict mode) under ``name``."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": dict(schema)}}


class MemoryModelClient:
    """Requests to one OpenAI-compatible base URL (``.../v1``) for ``model``. Close with :meth:`aclose`."""

    def __init__(self, base_url: str, model: str, api_key: str, timeout: float = MODEL_TIMEOUT_SECONDS) -> None:
        self.model = model
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            headers={"Authorization": f"Bearer {api_key}"},
            limits=httpx.Limits(keepalive_expiry=POOL_KEEPALIVE_SECONDS),
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.aclose()

    async def _post(self, path: str, body: dict[str, object]) -> bytes:
        url = f"{str(self._client.base_url).rstrip('/')}{path}"
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as error:
            raise ModelUnreachable(f"{url}: {type(error).__name__}: {error}") from error
        if response.status_code in REFUSED_STATUSES:
            raise ModelRefused(f"{url} refused the input ({response.status_code}): {response.text[:300]}")
        if response.status_code >= 400:
            raise ModelUnreachable(f"{url} answered {response.status_code}: {response.text[:300]}")
        return response.content

    async def chat_text(self, system: str, user: str) -> str:
        """The model's text answer to ``system`` + ``user``. Raises :class:`ModelUnreachable` or
        :class:`InvalidAnswer` (no text in the answer)."""
        return await self._chat(system, user, None)

    async def chat_json(
        self, system: str, user: str, name: str, schema: Mapping[str, object], shape: type[ModelT]
    ) -> ModelT:
        """The model's answer as ``shape``, asked for with ``response_format`` json_schema ``name`` and ``schema``
        (the wire form of ``shape``; ``shape`` may check more than strict mode can say, such as lengths).

        Raises :class:`InvalidAnswer` when the answer is not JSON of that shape, :class:`ModelUnreachable`.
        """
        text = await self._chat(system, user, json_schema_format(name, schema))
        try:
            return shape.model_validate_json(text)
        except ValidationError as error:
            raise InvalidAnswer(f"the answer is not {name} JSON: {text[:200]!r}") from error

    async def _chat(self, system: str, user: str, response_format: dict[str, object] | None) -> str:
        body: dict[str, object] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
        }
        if response_format is not None:
            body["response_format"] = response_format
        raw = await self._post("/chat/completions", body)
        try:
            text = ChatCompletion.model_validate_json(raw).choices[0].message.content or ""
        except ValidationError as error:
            raise InvalidAnswer(f"not a chat completion: {raw[:200]!r}") from error
        if not text.strip():
            raise InvalidAnswer("the answer has no text")
        return text

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One embedding per text, in order. Raises :class:`ModelUnreachable` (:class:`ModelRefused` when the model
        refuses a text: too long for it, say), or :class:`InvalidAnswer` when the answer does not hold one vector per
        text, all of one dimension."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            batch = list(texts[start : start + EMBED_BATCH])
            raw = await self._post("/embeddings", {"model": self.model, "input": batch})
            try:
                items = sorted(EmbeddingResponse.model_validate_json(raw).data, key=lambda item: item.index)
            except ValidationError as error:
                raise InvalidAnswer(f"not an embeddings response: {raw[:200]!r}") from error
            if [item.index for item in items] != list(range(len(batch))):
                raise InvalidAnswer(f"expected {len(batch)} embeddings, got {len(items)}")
            vectors.extend(item.embedding for item in items)
        if vectors and len({len(vector) for vector in vectors}) != 1:
            raise InvalidAnswer("embeddings of different dimensions")
        return vectors
