"""``POST /v1/responses``: one agent turn over OpenAI's Responses API, whole or streamed as its typed events.

A request is translated to the Chat Completions request it means (:mod:`kora.agent.responses_api`) and then
follows the chat endpoint's rules: every field honoured or refused with a 400, client function tools, structured
output (``text.format``), sampling fields. The session is the one ``previous_response_id`` names, else
``X-Session-ID``, else the body's ``session_id``, else a new one; the response ``id`` names it, so the next
request continues it with ``previous_response_id``. ``function_call_output`` items answer the function calls of
the previous response, which the session holds. ``store: false`` is refused (every turn is kept in its session);
retrieving, deleting and cancelling stored responses are not served.

Streamed: ``response.created``, ``response.in_progress``, the message's ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ..., ``.done`` events, each function call's
``response.output_item.added``, ``response.function_call_arguments.delta`` / ``.done``,
``response.output_item.done``, then ``response.completed`` (``response.incomplete`` when a token limit cut the
answer); a failure after the stream started is ``response.failed``. A structured answer is streamed once it
validated, as on the chat endpoint.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from kora.agent.identity import open_session
from kora.agent.openai_api import decode_body, parse_chat_body
from kora.agent.responses_api import ResponseEvents, chat_body, pending_calls, response_id, session_of
from kora.agent.routes.chat import chat_turn, event_stream, requested_session
from kora.agent.routes.errors import error_response
from kora.agent.state import AgentState
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import KoraError, RequestError
from kora.core.protocol import SESSION_HEADER

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime


def add_responses_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``POST /v1/responses`` to ``router``, serving turns with ``state``'s runtime and memory."""
    agent_name = state.settings.agent_name

    @router.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        identity = await state.identity.resolve(request.headers)
        body = decode_body(await request.body())
        previous = body.get("previous_response_id")
        runtime = await state.wait_runtime()
        if previous is not None:
            session_id = await open_session(state.memory, session_of(previous), agent_name, identity)
            stored = await state.memory.get_session_events(session_id, limit=_EVENTS_LOOKED_UP)
            with responses_params():
                parsed = parse_chat_body(chat_body(body, pending_calls(stored)))
                turn = chat_turn(parsed, request, identity)
                runtime.check(turn)
        else:
            with responses_params():
                parsed = parse_chat_body(chat_body(body))
                turn = chat_turn(parsed, request, identity)
                runtime.check(turn)
            requested = requested_session(request.headers.get(SESSION_HEADER), parsed.request.session_id)
            session_id = await open_session(state.memory, requested, agent_name, identity)
        turn = replace(turn, session_id=session_id)
        headers = {SESSION_HEADER: session_id}
        events = ResponseEvents(response_id(session_id), parsed.request.model or agent_name, body)
        if parsed.request.stream and parsed.output is None:
            return event_stream(stream_events(runtime, turn, events), headers)
        try:
            outcome = await runtime.run(turn)
        except KoraError as failure:
            return error_response(failure, headers)
        if parsed.request.stream:
            return event_stream(_whole(events, outcome), headers)
        return JSONResponse(events.body(outcome), headers=headers)


#: How many of a session's latest events are read for the calls a previous response handed to the client.
_EVENTS_LOOKED_UP = 64
#: Chat Completions request fields as the Responses field they were translated from (``param`` of a refusal).
_PARAMS: Final = (
    (re.compile(r"^max_tokens"), "max_output_tokens"),
    (re.compile(r"^response_format\.json_schema"), "text.format"),
    (re.compile(r"^response_format"), "text.format"),
    (re.compile(r"^messages.*"), "input"),
    (re.compile(r"^(tools\[\d+\])\.function"), r"\1"),
    (re.compile(r"^tool_choice\.function"), "tool_choice"),
)


@contextmanager
def responses_params() -> Iterator[None]:
    """Refusals raised inside name the Responses field (``max_output_tokens``, ``text.format``, ``input``, ...),
    not the Chat Completions field the request was translated to."""
    try:
        yield
    except RequestError as error:
        if error.param is not None:
            for pattern, name in _PARAMS:
                if pattern.match(error.param):
                    error.param = pattern.sub(name, error.param, count=1)
                    break
        raise


async def _whole(events: ResponseEvents, outcome: TurnOutcome) -> AsyncIterator[bytes]:
    for event in [*events.started(), *events.finished(outcome)]:
        yield event


async def stream_events(runtime: AgentRuntime, turn: TurnRequest, events: ResponseEvents) -> AsyncIterator[bytes]:
    """The turn's typed events as the model streams it (see the module docstring)."""
    for event in events.started():
        yield event
    stream = runtime.stream(turn)
    try:
        async for item in stream:
            batch = events.finished(item) if isinstance(item, TurnOutcome) else events.text(item)
            for event in batch:
                yield event
    except KoraError as failure:
        for event in events.failed(failure.code, failure.message):
            yield event
    finally:
        await stream.aclose()
