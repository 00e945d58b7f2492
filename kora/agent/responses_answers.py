"""The answers of OpenAI's Responses API, built from the ``openai`` package's own types
(``openai.types.responses``): the ``response`` object (:class:`ResponseEvents`), its output items, ``usage``, its
streamed typed events, a stored response read back (:func:`stored_response`) and its input items
(:func:`input_items`).

This is the one agent module that imports ``openai`` (an import-linter contract), and nothing imports it by name:
the Responses routes load it on their first request (:data:`ANSWERS`, through
:class:`~kora.core.imports.DeferredImport`), after ``/health`` answers, so an agent that serves no Responses
request never holds the package (~0.6 s of imports, ~12 MB of RSS). Importing it also builds the pydantic schemas
of the types it uses (the SDK defers them to their first use), so no request pays for that.

Cost: a response's echoed request fields are validated once per distinct request, into the in-progress
``response`` (:class:`ResponseEvents`), and that object is serialized once into a :class:`Template` whose open
values are the fields an answer sets (id, creation time, conversation, status, output, usage). An answer sent (a
whole one, or a streamed answer's ``response.*`` events) is that template rendered with those values, each
serialized by its own type's serializer or template (the message item, the usage): byte for byte what the
response object copied with them serializes to (tested), without copying and serializing it per answer. A response
read back (:func:`stored_response`) is that object copied with its status, output and usage (``model_copy``, no
validation). Small objects (function call items, input items, errors) are validated as they are built, which in
pydantic-core costs less than the SDK's unvalidated ``construct`` (a recursive Python walk), and serialized once
with the SDK's serializer (API field names, fields not set left out). A streamed answer's events but its function
calls' are rendered from templates (:class:`EventTemplate`): each event type serialized once, at import, by its own
serializer with sentinel values, and each event then its constant bytes joined with its values' JSON (a sequence
number, the message id, the text, the response object's JSON), without building and serializing ten objects per
answer. Pure functions and data, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Final, Literal, cast

from openai import BaseModel
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseError,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseFunctionToolCallItem,
    ResponseFunctionToolCallOutputItem,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseInputMessageItem,
    ResponseInputText,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response import Conversation, IncompleteDetails
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import JsonValue, ValidationError
from pydantic_core import to_json as _to_json

from kora.agent.responses_api import (
    REQUEST_FIELDS,
    Origin,
    client_call,
    output_calls,
    response_fields,
    turn_events,
)
from kora.agent.responses_input import input_messages
from kora.agent.turn import ClientCall, TurnOutcome
from kora.core.errors import RequestError
from kora.core.events import EventType, MemoryEvent
from kora.core.protocol import APPROVAL_FIELD

#: A response's status as the SDK types it.
Status = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
#: An output item's status.
ItemStatus = Literal["in_progress", "completed", "incomplete"]
#: The codes a response's ``error`` may have (OpenAI's ``ResponseError.code``) that Kora's errors can be.
_ERROR_CODES: Final = frozenset({"server_error", "rate_limit_exceeded"})


def to_json(model: BaseModel) -> bytes:
    """``model`` as the API sends it: compact JSON, API field names, fields never set left out (what the SDK's
    ``to_json(indent=None)`` gives, by the model's own serializer without the two Python layers around it and the
    re-encoding of its text: ~1 us less per event)."""
    return model.__pydantic_serializer__.to_json(model, by_alias=True, exclude_unset=True)


#: A response's ``incomplete_details`` when a token limit cut its answer.
_INCOMPLETE: Final = to_json(IncompleteDetails(reason="max_output_tokens"))


def _sse(event: BaseModel, type_: str) -> bytes:
    return b"event: " + type_.encode() + b"\ndata: " + to_json(event) + b"\n\n"


def json_text(value: str) -> bytes:
    """``value`` as a JSON string, escaped as the SDK models' serializer escapes their strings (pydantic-core's)."""
    return _to_json(value)


class Template:
    """JSON bytes of an SDK object (or an SSE frame of one) with some values left open, made once from an instance
    serialized by its own serializer: the open values are unique sentinels (``holes``: name -> the JSON the
    sentinel has there), and the bytes are kept as the constant parts between them. :meth:`render` puts each
    value's JSON in its place, so an answer costs a join instead of building and serializing the object: byte for
    byte what the object with those values serializes to (tested). Raises :class:`ValueError` when a sentinel is
    not found exactly once."""

    def __init__(self, frame: bytes, holes: Mapping[str, bytes]) -> None:
        places = []
        for name, sentinel in holes.items():
            if frame.count(sentinel) != 1:
                raise ValueError(f"the sentinel of {name!r} is not in the template exactly once")
            places.append((frame.index(sentinel), name, sentinel))
        self.names: tuple[str, ...] = ()
        self._parts: list[bytes] = []
        at = 0
        for place, name, sentinel in sorted(places):
            self._parts.append(frame[at:place])
            self.names += (name,)
            at = place + len(sentinel)
        self._parts.append(frame[at:])

    def render(self, values: Mapping[str, bytes]) -> bytes:
        """The bytes with each open value's JSON (``values``: name -> JSON bytes) in its place."""
        parts = self._parts
        out = [parts[0]]
        for index, name in enumerate(self.names, 1):
            out.append(values[name])
            out.append(parts[index])
        return b"".join(out)


class EventTemplate(Template):
    """One streamed event (its SSE frame, :func:`_sse`) of an SDK event type as a :class:`Template`."""

    def __init__(self, event: BaseModel, type_: str, holes: Mapping[str, bytes]) -> None:
        super().__init__(_sse(event, type_), holes)


def _usage(outcome: TurnOutcome) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=outcome.input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
        output_tokens=outcome.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=outcome.input_tokens + outcome.output_tokens,
    )


def _text_part(text: str) -> ResponseOutputText:
    return ResponseOutputText(type="output_text", text=text, annotations=[])


def message_item(item_id: str, text: str, status: ItemStatus = "completed") -> ResponseOutputMessage:
    """An assistant ``message`` output item with one ``output_text`` part (none while it starts)."""
    content = [_text_part(text)] if status == "completed" else []
    return ResponseOutputMessage(type="message", id=item_id, status=status, role="assistant", content=content)


def call_item(
    call: ClientCall, arguments: str | None = None, status: ItemStatus = "completed", marker: JsonValue = None
) -> ResponseFunctionToolCall:
    """A ``function_call`` output item; ``marker``: Kora's ``kora_approval`` of a call waiting for approval (an
    extension field, kept by the SDK's types as an extra)."""
    item = ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{call.tool_call_id}",
        call_id=call.tool_call_id,
        name=call.name,
        arguments=call.arguments if arguments is None else arguments,
        status=status,
    )
    if marker is not None:
        setattr(item, APPROVAL_FIELD, marker)
    return item


def response_error(code: str | None, message: str | None) -> ResponseError:
    """A failed response's ``error``: Kora's error ``code`` is named at the start of the ``message``, as the
    ``code`` field takes only OpenAI's codes (``server_error`` for every failure of the turn)."""
    if code == "rate_limit_exceeded":
        return ResponseError(code="rate_limit_exceeded", message=message or "")
    if code == "server_error":
        return ResponseError(code="server_error", message=message or "")
    return ResponseError(code="server_error", message=f"{code}: {message}" if code else message or "")


#: The fields of a response that differ between responses with the same request: set on a copy of the validated
#: echo (:func:`_echo`), so that requests asking alike share one validation.
_OWN_FIELDS: Final = ("id", "created_at", "conversation")


#: Longest echo (JSON characters) kept in :func:`_echo`'s cache: 256 of them hold at most ~2 MB, however large the
#: requests' tool schemas are (a longer one is validated each time).
_CACHED_ECHO_CHARS: Final = 8192


@lru_cache(maxsize=256)
def _echo(echoed: bytes) -> Response:
    """The in-progress ``response`` of the echoed request fields ``echoed`` (JSON), validated, with placeholders
    for :data:`_OWN_FIELDS`. Raises :class:`~kora.core.errors.RequestError` (400, ``invalid_value``, ``param`` the
    field) for an echoed field the type refuses."""
    body = {
        "object": "response",
        **json.loads(echoed),
        "id": "",
        "created_at": 0,
        "conversation": None,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    try:
        return Response.model_validate(body)
    except ValidationError as invalid:
        error = invalid.errors()[0]
        param = ".".join(str(part) for part in error["loc"])
        raise RequestError(f"Invalid value for '{param}': {error['msg']}.", code="invalid_value", param=param) from None


#: The fields of a response that its answer sets: the open values of the response's :class:`Template`.
_ANSWER_FIELDS: Final = ("id", "created_at", "conversation", "status", "output", "usage", "incomplete_details")


def _body_template(echo: Response) -> Template | None:
    """The validated echo (:func:`_echo`) as a :class:`Template` of the response object whose open values are
    :data:`_ANSWER_FIELDS`, or None when the echo holds one of the sentinels (a request can write anything in its
    ``instructions``). The sentinels are strings set where the field's type may be another (serializer warnings
    off: the template's own bytes are never sent, each open value is rendered by the serializer of its type)."""
    sentinels = {name: f"\ue000kora:response.{name}\ue000" for name in _ANSWER_FIELDS}
    body = echo.model_copy(update=sentinels)
    frame = body.__pydantic_serializer__.to_json(body, by_alias=True, exclude_unset=True, warnings=False)
    try:
        return Template(frame, {name: json_text(value) for name, value in sentinels.items()})
    except ValueError:
        return None


@lru_cache(maxsize=256)
def _cached_template(echoed: bytes) -> Template | None:
    """:func:`_body_template` of :func:`_echo` ``(echoed)``, once per distinct echo (as :func:`_echo`)."""
    return _body_template(_echo(echoed))


def _validated(fields: Mapping[str, JsonValue]) -> tuple[Response, dict[str, object], Template | None]:
    """The in-progress ``response`` of ``fields`` (:func:`kora.agent.responses_api.response_fields`) without its
    own fields, those (:data:`_OWN_FIELDS`, typed) to set on a copy, and its :class:`Template` (None for an echo
    longer than :data:`_CACHED_ECHO_CHARS`: made per request it would cost what it saves): the echoed request
    fields are validated once per distinct request (a typical turn's ~40 us of validation becomes a cached
    look-up). The cache's key is
    the fields' JSON in their order (pydantic-core's encoder, ~5x faster than ``json.dumps`` sorting them):
    :func:`~kora.agent.responses_api.response_fields` gives them in one order, and another order is only another
    key. Raises what :func:`_echo` raises."""
    echoed = _to_json({name: value for name, value in fields.items() if name not in _OWN_FIELDS})
    conversation = fields.get("conversation")
    own = {
        "id": fields["id"],
        "created_at": float(cast(float, fields["created_at"])),
        "conversation": Conversation(id=str(conversation["id"])) if isinstance(conversation, dict) else None,
    }
    if len(echoed) > _CACHED_ECHO_CHARS:
        return _echo.__wrapped__(echoed), own, None
    return _echo(echoed), own, _cached_template(echoed)


class ResponseEvents:
    """One response: its object (:meth:`body`) and, streamed, its typed events as SSE bytes, each with its
    ``type`` and a ``sequence_number``. ``fields``: :func:`~kora.agent.responses_api.response_fields` (also what
    its turn stores, so a response read back later is the one answered). Raises
    :class:`~kora.core.errors.RequestError` when an echoed field is not what the response type takes."""

    def __init__(self, fields: Mapping[str, JsonValue]) -> None:
        self.fields = dict(fields)
        self.id = str(fields["id"])
        self._echo, self._own, self._template = _validated(fields)
        self._sequence = 0
        self._message_id = f"msg_{self.id.removeprefix('resp_')}"
        self._message_json = json_text(self._message_id)
        self._text: list[str] = []
        self._open = False

    def body(
        self, outcome: TurnOutcome | None, status: Status = "completed", error: ResponseError | None = None
    ) -> Response:
        """The ``response`` object: ``output`` holds the answer's message (when it has text) and one
        ``function_call`` item per client call; ``usage`` the turn's tokens; ``error`` a failed turn's
        ``{"code", "message"}``."""
        if outcome is None:
            if status == "in_progress" and error is None:
                return self._started
            return self._echo.model_copy(update={**self._own, "status": status, "error": error})
        output: list[ResponseOutputMessage | ResponseFunctionToolCall] = []
        if outcome.text:
            output.append(message_item(self._message_id, outcome.text))
        output += [call_item(call, marker=marker) for call, marker in output_calls(outcome)]
        incomplete = IncompleteDetails(reason="max_output_tokens") if outcome.finish_reason == "length" else None
        update = {
            **self._own,
            "status": "incomplete" if incomplete is not None and status == "completed" else status,
            "output": output,
            "usage": _usage(outcome),
            "error": error,
            "incomplete_details": incomplete,
        }
        return self._echo.model_copy(update=update)  # one copy of the validated echo per answer, no validation

    def answer(self, outcome: TurnOutcome | None) -> bytes:
        """The ``response`` object's JSON: :meth:`body` of ``outcome`` (in progress when None) as :func:`to_json`
        serializes it, byte for byte (tested), rendered from the response's :class:`Template` (the validated echo
        serialized once per distinct request) with its own values, its output items and its usage, each serialized
        by its own type's serializer or template: no response object is copied and serialized per answer."""
        template = self._template
        if template is None:
            return to_json(self._started if outcome is None else self.body(outcome))
        conversation = self._own["conversation"]
        values = {
            "id": json_text(self.id),
            "created_at": _to_json(self._own["created_at"]),
            "conversation": b"null" if conversation is None else to_json(cast(Conversation, conversation)),
        }
        if outcome is None:
            values |= {"status": b'"in_progress"', "output": b"[]", "usage": b"null", "incomplete_details": b"null"}
            return template.render(values)
        frames = _frames()
        items = []
        if outcome.text:
            items.append(frames.message.render({"id": self._message_json, "text": json_text(outcome.text)}))
        items += [to_json(call_item(call, marker=marker)) for call, marker in output_calls(outcome)]
        tokens = {"input": outcome.input_tokens, "output": outcome.output_tokens}
        tokens["total"] = tokens["input"] + tokens["output"]
        limited = outcome.finish_reason == "length"
        values |= {
            "status": b'"incomplete"' if limited else b'"completed"',
            "output": b"[" + b",".join(items) + b"]",
            "usage": frames.usage.render({name: str(count).encode() for name, count in tokens.items()}),
            "incomplete_details": _INCOMPLETE if limited else b"null",
        }
        return template.render(values)

    @cached_property
    def _started(self) -> Response:
        """The in-progress ``response`` (made when first asked for: a whole answer never needs it)."""
        return self._echo.model_copy(update=self._own)

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _seq(self) -> bytes:
        return str(self._next()).encode()

    def started(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress`` (the response serialized once for both)."""
        frames, body = _frames(), self.answer(None)
        return [
            frames.created.render({"seq": self._seq(), "response": body}),
            frames.in_progress.render({"seq": self._seq(), "response": body}),
        ]

    def text(self, delta: str) -> list[bytes]:
        """A text delta (the message item and its part are opened before the first)."""
        frames, events = _frames(), []
        if not self._open:
            self._open = True
            events.append(frames.item_added.render({"seq": self._seq(), "id": self._message_json}))
            events.append(frames.part_added.render({"seq": self._seq(), "id": self._message_json}))
        self._text.append(delta)
        events.append(frames.delta.render({"seq": self._seq(), "id": self._message_json, "text": json_text(delta)}))
        return events

    def finished(self, outcome: TurnOutcome) -> list[bytes]:
        """The end: the message's ``done`` events, one ``function_call`` item per call (its arguments as one
        delta), then ``response.completed`` (``response.incomplete`` when a token limit cut the answer)."""
        frames = _frames()
        events = [] if self._open or not outcome.text else self.text(outcome.text)
        index = 0
        if self._open:
            text = json_text("".join(self._text))
            for frame in (frames.text_done, frames.part_done, frames.item_done):
                events.append(frame.render({"seq": self._seq(), "id": self._message_json, "text": text}))
            index = 1
        for offset, (call, marker) in enumerate(output_calls(outcome)):
            at = index + offset
            item_id = f"fc_{call.tool_call_id}"
            added = ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                sequence_number=self._next(),
                output_index=at,
                item=call_item(call, "", "in_progress", marker),
            )
            events.append(_sse(added, added.type))
            delta = ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta",
                sequence_number=self._next(),
                item_id=item_id,
                output_index=at,
                delta=call.arguments,
            )
            events.append(_sse(delta, delta.type))
            arguments = ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done",
                sequence_number=self._next(),
                item_id=item_id,
                output_index=at,
                arguments=call.arguments,
            )
            events.append(_sse(arguments, arguments.type))
            item_done = ResponseOutputItemDoneEvent(
                type="response.output_item.done",
                sequence_number=self._next(),
                output_index=at,
                item=call_item(call, marker=marker),
            )
            events.append(_sse(item_done, item_done.type))
        end = frames.incomplete if outcome.finish_reason == "length" else frames.completed
        events.append(end.render({"seq": self._seq(), "response": self.answer(outcome)}))
        return events

    def error(self, code: str, message: str, param: str | None = None) -> list[bytes]:
        """The ``error`` event: a request refused after its stream started, before its turn ran (not a failure of
        the response: see :func:`kora.agent.routes.responses.stream_events`); Kora's error ``code``."""
        event = ResponseErrorEvent(type="error", sequence_number=self._next(), code=code, message=message, param=param)
        return [_sse(event, "error")]

    def failed(self, code: str, message: str) -> list[bytes]:
        """``response.failed`` with the error."""
        body = self.body(None, "failed", response_error(code, message))
        return [_frames().failed.render({"seq": self._seq(), "response": to_json(body)})]


@dataclass(frozen=True)
class _Frames:
    """The :class:`EventTemplate` of each event a streamed answer is made of but its function calls' (those are
    built as SDK objects: one answer has few). Open values: ``seq`` (``sequence_number``), ``id`` (the message
    item's id), ``text`` (a delta, or the message's whole text), ``response`` (a response object's JSON). And the
    :class:`Template` of a response's parts (:meth:`ResponseEvents.answer`): ``message``, the answer's message
    item (``id``, ``text``), and ``usage`` (``input``, ``output``, ``total``: token counts)."""

    created: EventTemplate
    in_progress: EventTemplate
    completed: EventTemplate
    incomplete: EventTemplate
    failed: EventTemplate
    item_added: EventTemplate
    part_added: EventTemplate
    delta: EventTemplate
    text_done: EventTemplate
    part_done: EventTemplate
    item_done: EventTemplate
    message: Template
    usage: Template


@lru_cache(maxsize=1)
def _frames() -> _Frames:
    """The templates, made the first time (from sentinel values no answer holds; this module's import makes them)."""
    seq, id_, text = 987654321, "\ue000kora:id\ue000", "\ue000kora:text\ue000"
    response = ResponseEvents(response_fields("resp_00_frames", "\ue000kora:model\ue000", {})).body(None, "in_progress")
    holes = {"seq": str(seq).encode(), "id": json_text(id_), "text": json_text(text)}
    whole = {"seq": holes["seq"], "response": to_json(response)}
    ids = {"item_id": id_, "output_index": 0, "content_index": 0}
    tokens = {"input": 987654301, "output": 987654302}
    usage = _usage(TurnOutcome("", "stop", tokens["input"], tokens["output"], 0))
    counts = tokens | {"total": tokens["input"] + tokens["output"]}

    def of(event: BaseModel, names: tuple[str, ...]) -> EventTemplate:
        type_ = str(getattr(event, "type"))  # noqa: B009 (every SDK event has its type)
        return EventTemplate(event, type_, {name: (holes | whole)[name] for name in names})

    return _Frames(
        created=of(
            ResponseCreatedEvent(type="response.created", sequence_number=seq, response=response), ("seq", "response")
        ),
        in_progress=of(
            ResponseInProgressEvent(type="response.in_progress", sequence_number=seq, response=response),
            ("seq", "response"),
        ),
        completed=of(
            ResponseCompletedEvent(type="response.completed", sequence_number=seq, response=response),
            ("seq", "response"),
        ),
        incomplete=of(
            ResponseIncompleteEvent(type="response.incomplete", sequence_number=seq, response=response),
            ("seq", "response"),
        ),
        failed=of(
            ResponseFailedEvent(type="response.failed", sequence_number=seq, response=response), ("seq", "response")
        ),
        item_added=of(
            ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                sequence_number=seq,
                output_index=0,
                item=message_item(id_, "", "in_progress"),
            ),
            ("seq", "id"),
        ),
        part_added=of(
            ResponseContentPartAddedEvent(
                type="response.content_part.added", sequence_number=seq, part=_text_part(""), **ids
            ),
            ("seq", "id"),
        ),
        delta=of(
            ResponseTextDeltaEvent(
                type="response.output_text.delta", sequence_number=seq, delta=text, logprobs=[], **ids
            ),
            ("seq", "id", "text"),
        ),
        text_done=of(
            ResponseTextDoneEvent(type="response.output_text.done", sequence_number=seq, text=text, logprobs=[], **ids),
            ("seq", "id", "text"),
        ),
        part_done=of(
            ResponseContentPartDoneEvent(
                type="response.content_part.done", sequence_number=seq, part=_text_part(text), **ids
            ),
            ("seq", "id", "text"),
        ),
        item_done=of(
            ResponseOutputItemDoneEvent(
                type="response.output_item.done", sequence_number=seq, output_index=0, item=message_item(id_, text)
            ),
            ("seq", "id", "text"),
        ),
        message=Template(to_json(message_item(id_, text)), {"id": holes["id"], "text": holes["text"]}),
        usage=Template(to_json(usage), {name: str(count).encode() for name, count in counts.items()}),
    )


# -- stored responses -------------------------------------------------------------------------------------------


def stored_response(response_id: str, events: Sequence[MemoryEvent]) -> Response | None:
    """The response object ``response_id`` as its turn stored it (``events``: the session's events), or None when
    the session does not hold it. Its output: the turn's answer and the calls it handed to the client (its
    ``tool_call`` events that no result of the same turn answers); its status: ``failed`` or ``cancelled`` with
    the turn's ``error`` event, ``incomplete`` when a limit cut it (its text then the limit's message when a step
    budget or another budget ended the turn), else ``completed``."""
    own = turn_events(events, response_id)
    if not own:
        return None
    fields = own[0].metadata.get(REQUEST_FIELDS)
    if not isinstance(fields, dict):
        return None  # the turn's first events were evicted from a full session: the response is gone
    closing = own[-1].metadata
    usage = closing.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    answered = {_call_id(e) for e in own if e.event_type == EventType.TOOL_RESULT}
    calls = tuple(client_call(e) for e in own if e.event_type == EventType.TOOL_CALL and _call_id(e) not in answered)
    texts = [e.content for e in own if e.event_type == EventType.AGENT_RESPONSE and isinstance(e.content, str)]
    finish = closing.get("finish_reason")
    failure = next((e.content for e in own if e.event_type == EventType.ERROR and isinstance(e.content, dict)), {})
    message = failure.get("message") if isinstance(failure, dict) else None
    if finish == "length" and isinstance(message, str):
        texts.append(message)  # a spent step budget or another budget: its message was the answer
    outcome = TurnOutcome(
        texts[-1] if texts else "",
        finish if isinstance(finish, str) else "stop",
        _int(usage.get("input_tokens")),
        _int(usage.get("output_tokens")),
        0,
        calls,
    )
    events_of = ResponseEvents(fields)
    if isinstance(finish, str):
        return _marked(events_of.body(outcome), own)
    code = failure.get("error_type") if isinstance(failure, dict) else None
    if code == "cancelled":
        return events_of.body(outcome, "cancelled")
    return events_of.body(outcome, "failed", response_error(str(code) if code else None, str(message or "")))


def input_items(events: Sequence[MemoryEvent]) -> list[dict[str, JsonValue]]:
    """The input items of a stored response, oldest first (``events``: its turn's,
    :func:`~kora.agent.responses_api.turn_events`), as JSON objects: the prompt as a user ``message`` (its text:
    memory keeps no images), the client's ``function_call_output`` s and the ``function_call`` s they answer when
    the turn stored those (a client that resent them)."""
    items: list[BaseModel] = []
    for event in events:
        if event.metadata.get("input") is not True:
            continue
        key = event.event_id.removeprefix("evt_")
        content = event.content if isinstance(event.content, dict) else {}
        if event.event_type in (EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED):
            text = ResponseInputText(type="input_text", text=str(event.content))
            items.append(
                ResponseInputMessageItem(
                    type="message", id=f"msg_{key}", role="user", status="completed", content=[text]
                )
            )
        elif event.event_type == EventType.TOOL_CALL:
            call = client_call(event)
            items.append(
                ResponseFunctionToolCallItem(
                    type="function_call",
                    id=f"fc_{call.tool_call_id}",
                    call_id=call.tool_call_id,
                    name=call.name,
                    arguments=call.arguments,
                    status="completed",
                )
            )
        elif event.event_type == EventType.TOOL_RESULT:
            output = content.get("content")
            items.append(
                ResponseFunctionToolCallOutputItem(
                    type="function_call_output",
                    id=f"fco_{key}",
                    call_id=str(content.get("tool_call_id") or ""),
                    output=output if isinstance(output, str) else json.dumps(output),
                    status="completed",
                )
            )
    return [item.model_dump(mode="json", by_alias=True, exclude_unset=True) for item in items]


def _marked(body: Response, events: Sequence[MemoryEvent]) -> Response:
    """A stored response's ``body`` with the ``kora_approval`` marker of each ``function_call`` item whose call
    waited for approval (kept in its ``tool_call`` event's metadata), as the answer had it."""
    markers = {
        _call_id(e): e.metadata[APPROVAL_FIELD]
        for e in events
        if e.event_type == EventType.TOOL_CALL and APPROVAL_FIELD in e.metadata
    }
    for item in body.output if markers else ():
        if isinstance(item, ResponseFunctionToolCall) and item.call_id in markers:
            setattr(item, APPROVAL_FIELD, markers[item.call_id])
    return body


def _call_id(event: MemoryEvent) -> object:
    return event.content.get("tool_call_id") if isinstance(event.content, dict) else None


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


@dataclass(frozen=True)
class Answers:
    """What the Responses routes take from this module once it is loaded (typed, unlike a module object)."""

    events: type[ResponseEvents]
    stored_response: Callable[[str, Sequence[MemoryEvent]], Response | None]
    input_items: Callable[[Sequence[MemoryEvent]], list[dict[str, JsonValue]]]
    to_json: Callable[[BaseModel], bytes]
    input_messages: Callable[[Mapping[str, Any]], tuple[list[dict[str, Any]], list[Origin]]]


#: This module's answers, for :class:`~kora.core.imports.DeferredImport` users.
ANSWERS: Final = Answers(ResponseEvents, stored_response, input_items, to_json, input_messages)


def _build_schemas() -> None:
    """Build the pydantic schemas of the types used here (the SDK defers each to its first use, ~0.2 s for
    ``Response``), by making and serializing one answer of each kind."""
    fields: dict[str, JsonValue] = {
        "id": "resp_00_warm",
        "model": "m",
        "created_at": 0,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    warm = ResponseEvents(fields)
    outcome = TurnOutcome("hi", "stop", 1, 1, 1, (ClientCall("c", "f", "{}"),))
    warm.started()
    warm.text("h")
    warm.finished(outcome)
    warm.failed("server_error", "x")
    warm.error("memory_unavailable", "x")
    text = ResponseInputText(type="input_text", text="hi")
    message = ResponseInputMessageItem(type="message", id="m", role="user", status="completed", content=[text])
    call = ResponseFunctionToolCallItem(
        type="function_call", id="fc", call_id="c", name="f", arguments="{}", status="completed"
    )
    output = ResponseFunctionToolCallOutputItem(type="function_call_output", id="o", output="x", status="completed")
    for item in (message, call, output):
        to_json(item)


_build_schemas()
