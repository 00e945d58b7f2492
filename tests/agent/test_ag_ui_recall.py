"""What memory recalled for a turn, on AG-UI: one ``CUSTOM`` event named ``kora.memory_recall`` (the SDK's type),
holding the recalled facts' text and whether a summary was added; the web console shows it inline."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import CustomEvent, Event, RunAgentInput
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

from kora.agent.ag_ui import MEMORY_RECALL, EventWriter
from kora.agent.turn import Recalled

pytestmark = pytest.mark.unit

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def writer() -> EventWriter:
    run = RunAgentInput(thread_id="t", run_id="r", state={}, messages=[], tools=[], context=[], forwarded_props={})
    return EventWriter(run, "scripted")


def test_a_recall_is_one_custom_event_with_the_facts_and_whether_a_summary_was_added():
    (event,) = writer().item(Recalled(("I live in Lisbon.", "I like tea."), summary=True))
    assert isinstance(event, CustomEvent)
    assert (event.name, event.value) == (
        MEMORY_RECALL,
        {"facts": ["I live in Lisbon.", "I like tea."], "summary": True},
    )
    # As it goes on the wire, read back by the SDK's own event union.
    wire = EventEncoder().encode(event)
    read = EVENTS.validate_json(wire.removeprefix("data: ").strip())
    assert read == event


def test_a_summary_alone_has_no_facts():
    (event,) = writer().item(Recalled((), summary=True))
    assert event.value == {"facts": [], "summary": True}
