"""AG-UI (``POST /ag-ui``) against a real agent with the scripted model and a ``kora mcp`` inline-tool server, on
both turn paths; every answer is read back with the AG-UI SDK's own event types: text, server tool calls and
their results, frontend tools and their continuation, the session as the thread, errors before and after the
stream started, and a hypothesis fuzz of the body."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    Event,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from kora.scripted import ErrorReply, Match, Rule, TextReply, ToolCall, ToolCallReply
from tests.support.agent import RunningAgent, running_agent, served_agent
from tests.support.hostile import any_text, assert_handled, field, hostile_values, render
from tests.support.mcp import running_mcp, wait_until_ready
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

TOOLS = '''
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b
'''

RULES = [
    Rule(
        Match(user_matches=r"add (?P<a>\d+) and (?P<b>\d+)", tool_available="add", after_tool=False),
        ToolCallReply([ToolCall("add", {"a": "{a}", "b": "{b}"})]),
    ),
    Rule(
        Match(user_matches=r"weather in (?P<city>\w+)", tool_available="get_weather", after_tool=False),
        ToolCallReply([ToolCall("get_weather", {"city": "{city}"})]),
    ),
    Rule(Match(user_matches="break the model"), ErrorReply(500, "the model broke")),
]

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


@dataclass
class Setup:
    model: ScriptedModelServer
    agent: RunningAgent

    def post(self, body: object, **headers: str) -> httpx.Response:
        return httpx.post(f"{self.agent.url}/ag-ui", json=body, headers=headers, timeout=60)

    def run(self, body: dict[str, Any], **headers: str) -> list[Any]:
        """The run's events, each validated by the SDK's ``Event`` union."""
        response = self.post(body, **headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-session-id"] == body["threadId"]
        return decode(response.text)


def decode(text: str) -> list[Any]:
    """Server-sent events' ``data:`` lines as AG-UI events (the SDK's types). Lines end at CR, LF or CRLF only, as
    server-sent events define them: ``str.splitlines`` would also break a JSON string holding U+0085 or U+2028."""
    lines = re.split(r"\r\n|\r|\n", text)
    return [EVENTS.validate_json(line[len("data: ") :]) for line in lines if line.startswith("data: ")]


def types(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


@pytest.fixture(scope="module", params=["direct", "agent"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    """A scripted model, ``kora mcp`` serving ``add``, and an agent using both, per turn path."""
    with ScriptedModelServer() as model, running_mcp({"MCP_TOOLS_STRING": TOOLS}) as tools:
        wait_until_ready(tools.root_url)
        model.load_script(RULES)
        direct = str(request.param == "direct")
        env = {"MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": tools.root_url, "AGENT_DIRECT_FIRST_REQUEST": direct}
        with served_agent(model, "helper", **env) as agent:
            yield Setup(model, agent)


@pytest.fixture
def s(setup: Setup) -> Setup:
    setup.model.reset(keep_rules=True)
    return setup


def run_input(text: str | None = None, thread: str | None = None, **fields: Any) -> dict[str, Any]:
    messages = [{"id": "u1", "role": "user", "content": text}] if text is not None else []
    return {
        "threadId": thread or f"t-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": messages,
        **fields,
    }


def test_a_text_answer_is_one_text_message_between_run_started_and_run_finished(s):
    body = run_input("hello there")
    events = s.run(body)
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * (len(events) - 4),
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    started, finished = events[0], events[-1]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id, started.protocol_version) == (body["threadId"], body["runId"], "1.0")
    text = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))
    assert text == "You said: hello there"
    assert len({e.message_id for e in events[1:-1]}) == 1
    assert isinstance(finished, RunFinishedEvent)
    assert (finished.thread_id, finished.run_id, finished.outcome) == (body["threadId"], body["runId"], None)
    assert finished.usage is not None
    assert finished.usage[0].output_tokens > 0
    # The thread is the Kora session: the turn is stored under it.
    assert s.agent.event_types(body["threadId"]) == ["user_message", "agent_response"]


def test_a_server_tool_call_streams_start_args_end_and_its_result_before_the_answer(s):
    body = run_input("please add 2 and 3")
    events = s.run(body)
    assert types(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * (len(events) - 8),
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    start, args, result = events[1], events[2], events[4]
    assert isinstance(start, ToolCallStartEvent)
    assert start.tool_call_name == "add"
    assert isinstance(args, ToolCallArgsEvent)
    assert json.loads(args.delta) == {"a": 2, "b": 3}
    assert isinstance(result, ToolCallResultEvent)
    assert (result.tool_call_id, result.content) == (start.tool_call_id, "5")
    assert "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent)) == "Tool result: 5"
    assert events[-1].outcome is None
    assert s.agent.event_types(body["threadId"]) == ["user_message", "tool_call", "tool_result", "agent_response"]


def test_a_frontend_tool_ends_the_run_with_its_call_and_the_next_run_answers_from_its_result(s):
    thread = f"t-{uuid.uuid4().hex}"
    first = s.run(run_input("weather in Paris?", thread, tools=[WEATHER]))
    assert types(first) == ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    start, args, finished = first[1], first[2], first[-1]
    assert start.tool_call_name == "get_weather"
    assert json.loads(args.delta) == {"city": "Paris"}
    assert finished.outcome.type == "success"
    assert finished.outcome.pending_tool_call_ids == [start.tool_call_id]
    offered = {t["function"]["name"] for t in s.model.requests[0]["tools"]}
    assert offered == {"get_weather", "add"}

    call = {"id": start.tool_call_id, "type": "function", "function": {"name": "get_weather", "arguments": args.delta}}
    messages = [
        {"id": "u1", "role": "user", "content": "weather in Paris?"},
        {"id": "a1", "role": "assistant", "toolCalls": [call]},
        {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "sunny, 21 C"},
    ]
    second = s.run({**run_input(thread=thread, tools=[WEATHER]), "messages": messages})
    assert types(second)[-1] == "RUN_FINISHED"
    assert second[-1].outcome is None
    text = "".join(e.delta for e in second if isinstance(e, TextMessageContentEvent))
    assert text == "Tool result: sunny, 21 C"
    assert s.agent.event_types(thread) == ["user_message", "tool_call", "tool_result", "agent_response"]


def test_context_entries_reach_the_model_as_instructions(s):
    s.run(run_input("hi", context=[{"description": "page", "value": "the settings page"}]))
    system = [m for m in s.model.requests[-1]["messages"] if m["role"] == "system"]
    assert "page: the settings page" in system[-1]["content"]


def test_a_model_failure_after_the_stream_started_is_a_run_error_event(s):
    body = run_input("break the model")
    events = s.run(body)
    assert types(events)[0] == "RUN_STARTED"
    assert types(events)[-1] == "RUN_ERROR"
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert error.code == "model_error"
    assert "the model broke" in error.message
    assert "RUN_FINISHED" not in types(events)
    assert s.agent.event_types(body["threadId"]) == ["user_message", "error"]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"state": {"count": 1}}, "state", "unsupported_parameter"),
        ({"forwardedProps": {"x": 1}}, "forwardedProps", "unsupported_parameter"),
        ({"resume": [{"interruptId": "i", "status": "resolved"}]}, "resume", "unsupported_parameter"),
        ({"colour": "blue"}, "colour", "unsupported_parameter"),
        ({"threadId": "has space"}, None, "invalid_session_id"),
        ({"threadId": 5}, "threadId", "invalid_request_error"),
        ({"messages": [{"id": "r", "role": "reasoning", "content": "hm"}]}, "messages[0].role", "unsupported_value"),
        ({"messages": [{"id": "a", "role": "assistant", "content": "hi"}]}, "messages", "no_user_message"),
        ({"messages": []}, "messages", "missing_messages"),
        ({"tools": [{"name": "add", "description": "mine"}]}, "tools[0].name", "invalid_value"),
        ({"context": [{"description": "d", "value": "v", "weight": 2}]}, "context[0].weight", "unsupported_parameter"),
        (
            {"messages": [{"id": "u", "role": "user", "content": [{"type": "text", "text": "x", "lang": "en"}]}]},
            "messages[0].content[0].lang",
            "unsupported_parameter",
        ),
        (
            {"messages": [{"id": "u", "role": "user", "content": "x", "encryptedValue": "zz"}]},
            "messages[0].encryptedValue",
            "unsupported_parameter",
        ),
        (
            {
                "messages": [
                    {"id": "u", "role": "user", "content": [{"type": "audio", "source": {"type": "url", "value": "u"}}]}
                ]
            },
            "messages[0].content[0].type",
            "unsupported_value",
        ),
    ],
)
def test_what_is_refused_is_a_400_before_the_stream_and_stores_nothing(s, body, param, code):
    request = {**run_input("hi"), **body}
    response = s.post(request)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["code"] == code or error["type"] == code
    assert_handled(response)
    if isinstance(request["threadId"], str) and " " not in request["threadId"]:
        assert s.agent.events(request["threadId"]) == []


def test_bad_json_and_a_header_naming_another_session_are_refused(s):
    response = httpx.post(f"{s.agent.url}/ag-ui", content=b"{nope", timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    body = run_input("hi")
    response = s.post(body, **{"X-Session-ID": "another"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "threadId"
    assert s.post(body, **{"X-Session-ID": body["threadId"]}).status_code == 200


def test_the_thread_of_another_user_is_forbidden():
    header = "X-Test-User"
    with ScriptedModelServer() as model, served_agent(model, "owned", AUTH_TRUSTED_USER_HEADER=header) as agent:
        body = run_input("mine")
        url = f"{agent.url}/ag-ui"
        assert httpx.post(url, json=body, headers={header: "alice"}, timeout=60).status_code == 200
        response = httpx.post(url, json=run_input("yours?", body["threadId"]), headers={header: "bob"}, timeout=60)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "session_forbidden"
        assert agent.event_types(body["threadId"]) == ["user_message", "agent_response"]


def test_memory_tools_stream_as_tool_calls_with_their_results():
    rules = [
        Rule(
            Match(user_matches=r"remember (?P<fact>.+)", tool_available="save_memory", after_tool=False),
            ToolCallReply([ToolCall("save_memory", {"content": "{fact}"})]),
        ),
        Rule(
            Match(user_matches=r"what do I like", tool_available="search_memory", after_tool=False),
            ToolCallReply([ToolCall("search_memory", {"query": "tea"})]),
        ),
    ]
    with ScriptedModelServer() as model, served_agent(model, "rememberer", MEMORY_TOOLS="all") as agent:
        model.load_script(rules)
        thread = f"t-{uuid.uuid4().hex}"
        setup = Setup(model, agent)
        saved = setup.run(run_input("remember I like green tea", thread))
        recalled = setup.run(run_input("what do I like?", thread))
    for events, name in ((saved, "save_memory"), (recalled, "search_memory")):
        assert types(events)[:5] == [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
        ]
        start, result = events[1], events[4]
        assert start.tool_call_name == name
        assert result.tool_call_id == start.tool_call_id
    assert saved[4].content.startswith("Saved (")
    assert "I like green tea" in recalled[4].content


# -- hypothesis: the body, hostile ------------------------------------------------------------------------------------

names = st.sampled_from(["get_weather", "add", "x", ""])
message = st.one_of(
    st.fixed_dictionaries(
        {
            "id": field(st.text(max_size=4)),
            "role": field(st.sampled_from(["user", "assistant", "system", "developer", "tool", "activity"])),
            "content": field(any_text),
        },
        optional={"toolCallId": field(st.text(max_size=4)), "name": field(st.text(max_size=4))},
    ),
    hostile_values,
)
#: Half the conversations end with a plain user message, so many runs get through to the model.
messages = st.one_of(
    st.lists(message, max_size=3),
    st.lists(message, max_size=2).map(lambda head: [*head, {"id": "u", "role": "user", "content": "hello"}]),
)
bodies = st.fixed_dictionaries(
    {
        "threadId": field(st.from_regex(r"\Afz-[a-z0-9]{6}\Z")),
        "runId": field(st.text(max_size=6)),
        "messages": messages,
    },
    optional={
        "tools": field(
            st.lists(
                st.fixed_dictionaries({"name": field(names), "description": field(st.text(max_size=4))}), max_size=2
            )
        ),
        "context": field(
            st.lists(st.fixed_dictionaries({"description": field(any_text), "value": field(any_text)}), max_size=2)
        ),
        "state": field(st.just({})),
        "forwardedProps": field(st.just({})),
        "parentRunId": field(st.text(max_size=4)),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_fuzz_the_run_agent_input(setup, body):
    # Hypothesis draws the same thread for several examples (it shrinks towards fz-000000): a refused request must
    # leave what the thread held as it was.
    thread = body.get("threadId")
    ours = isinstance(thread, str) and thread.startswith("fz-")
    before = setup.agent.events(thread) if ours else None
    response = httpx.post(
        f"{setup.agent.url}/ag-ui",
        content=render(body).encode("utf-8", "surrogatepass"),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    event(f"status {response.status_code}")
    assert_handled(response)
    if response.status_code == 400:
        error = response.json()["error"]
        assert error["message"]
        event(f"code {error['code']}")
        if ours:
            assert setup.agent.events(thread) == before
        return
    assert response.status_code == 200, response.text
    events = decode(response.text)
    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)


async def test_a_delegation_is_a_tool_call_naming_the_peer_with_the_peers_answer_as_its_result(model):
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "count to three"})]),
        TextReply("one two three"),
        TextReply("The child counted."),
    )
    async with (
        running_agent(model, name="child") as child,
        running_agent(model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}") as parent,
    ):
        body = run_input("ask the child")
        response = await asyncio.to_thread(httpx.post, f"{parent.url}/ag-ui", json=body, timeout=60)
        assert response.status_code == 200, response.text
        events = decode(response.text)
        start = next(e for e in events if isinstance(e, ToolCallStartEvent))
        assert start.tool_call_name == "delegate_to_child"
        result = next(e for e in events if isinstance(e, ToolCallResultEvent))
        assert result.tool_call_id == start.tool_call_id
        assert "one two three" in result.content
        assert "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent)) == "The child counted."
        assert [e["event_type"] for e in parent.events(body["threadId"])] == [
            "user_message",
            "delegation_request",
            "delegation_response",
            "agent_response",
        ]
