"""The agent server's HTTP application (spec: "Endpoints / Agent server").

``create_app(settings)`` builds a FastAPI app with ``POST /v1/chat/completions``, ``GET /tools``,
``GET /memory/events``, ``GET /memory/sessions``, ``GET /health``, ``GET /ready``, and A2A (the card at
``GET /.well-known/agent.json`` and JSON-RPC 2.0 on ``POST /``, see ``kora.agent.a2a``). The runtime
(``kora.agent.runtime``; for agents that offer tools also the agentic loop, ~1 s of imports) starts in the
background after start-up, so ``/health`` answers within a second; ``/ready`` says not-ready, with reasons,
until the runtime has started and every configured tool server can be listed. Requests that need the runtime
wait for it.

Errors on ``/v1`` use OpenAI's body ``{"error": {"message", "type", "code"}}``: 400 for a bad request,
502 when the model API fails, 504 when it times out, 503 while the agent is still starting; never a bare 500
with a traceback.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kora.agent import openai_api as oai
from kora.agent.a2a.routes import A2AServer
from kora.agent.settings import AgentSettings
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import KoraError, RequestError, Unavailable
from kora.core.openai_errors import error_body, openai_error_body
from kora.core.protocol import DELEGATED_BY_HEADER, SESSION_HEADER
from kora.memory import Memory, build_memory

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime

log = logging.getLogger("kora.agent")

#: Seconds a request waits for the runtime to finish starting before answering 503.
STARTUP_WAIT_SECONDS = 30.0


class AgentState:
    """What the routes share: settings, memory, and the runtime once it has loaded."""

    def __init__(self, settings: AgentSettings, memory: Memory) -> None:
        self.settings = settings
        self.memory = memory
        self.runtime: AgentRuntime | None = None
        self.startup_error: str | None = None
        self._loaded = asyncio.Event()

    async def load(self) -> None:
        """Import and start the runtime (in the background of the app's lifespan)."""
        try:
            module = await asyncio.to_thread(importlib.import_module, "kora.agent.runtime")
            runtime: AgentRuntime = module.AgentRuntime(self.settings, self.memory)
            await runtime.start()
            self.runtime = runtime
        except Exception as error:  # reported on /ready and to every request instead of crashing the server
            log.exception("agent runtime failed to start")
            self.startup_error = f"{type(error).__name__}: {error}"
        finally:
            self._loaded.set()

    async def wait_runtime(self) -> AgentRuntime:
        """The runtime; raises :class:`~kora.core.errors.Unavailable` (503) if it is not available."""
        try:
            await asyncio.wait_for(self._loaded.wait(), STARTUP_WAIT_SECONDS)
        except TimeoutError:
            raise Unavailable("The agent is still starting.", code="starting") from None
        if self.runtime is None:
            raise Unavailable(f"The agent failed to start: {self.startup_error}", code="startup_failed")
        return self.runtime

    def problems(self) -> list[str]:
        """Reasons the agent is not ready (empty when ready)."""
        if self.startup_error:
            return [f"agent runtime failed to start: {self.startup_error}"]
        if self.runtime is None:
            return ["agent runtime is still loading"]
        return self.runtime.problems()


def create_app(settings: AgentSettings, memory: Memory | None = None) -> FastAPI:
    """Build the agent server for ``settings``; ``memory`` defaults to the one the settings select.

    Raises ``ValueError`` when the memory settings cannot be served (e.g. ``MEMORY_STORE_ENDPOINT`` without
    the remote client).
    """
    state = AgentState(
        settings,
        memory
        or build_memory(
            enabled=settings.memory_enabled,
            max_sessions=settings.memory_max_sessions,
            max_session_events=settings.memory_max_session_events,
            app_name=settings.agent_name,
            store_endpoint=settings.memory_store_endpoint,
        ),
    )

    a2a = A2AServer(
        settings,
        state.wait_runtime,
        lambda: state.runtime.tool_definitions() if state.runtime is not None else [],
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(state.load(), name="kora-agent-load")
        try:
            yield
        finally:
            await a2a.close()
            await loading
            if state.runtime is not None:
                await state.runtime.close()
            await state.memory.close()

    app = FastAPI(title=f"Kora agent {settings.agent_name}", lifespan=lifespan)
    app.state.kora = state
    app.state.a2a = a2a
    _install_error_handlers(app)
    a2a.install(app)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "agent": settings.agent_name}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        problems = state.problems()
        if problems:
            return JSONResponse({"status": "not_ready", "reasons": problems}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/tools")
    async def tools() -> dict[str, Any]:
        runtime = await state.wait_runtime()
        return {"agent": settings.agent_name, "tools": runtime.tool_definitions()}

    @app.get("/memory/events")
    async def memory_events(
        session_id: str | None = None, limit: Annotated[int | None, Query(ge=1, le=100_000)] = None
    ) -> dict[str, Any]:
        events = await state.memory.list_events(session_id, limit)
        return {
            "agent": settings.agent_name,
            "session_id": session_id,
            "events": [event.model_dump(mode="json") for event in events],
            "total": await state.memory.count_events(session_id),
        }

    @app.get("/memory/sessions")
    async def memory_sessions() -> dict[str, Any]:
        sessions = await state.memory.list_sessions()
        return {
            "agent": settings.agent_name,
            "sessions": [session.model_dump(mode="json") for session in sessions],
            "total": len(sessions),
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        parsed = oai.parse_chat_request(await request.body())
        runtime = await state.wait_runtime()
        requested = request.headers.get(SESSION_HEADER) or parsed.request.session_id
        session_id = await state.memory.get_or_create_session(requested, settings.agent_name)
        turn = TurnRequest(
            session_id=session_id,
            prompt=parsed.prompt,
            client_history=parsed.history,
            system=parsed.system,
            delegated_by=request.headers.get(DELEGATED_BY_HEADER),
        )
        headers = {SESSION_HEADER: session_id}
        model = parsed.request.model or settings.agent_name
        if parsed.request.stream:
            return StreamingResponse(
                _stream_chunks(runtime, turn, model, include_usage=parsed.include_usage),
                media_type="text/event-stream",
                headers=headers | {"Cache-Control": "no-cache"},
            )
        try:
            outcome = await runtime.run(turn)
        except KoraError as failure:
            return _error_response(failure, headers)
        body = oai.completion_body(
            oai.completion_id(),
            model,
            outcome.text,
            outcome.finish_reason,
            oai.usage_body(outcome.input_tokens, outcome.output_tokens),
        )
        return JSONResponse(body, headers=headers)

    return app


def _error_response(error: KoraError, headers: dict[str, str] | None = None) -> JSONResponse:
    """``error`` as OpenAI's error body with the error's HTTP status."""
    return JSONResponse(error_body(error), status_code=error.status, headers=headers)


async def _stream_chunks(
    runtime: AgentRuntime, turn: TurnRequest, model: str, *, include_usage: bool
) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk, one content chunk per text delta, the finish chunk, a usage chunk (only when
    the client asked with ``stream_options.include_usage``, as OpenAI does), then ``[DONE]``.

    A failure after the stream started cannot change the status line: it is sent as an OpenAI error object
    in the stream, followed by ``[DONE]``.
    """
    id_, created = oai.completion_id(), int(time.time())
    yield oai.chunk_line(id_, model, created, {"role": "assistant", "content": ""})
    stream = runtime.stream(turn)
    try:
        async for item in stream:
            if isinstance(item, TurnOutcome):
                yield oai.chunk_line(id_, model, created, {}, item.finish_reason)
                if include_usage:
                    usage = oai.usage_body(item.input_tokens, item.output_tokens)
                    yield oai.chunk_line(id_, model, created, {}, usage=usage)
            else:
                yield oai.chunk_line(id_, model, created, {"content": item})
    except KoraError as failure:
        yield oai.error_line(failure)
    finally:
        await stream.aclose()
    yield oai.DONE_LINE


def _install_error_handlers(app: FastAPI) -> None:
    """JSON errors everywhere; OpenAI's error shape under ``/v1``."""

    @app.exception_handler(KoraError)
    async def kora_error(_: Request, error: KoraError) -> JSONResponse:
        return _error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/v1"):
            code = "not_found" if error.status_code == 404 else "http_error"
            body = openai_error_body(str(error.detail), "invalid_request_error", code)
            return JSONResponse(body, status_code=error.status_code, headers=error.headers)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first["loc"])
        message = f"Invalid request: {where}: {first['msg']}"
        if request.url.path.startswith("/v1"):
            return _error_response(RequestError(message))
        return JSONResponse({"detail": message}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return _error_response(KoraError(f"Internal error: {type(error).__name__}"))
