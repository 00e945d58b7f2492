"""Events <-> pydantic-ai messages: the conversion table, pairing and orphan rules, a real agent run, round trip."""

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from kora.agent.history import events_to_messages, messages_to_events, request_event_count
from kora.core.events import EventType, MemoryEvent
from tests.support.conversations import ANY_EVENT, conversations

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
E = EventType


def ev(kind, content, **metadata) -> MemoryEvent:
    return MemoryEvent(event_type=kind, content=content, metadata=metadata)


def call(cid, name="weather", args=None) -> MemoryEvent:
    return ev(E.TOOL_CALL, {"tool_name": name, "args": args or {"city": "Oslo"}, "tool_call_id": cid})


def result(cid, name="weather", content="cold") -> MemoryEvent:
    return ev(E.TOOL_RESULT, {"tool_name": name, "tool_call_id": cid, "content": content})


def shape(messages: list[ModelMessage]) -> list[tuple[str, list[str]]]:
    """Messages as (kind, [part kind:key]) for compact assertions."""
    out = []
    for m in messages:
        parts = []
        for p in m.parts:
            if isinstance(p, ToolCallPart | ToolReturnPart):
                parts.append(f"{p.part_kind}:{p.tool_call_id}")
            else:
                parts.append(f"{p.part_kind}:{p.content}")
        out.append((m.kind, parts))
    return out


def assert_api_valid(messages: list[ModelMessage]) -> None:
    """What OpenAI-compatible APIs require: each tool-calling response is answered by the very next request,
    whose tool returns come first and answer only those calls."""
    for i, m in enumerate(messages):
        if isinstance(m, ModelResponse) and m.tool_calls:
            nxt = messages[i + 1]
            assert isinstance(nxt, ModelRequest)
            returned = [p.tool_call_id for p in nxt.parts if isinstance(p, ToolReturnPart)]
            assert sorted(returned) == sorted(c.tool_call_id for c in m.tool_calls)
        if isinstance(m, ModelRequest):
            kinds = [isinstance(p, ToolReturnPart) for p in m.parts]
            if any(kinds):
                assert kinds == sorted(kinds, reverse=True), "tool returns must come before other parts"
                prev = messages[i - 1]
                assert i > 0
                assert isinstance(prev, ModelResponse)
                assert prev.tool_calls


# -- events -> messages: the table ------------------------------------------------------------------------------


def test_conversion_table():
    events = [
        ev(E.USER_MESSAGE, "hi"),
        ev(E.AGENT_RESPONSE, "hello"),
        ev(E.TASK_DELEGATION_RECEIVED, "sum 1 and 2", from_agent="planner"),
        call("c1"),
        result("c1"),
        ev(E.DELEGATION_REQUEST, {"agent": "math", "task": "add", "tool_call_id": "d1"}),
        ev(E.DELEGATION_RESPONSE, {"agent": "math", "response": "3", "tool_call_id": "d1"}),
        ev(E.ERROR, {"error_type": "Boom", "message": "x"}),
        ev(E.AGENT_RESPONSE, "done"),
    ]
    messages = events_to_messages(events)
    assert shape(messages) == [
        ("request", ["user-prompt:hi"]),
        ("response", ["text:hello"]),
        ("request", ["user-prompt:sum 1 and 2"]),
        ("response", ["tool-call:c1"]),
        ("request", ["tool-return:c1"]),
        ("response", ["tool-call:d1"]),
        ("request", ["tool-return:d1"]),
        ("response", ["text:done"]),
    ]
    tool_call = messages[3].parts[0]
    assert isinstance(tool_call, ToolCallPart)
    assert (tool_call.tool_name, tool_call.args) == ("weather", {"city": "Oslo"})
    tool_return = messages[4].parts[0]
    assert isinstance(tool_return, ToolReturnPart)
    assert (tool_return.tool_name, tool_return.content, tool_return.outcome) == ("weather", "cold", "success")
    delegation = messages[5].parts[0]
    assert isinstance(delegation, ToolCallPart)
    assert (delegation.tool_name, delegation.args) == ("delegate_to_math", {"task": "add"})
    answer = messages[6].parts[0]
    assert isinstance(answer, ToolReturnPart)
    assert (answer.tool_name, answer.content) == ("delegate_to_math", "3")
    assert_api_valid(messages)
    # The history is ordinary pydantic-ai data: it serialises and loads back.
    assert shape(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))) == shape(
        messages
    )


def test_delegation_tool_name_recorded_in_metadata_wins():
    events = [
        ev(
            E.DELEGATION_REQUEST,
            {"agent": "math-bot", "task": "t", "tool_call_id": "d"},
            tool_name="delegate_to_math_bot",
        ),
        ev(E.DELEGATION_RESPONSE, {"agent": "math-bot", "response": "r", "tool_call_id": "d"}),
    ]
    response, request = events_to_messages(events, delegation_tool_prefix="ask_")
    assert response.parts[0].tool_name == "delegate_to_math_bot"
    assert request.parts[0].tool_name == "delegate_to_math_bot"
    events[0] = ev(E.DELEGATION_REQUEST, {"agent": "math-bot", "task": "t", "tool_call_id": "d"})
    assert events_to_messages(events, delegation_tool_prefix="ask_")[0].parts[0].tool_name == "ask_math-bot"


def test_parallel_calls_share_one_response_and_one_request():
    events = [ev(E.USER_MESSAGE, "q"), call("a"), call("b"), result("b"), result("a"), ev(E.AGENT_RESPONSE, "r")]
    messages = events_to_messages(events)
    assert shape(messages) == [
        ("request", ["user-prompt:q"]),
        ("response", ["tool-call:a", "tool-call:b"]),
        ("request", ["tool-return:b", "tool-return:a"]),
        ("response", ["text:r"]),
    ]


def test_call_is_moved_right_before_its_return():
    # Something sits between a call and its return (a stored error, a prompt of a concurrent turn).
    events = [call("a"), ev(E.ERROR, {"error_type": "E", "message": "m"}), ev(E.USER_MESSAGE, "u"), result("a")]
    messages = events_to_messages(events)
    assert shape(messages) == [
        ("request", ["user-prompt:u"]),
        ("response", ["tool-call:a"]),
        ("request", ["tool-return:a"]),
    ]
    assert_api_valid(messages)


def test_orphans_are_dropped():
    events = [
        result("cut-off"),  # its call fell outside the window
        ev(E.USER_MESSAGE, "u"),
        call("a"),
        result("a"),
        result("a"),  # answers the same call twice
        call("never-answered"),
        ev(E.DELEGATION_REQUEST, {"agent": "math", "task": "t", "tool_call_id": "d"}),
        ev(E.AGENT_RESPONSE, "r"),
        result("b"),
        call("b"),  # a return before its call does not pair
    ]
    assert shape(events_to_messages(events)) == [
        ("request", ["user-prompt:u"]),
        ("response", ["tool-call:a"]),
        ("request", ["tool-return:a"]),
        ("response", ["text:r"]),
    ]


def test_malformed_and_empty_events_are_dropped():
    events = [
        ev(E.USER_MESSAGE, ""),
        ev(E.AGENT_RESPONSE, None),
        ev(E.TOOL_CALL, "not a dict"),
        ev(E.TOOL_RESULT, {"tool_call_id": ""}),
        ev(E.USER_MESSAGE, {"structured": True}),
    ]
    assert shape(events_to_messages(events)) == [("request", ['user-prompt:{"structured": true}'])]
    assert events_to_messages([]) == []


def test_merging_rules():
    events = [
        ev(E.USER_MESSAGE, "first, unanswered"),
        ev(E.USER_MESSAGE, "second"),
        ev(E.AGENT_RESPONSE, "let me check", intermediate=True),
        call("a"),
        result("a"),
        ev(E.USER_MESSAGE, "third"),  # the previous turn's answer was lost: returns and prompt share a request
        ev(E.AGENT_RESPONSE, "one"),
        ev(E.AGENT_RESPONSE, "two"),
    ]
    assert shape(events_to_messages(events)) == [
        ("request", ["user-prompt:first, unanswered", "user-prompt:second"]),
        ("response", ["text:let me check", "tool-call:a"]),
        ("request", ["tool-return:a", "user-prompt:third"]),
        ("response", ["text:one"]),
        ("response", ["text:two"]),  # kept apart: one response's texts would be joined into one
    ]


def test_failed_outcome_is_restored():
    events = [
        call("a"),
        ev(E.TOOL_RESULT, {"tool_name": "weather", "tool_call_id": "a", "content": "Error: x"}, outcome="failed"),
    ]
    (_, request) = events_to_messages(events)
    assert request.parts[0].outcome == "failed"


def test_history_window_starting_mid_turn_is_valid():
    turn = [ev(E.USER_MESSAGE, "u"), call("a"), result("a"), ev(E.AGENT_RESPONSE, "r")]
    events = [
        *turn,
        *[ev(e.event_type, e.content) for e in turn[:1]],
        call("b"),
        result("b"),
        ev(E.AGENT_RESPONSE, "s"),
    ]
    for start in range(len(events)):
        assert_api_valid(events_to_messages(events[start:]))


# -- messages -> events -----------------------------------------------------------------------------------------


def test_run_messages_to_events():
    messages = [
        ModelRequest(parts=[SystemPromptPart("be nice"), UserPromptPart("weather and sum?")]),
        ModelResponse(
            parts=[
                ThinkingPart("hmm"),
                TextPart("Let me check."),
                ToolCallPart("weather", {"city": "Oslo"}, "c1"),
                ToolCallPart("delegate_to_math", '{"task": "1+2"}', "d1"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("weather", {"temp": -3}, "c1"),
                ToolReturnPart("delegate_to_math", "3", "d1"),
            ]
        ),
        ModelResponse(parts=[TextPart("Cold, and 3.")]),
    ]
    events = messages_to_events(messages, metadata={"user": "alice"})
    assert [(e.event_type, e.content) for e in events] == [
        (E.USER_MESSAGE, "weather and sum?"),
        (E.TOOL_CALL, {"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "c1"}),
        (E.DELEGATION_REQUEST, {"agent": "math", "task": "1+2", "tool_call_id": "d1"}),
        (E.TOOL_RESULT, {"tool_name": "weather", "tool_call_id": "c1", "content": {"temp": -3}}),
        (E.DELEGATION_RESPONSE, {"agent": "math", "response": "3", "tool_call_id": "d1"}),
        (E.AGENT_RESPONSE, "Cold, and 3."),
    ]
    assert all(e.metadata.get("user") == "alice" for e in events)
    assert events[2].metadata["tool_name"] == "delegate_to_math"
    assert events[4].metadata["tool_name"] == "delegate_to_math"
    assert events[0].timestamp == messages[0].parts[1].timestamp

    with_text = messages_to_events(messages, include_intermediate_text=True)
    assert (with_text[1].event_type, with_text[1].content) == (E.AGENT_RESPONSE, "Let me check.")
    assert with_text[1].metadata == {"intermediate": True}


def test_delegated_turn_and_delegation_agent_map():
    messages = [
        ModelRequest(parts=[UserPromptPart("add 1 and 2")]),
        ModelResponse(parts=[ToolCallPart("ask_math_bot", {"question": "1+2", "n": 2}, "d1")]),
        ModelRequest(parts=[ToolReturnPart("ask_math_bot", "3", "d1")]),
        ModelResponse(parts=[TextPart("3")]),
    ]
    events = messages_to_events(
        messages,
        prompt_event_type=E.TASK_DELEGATION_RECEIVED,
        prompt_metadata={"from_agent": "planner"},
        delegation_agents={"ask_math_bot": "math-bot"},
    )
    assert events[0].event_type == E.TASK_DELEGATION_RECEIVED
    assert events[0].metadata == {"from_agent": "planner"}
    assert events[1].content == {"agent": "math-bot", "task": "1+2", "tool_call_id": "d1"}
    assert events[2].content == {"agent": "math-bot", "response": "3", "tool_call_id": "d1"}
    with pytest.raises(ValueError, match="prompt_event_type"):
        messages_to_events(messages, prompt_event_type=E.AGENT_RESPONSE)


def test_retries_rejections_and_empty_texts_are_skipped():
    messages = [
        ModelRequest(parts=[UserPromptPart("go")]),
        ModelResponse(parts=[ToolCallPart("weather", {"town": "Oslo"}, "bad")]),
        ModelRequest(parts=[ToolReturnPart("weather", "city is required", "bad", outcome="retried")]),
        ModelResponse(parts=[ToolCallPart("weather", {"city": "Oslo"}, "good")]),
        ModelRequest(parts=[ToolReturnPart("weather", "Error: down", "good", outcome="failed")]),
        ModelResponse(parts=[TextPart("not valid output")]),
        ModelRequest(parts=[RetryFeedbackPart("try again", retry=RetryInfo("output_validation"))]),
        ModelResponse(parts=[TextPart("   ")]),
        ModelRequest(parts=[UserPromptPart("")]),
        ModelResponse(parts=[TextPart("final")]),
    ]
    events = messages_to_events(messages)
    assert [(e.event_type, e.content) for e in events] == [
        (E.USER_MESSAGE, "go"),
        (E.TOOL_CALL, {"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "good"}),
        (E.TOOL_RESULT, {"tool_name": "weather", "tool_call_id": "good", "content": "Error: down"}),
        (E.AGENT_RESPONSE, "final"),
    ]
    assert events[2].metadata == {"outcome": "failed"}


def test_unserialisable_tool_content_becomes_text():
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    messages = [ModelRequest(parts=[ToolReturnPart("t", Opaque(), "c")])]
    (event,) = messages_to_events(messages)
    assert event.content == {"tool_name": "t", "tool_call_id": "c", "content": "opaque!"}


async def test_a_real_agent_run_accepts_the_history_and_its_messages_convert_back():
    history_events = [
        ev(E.USER_MESSAGE, "I live in Oslo"),
        call("old"),
        result("old"),
        ev(E.AGENT_RESPONSE, "Noted."),
    ]
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("weather", {"city": "Oslo"}, "c1"),
                    ToolCallPart("delegate_to_math", {"task": "1+2"}, "d1"),
                ]
            )
        return ModelResponse(parts=[TextPart("Cold; 3.")])

    agent = Agent(FunctionModel(model), instructions="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"cold in {city}"

    @agent.tool_plain
    def delegate_to_math(task: str) -> str:
        return "3"

    history = events_to_messages(history_events)
    run = await agent.run("weather again, and 1+2?", message_history=history)
    assert run.output == "Cold; 3."
    assert shape(seen[0][:4]) == shape(history)  # the model saw the replayed history first

    new_events = messages_to_events(run.new_messages())
    assert [(e.event_type, e.content) for e in new_events] == [
        (E.USER_MESSAGE, "weather again, and 1+2?"),
        (E.TOOL_CALL, {"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "c1"}),
        (E.DELEGATION_REQUEST, {"agent": "math", "task": "1+2", "tool_call_id": "d1"}),
        (E.TOOL_RESULT, {"tool_name": "weather", "tool_call_id": "c1", "content": "cold in Oslo"}),
        (E.DELEGATION_RESPONSE, {"agent": "math", "response": "3", "tool_call_id": "d1"}),
        (E.AGENT_RESPONSE, "Cold; 3."),
    ]
    # The next turn replays it all, and the model accepts that too.
    again = await agent.run("thanks", message_history=events_to_messages([*history_events, *new_events]))
    assert again.output == "Cold; 3."


# -- properties -------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([E.USER_MESSAGE, E.TASK_DELEGATION_RECEIVED]).flatmap(
        lambda k: st.tuples(st.just(k), conversations(k))
    )
)
def test_round_trip_keeps_types_and_contents(case):
    prompt_kind, events = case
    messages = events_to_messages(events)
    assert_api_valid(messages)
    back = messages_to_events(messages, prompt_event_type=prompt_kind)
    assert [(e.event_type, e.content) for e in back] == [(e.event_type, e.content) for e in events]
    assert [e.timestamp for e in back if e.event_type in (E.USER_MESSAGE, E.TASK_DELEGATION_RECEIVED)] == [
        e.timestamp for e in events if e.event_type in (E.USER_MESSAGE, E.TASK_DELEGATION_RECEIVED)
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(ANY_EVENT, max_size=12))
def test_any_event_window_gives_a_history_a_model_api_accepts(events):
    messages = events_to_messages(events)
    assert_api_valid(messages)
    ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))


_request_parts = st.lists(
    st.one_of(
        st.builds(UserPromptPart, st.sampled_from(["hi", "", "  ", "\n", "two words"])),
        st.builds(
            lambda outcome: ToolReturnPart("calc", "3", tool_call_id="c1", outcome=outcome),
            st.sampled_from(["success", "failed", "denied", "retried"]),
        ),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(parts=_request_parts)
def test_a_requests_event_count_is_how_many_events_it_makes(parts):
    request = ModelRequest(parts=parts)
    assert request_event_count(request) == len(messages_to_events([request]))
