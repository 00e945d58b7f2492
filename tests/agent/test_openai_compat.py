"""OpenAI compatibility as clients use it, with the ``openai`` SDK against a real agent and the scripted model:
client tools (whole, streamed, follow-ups with and without a session), structured output, sampling fields,
refusals in OpenAI's error shape, models, and multi-part content."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kora.scripted import Match, Rule, TextReply, ToolCall, ToolCallReply
from tests.support.agent import RunningAgent, running_agent, served_agent
from tests.support.hostile import any_text, assert_handled, field, hostile_values, render
from tests.support.scripted_server import ScriptedModelServer
from tests.support.weather import CALLS_WEATHER, CHAT_TOOL

pytestmark = pytest.mark.integration

WEATHER_TOOL = CHAT_TOOL

RULES = [
    CALLS_WEATHER,
    Rule(Match(response_format="Weather"), TextReply('{"city": "Paris", "degrees": 21}')),
    Rule(Match(response_format="Broken"), TextReply("it is sunny")),
    Rule(Match(response_format="json_object"), TextReply('{"ok": true}')),
]


@dataclass
class Setup:
    model: ScriptedModelServer
    agent: RunningAgent

    @property
    def client(self) -> openai.OpenAI:
        return self.agent.openai()

    def post(self, body: dict[str, object], **headers: str) -> httpx.Response:
        return httpx.post(f"{self.agent.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


@pytest.fixture(scope="module", params=["direct", "agent"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    """One scripted model and one agent (memory tools on, so the agent has tools of its own) per turn path."""
    with ScriptedModelServer() as model:
        model.load_script(RULES)
        direct = str(request.param == "direct")
        with served_agent(model, "helper", MEMORY_TOOLS="all", AGENT_DIRECT_FIRST_REQUEST=direct) as agent:
            yield Setup(model, agent)


@pytest.fixture
def s(setup: Setup) -> Setup:
    setup.model.reset(keep_rules=True)
    return setup


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


# -- client tools ---------------------------------------------------------------------------------------------------


def test_a_client_tool_call_reaches_the_client_and_its_result_continues_the_session(s):
    session = "weather-1"
    first = s.client.chat.completions.create(
        model="helper",
        messages=[user("weather in Paris?")],
        tools=[WEATHER_TOOL],
        extra_headers={"X-Session-ID": session},
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    offered = {t["function"]["name"] for t in s.model.requests[0]["tools"]}
    assert offered == {"get_weather", "search_memory", "save_memory"}
    assert s.agent.event_types(session) == ["user_message", "tool_call"]

    second = s.client.chat.completions.create(
        model="helper",
        messages=[
            user("weather in Paris?"),
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ],
        tools=[WEATHER_TOOL],
        extra_headers={"X-Session-ID": session},
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Tool result: sunny, 21 C"
    sent = s.model.requests[-1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool"]
    assert sent[-2]["tool_calls"][0]["id"] == call.id
    assert sent[-1] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}
    # Each step stored once: the call by the first request, its result and the answer by the second.
    assert s.agent.event_types(session) == ["user_message", "tool_call", "tool_result", "agent_response"]


def test_a_framework_that_resends_the_conversation_without_a_session_gets_the_same_continuation(s):
    first = s.client.chat.completions.create(model="helper", messages=[user("weather in Rome?")], tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    second = s.client.chat.completions.with_raw_response.create(
        model="helper",
        messages=[
            {"role": "system", "content": "Be brief."},
            user("weather in Rome?"),
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "rain"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert second.parse().choices[0].message.content == "Tool result: rain"
    sent = s.model.requests[-1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool"]
    assert any(m["role"] == "system" and "Be brief." in m["content"] for m in sent)
    # A new session of its own holds the call (from the client's message), its result and the answer.
    session = second.headers["X-Session-ID"]
    assert s.agent.event_types(session) == ["tool_call", "tool_result", "agent_response"]


def test_client_tool_calls_stream_as_deltas(s):
    stream = s.client.chat.completions.create(
        model="helper", messages=[user("weather in Oslo?")], tools=[WEATHER_TOOL], stream=True
    )
    chunks = list(stream)
    deltas = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []]
    assert [(d.function.name, json.loads(d.function.arguments)) for d in deltas] == [("get_weather", {"city": "Oslo"})]
    assert deltas[0].id
    assert deltas[0].index == 0
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]


def test_server_tools_run_inside_the_turn_before_a_client_call_ends_it(s):
    s.model.enqueue(
        ToolCallReply([ToolCall("save_memory", {"content": "The user likes Oslo."})]),
        ToolCallReply([ToolCall("get_weather", {"city": "Oslo"})]),
    )
    answer = s.client.chat.completions.create(
        model="helper",
        messages=[user("remember Oslo, then check it")],
        tools=[WEATHER_TOOL],
        extra_headers={"X-Session-ID": "mixed"},
    )
    assert [c.function.name for c in answer.choices[0].message.tool_calls] == ["get_weather"]
    assert len(s.model.requests) == 2
    assert s.agent.event_types("mixed") == ["user_message", "tool_call", "tool_result", "tool_call"]


def test_tool_choice_none_offers_no_tool_at_all(s):
    s.client.chat.completions.create(
        model="helper", messages=[user("weather in Paris?")], tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert "tools" not in s.model.requests[-1]


def test_a_named_tool_choice_and_parallel_tool_calls_reach_the_model(s):
    s.client.chat.completions.create(
        model="helper",
        messages=[user("weather in Paris?")],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
    )
    sent = s.model.requests[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"tools": [{**WEATHER_TOOL, "function": {"name": "save_memory"}}]}, "tools[0].function.name", "invalid_value"),
        ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools[1].function.name", "invalid_value"),
        (
            {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
            "tools[0].function.name",
            "invalid_value",
        ),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "invalid_value"),
        ({"tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"temperature": 3}, "temperature", "invalid_value"),
        ({"max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"n": 2}, "n", "unsupported_value"),
        ({"logprobs": True}, "logprobs", "unsupported_value"),
        ({"top_logprobs": 2}, "top_logprobs", "unsupported_parameter"),
        ({"frobnicate": 1}, "frobnicate", "unsupported_parameter"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
            "response_format.json_schema.schema",
            "invalid_value",
        ),
        (
            {"messages": [user("hi"), {"role": "tool", "tool_call_id": "nope", "content": "x"}]},
            "messages[1].role",
            "invalid_value",
        ),
        (
            {"messages": [user("hi"), {"role": "assistant", "content": "I say"}]},
            "messages[1].role",
            "unsupported_value",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages[0].content[0].type",
            "unsupported_value",
        ),
        ({"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages[0].name", "unsupported_parameter"),
    ],
)
def test_requests_kora_cannot_honour_are_refused_naming_the_field(s, body, param, code):
    session = "refused-" + "".join(c if c.isalnum() else "-" for c in f"{param}-{code}")
    response = s.post({"model": "helper", "messages": [user("weather in Paris?")], **body}, **{"X-Session-ID": session})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert s.model.requests == []
    assert s.agent.events(session) == []


def test_tool_results_must_answer_the_calls_before_them(s):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    base = [user("weather in Paris?"), {"role": "assistant", "tool_calls": [call]}]
    for tail, param in (
        ([{"role": "tool", "tool_call_id": "c2", "content": "x"}], "messages[2].tool_call_id"),
        ([{"role": "tool", "tool_call_id": "c1", "content": "x"}] * 2, "messages[3].tool_call_id"),
    ):
        response = s.post({"model": "helper", "messages": base + tail, "tools": [WEATHER_TOOL]})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param
    unanswered = s.post({"model": "helper", "messages": [*base, user("never mind")]})
    assert unanswered.status_code == 200  # an unanswered call in the history is left out, as in replay
    assert [m["role"] for m in s.model.requests[-1]["messages"] if m["role"] != "system"] == ["user", "user"]


# -- structured output, sampling, models, content -------------------------------------------------------------------


class Weather(pydantic.BaseModel):
    city: str
    degrees: int


def test_parse_gets_a_validated_structured_answer(s):
    answer = s.client.chat.completions.parse(model="helper", messages=[user("weather?")], response_format=Weather)
    assert answer.choices[0].message.parsed == Weather(city="Paris", degrees=21)
    sent = s.model.requests[-1]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "Weather"
    assert sent["json_schema"]["strict"] is True


def test_json_object_is_forwarded_and_checked(s):
    answer = s.client.chat.completions.create(
        model="helper", messages=[user("json please")], response_format={"type": "json_object"}
    )
    assert json.loads(answer.choices[0].message.content) == {"ok": True}
    assert s.model.requests[-1]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("stream", [False, True])
def test_a_structured_answer_that_never_validates_is_an_http_error(s, stream):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "Broken", "schema": schema}}
    response = s.post(
        {"model": "helper", "messages": [user("x")], "response_format": response_format, "stream": stream},
        **{"X-Session-ID": f"broken-{stream}"},
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "invalid_model_output"
    # The model was told why and asked again before the turn gave up.
    assert len(s.model.requests) == 2
    assert s.agent.event_types(f"broken-{stream}")[-1] == "error"


def test_sampling_and_limits_reach_every_model_request_of_the_turn(s):
    s.model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "x"})]), TextReply("saved"))
    s.client.chat.completions.create(
        model="helper",
        messages=[user("save x")],
        temperature=0.2,
        top_p=0.9,
        max_completion_tokens=50,
        stop=["END"],
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={"42": 10},
        user="u-1",
    )
    assert len(s.model.requests) == 2
    for sent in s.model.requests:
        assert {k: sent.get(k) for k in ("temperature", "top_p", "max_tokens", "stop", "seed", "user")} == {
            "temperature": 0.2,
            "top_p": 0.9,
            "max_tokens": 50,
            "stop": ["END"],
            "seed": 7,
            "user": "u-1",
        }
        assert (sent["presence_penalty"], sent["frequency_penalty"], sent["logit_bias"]) == (0.5, -0.5, {"42": 10})


def test_models_list_and_retrieve(s):
    models = s.client.models.list()
    assert [m.id for m in models.data] == ["helper"]
    assert models.data[0].owned_by == "kora"
    assert s.client.models.retrieve("helper").id == "helper"
    with pytest.raises(openai.NotFoundError) as raised:
        s.client.models.retrieve("gpt-4o")
    assert raised.value.code == "model_not_found"


def test_text_parts_stay_separate_and_images_reach_the_model(s):
    content = [
        {"type": "text", "text": "alpha"},
        {"type": "text", "text": "beta"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    ]
    answer = s.client.chat.completions.create(model="helper", messages=[{"role": "user", "content": content}])
    assert answer.choices[0].message.content == "You said: alpha\nbeta"
    assert s.model.requests[-1]["messages"][-1]["content"] == content


# -- hypothesis: the new fields, hostile -----------------------------------------------------------------------------

names = st.one_of(st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True), any_text)
schemas = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["object", "string", "integer", 5, "nope"])}),
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("object"), "properties": st.dictionaries(names, inner, max_size=4)}
    ),
    max_leaves=30,
)
tools = st.lists(
    st.fixed_dictionaries(
        {
            "type": field(st.just("function")),
            "function": field(st.fixed_dictionaries({"name": field(names)}, optional={"parameters": field(schemas)})),
        }
    ),
    max_size=3,
)
tool_choices = st.one_of(
    st.sampled_from(["auto", "none", "required", "sometimes"]),
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": names})}),
    hostile_values,
)
response_formats = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "xml"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries({"name": names}, optional={"schema": schemas}),
        }
    ),
    hostile_values,
)
tool_tails = st.lists(
    st.fixed_dictionaries(
        {"role": st.just("tool"), "tool_call_id": field(names), "content": field(st.text(max_size=5))}
    ),
    min_size=1,
    max_size=2,
)
openai_bodies = st.fixed_dictionaries(
    {"model": st.just("helper"), "messages": st.just([user("hi")])},
    optional={
        "tools": field(tools),
        "tool_choice": tool_choices,
        "parallel_tool_calls": field(st.booleans()),
        "response_format": response_formats,
        "temperature": field(st.floats(-1, 3)),
        "top_p": field(st.floats(0, 1)),
        "max_tokens": field(st.integers(-2, 50)),
        "max_completion_tokens": field(st.integers(1, 50)),
        "stop": field(st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=6))),
        "seed": field(st.integers()),
        "presence_penalty": field(st.floats(-3, 3)),
        "logit_bias": field(st.dictionaries(st.text(max_size=5), st.integers(-200, 200), max_size=2)),
        "n": field(st.integers(0, 3)),
        "logprobs": field(st.booleans()),
        "user": field(st.text(max_size=5)),
        "unknown_field": hostile_values,
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=openai_bodies, tail=st.none() | tool_tails)
def test_fuzz_the_openai_fields(setup, body, tail):
    if tail is not None:
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        body = {**body, "messages": [user("hi"), {"role": "assistant", "tool_calls": [call]}, *tail]}
    session = f"fuzz-{uuid.uuid4().hex}"
    response = httpx.post(
        f"{setup.agent.url}/v1/chat/completions",
        content=render(body).encode("utf-8", "surrogatepass"),
        headers={"content-type": "application/json", "X-Session-ID": session},
        timeout=30,
    )
    event(f"status {response.status_code}")
    if response.status_code == 502:  # a schema the scripted model has no rule for: the model API's error
        assert response.json()["error"]["code"] in ("model_error", "invalid_model_output")
        return
    assert_handled(response)
    if response.status_code == 400:
        error = response.json()["error"]
        assert error["message"]
        event(f"code {error['code']}")
        assert setup.agent.events(session) == []
    else:
        assert response.status_code == 200, response.text


# -- the Responses API ------------------------------------------------------------------------------------------------

RESPONSES_TOOL = {"type": "function", **WEATHER_TOOL["function"]}


def test_responses_text_and_a_continued_session(s):
    first = s.client.responses.create(model="helper", input="hello there", instructions="Be brief.")
    assert first.output_text == "You said: hello there"
    assert first.status == "completed"
    assert first.usage.total_tokens > 0
    assert any(m["role"] == "system" and "Be brief." in m["content"] for m in s.model.requests[-1]["messages"])
    second = s.client.responses.create(model="helper", input="and again", previous_response_id=first.id)
    assert second.output_text == "You said: and again"
    # The second turn saw the first from the session's stored events.
    assert [m["content"] for m in s.model.requests[-1]["messages"] if m["role"] != "system"] == [
        "hello there",
        "You said: hello there",
        "and again",
    ]


def test_responses_function_tool_round_trip_with_previous_response_id(s):
    first = s.client.responses.create(model="helper", input="weather in Paris?", tools=[RESPONSES_TOOL])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    second = s.client.responses.create(
        model="helper",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[RESPONSES_TOOL],
    )
    assert second.output_text == "Tool result: sunny"
    sent = [m for m in s.model.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]


def test_responses_stream_the_typed_events(s):
    with s.client.responses.stream(model="helper", input="weather in Oslo?", tools=[RESPONSES_TOOL]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"city": "Oslo"}
    with s.client.responses.stream(model="helper", input="hello") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
    assert "".join(deltas) == "You said: hello"


def test_responses_structured_output_and_refusals(s):
    schema = Weather.model_json_schema()
    answer = s.client.responses.create(
        model="helper",
        input="weather?",
        text={"format": {"type": "json_schema", "name": "Weather", "schema": schema, "strict": False}},
    )
    assert Weather.model_validate_json(answer.output_text) == Weather(city="Paris", degrees=21)
    for body, param in (
        ({"store": "no"}, "store"),
        ({"conversation": "not a session id"}, "conversation"),
        ({"conversation": {"id": 5}}, "conversation"),
        ({"conversation": "conv_1", "previous_response_id": "resp_zz"}, "conversation"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"include": "all"}, "include"),
        ({"background": True, "store": False}, "background"),
        ({"background": True, "stream": True}, "background"),
        ({"background": "yes"}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}}, "text.format.schema"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ):
        response = httpx.post(f"{s.agent.url}/v1/responses", json={"model": "helper", "input": "x", **body}, timeout=30)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
    unknown = httpx.post(
        f"{s.agent.url}/v1/responses", json={"input": "x", "previous_response_id": "resp_zz"}, timeout=30
    )
    assert unknown.json()["error"]["param"] == "previous_response_id"


response_items = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"role": field(st.sampled_from(["user", "assistant", "system"])), "content": field(st.text(max_size=5))}
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("function_call"),
                "call_id": field(names),
                "name": field(names),
                "arguments": field(st.just("{}")),
            }
        ),
        st.fixed_dictionaries(
            {"type": st.just("function_call_output"), "call_id": field(names), "output": field(st.text(max_size=5))}
        ),
        hostile_values,
    ),
    max_size=4,
)
#: A ``conversation`` that the fuzz test replaces with the session its ``X-Session-ID`` names.
SAME_SESSION = "same-as-the-header"
responses_bodies = st.fixed_dictionaries(
    {"input": st.one_of(st.text(max_size=10), response_items, hostile_values)},
    optional={
        "model": field(st.just("helper")),
        "instructions": field(st.text(max_size=5)),
        "tools": field(
            st.lists(st.fixed_dictionaries({"type": field(st.just("function")), "name": field(names)}), max_size=2)
        ),
        "text": st.one_of(
            hostile_values,
            st.fixed_dictionaries(
                {
                    "format": st.one_of(
                        st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "xml"])}),
                        st.fixed_dictionaries(
                            {"type": st.just("json_schema"), "name": field(names)},
                            optional={"schema": field(schemas), "strict": field(st.booleans())},
                        ),
                    )
                }
            ),
        ),
        "tool_choice": st.one_of(
            st.sampled_from(["auto", "none", "required", "sometimes"]),
            st.fixed_dictionaries({"type": st.just("function"), "name": names}),
            hostile_values,
        ),
        "metadata": field(
            st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers()), max_size=2)
        ),
        "temperature": field(st.floats(-1, 3)),
        "parallel_tool_calls": field(st.booleans()),
        "previous_response_id": field(st.text(max_size=20)),
        "max_output_tokens": field(st.integers(0, 20)),
        "stream": field(st.booleans()),
        "store": field(st.booleans()),
        "background": field(st.booleans()),
        "include": field(st.just([])),
        "conversation": field(
            st.one_of(st.none(), st.just(SAME_SESSION), st.text(max_size=20), st.builds(lambda t: {"id": t}, st.text()))
        ),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=responses_bodies)
def test_fuzz_the_responses_api(setup, body):
    session = f"fuzz-{uuid.uuid4().hex}"
    if body.get("conversation") == SAME_SESSION:  # the conversation the header names too
        body = {**body, "conversation": session}
    response = httpx.post(
        f"{setup.agent.url}/v1/responses",
        content=render(body).encode("utf-8", "surrogatepass"),
        headers={"content-type": "application/json", "X-Session-ID": session},
        timeout=30,
    )
    event(f"status {response.status_code}")
    assert_handled(response)
    if response.status_code >= 400:
        assert response.json()["error"]["message"]
        assert setup.agent.events(session) == []
    else:
        assert response.status_code == 200, response.text
        if not body.get("stream"):  # every answer is the SDK's response object, whatever the request echoed
            openai.types.responses.Response.model_validate(response.json())
        if body.get("store") is False:  # a response not stored leaves nothing
            assert setup.agent.events(session) == []


def test_a_token_limit_cuts_the_answer_with_finish_reason_length(s):
    answer = s.client.chat.completions.create(
        model="helper", messages=[user("hello there my friend")], max_completion_tokens=2
    )
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == ("You said:", "length")
    assert s.model.requests[-1]["max_tokens"] == 2
    response = s.client.responses.create(model="helper", input="hello there my friend", max_output_tokens=2)
    assert (response.output_text, response.status) == ("You said:", "incomplete")
    assert response.incomplete_details.reason == "max_output_tokens"


async def test_a_call_outside_the_replay_window_is_not_stored_twice(model):
    model.load_script(RULES)
    async with running_agent(model, "helper", MEMORY_CONTEXT_LIMIT="0") as agent:
        client, headers = agent.openai(), {"X-Session-ID": "no-window"}
        first = client.chat.completions.create(
            model="helper", messages=[user("weather in Paris?")], tools=[WEATHER_TOOL], extra_headers=headers
        )
        message = first.choices[0].message
        follow_up = [
            user("weather in Paris?"),
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "fog"},
        ]
        client.chat.completions.create(model="helper", messages=follow_up, tools=[WEATHER_TOOL], extra_headers=headers)
        assert agent.event_types("no-window") == ["user_message", "tool_call", "tool_result", "agent_response"]


def test_tool_choice_required_binds_only_the_first_model_request_of_the_turn(s):
    s.model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "x"})]), TextReply("saved"))
    answer = s.client.chat.completions.create(model="helper", messages=[user("save x")], tool_choice="required")
    assert answer.choices[0].message.content == "saved"
    first, second = s.model.requests
    assert first["tool_choice"] == "required"
    assert second.get("tool_choice", "auto") == "auto"


def test_one_answer_calling_an_own_tool_and_a_client_tool_runs_the_own_and_hands_over_the_client_call(s):
    s.model.enqueue(
        ToolCallReply([ToolCall("save_memory", {"content": "Oslo"}), ToolCall("get_weather", {"city": "Oslo"})])
    )
    answer = s.client.chat.completions.create(
        model="helper", messages=[user("both at once")], tools=[WEATHER_TOOL], extra_headers={"X-Session-ID": "both"}
    )
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert len(s.model.requests) == 1
    events = s.agent.events("both")
    assert [(e["event_type"], e["content"].get("tool_name")) for e in events[1:]] == [
        ("tool_call", "save_memory"),
        ("tool_call", "get_weather"),
        ("tool_result", "save_memory"),
    ]
    follow_up = s.client.chat.completions.create(
        model="helper",
        messages=[
            user("both at once"),
            answer.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "cold"},
        ],
        tools=[WEATHER_TOOL],
        extra_headers={"X-Session-ID": "both"},
    )
    assert follow_up.choices[0].message.content == "Tool result: cold"
    assert [e["event_type"] for e in s.agent.events("both")][-2:] == ["tool_result", "agent_response"]
