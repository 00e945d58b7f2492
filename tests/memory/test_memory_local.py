"""LocalMemory: bounds exactly at the default limits (1000 sessions, 500 events), recency, filters, limits,
concurrency, search and save."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from kora.agent.settings import load_agent_settings
from kora.core.errors import Forbidden
from kora.core.events import EventType, MemoryEvent
from kora.memory import LocalMemory, Memory, build_memory
from kora.memory.null import NullMemory
from kora.memory.remote import RemoteMemory

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(text: str, kind: EventType = EventType.USER_MESSAGE, at: datetime | None = None) -> MemoryEvent:
    return MemoryEvent(event_type=kind, content=text, timestamp=at or datetime.now(UTC))


async def session_ids(memory: LocalMemory) -> list[str]:
    return [s.session_id for s in await memory.list_sessions()]


# -- session bound ----------------------------------------------------------------------------------------------


async def test_1001st_session_evicts_the_oldest_100():
    memory = LocalMemory()  # defaults: 1000 sessions, 500 events
    ids = [await memory.get_or_create_session(f"s{i}", "app") for i in range(1000)]
    assert len(await memory.list_sessions()) == 1000
    await memory.get_or_create_session("new", "app")
    remaining = await session_ids(memory)
    assert len(remaining) == 901
    assert remaining == [*ids[100:], "new"]
    assert memory.evicted_sessions == 100


@pytest.mark.parametrize(("max_sessions", "batch"), [(1, 1), (5, 1), (10, 1), (11, 2), (25, 3), (100, 10)])
async def test_eviction_batch_is_ceil_of_ten_percent_and_spares_the_new_session(max_sessions, batch):
    memory = LocalMemory(max_sessions=max_sessions)
    for _i in range(max_sessions):
        await memory.create_session("app")
    await memory.add_event("writer", ev("hello"))  # an implicit creation is the one that overflows
    remaining = await session_ids(memory)
    assert len(remaining) == max_sessions + 1 - batch
    assert remaining[-1] == "writer"
    assert await memory.get_session_events("writer") != []


async def test_eviction_is_least_recently_active_first():
    memory = LocalMemory(max_sessions=3)
    for sid in ("a", "b", "c"):
        await memory.get_or_create_session(sid, "app")
    await memory.add_event("a", ev("a is active again"))  # a write makes "a" the newest
    await memory.get_or_create_session("b", "app")  # so does starting a turn
    await memory.get_session_events("c")  # reads do not
    await memory.count_events("c")
    assert await session_ids(memory) == ["c", "a", "b"]
    await memory.get_or_create_session("d", "app")
    assert await session_ids(memory) == ["a", "b", "d"]


async def test_eviction_keeps_the_event_total_right():
    memory = LocalMemory(max_sessions=10)
    for i in range(10):
        await memory.add_events(f"s{i}", [ev("x"), ev("y")])
    assert await memory.count_events() == 20
    await memory.add_event("s10", ev("z"))
    assert await memory.count_events() == 19  # s0 (2 events) evicted, one added


# -- event bound ------------------------------------------------------------------------------------------------


async def test_501st_event_evicts_the_oldest():
    memory = LocalMemory()
    sid = await memory.create_session("app")
    events = [ev(f"m{i}") for i in range(501)]
    await memory.add_events(sid, events[:500])
    assert await memory.count_events(sid) == 500
    await memory.add_event(sid, events[500])
    stored = await memory.get_session_events(sid)
    assert len(stored) == 500
    assert stored[0] == events[1]
    assert stored[-1] == events[500]
    assert await memory.count_events() == 500
    (info,) = await memory.list_sessions()
    assert info.event_count == 500


async def test_event_bound_within_one_add_events_call():
    memory = LocalMemory(max_session_events=3)
    events = [ev(str(i)) for i in range(7)]
    await memory.add_events("s", events)
    assert await memory.get_session_events("s") == events[4:]
    assert await memory.count_events() == 3


# -- sessions ---------------------------------------------------------------------------------------------------


async def test_get_or_create_is_idempotent_and_generates_ids():
    memory = LocalMemory(app_name="bot")
    sid = await memory.get_or_create_session("chat-1", "bot", "alice")
    assert sid == "chat-1"
    assert await memory.get_or_create_session("chat-1", "other", "alice") == "chat-1"
    (info,) = await memory.list_sessions()
    assert (info.app_name, info.user_id, info.event_count) == ("bot", "alice", 0)
    fresh = await memory.get_or_create_session(None, "bot")
    assert fresh.startswith("ses_")
    assert len(fresh) == 36
    assert (await memory.get_or_create_session("", "bot")).startswith("ses_")
    assert len(await memory.list_sessions()) == 3


async def test_a_verified_users_session_is_refused_to_other_users_and_to_anonymous_requests():
    memory = LocalMemory(app_name="bot")
    await memory.get_or_create_session("mine", "bot", "alice")
    await memory.add_events("mine", [ev("my secret is 42")])
    for intruder in ("bob", None, "Alice", "alice "):
        with pytest.raises(Forbidden) as refused:
            await memory.get_or_create_session("mine", "bot", intruder)
        assert refused.value.status == 403
        assert refused.value.code == "session_forbidden"
        assert "alice" not in refused.value.message
        assert "42" not in refused.value.message
        with pytest.raises(Forbidden):
            memory.check_access("mine", intruder)
    # Refusals change nothing, not even the session's recency: "other" was opened after "mine", and stays newer.
    await memory.get_or_create_session("other", "bot")
    with pytest.raises(Forbidden):
        await memory.get_or_create_session("mine", "bot", "bob")
    assert await session_ids(memory) == ["mine", "other"]
    assert [e.content for e in await memory.get_session_events("mine")] == ["my secret is 42"]
    assert await memory.get_or_create_session("mine", "bot", "alice") == "mine"
    memory.check_access("mine", "alice")
    memory.check_access("unknown", None)  # a session nobody started is nobody's


async def test_an_anonymous_session_stays_open_to_everyone_and_is_never_claimed():
    memory = LocalMemory(app_name="bot")
    await memory.get_or_create_session("open", "bot")
    for user in ("alice", None, "bob"):
        assert await memory.get_or_create_session("open", "bot", user) == "open"
    (info,) = await memory.list_sessions()
    assert info.user_id == "default"


async def test_an_evicted_session_is_forgotten_with_its_owner_and_events():
    memory = LocalMemory(max_sessions=1, app_name="bot")
    await memory.get_or_create_session("mine", "bot", "alice")
    await memory.add_events("mine", [ev("secret")])
    await memory.get_or_create_session("next", "bot", "bob")  # evicts "mine"
    assert await memory.get_or_create_session("mine", "bot") == "mine"
    assert await memory.get_session_events("mine") == []


async def test_add_event_creates_the_session_under_the_app_name():
    memory = LocalMemory(app_name="bot")
    await memory.add_event("implicit", ev("hi"))
    (info,) = await memory.list_sessions()
    assert (info.session_id, info.app_name, info.user_id, info.event_count) == ("implicit", "bot", "default", 1)
    assert info.updated_at >= info.created_at


async def test_delete_session():
    memory = LocalMemory()
    await memory.add_events("s", [ev("a"), ev("b")])
    await memory.save("s", "a fact")
    assert await memory.delete_session("s") is True
    assert await memory.delete_session("s") is False
    assert await memory.get_session_events("s") == []
    assert await memory.count_events() == 0
    assert await memory.search("s", "fact") == []  # facts go with their session


@pytest.mark.parametrize("kwargs", [{"max_sessions": 0}, {"max_session_events": 0}])
def test_bounds_must_be_positive(kwargs):
    with pytest.raises(ValueError, match="must be >= 1"):
        LocalMemory(**kwargs)


# -- reads: filters and limits --------------------------------------------------------------------------------


@pytest.fixture
async def turn_memory():
    memory = LocalMemory()
    kinds = [EventType.USER_MESSAGE, EventType.TOOL_CALL, EventType.TOOL_RESULT, EventType.AGENT_RESPONSE]
    events = [ev(f"{k}-{turn}", k) for turn in range(3) for k in kinds]
    await memory.add_events("s", events)
    return memory, events


async def test_limit_keeps_the_newest_oldest_first(turn_memory):
    memory, events = turn_memory
    assert await memory.get_session_events("s") == events
    assert await memory.get_session_events("s", limit=6) == events[-6:]
    assert await memory.get_session_events("s", limit=100) == events
    assert await memory.get_session_events("s", limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        await memory.get_session_events("s", limit=-1)


async def test_type_filter_applies_before_the_limit(turn_memory):
    memory, events = turn_memory
    users = [e for e in events if e.event_type == EventType.USER_MESSAGE]
    assert await memory.get_session_events("s", [EventType.USER_MESSAGE]) == users
    assert await memory.get_session_events("s", ["user_message"], limit=2) == users[-2:]
    both = await memory.get_session_events("s", ["user_message", EventType.AGENT_RESPONSE], limit=3)
    assert [e.content for e in both] == ["agent_response-1", "user_message-2", "agent_response-2"]
    assert await memory.get_session_events("s", ["no_such_type"]) == []
    assert await memory.get_session_events("s", []) == []


async def test_unknown_session_reads_are_empty():
    memory = LocalMemory()
    assert await memory.get_session_events("nope") == []
    assert await memory.list_events("nope") == []
    assert await memory.count_events("nope") == 0
    assert await memory.list_sessions() == []  # reads do not create sessions


async def test_list_events_across_sessions_is_newest_last_by_timestamp():
    memory = LocalMemory()
    # Three sessions written in interleaved time order.
    for i in range(9):
        await memory.add_event(f"s{i % 3}", ev(f"m{i}", at=T0 + timedelta(seconds=i)))
    everything = await memory.list_events()
    assert [e.content for e in everything] == [f"m{i}" for i in range(9)]
    assert [e.content for e in await memory.list_events(limit=4)] == ["m5", "m6", "m7", "m8"]
    assert [e.content for e in await memory.list_events("s1")] == ["m1", "m4", "m7"]
    assert [e.content for e in await memory.list_events("s1", limit=1)] == ["m7"]
    assert await memory.list_events(limit=0) == []
    assert await memory.count_events() == 9
    assert await memory.count_events("s2") == 3


# -- concurrency ------------------------------------------------------------------------------------------------


async def test_concurrent_turns_lose_nothing_and_stay_contiguous():
    memory = LocalMemory(max_sessions=1000, max_session_events=500)

    async def turn(session_id: str, n: int) -> None:
        sid = await memory.get_or_create_session(session_id, "app")
        await memory.get_session_events(sid, limit=6)
        await asyncio.sleep(0)  # the model call: other turns run here
        await memory.add_events(sid, [ev(f"{n}-u"), ev(f"{n}-c", EventType.TOOL_CALL), ev(f"{n}-a")])

    # 50 turns on one shared session and 200 turns on their own sessions, all at once.
    await asyncio.gather(*(turn("shared", n) for n in range(50)), *(turn(f"own-{n}", n) for n in range(200)))

    shared = await memory.get_session_events("shared")
    assert len(shared) == 150
    for i in range(0, 150, 3):  # each turn's three events are adjacent, in order
        n = str(shared[i].content).split("-")[0]
        assert [e.content for e in shared[i : i + 3]] == [f"{n}-u", f"{n}-c", f"{n}-a"]
    assert len(await memory.list_sessions()) == 201
    assert await memory.count_events() == 150 + 200 * 3
    assert len(await memory.list_events()) == 750


async def test_concurrent_single_event_writes_to_one_session():
    memory = LocalMemory()
    await asyncio.gather(*(memory.add_event("s", ev(str(i))) for i in range(400)))
    assert sorted(int(str(e.content)) for e in await memory.get_session_events("s")) == list(range(400))


# -- search and save --------------------------------------------------------------------------------------------


async def test_search_scores_by_keyword_overlap_best_first():
    memory = LocalMemory()
    await memory.add_events(
        "s",
        [
            ev("My favourite colour is blue", at=T0),
            ev("The deployment uses a blue database", EventType.AGENT_RESPONSE, at=T0 + timedelta(seconds=1)),
            ev("nothing relevant here", at=T0 + timedelta(seconds=2)),
        ],
    )
    fact_id = await memory.save("s", "Favourite colour: blue, confirmed by the user", {"user": "alice"})
    assert fact_id.startswith("fact_")

    hits = await memory.search("s", "what is my favourite colour?")
    assert [h.score for h in hits] == [1.0, 1.0]  # "favourite", "colour" both present; stopwords ignored
    assert hits[0].source == "fact"
    assert hits[0].event_id is None
    assert hits[1].text == "My favourite colour is blue"
    assert hits[1].event_id is not None

    hits = await memory.search("s", "blue deployment colour")
    assert [round(h.score, 3) for h in hits] == [0.667, 0.667, 0.667]
    assert hits[0].source == "fact"
    assert all(0 <= h.score <= 1 for h in hits)
    assert len(await memory.search("s", "blue", limit=1)) == 1
    assert await memory.search("s", "blue", limit=0) == []
    assert await memory.search("s", "zebra") == []
    assert await memory.search("s", "  ?! ") == []
    assert await memory.search("other", "blue") == []


async def test_search_reads_structured_event_content():
    memory = LocalMemory()
    await memory.add_event(
        "s",
        MemoryEvent(
            event_type=EventType.TOOL_RESULT,
            content={"tool_name": "weather", "tool_call_id": "c1", "content": {"city": "Oslo", "temp": -3}},
        ),
    )
    (hit,) = await memory.search("s", "oslo weather")
    assert hit.score == 1.0
    assert hit.text == 'weather: {"city":"Oslo","temp":-3}'


@pytest.mark.parametrize("scope", ["agent", "user", "store", ""])
async def test_search_rejects_pooled_scopes_with_a_message_for_the_model(scope):
    memory = LocalMemory()
    with pytest.raises(ValueError, match="needs a bound MemoryStore") as info:
        await memory.search("s", "anything", scope=scope)
    assert "level 'session'" in str(info.value)


async def test_saved_facts_are_bounded_and_create_the_session():
    memory = LocalMemory(max_session_events=2)
    for i in range(3):
        await memory.save("s", f"fact number{i}")
    texts = {h.text for h in await memory.search("s", "fact")}
    assert texts == {"fact number1", "fact number2"}
    assert [s.session_id for s in await memory.list_sessions()] == ["s"]
    assert await memory.count_events() == 0  # facts are not events


# -- factory ----------------------------------------------------------------------------------------------------


def test_build_memory_picks_the_implementation_from_the_agents_settings():
    def memory(**env: str) -> Memory:
        base = {"AGENT_NAME": "bot", "MODEL_API_URL": "http://m/v1", "MODEL_NAME": "m"}
        return build_memory(
            load_agent_settings(base | {"MEMORY_MAX_SESSIONS": "10", "MEMORY_MAX_SESSION_EVENTS": "20"} | env)
        )

    local = memory()
    assert isinstance(local, LocalMemory)
    assert local.enabled
    assert (local.max_sessions, local.max_session_events, local.app_name) == (10, 20, "bot")
    assert isinstance(memory(MEMORY_ENABLED="false"), NullMemory)
    assert isinstance(memory(MEMORY_ENABLED="false", MEMORY_STORE_ENDPOINT="http://store:8000"), NullMemory)
    remote = memory(
        MEMORY_STORE_ENDPOINT="http://store:8000/",
        MEMORY_MAX_READ_SCOPE="agent",
        MEMORY_FAILURE_MODE="strict",
        MEMORY_ROLLING_SUMMARY="true",
        MEMORY_CLIENT_TOKEN_BUDGET="300",
    )
    assert isinstance(remote, RemoteMemory)
    assert (remote.endpoint, remote.app_name, remote.max_read_scope) == ("http://store:8000", "bot", "agent")
    assert (remote.failure_mode, remote.rolling_summary, remote.token_budget) == ("strict", True, 300)


async def test_a_session_is_shown_and_keeps_its_metadata_without_being_touched():
    memory = LocalMemory(max_sessions=2)
    first = await memory.create_session("app", "alice")
    second = await memory.create_session("app")
    await memory.set_session_metadata(first, {"topic": "fruit"})
    info = await memory.session_info(first)
    assert info is not None
    assert (info.session_id, info.user_id, info.event_count) == (first, "alice", 0)
    assert await memory.session_metadata(first) == {"topic": "fruit"}
    assert (await memory.session_info("ses_unknown"), await memory.session_metadata("ses_unknown")) == (None, {})
    await memory.set_session_metadata("ses_unknown", {"k": "v"})  # not held: nothing is created
    assert await memory.session_info("ses_unknown") is None
    # Reads do not make a session more recent: the first is still evicted first.
    await memory.create_session("app")
    assert (await memory.session_info(first), (await memory.session_info(second)) is not None) == (None, True)
    await memory.set_session_metadata(second, {})
    assert await memory.session_metadata(second) == {}


async def test_null_memory_keeps_no_session_metadata():
    null = NullMemory()
    assert (null.keeps_session_metadata, await null.session_info("ses_x"), await null.session_metadata("ses_x")) == (
        False,
        None,
        {},
    )
    with pytest.raises(NotImplementedError):
        await null.set_session_metadata("ses_x", {"k": "v"})
    assert RemoteMemory.keeps_session_metadata is True  # in the memory service (tests/memory_service)
