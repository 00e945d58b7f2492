"""``POST /v1/chat/completions``: one agent turn over OpenAI's chat completions format, streaming or not; and
``GET /v1/models`` / ``GET /v1/models/{id}``, which list the agent as the one model (OpenAI's list shape).

What a request may ask and what is refused: :mod:`kora.agent.openai_api`. A turn that ends with calls of client
tools answers ``finish_reason: "tool_calls"`` with the calls in the message (streamed: one ``tool_calls`` delta
before the finish chunk). So does a turn paused at calls of the agent's own tools that wait for a person's approval
(:mod:`kora.agent.approvals`), each such call marked with Kora's extension field ``kora_approval`` (``{"id",
"target", "expires_at"}``); the next request decides them with a ``tool`` message per call whose content is a
decision object (``{"decision": "approve" | "reject", "reason"?, "arguments"?}``), and the turn goes on: 400 for
a content that is no decision, 409 (``approval_decided``) for a call already decided or expired, 403
(``approval_forbidden``) for another user's, nothing run. A streamed request with a ``response_format`` is
answered once the answer validated (in one content chunk), so an answer that does not validate is an HTTP error,
not an error inside a 200 stream.

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
from dataclasses import replace
from typing import TYPE_CHECKING, Final, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import JsonValue

from kora.agent.approvals import PausedTurn
from kora.agent.identity import Identity, open_session
from kora.agent.openai_api import ParsedChat, parse_chat_request
from kora.agent.routes.request_route import request_route
from kora.agent.state import AgentState
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import ApprovalConflict, KoraError, NotFound
from kora.core.openai_wire import (
    DONE_EVENT,
    ChunkWriter,
    JSONObject,
    assistant_message,
    completion_body,
    completion_id,
    model_list_body,
    model_object,
    sse_error,
    tool_call_body,
    usage_body,
)
from kora.core.protocol import APPROVAL_FIELD, DELEGATED_BY_HEADER, SESSION_HEADER, check_session_id
from kora.core.serving import StreamingAnswer, error_response

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime


def event_stream(body: AsyncIterator[str | bytes], headers: dict[str, str]) -> StreamingResponse:
    """An answer streamed as server-sent events (``text/event-stream``, never cached) with ``headers``: the
    streamed shape of ``/v1/chat/completions`` and ``/v1/responses``."""
    return StreamingAnswer(body, media_type="text/event-stream", headers=headers | {"Cache-Control": "no-cache"})


def add_chat_routes(router: APIRouter, state: AgentState) -> None:
    """Add the chat completions route to ``router``, serving turns with ``state``'s runtime and memory."""
    agent_name = state.settings.agent_name

    @request_route(router, "/v1/chat/completions", methods=["POST"])
    async def chat_completions(request: Request) -> Response:
        identity = await state.identity.resolve(request.headers)
        parsed = parse_chat_request(await request.body())
        requested = requested_session(request.headers.get(SESSION_HEADER), parsed.request.session_id)
        runtime = await state.wait_runtime()
        turn = chat_turn(parsed, request, identity)
        runtime.check(turn)
        session_id = await open_session(state.memory, requested, agent_name, identity)
        turn = replace(turn, session_id=session_id)
        headers = {SESSION_HEADER: session_id}
        model = parsed.request.model or agent_name
        if turn.tool_results and runtime.approvals.in_session(session_id) is None:
            await runtime.sync_paused()  # the shared task store: calls another replica paused
        # Results for calls of the agent's own tools no paused turn holds: refused, not shown to the model.
        runtime.refuse_unknown_decisions(turn)
        paused = runtime.take_decisions(turn)
        if paused is None and parsed.approvals:
            # Calls Kora said wait for approval, which this session does not hold (the request names another
            # session or none, or a restart of the agent forgot them): refused, rather than the decision given to
            # the model as the call's result.
            raise ApprovalConflict(
                f"The approval '{parsed.approvals[0]}' is not waiting in session '{session_id}': this session holds "
                f"no such waiting call. Either the request names another session or none (send the session's "
                f"{SESSION_HEADER} header, as the paused answer gave it), or the agent restarted since and forgot it.",
                code="approval_unknown",
            )
        if paused is None:  # refused before a stream starts: a 409, not an error inside a 200 stream
            await runtime.refuse_waiting(session_id)
        elif paused.decided and paused.resumer is None:
            turn = paused.turn
        if parsed.request.stream and parsed.output is None and (paused is None or turn is paused.turn):
            chunks = stream_chunks(runtime, turn, model, include_usage=parsed.include_usage, resume=paused)
            return event_stream(chunks, headers)
        try:
            outcome = await run_or_resume(runtime, turn, paused)
        except KoraError as failure:
            return error_response(failure, headers)
        if parsed.request.stream:
            # A structured answer is checked whole before any of it is sent: one that fails is an HTTP error.
            return event_stream(whole_as_chunks(outcome, model, include_usage=parsed.include_usage), headers)
        usage = usage_body(outcome.input_tokens, outcome.output_tokens)
        calls = _calls(outcome)
        message = assistant_message(outcome.text or None if calls else outcome.text, calls)
        body = completion_body(completion_id(), model, message, outcome.finish_reason, usage)
        return JSONResponse(body, headers=headers)


def add_model_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``GET /v1/models`` and ``GET /v1/models/{id}`` to ``router``: the agent as the one model (apart from
    the chat route, so that the turns' routes come first in the route table, :func:`kora.agent.app.create_app`)."""
    agent_name = state.settings.agent_name
    started = int(time.time())

    @router.get("/v1/models")
    async def list_models() -> Response:
        return JSONResponse(model_list_body([agent_name], OWNED_BY, started))

    @router.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str) -> Response:
        if model_id != agent_name:
            raise NotFound(
                f"The model '{model_id}' does not exist: this agent serves '{agent_name}'.",
                code="model_not_found",
                param="model",
            )
        return JSONResponse(model_object(agent_name, OWNED_BY, started))


def chat_turn(parsed: ParsedChat, request: Request, identity: Identity) -> TurnRequest:
    """The turn a parsed request asks for, by ``identity`` (its session is set once opened)."""
    return TurnRequest(
        session_id="",
        prompt=parsed.prompt,
        client_history=parsed.history,
        system=parsed.system,
        delegated_by=request.headers.get(DELEGATED_BY_HEADER),
        user_id=identity.user_id,
        credential=identity.credential,
        prompt_parts=parsed.prompt_parts,
        tool_results=parsed.tool_results,
        answered=parsed.answered,
        client_tools=parsed.client_tools,
        tool_choice=parsed.tool_choice,
        output=parsed.output,
        model_settings=parsed.model_settings,
    )


#: ``owned_by`` of the agent's model entry.
OWNED_BY: Final = "kora"


def _calls(outcome: TurnOutcome) -> list[JSONObject]:
    """The answer's ``tool_calls``: the client's calls, or the calls waiting for approval (marked
    ``kora_approval``)."""
    if outcome.approvals:
        return [
            {**tool_call_body(a.tool_call_id, a.tool_name, a.arguments), APPROVAL_FIELD: a.marker()}
            for a in outcome.approvals
        ]
    return [tool_call_body(c.tool_call_id, c.name, c.arguments) for c in outcome.tool_calls]


async def run_or_resume(runtime: AgentRuntime, turn: TurnRequest, paused: PausedTurn | None) -> TurnOutcome:
    """The outcome of a whole (not streamed) turn: ``turn`` run when it decides no waiting call (``paused`` None);
    the paused turn resumed once every one of its calls is decided; otherwise the calls still waiting, with no
    model request made. Raises what the run raises (:class:`~kora.core.errors.KoraError`)."""
    if paused is None:
        return await runtime.run(turn, checked=True)  # the routes refused a session that waits
    if not paused.decided:
        left = tuple(a for a in paused.approvals if a.decision is None)
        return TurnOutcome("", "tool_calls", 0, 0, 0, approvals=left)
    resumed = await runtime.resume(paused)
    assert resumed is not None
    return resumed


def _call_deltas(outcome: TurnOutcome) -> list[JSONObject]:
    """The client tool calls as streamed ``tool_calls`` deltas, each whole in one delta."""
    return [{"index": i, **call} for i, call in enumerate(_calls(outcome))]


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
    runtime: AgentRuntime, turn: TurnRequest, model: str, *, include_usage: bool, resume: PausedTurn | None = None
) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk, one content chunk per text delta, the finish chunk, a usage chunk (only when
    the client asked with ``stream_options.include_usage``, as OpenAI does), then ``[DONE]``.

    A failure after the stream started cannot change the status line: it is sent as an OpenAI error object
    in the stream, followed by ``[DONE]``.
    """
    chunks = ChunkWriter(completion_id(), model, int(time.time()), include_usage=include_usage)
    yield chunks.role()
    stream = runtime.stream(turn, resume=resume, checked=True)  # the route refused a session that waits
    try:
        async for item in stream:
            if isinstance(item, TurnOutcome):
                if item.tool_calls or item.approvals:
                    yield chunks.chunk({"tool_calls": cast(JsonValue, _call_deltas(item))})
                yield chunks.chunk({}, item.finish_reason)
                if include_usage:
                    yield chunks.usage(usage_body(item.input_tokens, item.output_tokens))
            else:
                yield chunks.content(item)
    except KoraError as failure:
        yield sse_error(failure)
    finally:
        await stream.aclose()
    yield DONE_EVENT


async def whole_as_chunks(outcome: TurnOutcome, model: str, *, include_usage: bool) -> AsyncIterator[bytes]:
    """A finished turn as a stream: the role chunk, the answer in one content chunk, the finish chunk, the usage
    chunk when asked for, ``[DONE]``."""
    chunks = ChunkWriter(completion_id(), model, int(time.time()), include_usage=include_usage)
    yield chunks.role()
    if outcome.text:
        yield chunks.chunk({"content": outcome.text})
    if outcome.tool_calls or outcome.approvals:
        yield chunks.chunk({"tool_calls": cast(JsonValue, _call_deltas(outcome))})
    yield chunks.chunk({}, outcome.finish_reason)
    if include_usage:
        yield chunks.usage(usage_body(outcome.input_tokens, outcome.output_tokens))
    yield DONE_EVENT
