"""``POST /v1/chat/completions``: one agent turn over OpenAI's chat completions format, streaming or not.

The session is the ``X-Session-ID`` header, else the body's ``session_id``, else a new one; the answer
carries it back in ``X-Session-ID``. A session id is 1-128 characters from ``A-Z a-z 0-9 . _ : -``
(:mod:`kora.core.protocol`); another is a 400 before any work, and so is text no store can keep (a NUL or a lone
surrogate anywhere in the body, :mod:`kora.core.text`). The turn's user is the request's verified identity
(:mod:`kora.agent.identity`; anonymous without one). Errors use OpenAI's body: 400 for a bad request, 401 for a
bearer token that does not verify, 403 (``session_forbidden``) for a session that belongs to another user
(:func:`kora.memory.base.check_owner`), 502 when the model API fails, 504 when it times out, 503 while the agent is
still starting.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kora.agent.identity import open_session
from kora.agent.openai_api import parse_chat_request
from kora.agent.routes.errors import error_response
from kora.agent.state import AgentState
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import KoraError
from kora.core.openai_wire import (
    DONE_EVENT,
    ChunkWriter,
    assistant_message,
    completion_body,
    completion_id,
    sse_error,
    usage_body,
)
from kora.core.protocol import DELEGATED_BY_HEADER, SESSION_HEADER, check_session_id

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime


def add_chat_routes(router: APIRouter, state: AgentState) -> None:
    """Add the chat completions route to ``router``, serving turns with ``state``'s runtime and memory."""
    agent_name = state.settings.agent_name

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        identity = await state.identity.resolve(request.headers)
        parsed = parse_chat_request(await request.body())
        requested = requested_session(request.headers.get(SESSION_HEADER), parsed.request.session_id)
        runtime = await state.wait_runtime()
        session_id = await open_session(state.memory, requested, agent_name, identity)
        turn = TurnRequest(
            session_id=session_id,
            prompt=parsed.prompt,
            client_history=parsed.history,
            system=parsed.system,
            delegated_by=request.headers.get(DELEGATED_BY_HEADER),
            user_id=identity.user_id,
            credential=identity.credential,
        )
        headers = {SESSION_HEADER: session_id}
        model = parsed.request.model or agent_name
        if parsed.request.stream:
            return StreamingResponse(
                stream_chunks(runtime, turn, model, include_usage=parsed.request.include_usage),
                media_type="text/event-stream",
                headers=headers | {"Cache-Control": "no-cache"},
            )
        try:
            outcome = await runtime.run(turn)
        except KoraError as failure:
            return error_response(failure, headers)
        usage = usage_body(outcome.input_tokens, outcome.output_tokens)
        body = completion_body(completion_id(), model, assistant_message(outcome.text), outcome.finish_reason, usage)
        return JSONResponse(body, headers=headers)


def requested_session(header: str | None, body: str | None) -> str | None:
    """The session a chat request names: the ``X-Session-ID`` header, else the body's ``session_id``, else none.
    Raises :class:`~kora.core.errors.RequestError` (400) when it breaks the session id rule
    (:mod:`kora.core.protocol`), before the turn does any work."""
    if header:
        return check_session_id(header, SESSION_HEADER)
    if body is not None:
        return check_session_id(body, "'session_id'")
    return None


async def stream_chunks(
    runtime: AgentRuntime, turn: TurnRequest, model: str, *, include_usage: bool
) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk, one content chunk per text delta, the finish chunk, a usage chunk (only when
    the client asked with ``stream_options.include_usage``, as OpenAI does), then ``[DONE]``.

    A failure after the stream started cannot change the status line: it is sent as an OpenAI error object
    in the stream, followed by ``[DONE]``.
    """
    chunks = ChunkWriter(completion_id(), model, int(time.time()), include_usage=include_usage)
    yield chunks.chunk({"role": "assistant", "content": ""})
    stream = runtime.stream(turn)
    try:
        async for item in stream:
            if isinstance(item, TurnOutcome):
                yield chunks.chunk({}, item.finish_reason)
                if include_usage:
                    yield chunks.usage(usage_body(item.input_tokens, item.output_tokens))
            else:
                yield chunks.chunk({"content": item})
    except KoraError as failure:
        yield sse_error(failure)
    finally:
        await stream.aclose()
    yield DONE_EVENT
