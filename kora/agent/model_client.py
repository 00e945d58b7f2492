"""HTTP client of the ModelAPI at ``MODEL_API_URL``, its failures mapped to :mod:`kora.core.errors`.

One :class:`ModelClient` per agent sends chat-completions requests, whole (:meth:`ModelClient.complete`) or
streamed (:meth:`ModelClient.stream`, server-sent events read by ``httpx2.EventSource``), with
``MODEL_TIMEOUT_SECONDS`` per read and up to ``MODEL_MAX_RETRIES`` retries of connection failures, timeouts and
HTTP 408, 409, 429 and 5xx (exponential back-off with jitter from 0.5 s, at most 8 s, or the ``Retry-After``
the server asks for, up to 60 s), the policy of the official ``openai`` client. A stream is retried only
before its first event.

Transport: aiohttp, one pool for both. A whole answer is one aiohttp request (~0.1-0.16 ms of CPU); a stream is one
aiohttp request too, its body read as server-sent events by ``httpx2.EventSource`` (over ``httpx_aiohttp``'s
stream of the aiohttp response: httpx2's client layers, its request objects, auth, redirects and hooks, are not
on the path, which cost a streamed turn ~0.3 ms of CPU before the model was asked). ~0.6 ms over httpx2's default
transport and ~1.1-1.8 ms through the ``openai`` client (see ``bench/README.md``). The pool's limits, expiry and
proxy settings (``HTTP(S)_PROXY``, ``NO_PROXY``) and TLS context are set once. It is the transport of
:class:`~kora.agent.chat_model.KoraChatModel`, the agent's one model adapter.

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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar

import aiohttp
import httpx2
import pydantic
import pydantic_core
from aiohttp.helpers import get_env_proxy_for_url
from httpx_aiohttp.httpx2.transport import AiohttpResponseStream
from opentelemetry import trace
from yarl import URL

from kora.core.errors import ModelError, ModelRetry, ModelTimeout
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.core.openai_wire import ChatCompletion, ChatCompletionChunk, JSONObject, ModelAnswer, parse_error_body
from kora.core.telemetry import tracing_enabled

RETRY_STATUSES = frozenset({408, 409, 429})
INITIAL_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 60.0


def _error_text(content: bytes) -> str:
    """The ``error.message`` of an OpenAI error body, else the start of the body."""
    error = parse_error_body(content)
    if error is not None:
        return error.message
    return content.decode(errors="replace")[:300] or "no body"


class _WithHeaders(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


def _retry_after(response: _WithHeaders | None) -> float | None:
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
        self.url_text = base_url.rstrip("/") + "/chat/completions"
        # What a stream's httpx2 response names as its request (its errors' context; the request itself is sent by
        # aiohttp): built once.
        self._stream_request = httpx2.Request("POST", self.url_text)
        self.max_retries = max_retries
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._timeout = timeout
        # aiohttp, opened at the first request (a session belongs to a running loop).
        self._session: aiohttp.ClientSession | None = None
        self._proxy: URL | None = None
        self._proxy_auth: aiohttp.BasicAuth | None = None
        # Decided once: the environment decides tracing at start, and the check would cost every request.
        self._inject = _trace_context_injector() if tracing_enabled() else None

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()

    async def complete(self, body: JSONObject) -> ModelAnswer:
        """Send ``body`` (``stream`` false) and return the first choice. Raises ``ModelError``."""
        content = await self._retrying(lambda: self._post_once(pydantic_core.to_json(body), self._request_headers()))
        try:
            return ModelAnswer.from_completion(ChatCompletion.model_validate_json(content))
        except pydantic.ValidationError as error:
            raise ModelError(f"The model API sent an invalid answer: {_first(error)}") from None

    @asynccontextmanager
    async def stream(self, body: JSONObject) -> AsyncIterator[AsyncIterator[ChatCompletionChunk]]:
        """Send ``body`` (``stream`` true); yields an iterator of its chunks, ending at ``[DONE]`` (or at the end
        of a stream whose last choice gave a ``finish_reason``; a stream with neither is cut: ``ModelError``).

        Leaving the block early closes the connection, which tells the model API to stop. Raises
        ``ModelError``, also while iterating.
        """
        content, headers = pydantic_core.to_json(body), self._request_headers()
        response = await self._retrying(lambda: self._stream_once(content, headers))
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
        except httpx2.TimeoutException as error:
            # httpx_aiohttp maps every aiohttp connection error to a timeout (ConnectTimeout); only a read that
            # timed out is one, a connection lost mid-stream is a failure.
            if isinstance(error.__cause__, TimeoutError) or error.__cause__ is None:
                raise ModelTimeout("The model API's stream stalled for longer than the timeout.") from None
            raise ModelError(f"The model API stream failed: {error.__cause__!r}") from None
        except httpx2.HTTPError as error:
            raise ModelError(f"The model API stream failed: {error}") from None
        if not finished:
            raise ModelError("The model API's stream ended before the answer was complete (no finish_reason, [DONE]).")

    def _request_headers(self) -> dict[str, str]:
        if self._inject is None:
            return self._headers
        headers = dict(self._headers)
        self._inject(headers)
        return headers

    def _open_session(self) -> aiohttp.ClientSession:
        # Pool limits as the openai client's (a streamed turn holds its connection for as long as the model talks).
        # Idle connections expire before the server closes them (POOL_KEEPALIVE_SECONDS): under load a reused
        # connection the server was closing failed turns with "Can not write request body".
        connector = aiohttp.TCPConnector(
            limit=1000, keepalive_timeout=POOL_KEEPALIVE_SECONDS, ssl=httpx2.create_ssl_context()
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=self._timeout)
        # The proxy is looked up in the environment once, here: aiohttp's trust_env looks it up (os.environ,
        # NO_PROXY, netrc) on every request, measured at ~0.3 ms of a text turn's ~1.2 ms.
        try:
            self._proxy, self._proxy_auth = get_env_proxy_for_url(URL(self.url_text))
        except LookupError:
            self._proxy, self._proxy_auth = None, None
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    async def _post_once(self, content: bytes, headers: dict[str, str]) -> bytes:
        """One attempt of a whole answer: its body when the status is 2xx; raises :class:`ModelRetry` for a failure
        worth retrying, ``ModelError`` for another."""
        session = self._session or self._open_session()
        try:
            async with session.post(
                self.url_text, data=content, headers=headers, proxy=self._proxy, proxy_auth=self._proxy_auth
            ) as response:
                answer = await response.read()
                if 200 <= response.status < 300:
                    return answer
                failure = ModelError(
                    f"The model API answered HTTP {response.status}: {_error_text(answer)}",
                    upstream_status=response.status,
                )
                if response.status not in RETRY_STATUSES and response.status < 500:
                    raise failure
                raise ModelRetry(failure, _retry_after(response))
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            raise ModelRetry(ModelTimeout("The model API did not answer in time."), None) from None
        except aiohttp.ClientError as error:
            raise ModelRetry(ModelError(f"The model API could not be reached: {error}"), None) from None

    async def _stream_once(self, content: bytes, headers: dict[str, str]) -> httpx2.Response:
        """One attempt of a stream: the response, unread, when the status is 2xx (its body an httpx2 stream of the
        aiohttp response, as ``httpx_aiohttp`` gives it, so that :class:`httpx2.EventSource` reads it and aiohttp's
        failures while reading are httpx2's); raises as :meth:`_post_once`."""
        session = self._session or self._open_session()
        try:
            # Not decompressed by aiohttp: the httpx2 response decodes the body by its Content-Encoding.
            response = await session.post(
                self.url_text,
                data=content,
                headers=headers,
                proxy=self._proxy,
                proxy_auth=self._proxy_auth,
                auto_decompress=False,
            )
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            raise ModelRetry(ModelTimeout("The model API did not answer in time."), None) from None
        except aiohttp.ClientError as error:
            raise ModelRetry(ModelError(f"The model API could not be reached: {error}"), None) from None
        if 200 <= response.status < 300:
            return httpx2.Response(
                response.status,
                headers=response.raw_headers,
                stream=AiohttpResponseStream(response),
                request=self._stream_request,
            )
        try:
            answer = await response.read()
        except (TimeoutError, aiohttp.ClientError) as error:
            answer = f"(the answer could not be read: {error or type(error).__name__})".encode()
        finally:
            response.release()
        failure = ModelError(
            f"The model API answered HTTP {response.status}: {_error_text(answer)}", upstream_status=response.status
        )
        if response.status not in RETRY_STATUSES and response.status < 500:
            raise failure
        raise ModelRetry(failure, _retry_after(response))

    async def _retrying(self, once: Callable[[], Awaitable[_T]]) -> _T:
        """``once()`` with the retry policy: a :class:`ModelRetry` it raises is retried after its back-off, up to
        ``max_retries`` times, then its failure is raised."""
        attempt = 0
        while True:
            try:
                return await once()
            except ModelRetry as retry:
                failure, delay = retry.failure, retry.delay
            if attempt >= self.max_retries:
                raise failure
            if delay is None:
                delay = min(INITIAL_BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS) * random.uniform(0.75, 1.0)
            attempt += 1
            if self._inject is not None:
                trace.get_current_span().add_event(
                    "retry", {"kora.model.attempt": attempt, "error.type": type(failure).__name__}
                )
            await asyncio.sleep(delay)


_T = TypeVar("_T")


def _trace_context_injector() -> Callable[[dict[str, str]], None]:
    """The global propagators' ``inject`` (W3C ``traceparent`` by default, per ``OTEL_PROPAGATORS``); imported
    only with tracing on, since importing it loads the propagators."""
    from opentelemetry import propagate

    return propagate.inject


def _first(error: pydantic.ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
