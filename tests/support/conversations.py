"""Hypothesis strategies for stored conversations: well-formed sessions and arbitrary (malformed) event windows."""

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from kora.core.events import EventType, MemoryEvent

E = EventType
T0 = datetime(2026, 1, 1, tzinfo=UTC)

TEXT = st.text(min_size=1, max_size=20).filter(str.strip)
SCALAR = st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.floats(allow_nan=False, allow_infinity=False)
JSON = st.recursive(
    SCALAR | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
TOOL = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True).filter(lambda n: not n.startswith("delegate_to_"))
AGENT = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)


@st.composite
def conversations(draw, prompt_kind: EventType) -> list[MemoryEvent]:
    """Well-formed sessions: turns of a prompt, tool steps (calls, then their returns in any order), an answer."""
    events: list[MemoryEvent] = []
    ids = iter(range(10**6))
    clock = iter(T0 + timedelta(seconds=i) for i in range(10**6))

    def add(kind: EventType, content) -> None:
        events.append(MemoryEvent(event_type=kind, content=content, timestamp=next(clock)))

    for _ in range(draw(st.integers(1, 4))):
        add(prompt_kind, draw(TEXT))
        for _ in range(draw(st.integers(0, 2))):
            calls, returns = [], []
            for _ in range(draw(st.integers(1, 3))):
                cid = f"call_{next(ids)}"
                if draw(st.booleans()):
                    name = draw(TOOL)
                    args = draw(st.dictionaries(st.text(min_size=1, max_size=5), JSON, max_size=3))
                    calls.append((E.TOOL_CALL, {"tool_name": name, "args": args, "tool_call_id": cid}))
                    returns.append((E.TOOL_RESULT, {"tool_name": name, "tool_call_id": cid, "content": draw(JSON)}))
                else:
                    agent = draw(AGENT)
                    calls.append((E.DELEGATION_REQUEST, {"agent": agent, "task": draw(TEXT), "tool_call_id": cid}))
                    response = {"agent": agent, "response": draw(st.text(max_size=10)), "tool_call_id": cid}
                    returns.append((E.DELEGATION_RESPONSE, response))
            for kind, content in [*calls, *draw(st.permutations(returns))]:
                add(kind, content)
        if draw(st.booleans()):
            add(E.AGENT_RESPONSE, draw(TEXT))
    return events


ANY_EVENT = st.builds(
    MemoryEvent,
    event_type=st.sampled_from(list(EventType)),
    content=st.one_of(
        JSON,
        st.fixed_dictionaries(
            {"tool_name": TOOL, "tool_call_id": st.sampled_from(["a", "b", "c"])},
            optional={"args": JSON, "content": JSON, "agent": AGENT, "task": JSON, "response": JSON},
        ),
    ),
)
