"""NullMemory: every operation a no-op, ids still usable."""

import pytest

from kora.core.events import EventType
from kora.memory import NullMemory

pytestmark = pytest.mark.unit


async def test_reads_are_empty_and_writes_dropped():
    memory = NullMemory()
    assert memory.enabled is False
    sid = await memory.create_session("app", "alice")
    assert sid.startswith("ses_")
    assert await memory.get_or_create_session("chat-1", "app") == "chat-1"
    assert (await memory.get_or_create_session(None, "app")).startswith("ses_")
    event = memory.create_event(EventType.USER_MESSAGE, "hello")
    await memory.add_event(sid, event)
    await memory.add_events(sid, [event, event])
    assert (await memory.save(sid, "a fact")).startswith("fact_")
    assert await memory.get_session_events(sid) == []
    assert await memory.get_session_events(sid, [EventType.USER_MESSAGE], limit=6) == []
    assert await memory.list_events() == []
    assert await memory.list_events(sid, limit=3) == []
    assert await memory.count_events() == 0
    assert await memory.count_events(sid) == 0
    assert await memory.list_sessions() == []
    assert await memory.delete_session(sid) is False
    await memory.close()


@pytest.mark.parametrize("scope", ["session", "agent", "user", "store"])
async def test_search_is_empty_for_every_scope(scope):
    assert await NullMemory().search("s", "anything", scope=scope) == []


def test_create_event_still_validates_the_type():
    with pytest.raises(ValueError, match="not_a_type"):
        NullMemory().create_event("not_a_type", "x")
