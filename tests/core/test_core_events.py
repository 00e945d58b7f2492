"""Typed event contents: the content types, the typed builder and the typed reader agree with one another and with
the JSON Kora has always stored."""

import json
import typing
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core import events
from kora.core.events import (
    ContentKey,
    DelegationRequestContent,
    DelegationResponseContent,
    ErrorContent,
    EventType,
    MemoryEvent,
    ToolCallContent,
    ToolResultContent,
    content_field,
    new_event,
    tool_call_id,
)

pytestmark = pytest.mark.unit

CONTENT_TYPES = (ToolCallContent, ToolResultContent, DelegationRequestContent, DelegationResponseContent, ErrorContent)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_reader_knows_exactly_the_keys_the_content_types_have():
    written = set().union(*(t.__required_keys__ for t in CONTENT_TYPES))
    assert set(typing.get_args(ContentKey)) == written


def test_the_module_table_names_each_content_type():
    doc = events.__doc__ or ""
    for content_type in CONTENT_TYPES:
        assert f":class:`{content_type.__name__}`" in doc


def test_a_built_event_stores_the_same_json_as_a_hand_built_one():
    content: ToolCallContent = {"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "c1"}
    typed = new_event(EventType.TOOL_CALL, content, metadata={"a": 1}, timestamp=T0, event_id="evt_1")
    by_hand = MemoryEvent(
        event_id="evt_1",
        timestamp=T0,
        event_type=EventType.TOOL_CALL,
        content={"tool_name": "weather", "args": {"city": "Oslo"}, "tool_call_id": "c1"},
        metadata={"a": 1},
    )
    assert typed.model_dump_json() == by_hand.model_dump_json()
    assert json.loads(typed.model_dump_json())["content"] == {
        "tool_name": "weather",
        "args": {"city": "Oslo"},
        "tool_call_id": "c1",
    }


def test_a_built_event_gets_a_fresh_id_and_the_current_time_unless_given():
    before = datetime.now(UTC)
    first = new_event(EventType.USER_MESSAGE, "hi")
    second = new_event(EventType.USER_MESSAGE, "hi")
    assert first.event_id != second.event_id
    assert first.event_id.startswith("evt_")
    assert first.timestamp >= before
    assert first.metadata == {}


def test_a_given_metadata_map_is_copied():
    metadata = {"from_agent": "planner"}
    event = new_event(EventType.TASK_DELEGATION_RECEIVED, "task", metadata=metadata)
    metadata["from_agent"] = "changed"
    assert event.metadata == {"from_agent": "planner"}


@pytest.mark.parametrize(
    ("content", "field", "call_id"),
    [
        ({"tool_call_id": "c1", "tool_name": "weather"}, "weather", "c1"),
        ({"tool_call_id": 7}, None, None),
        ({}, None, None),
        ("plain text", None, None),
        (["tool_call_id", "c1"], None, None),
        (None, None, None),
    ],
)
def test_reading_tolerates_any_stored_content(content, field, call_id):
    event = MemoryEvent(event_type=EventType.TOOL_CALL, content=content)
    assert content_field(event, "tool_name") == field
    assert tool_call_id(event) == call_id


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), lambda inner: st.lists(inner, max_size=3)))
def test_reading_never_raises_on_content_that_is_no_object(content):
    event = MemoryEvent(event_type=EventType.TOOL_RESULT, content=content)
    assert content_field(event, "content") is None
    assert tool_call_id(event) is None
