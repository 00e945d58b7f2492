"""The HTTP face of a hosted embedding model: OpenAI's ``/v1/embeddings`` and ``/v1/models``, and probes.

- ``GET /health``, ``GET /ready``: the probes of :mod:`kora.core.serving.probes`. ``/health`` answers from the
  first moment (the model loads in the background); ``/ready`` 200 once the model is loaded, until then 503
  ``starting``, and 503 ``failed`` with the reason if loading failed (``details.model`` names the model).
- ``GET /v1/models``: the model under each of its names (OpenAI's list shape).
- ``POST /v1/embeddings``: :mod:`kora.core.openai_wire.embeddings`'s request and response. Errors use OpenAI's
  error body: 400 for a malformed request (the message names the field), 404 ``model_not_found`` for a model
  this server does not serve, 400 for ``dimensions`` other than the model's, 503 while loading.

The model loads on, and every request is encoded on, one worker thread: encoding is CPU-bound and PyTorch
already spreads one batch over every core, so taking requests one at a time loses nothing, and the event loop
stays free to answer probes. A stop during loading waits for the load to end (it cannot be interrupted).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kora.core.env import DEFAULT_MAX_LARGE_REQUEST_BYTES
from kora.core.errors import KoraError, RequestError
from kora.core.limits import RequestLimits
from kora.core.openai_wire import error_body, model_list_body, openai_error_body
from kora.core.openai_wire.embeddings import embedding_response_body, parse_embedding_request
from kora.core.serving import Lifecycle, Readiness, StartupText, probe_routes
from kora.hosted.embedder import Embeddings
from kora.resources import HostedModel

__all__ = ["Embedder", "create_hosted_app"]


class Embedder(Protocol):
    """A loaded embedding model (:class:`kora.hosted.embedder.MiniLMEmbedder` in production); ``dimensions``: the
    length of its vectors."""

    dimensions: int

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Unit-length vectors for ``texts`` and the tokens read; blocking."""
        ...


class _Slot:
    """The model's one worker thread, the model loading (then loaded) on it, and the encoding calls."""

    def __init__(
        self,
        model: HostedModel,
        load: Callable[[], Embedder],
        on_loaded: Callable[[float], None],
        on_load_failure: Callable[[str], None],
    ) -> None:
        self.model = model
        self._load = load
        self._on_loaded = on_loaded
        self._on_load_failure = on_load_failure
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hosted-model")
        self._embedder: Embedder | None = None
        self.lifecycle = Lifecycle(
            self._start,
            StartupText(
                subject=f"The model {model.name}",
                starting=f"the model {model.name} is still loading",
                failed=f"the model {model.name} failed to load",
                codes=("model_loading", "model_failed"),
            ),
            describe=_reason,
        )

    async def _start(self) -> None:
        """Load the model on the worker thread, then say how long it took (or why it failed)."""

        def load_timed() -> tuple[Embedder, float]:
            started = time.monotonic()
            return self._load(), time.monotonic() - started

        try:
            self._embedder, seconds = await asyncio.wrap_future(self._worker.submit(load_timed))
        except Exception as error:
            self._on_load_failure(_reason(error))
            raise
        self._on_loaded(seconds)

    def stop(self) -> None:
        """Wait for the worker's current call to end (a load cannot be interrupted) and stop it."""
        self._worker.shutdown(wait=True, cancel_futures=True)

    def loaded(self) -> Embedder:
        """The loaded model; :class:`Unavailable` (503) while loading or after a failed load."""
        self.lifecycle.check()
        assert self._embedder is not None
        return self._embedder

    async def embed(self, texts: list[str]) -> Embeddings:
        """Encode ``texts`` on the worker thread; :class:`Unavailable` (503) while loading or after a failed
        load."""
        embedder = self.loaded()
        return await asyncio.wrap_future(self._worker.submit(embedder.embed, texts))


def create_hosted_app(
    model: HostedModel,
    load: Callable[[], Embedder],
    *,
    on_loaded: Callable[[float], None] = lambda seconds: None,
    on_load_failure: Callable[[str], None] = lambda reason: None,
    max_request_bytes: int = DEFAULT_MAX_LARGE_REQUEST_BYTES,
) -> Starlette:
    """The app serving ``model``, loaded by ``load`` on the worker thread when the app starts (serve it with
    lifespan on). ``on_loaded(seconds)`` or ``on_load_failure(reason)`` is called on the event loop once
    loading has ended, e.g. to log it or to stop the process. A body over ``max_request_bytes`` is a 413, JSON
    beyond the limits of :mod:`kora.core.limits` a 400."""
    slot = _Slot(model, load, on_loaded, on_load_failure)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        slot.lifecycle.begin()
        try:
            yield
        finally:
            await asyncio.to_thread(slot.stop)
            await slot.lifecycle.close()

    def readiness() -> Readiness:
        return slot.lifecycle.readiness(details={"model": model.name})

    async def models(request: Request) -> Response:
        return JSONResponse(model_list_body(list(model.names), "kora-hosted", created))

    async def embeddings(request: Request) -> Response:
        try:
            body = parse_embedding_request(await request.body())
            if not model.answers_to(body.model):
                message = f"The model {body.model!r} does not exist here: this server hosts {model.name}."
                return JSONResponse(
                    openai_error_body(message, "invalid_request_error", "model_not_found"), status_code=404
                )
            # A model read from a directory says its length once loaded.
            dimensions = model.dimensions if model.dimensions is not None else slot.loaded().dimensions
            if body.dimensions is not None and body.dimensions != dimensions:
                raise RequestError(
                    f"Invalid request: dimensions: {model.name} produces {dimensions} dimensions and "
                    f"cannot shorten them; omit 'dimensions' or send {dimensions}.",
                    code="invalid_dimensions",
                )
            # A lone surrogate (valid JSON, no valid UTF-8) reaches the tokenizer as U+FFFD, as a model reads
            # undecodable bytes; the tokenizer refuses the raw string.
            texts = [text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for text in body.texts]
            result = await slot.embed(texts)
        except KoraError as error:
            return JSONResponse(error_body(error), status_code=error.status)
        return JSONResponse(embedding_response_body(result.vectors, body.model, result.tokens, body.encoding_format))

    return Starlette(
        routes=[
            *probe_routes(readiness),
            Route("/v1/models", models),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
        ],
        lifespan=lifespan,
        middleware=[Middleware(RequestLimits, max_body_bytes=max_request_bytes)],
    )


def _reason(error: BaseException | None) -> str:
    """One line saying what went wrong (no traceback: it is shown to clients and in ``kora up status``)."""
    if error is None:
        return "unknown error"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
