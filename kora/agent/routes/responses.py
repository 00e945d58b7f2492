"""``POST /v1/responses``: one agent turn over OpenAI's Responses API, whole or streamed as its typed events.

A request is translated to the Chat Completions request it means (:mod:`kora.agent.responses_api`) and then
follows the chat endpoint's rules: every field honoured or refused with a 400, client function tools, structured
output (``text.format``), sampling fields. The session is the one ``previous_response_id`` names, else the
``conversation`` (its id is the session id: the turn reads that session's history and adds to it, as
``X-Session-ID`` does on the chat endpoint; with the header or the body's ``session_id`` naming another session,
or with ``previous_response_id``, it is a 400), else ``X-Session-ID``, else the body's ``session_id``, else a new
one; the response ``id`` names it, so the next request continues it with ``previous_response_id`` (or the same
``conversation``). ``function_call_output`` items answer the function calls of
the previous response, which the session holds; it must be the session's latest stored response. A turn paused at
calls waiting for a person's approval answers with their ``function_call`` items, each marked with Kora's extension
field ``kora_approval`` (``{"id", "target", "expires_at"}``); a ``function_call_output`` whose ``output`` is a
decision object (``{"decision": "approve" | "reject", "reason"?, "arguments"?}``) decides the call and the turn
goes on, stored as the new response (refusals as on the chat endpoint: 400, 409 ``approval_decided``, 403). ``store:
false`` runs the turn without storing anything (no session is created; one named is read, not written).

Stored responses: ``GET /v1/responses/{id}`` answers one as it was answered, read back from its turn's events
(:func:`kora.agent.responses_answers.stored_response`); ``DELETE`` erases its session (a session's events are erased
together); ``GET .../input_items`` lists its input (``after``, ``limit``, ``order``). ``background: true``
runs the turn as a task and answers at once (``queued``); ``GET`` shows it ``in_progress`` until it ends and
``POST .../cancel`` cancels it (:mod:`kora.agent.routes.background`); cancelling any other response is a 400.
Who may read, continue or delete a response is who may use its session (:meth:`kora.memory.Memory.check_reader`:
403 ``session_forbidden``); one not held is a 404 (``response_not_found``, or ``previous_response_not_found``
when a request names it).

Streamed: ``response.created``, ``response.in_progress``, the message's ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ..., ``.done`` events, each function call's
``response.output_item.added``, ``response.function_call_arguments.delta`` / ``.done``,
``response.output_item.done``, then ``response.completed`` (``response.incomplete`` when a token limit cut the
answer). A request refused before its stream starts is an HTTP error (400, 403, 409, 503) in OpenAI's error
body. Once the stream has started, a failure of the turn itself (a :class:`~kora.core.errors.TurnError`: the model
failed or timed out, ...; its ``error`` event is stored) is ``response.failed``, and the response reads back as
failed; any other error (the agent could not serve the request: the session began waiting for an approval while
this request waited for it, a paused turn another request took, a memory store that went away in strict mode) is
OpenAI's ``error`` event (``code``: Kora's error code, ``message``, ``param``), which ends the stream: it is no
failure of a response, and no failed response is stored for it. A structured answer is streamed once it
validated, as on the chat endpoint.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from kora.agent.approvals import PausedTurn
from kora.agent.identity import open_session
from kora.agent.openai_api import decode_body, parse_chat_body
from kora.agent.responses_api import (
    Origin,
    chat_body,
    check_previous,
    conversation_of,
    input_param,
    latest_response,
    pending_calls,
    response_fields,
    response_id,
    response_not_found,
    session_in,
    session_of,
    turn_events,
)
from kora.agent.routes.chat import chat_turn, event_stream, requested_session, run_or_resume
from kora.agent.routes.queries import PAGE_PARAMS, page, refuse_query
from kora.agent.routes.request_route import request_route
from kora.agent.state import AgentState
from kora.agent.turn import ResponseRecord, TurnOutcome, TurnRequest
from kora.core.errors import KoraError, RequestError, TurnError
from kora.core.events import MemoryEvent
from kora.core.imports import DeferredImport
from kora.core.protocol import SESSION_HEADER
from kora.core.serving import error_response
from kora.memory import new_session_id

if TYPE_CHECKING:
    from openai import BaseModel

    from kora.agent.responses_answers import Answers, ResponseEvents
    from kora.agent.runtime import AgentRuntime

#: The answers, built from the ``openai`` package's types: imported on the first request that needs them, after
#: ``/health`` answers (an agent that serves no Responses request never loads ``openai``).
_ANSWERS: Final = DeferredImport("kora.agent.responses_answers")


async def load_answers() -> Answers:
    """:data:`kora.agent.responses_answers.ANSWERS`, imported the first time (~0.6 s, in a worker thread)."""
    return cast("Answers", (await _ANSWERS.load()).ANSWERS)


def json_answer(answers: Answers, body: BaseModel, headers: dict[str, str] | None = None) -> Response:
    """``body`` (an SDK object) as a JSON answer, serialized once by the SDK's own method."""
    return Response(answers.to_json(body), media_type="application/json", headers=headers)


def add_responses_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``
    and ``POST /v1/responses/{id}/cancel`` to ``router``, serving turns with ``state``'s runtime and memory."""
    agent_name = state.settings.agent_name
    background = state.background

    @request_route(router, "/v1/responses", methods=["POST"])
    async def create_response(request: Request) -> Response:
        identity = await state.identity.resolve(request.headers)
        body = decode_body(await request.body())
        answers = await load_answers()
        messages, origins = answers.input_messages(body)
        previous = body.get("previous_response_id")
        conversation = conversation_of(body)
        store = body.get("store") is not False
        runtime = await state.wait_runtime()
        if previous is not None or conversation is not None:
            session_id = session_of(previous) if conversation is None else conversation
            await state.memory.check_reader(session_id, identity.user_id)
            # A decision on a call decided already: 409, whichever response the request continues.
            runtime.refuse_decided(session_id, output_call_ids(body), identity.user_id)
            stored = await state.memory.get_session_events(session_id, limit=_EVENTS_LOOKED_UP)
            if previous is not None and latest_response(stored) != previous:  # else the whole session says why
                check_previous(await state.memory.get_session_events(session_id), previous)
            unanswered = pending_calls(stored)
            with responses_params(origins):
                parsed = parse_chat_body(chat_body(body, messages, origins, unanswered))
                turn = chat_turn(parsed, request, identity)
                runtime.check(turn)
            if conversation is not None:
                _check_one_session(conversation, request.headers.get(SESSION_HEADER), parsed.request.session_id)
            if store:  # as every stored turn opens its session (a remote store learns who continues it)
                await open_session(state.memory, session_id, agent_name, identity)
        else:
            unanswered = []
            with responses_params(origins):
                parsed = parse_chat_body(chat_body(body, messages, origins))
                turn = chat_turn(parsed, request, identity)
                runtime.check(turn)
            requested = requested_session(request.headers.get(SESSION_HEADER), parsed.request.session_id)
            if store:
                session_id = await open_session(state.memory, requested, agent_name, identity)
            elif requested is not None:  # read, never created: a turn that is not stored leaves no session
                await state.memory.check_reader(requested, identity.user_id)
                session_id = requested
            else:
                session_id = new_session_id()
        fields = response_fields(response_id(session_id), parsed.request.model or agent_name, body, conversation)
        fields["store"] = store and state.memory.enabled  # a disabled memory keeps nothing: the answer says so
        events = answers.events(fields)
        turn = replace(turn, session_id=session_id, response=ResponseRecord(events.id, fields, store))
        headers = {SESSION_HEADER: session_id}
        if turn.tool_results and runtime.approvals.in_session(session_id) is None:
            await runtime.sync_paused()  # the shared task store: calls another replica paused
        # Results for calls of the agent's own tools no paused turn holds: refused, not shown to the model.
        runtime.refuse_unknown_decisions(turn)
        if fields["background"] is True:
            if not fields["store"]:
                raise RequestError(
                    "Invalid value: 'background' needs a stored response, and this agent's memory is disabled "
                    "(MEMORY_ENABLED=false): there would be nothing to poll.",
                    code="invalid_value",
                    param="background",
                )
            # Decisions on calls waiting for approval are taken in the foreground: a 409 while the session waits.
            await runtime.refuse_waiting(session_id)
            return json_answer(answers, background.start(runtime, turn, events), headers)
        paused = runtime.take_decisions(turn)
        if paused is None:  # refused before a stream starts: a 409, not an error inside a 200 stream
            await runtime.refuse_waiting(session_id)
        elif paused.decided and paused.resumer is None:
            # The turn goes on as this response: its events carry this response's id.
            paused.turn = replace(paused.turn, response=turn.response)
            turn = paused.turn
        if parsed.request.stream and parsed.output is None and (paused is None or turn is paused.turn):
            return event_stream(stream_events(runtime, turn, events, paused), headers)
        try:
            outcome = await run_or_resume(runtime, turn, paused)
        except KoraError as failure:
            return error_response(failure, headers)
        if parsed.request.stream:
            return event_stream(_whole(events, outcome), headers)
        return Response(events.answer(outcome), media_type="application/json", headers=headers)

    async def held(request: Request, id_: str, served: frozenset[str] = frozenset()) -> tuple[str, list[MemoryEvent]]:
        """The session of response ``id_`` and its events, once the caller may read it (a session of another
        user: 403); 404 for an id that names no session; 400 for a query parameter not ``served``."""
        refuse_query(request, served)
        identity = await state.identity.resolve(request.headers)
        session_id = session_in(id_)
        if session_id is None:
            raise response_not_found(id_)
        await state.memory.check_reader(session_id, identity.user_id)
        return session_id, await state.memory.get_session_events(session_id)

    @router.get("/v1/responses/{response_id}")
    async def retrieve_response(request: Request, response_id: str) -> Response:
        _, stored = await held(request, response_id)
        answers = await load_answers()
        body = background.running(response_id) or answers.stored_response(response_id, stored)
        if body is None:
            raise response_not_found(response_id)
        return json_answer(answers, body)

    @router.get("/v1/responses/{response_id}/input_items")
    async def list_input_items(request: Request, response_id: str) -> Response:
        _, stored = await held(request, response_id, PAGE_PARAMS)
        own = turn_events(stored, response_id)
        answers = await load_answers()
        if answers.stored_response(response_id, own) is None:
            raise response_not_found(response_id)
        return JSONResponse(page(request, answers.input_items(own)))

    @router.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request, response_id: str) -> Response:
        session_id, stored = await held(request, response_id)
        answers = await load_answers()
        if (background.running(response_id) or answers.stored_response(response_id, stored)) is None:
            raise response_not_found(response_id)
        await state.forget_session(session_id)  # a turn still running would store into the erased session
        # A response is a turn of its session, and a session's events are erased together: deleting it erases
        # the conversation it belongs to (every response chained with it). Its own events alone are no erasure:
        # the memory service folds older events into the session's rolling summary and extracts facts from them,
        # and neither gives back one turn; the memory interface erases sessions and users, never single events.
        await state.memory.erase_session(session_id)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})

    @router.post("/v1/responses/{response_id}/cancel")
    async def cancel_response(request: Request, response_id: str) -> Response:
        session_id, stored = await held(request, response_id)
        if await background.cancel(response_id):
            stored = await state.memory.get_session_events(session_id)
        answers = await load_answers()
        body = answers.stored_response(response_id, stored)
        if body is None:
            raise response_not_found(response_id)
        if body.background is not True:
            raise RequestError(
                f"Cannot cancel response '{response_id}': only a response created with background=true can be "
                "cancelled (every other response has ended when it is answered).",
                code="unsupported_value",
            )
        return json_answer(answers, body)  # cancelled, or as it ended when it ended before the cancel


def output_call_ids(body: dict[str, Any]) -> list[str]:
    """The ``call_id`` of each ``function_call_output`` item of a request's ``input``."""
    items = body.get("input")
    if not isinstance(items, list):
        return []
    outputs = [item for item in items if isinstance(item, dict) and item.get("type") == "function_call_output"]
    return [item["call_id"] for item in outputs if isinstance(item.get("call_id"), str)]


def _check_one_session(conversation: str, header: str | None, body: str | None) -> None:
    """Refuse an ``X-Session-ID`` header or a body ``session_id`` naming another session than ``conversation``
    (400 ``invalid_value``, ``param: "conversation"``): the turn runs in one session."""
    requested = requested_session(header, body)
    if requested is not None and requested != conversation:
        raise RequestError(
            "Invalid value: 'conversation' names another session than the request's "
            f"{SESSION_HEADER if header else 'session_id'}: a conversation is the session the turn runs in.",
            code="invalid_value",
            param="conversation",
        )


#: How many of a session's latest events are read for the calls a previous response handed to the client (and to
#: find that it is the session's latest response; the whole session is read only to refuse one that is not).
_EVENTS_LOOKED_UP = 64
#: Chat Completions request fields as the Responses field they were translated from (``param`` of a refusal).
_PARAMS: Final = (
    (re.compile(r"^max_tokens"), "max_output_tokens"),
    (re.compile(r"^response_format\.json_schema"), "text.format"),
    (re.compile(r"^response_format"), "text.format"),
    (re.compile(r"^(tools\[\d+\])\.function"), r"\1"),
    (re.compile(r"^tool_choice\.function"), "tool_choice"),
)


#: The chat rules' codes for a conversation they cannot take, as the Responses API's: both say ``input`` holds no
#: prompt (no item at all, or none a turn can answer).
_CHAT_CODES: Final = {"missing_messages": "invalid_value", "no_user_message": "invalid_value"}


@contextmanager
def responses_params(origins: Sequence[Origin]) -> Iterator[None]:
    """Refusals raised inside name the Responses field (``max_output_tokens``, ``text.format``,
    ``input[2].call_id``, ...), not the Chat Completions field the request was translated to; ``origins``: where
    each chat message came from (:func:`~kora.agent.responses_api.input_param`)."""
    try:
        yield
    except RequestError as error:
        chat_param = error.param
        if chat_param is not None and chat_param.startswith("messages"):
            error.param = input_param(chat_param, origins)
        elif chat_param is not None:
            for pattern, name in _PARAMS:
                if pattern.match(chat_param):
                    error.param = pattern.sub(name, chat_param, count=1)
                    break
        if error.param != chat_param:  # the message quotes the field it names
            error.message = error.message.replace(f"'{chat_param}'", f"'{error.param}'")
        if error.code in _CHAT_CODES:
            error.code = _CHAT_CODES[error.code]
            error.param = "input"
        raise


async def _whole(events: ResponseEvents, outcome: TurnOutcome) -> AsyncIterator[bytes]:
    yield b"".join([*events.started(), *events.finished(outcome)])


async def stream_events(
    runtime: AgentRuntime, turn: TurnRequest, events: ResponseEvents, resume: PausedTurn | None = None
) -> AsyncIterator[bytes]:
    """The turn's typed events as the model streams it; ``resume``: a paused turn whose calls this request decided
    goes on. Ends with ``response.failed`` when the turn fails, with the ``error`` event when another error stops
    the request (see the module docstring).

    The events one step makes (the two that open the response, a message's opening and its first delta, the
    ``done`` events and ``response.completed``) are sent together, in one write: the same bytes as one write
    each, without a pass through the ASGI stack per event (which made a streamed answer cost ~1.2x a chat one)."""
    yield b"".join(events.started())
    stream = runtime.stream(turn, resume=resume, checked=True)  # the route refused a session that waits
    try:
        async for item in stream:
            yield b"".join(events.finished(item) if isinstance(item, TurnOutcome) else events.text(item))
    except TurnError as failure:  # the turn ran and failed: its error event is stored, the response failed
        yield b"".join(events.failed(failure.code, failure.message))
    except KoraError as refused:  # refused before its turn ran: no response of its own failed, nothing stored
        yield b"".join(events.error(refused.code, refused.message, refused.param))
    finally:
        await stream.aclose()
