"""The streamed Responses events rendered from templates (:class:`kora.agent.responses_answers.EventTemplate`) are
byte for byte what the ``openai`` SDK's event objects with the same values serialize to, and the SDK parses them
back to those values; hostile text included (quotes, escapes, control characters, non-BMP characters)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from pydantic import TypeAdapter

from kora.agent.approval_calls import PendingApproval
from kora.agent.responses_answers import (
    ResponseEvents,
    _frames,
    _sse,
    _text_part,
    json_text,
    message_item,
    response_error,
    to_json,
)
from kora.agent.responses_api import response_fields
from kora.agent.turn import ClientCall, TurnOutcome

pytestmark = pytest.mark.unit

EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
#: Text as a model may send it: any character a JSON string can carry (no lone surrogates: those are not UTF-8).
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
numbers = st.integers(min_value=0, max_value=2**31)


def _parsed(frame: bytes) -> tuple[str, ResponseStreamEvent]:
    head, data = frame.removesuffix(b"\n\n").split(b"\ndata: ")
    return head.removeprefix(b"event: ").decode(), EVENTS.validate_json(data)


@settings(max_examples=200, deadline=None)
@given(seq=numbers, item_id=texts, text=texts)
def test_message_event_frames_are_the_sdk_events_bytes(seq, item_id, text):
    frames = _frames()
    values = {"seq": str(seq).encode(), "id": json_text(item_id), "text": json_text(text)}
    ids = {"item_id": item_id, "output_index": 0, "content_index": 0}
    expected = {
        frames.item_added: ResponseOutputItemAddedEvent(
            type="response.output_item.added",
            sequence_number=seq,
            output_index=0,
            item=message_item(item_id, "", "in_progress"),
        ),
        frames.part_added: ResponseContentPartAddedEvent(
            type="response.content_part.added", sequence_number=seq, part=_text_part(""), **ids
        ),
        frames.delta: ResponseTextDeltaEvent(
            type="response.output_text.delta", sequence_number=seq, delta=text, logprobs=[], **ids
        ),
        frames.text_done: ResponseTextDoneEvent(
            type="response.output_text.done", sequence_number=seq, text=text, logprobs=[], **ids
        ),
        frames.part_done: ResponseContentPartDoneEvent(
            type="response.content_part.done", sequence_number=seq, part=_text_part(text), **ids
        ),
        frames.item_done: ResponseOutputItemDoneEvent(
            type="response.output_item.done", sequence_number=seq, output_index=0, item=message_item(item_id, text)
        ),
    }
    for template, event in expected.items():
        rendered = template.render(values)
        assert rendered == _sse(event, event.type)
        assert _parsed(rendered) == (event.type, event)


@settings(max_examples=100, deadline=None)
@given(seq=numbers, model=texts, answer=texts, message=texts)
def test_response_event_frames_are_the_sdk_events_bytes(seq, model, answer, message):
    events = ResponseEvents(response_fields("resp_00_x", model, {"instructions": message}))
    finished = events.body(TurnOutcome(answer, "stop", 3, 4, 1, (ClientCall("c", "f", "{}"),)))
    failed = events.body(None, "failed", response_error("model_error", message))
    frames = _frames()
    for template, event in (
        (frames.created, ResponseCreatedEvent(type="response.created", sequence_number=seq, response=finished)),
        (
            frames.in_progress,
            ResponseInProgressEvent(type="response.in_progress", sequence_number=seq, response=finished),
        ),
        (frames.completed, ResponseCompletedEvent(type="response.completed", sequence_number=seq, response=finished)),
        (
            frames.incomplete,
            ResponseIncompleteEvent(type="response.incomplete", sequence_number=seq, response=finished),
        ),
        (frames.failed, ResponseFailedEvent(type="response.failed", sequence_number=seq, response=failed)),
    ):
        rendered = template.render({"seq": str(seq).encode(), "response": to_json(event.response)})
        assert rendered == _sse(event, event.type)
        assert _parsed(rendered) == (event.type, event)


@settings(max_examples=50, deadline=None)
@given(deltas=st.lists(texts, min_size=1, max_size=4), limited=st.booleans())
def test_a_whole_stream_parses_as_the_sdk_events_in_order(deltas, limited):
    events = ResponseEvents(response_fields("resp_00_y", "m", {}))
    frames = [*events.started()]
    for delta in deltas:
        frames += events.text(delta)
    outcome = TurnOutcome("".join(deltas), "length" if limited else "stop", 1, 2, 1, (ClientCall("c1", "f", "{}"),))
    frames += events.finished(outcome)
    parsed = [_parsed(frame) for frame in frames]
    assert [event.sequence_number for _, event in parsed] == list(range(len(frames)))
    assert all(kind == event.type for kind, event in parsed)
    last = parsed[-1][1]
    assert last.type == ("response.incomplete" if limited else "response.completed")
    assert last.response.output_text == "".join(deltas)
    done = [event for _, event in parsed if event.type == "response.output_text.done"]
    assert [event.text for event in done] == ["".join(deltas)]


#: What a request may echo into its response (tool schemas, instructions, metadata), hostile text included.
echoed_requests = st.fixed_dictionaries(
    {},
    optional={
        "instructions": texts,
        "metadata": st.dictionaries(st.text(max_size=8), texts, max_size=3),
        "temperature": st.floats(min_value=0, max_value=2),
        "max_output_tokens": st.integers(min_value=1, max_value=10**6),
        "tools": st.lists(
            st.builds(
                lambda name, description: {
                    "type": "function",
                    "name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": {}},
                    "strict": False,
                },
                st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                texts,
            ),
            max_size=2,
        ),
    },
)
calls = st.lists(
    st.builds(ClientCall, st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True), st.just("f"), texts), max_size=2
)


@settings(max_examples=200, deadline=None)
@given(
    request=echoed_requests,
    model=texts,
    conversation=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9._:-]{1,20}", fullmatch=True)),
    answer=texts,
    finish=st.sampled_from(["stop", "length", "tool_calls"]),
    tokens=st.tuples(numbers, numbers),
    client_calls=calls,
)
def test_an_answer_rendered_from_the_template_is_the_sdk_objects_bytes(
    request, model, conversation, answer, finish, tokens, client_calls
):
    events = ResponseEvents(response_fields("resp_00_z", model, request, conversation))
    outcome = TurnOutcome(answer, finish, tokens[0], tokens[1], 1, tuple(client_calls))
    assert events.answer(None) == to_json(events.body(None, "in_progress"))
    assert events.answer(outcome) == to_json(events.body(outcome))


def test_an_echo_holding_a_sentinel_is_answered_by_the_sdk_objects():
    request = {"instructions": "\ue000kora:response.id\ue000"}
    events = ResponseEvents(response_fields("resp_00_s", "m", request))
    outcome = TurnOutcome("hi", "stop", 1, 2, 1)
    assert events._template is None
    assert events.answer(outcome) == to_json(events.body(outcome))


def test_an_answer_with_calls_waiting_for_approval_keeps_their_markers():
    waiting = PendingApproval("appr_1", "s", None, "call_1", "calc", "tools/calc", '{"a": 1}', 1.0, 2.5)
    events = ResponseEvents(response_fields("resp_00_w", "m", {}))
    outcome = TurnOutcome("", "tool_calls", 1, 2, 1, approvals=(waiting,))
    assert events._template is not None  # a typical request's answer is rendered from its template
    assert events.answer(outcome) == to_json(events.body(outcome))
    assert b'"kora_approval":{"id":"appr_1"' in events.answer(outcome)
