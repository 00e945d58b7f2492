"""HTTP client of the ModelAPI at ``MODEL_API_URL``, its failures mapped to :mod:`kora.core.errors`.

One :class:`ModelClient` per agent sends chat-completions requests, whole (:meth:`ModelClient.complete`) or
streamed (:meth:`ModelClient.stream`, server-sent events read by ``httpx2.EventSource``), with
``MODEL_TIMEOUT_SECONDS`` per read and up to ``MODEL_MAX_RETRIES`` retries of connection failures, timeouts and
HTTP 408, 409, 429 and 5xx (exponential back-off with jitter from 0.5 s, at most 8 s, or the ``Retry-After``
the server asks for, up to 60 s), the policy of the official ``openai`` client. A stream is retried only
before its first event.

Transport: ``httpx2`` over aiohttp (``httpx_aiohttp``). Measured here, one request costs ~0.23 ms of CPU
against ~0.6 ms over httpx2's default transport and ~1.1-1.8 ms through the ``openai`` client (see
``bench/README.md``). It is the transport of :class:`~kora.agent.chat_model.KoraChatModel`, the agent's one
model adapter.

Failures raise :class:`~kora.core.errors.ModelTimeout` (no answer in time) or
:class:`~kora.core.errors.ModelError` (connection failure, an HTTP error status, or an answer that is not a
chat completion).

Tracing (``OTEL_EXPORTER_OTLP_ENDPOINT`` set): the W3C trace context of the current span, the ``chat {model}``
span of :class:`~kora.agent.telemetry.ModelRequests`, goes out on every request through the configured
propagators. That span is the request's client span in the GenAI conventions, so no HTTP client span is made
below it: it would repeat the same interval and cost ~0.2 ms of CPU per request (bench/README.md,
bench_telemetry.py). A retry adds a ``retry`` event to it with the attempt and the failure.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import httpx2
import pydantic
import pydantic_core
from httpx_aiohttp.httpx2 import Httpx2AiohttpClient
from opentelemetry import trace

from kora.core.errors import ModelError, ModelTimeout
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import ChatCompletion, ChatCompletionChunk, JSONObject, ModelAnswer
from kora.core.telemetry import tracing_enabled

RETRY_STATUSES = frozenset({408, 409, 429})
INITIAL_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 60.0


def _error_text(response: httpx2.Response) -> str:
    """The ``error.message`` of an OpenAI error body, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or "no body"
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    return str(body)[:300]


def _retry_after(response: httpx2.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= MAX_RETRY_AFTER_SECONDS else None


class ModelClient:
    """Chat-completions client for ``base_url`` (``MODEL_API_URL``, e.g. ``http://host:port/v1``).

    ``timeout``: seconds to connect and between reads; ``max_retries``: retries after the first attempt.
    Use it from one event loop; ``await aclose()`` when done.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float, max_retries: int) -> None:
        # Parsed once: httpx2 would parse a string URL again for every request (~40 us).
        self.url = httpx2.URL(base_url.rstrip("/") + "/chat/completions")
        self.max_retries = max_retries
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        # Httpx2AiohttpClient: aiohttp for direct and proxied (HTTP(S)_PROXY) requests alike. Pool limits as the
        # openai client's: a streamed turn holds its connection for as long as the model talks. Idle connections
        # expire before the server closes them (POOL_KEEPALIVE_SECONDS): under load a reused connection the server
        # was closing failed turns with "Can not write request body".
        self.http: httpx2.AsyncClient = Httpx2AiohttpClient(
            limits=httpx2.Limits(
                max_connections=1000, max_keepalive_connections=100, keepalive_expiry=POOL_KEEPALIVE_SECONDS
            ),
            timeout=httpx2.Timeout(timeout),
        )
        # Decided once: the environment decides tracing at start, and the check would cost every request.
        self._inject = _trace_context_injector() if tracing_enabled() else None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def complete(self, body: JSONObject) -> ModelAnswer:
        """Send ``body`` (``stream`` false) and return the first choice. Raises ``ModelError``."""
        response = await self._send(body, stream=False)
        try:
            return ModelAnswer.from_completion(ChatCompletion.model_validate_json(response.content))
        except pydantic.ValidationError as error:
            raise ModelError(f"The model API sent an invalid answer: {_first(error)}") from None

    @asynccontextmanager
    async def stream(self, body: JSONObject) -> AsyncIterator[AsyncIterator[ChatCompletionChunk]]:
        """Send ``body`` (``stream`` true); yields an iterator of its chunks, ending at ``[DONE]`` (or at the end
        of a stream whose last choice gave a ``finish_reason``; a stream with neither is cut: ``ModelError``).

        Leaving the block early closes the connection, which tells the model API to stop. Raises
        ``ModelError``, also while iterating.
        """
        response = await self._send(body, stream=True)
        chunks = self._chunks(response)
        try:
            yield chunks
        finally:
            await chunks.aclose()
            await response.aclose()

    async def _chunks(self, response: httpx2.Response) -> AsyncGenerator[ChatCompletionChunk]:
        """The stream's chunks up to ``[DONE]``. A stream that ends with neither ``[DONE]`` nor a chunk with a
        ``finish_reason`` was cut mid-answer (a proxy or model server that went away and closed the response
        cleanly): :class:`~kora.core.errors.ModelError`, never a silent end that would pass for a whole answer."""
        finished = False
        try:
            async for event in httpx2.EventSource(response):
                if event.data == "[DONE]":
                    return
                if event.data:
                    chunk = ChatCompletionChunk.model_validate_json(event.data)
                    finished = finished or any(choice.finish_reason for choice in chunk.choices or [])
                    yield chunk
        except pydantic.ValidationError as error:
            raise ModelError(f"The model API sent an invalid chunk: {_first(error)}") from None
        except httpx2.TimeoutException:
            raise ModelTimeout("The model API's stream stalled for longer than the timeout.") from None
        except httpx2.HTTPError as error:
            raise ModelError(f"The model API stream failed: {error}") from None
        if not finished:
            raise ModelError("The model API's stream ended before the answer was complete (no finish_reason, [DONE]).")

    async def _send(self, body: JSONObject, *, stream: bool) -> httpx2.Response:
        """POST ``body`` with the retry policy; the response with a 2xx status (unread when ``stream``)."""
        content = pydantic_core.to_json(body)
        headers = self._headers
        if self._inject is not None:
            headers = dict(headers)
            self._inject(headers)
        attempt = 0
        while True:
            response: httpx2.Response | None = None
            try:
                request = self.http.build_request("POST", self.url, content=content, headers=headers)
                response = await self.http.send(request, stream=stream)
            except httpx2.TimeoutException as error:
                failure = _timeout_or_unreachable(error)
            except httpx2.HTTPError as error:
                failure = ModelError(f"The model API could not be reached: {error}")
            else:
                if response.is_success:
                    return response
                if stream:
                    await response.aread()
                failure = ModelError(
                    f"The model API answered HTTP {response.status_code}: {_error_text(response)}",
                    upstream_status=response.status_code,
                )
                if response.status_code not in RETRY_STATUSES and response.status_code < 500:
                    raise failure
            if attempt >= self.max_retries:
                raise failure
            delay = _retry_after(response)
            if delay is None:
                delay = min(INITIAL_BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS) * random.uniform(0.75, 1.0)
            attempt += 1
            if self._inject is not None:
                trace.get_current_span().add_event(
                    "retry", {"kora.model.attempt": attempt, "error.type": type(failure).__name__}
                )
            await asyncio.sleep(delay)


def _trace_context_injector() -> Callable[[dict[str, str]], None]:
    """The global propagators' ``inject`` (W3C ``traceparent`` by default, per ``OTEL_PROPAGATORS``); imported
    only with tracing on, since importing it loads the propagators."""
    from opentelemetry import propagate

    return propagate.inject


def _timeout_or_unreachable(error: httpx2.TimeoutException) -> ModelError:
    """httpx_aiohttp 0.2 reports a refused connection as ``ConnectTimeout``; aiohttp's own error says which."""
    cause = error.__cause__
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, aiohttp.ServerTimeoutError):
        return ModelError(f"The model API could not be reached: {cause}")
    return ModelTimeout("The model API did not answer in time.")


def _first(error: pydantic.ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
