"""The Responses API's ``input`` items checked by the Responses rules (the ``openai`` package's param types), with
the ``openai`` SDK against a real agent and the scripted model: every item type the API defines is taken and
mapped (messages in their three forms with text, image and echoed output parts, function calls and their outputs)
or refused with a 400 in OpenAI's error shape naming ``input[i]...``; refused requests store nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.agent import RunningAgent, served_agent
from tests.support.hostile import any_text, assert_handled, field, hostile_values, render
from tests.support.scripted_server import ScriptedModelServer
from tests.support.weather import CALLS_WEATHER, RESPONSES_TOOL

pytestmark = pytest.mark.integration

TOOL = RESPONSES_TOOL
RULES = [
    CALLS_WEATHER,
]
#: The four codes a refusal of the Responses API may carry.
CODES = {"unsupported_parameter", "unsupported_value", "invalid_type", "invalid_value"}
IMAGE = "data:image/png;base64,iVBORw0KGgo="


@dataclass
class Setup:
    model: ScriptedModelServer
    agent: RunningAgent

    @property
    def client(self) -> openai.OpenAI:
        return self.agent.openai()

    def post(self, body: dict[str, object], session: str) -> httpx.Response:
        return httpx.post(
            f"{self.agent.url}/v1/responses",
            content=render(body).encode("utf-8", "surrogatepass"),
            headers={"content-type": "application/json", "X-Session-ID": session},
            timeout=30,
        )

    def sent(self) -> list[dict[str, object]]:
        """The messages of the model's last request, the agent's system prompt left out."""
        return [m for m in self.model.requests[-1]["messages"] if m["role"] != "system"]


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    with ScriptedModelServer() as model:
        model.load_script(RULES)
        with served_agent(model, "helper") as agent:
            yield Setup(model, agent)


@pytest.fixture
def s(setup: Setup) -> Setup:
    setup.model.reset(keep_rules=True)
    return setup


def test_messages_in_each_form_reach_the_model_with_their_parts(s):
    items = [
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user", "status": "completed", "content": [{"type": "input_text", "text": "a"}]},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "b", "annotations": []}],
        },
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "alpha"},
                {"type": "input_text", "text": "beta"},
                {"type": "input_image", "image_url": IMAGE, "detail": "low"},
                {"type": "input_image", "image_url": IMAGE},  # detail left out: the API's default, auto
            ],
        },
    ]
    answer = s.client.responses.create(model="helper", input=items)
    assert answer.output_text == "You said: alpha\nbeta"
    system = "\n".join(str(m["content"]) for m in s.model.requests[-1]["messages"] if m["role"] == "system")
    assert "Answer in French." in system
    assert s.sent() == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "alpha"},
                {"type": "text", "text": "beta"},
                {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
                {"type": "image_url", "image_url": {"url": IMAGE}},
            ],
        },
    ]


def test_an_answer_echoed_back_as_input_items_continues_the_conversation(s):
    """What the OpenAI Agents SDK does: the previous output items, as the SDK parsed them, resent as input."""
    first = s.client.responses.create(model="helper", input="weather in Oslo?", tools=[TOOL], store=False)
    (call,) = [item for item in first.output if item.type == "function_call"]
    items = [
        {"role": "user", "content": "weather in Oslo?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": [{"type": "input_text", "text": "mild"}]},
    ]
    second = s.client.responses.create(model="helper", input=items, tools=[TOOL], store=False)
    assert second.output_text == "Tool result: mild"
    assert [(m["role"], m.get("tool_call_id")) for m in s.sent()] == [
        ("user", None),
        ("assistant", None),
        ("tool", call.call_id),
    ]
    assert s.sent()[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    # Kora's own answer echoed as an output message, then a new question.
    third = s.client.responses.create(
        model="helper",
        input=[*[item.model_dump(exclude_none=True) for item in second.output], {"role": "user", "content": "ok"}],
        store=False,
    )
    assert third.output_text == "You said: ok"
    assert s.sent() == [{"role": "assistant", "content": "Tool result: mild"}, {"role": "user", "content": "ok"}]
    # The same answer built by hand from the output, as langchain-openai sends it: no type, no status, no id.
    by_hand = {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Tool result: mild", "annotations": []}],
    }
    fourth = s.client.responses.create(model="helper", input=[by_hand, {"role": "user", "content": "ok"}], store=False)
    assert fourth.output_text == "You said: ok"
    assert s.sent() == [{"role": "assistant", "content": "Tool result: mild"}, {"role": "user", "content": "ok"}]


def _call(call_id: str = "c1", **extra: object) -> dict[str, object]:
    return {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": "{}", **extra}


def _user(*parts: dict[str, object]) -> dict[str, object]:
    return {"role": "user", "content": list(parts)}


REFUSED = [
    # Shapes the Responses API does not define.
    ([{"role": "user", "content": 5}], "input[0].content", "invalid_type"),
    ([{"role": "robot", "content": "x"}], "input[0].role", "invalid_value"),
    ([_user({"type": "input_text", "text": "x"}) | {"status": "bogus"}], "input[0].status", "invalid_value"),
    ([{"role": "user", "content": "x", "foo": 1}], "input[0].foo", "unsupported_parameter"),
    ([_user({"type": "input_text", "text": 5})], "input[0].content[0].text", "invalid_type"),
    ([_user({"type": "input_audio", "data": "x"})], "input[0].content[0].type", "invalid_value"),
    ([_user({"text": "x"})], "input[0].content[0].type", "invalid_value"),
    ([{"type": "nope"}], "input[0].type", "invalid_value"),
    ([{"type": 5}], "input[0].type", "invalid_type"),
    ([5], "input[0]", "invalid_type"),
    ([_call(arguments={})], "input[0].arguments", "invalid_type"),
    ([{"type": "function_call_output", "call_id": "c1"}], "input[0].output", "invalid_value"),
    ([{"type": "reasoning", "id": "rs_1", "summary": "x"}], "input[0].summary", "invalid_type"),
    (
        [
            {
                "type": "message",
                "role": "assistant",
                "status": "done",
                "content": [{"type": "output_text", "text": "b", "annotations": []}],
            }
        ],
        "input[0].status",
        "invalid_value",
    ),
    # Defined by the API, not served by Kora.
    (
        [_user({"type": "input_file", "file_data": "eA==", "filename": "x.txt"})],
        "input[0].content[0].type",
        "unsupported_value",
    ),
    ([_user({"type": "input_image", "file_id": "file_1"})], "input[0].content[0].file_id", "unsupported_parameter"),
    (
        [_user({"type": "input_image", "image_url": IMAGE, "detail": "original"})],
        "input[0].content[0].detail",
        "unsupported_value",
    ),
    (
        [_user({"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}})],
        "input[0].content[0].prompt_cache_breakpoint",
        "unsupported_parameter",
    ),
    (
        [{"role": "assistant", "content": "b", "phase": "final_answer"}, {"role": "user", "content": "x"}],
        "input[0].phase",
        "unsupported_parameter",
    ),
    (
        [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]}],
        "input[0].type",
        "unsupported_value",
    ),
    ([{"type": "item_reference", "id": "msg_1"}], "input[0].type", "unsupported_value"),
    ([{"id": "msg_1"}], "input[0].type", "unsupported_value"),
    (
        [{"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}}],
        "input[0].type",
        "unsupported_value",
    ),
    ([_call(namespace="n")], "input[0].namespace", "unsupported_parameter"),
    ([_call(), {"type": "function_call_output", "output": "x"}], "input[1].call_id", "invalid_value"),
    (
        [_call(), {"type": "function_call_output", "call_id": "c1", "output": "x", "name": "f"}],
        "input[1].name",
        "unsupported_parameter",
    ),
    (
        [
            _call(),
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": IMAGE}]},
        ],
        "input[1].output[0].type",
        "unsupported_value",
    ),
    # Valid items the chat rules refuse, named by the item they came from.
    ([_call(), {"type": "function_call_output", "call_id": "c2", "output": "x"}], "input[1].call_id", "invalid_value"),
    (
        [_call(), _call("c2", arguments="[1]"), {"type": "function_call_output", "call_id": "c1", "output": "x"}],
        "input[1].arguments",
        "invalid_value",
    ),
    (
        [{"role": "assistant", "content": [{"type": "input_image", "image_url": IMAGE}]}],
        "input[0].content[0].type",
        "unsupported_value",
    ),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "input[1].role", "unsupported_value"),
    ([{"type": "function_call_output", "call_id": "c1", "output": "x"}], "input[0].call_id", "invalid_value"),
    # No prompt at all, and text no store can keep.
    ([], "input", "invalid_value"),
    ([{"role": "assistant", "content": "b"}], "input", "invalid_value"),
    ("nul \x00 inside", "input", "invalid_value"),
    ("lone \ud800", "input", "invalid_value"),
    (
        [{"role": "user", "content": [{"type": "input_text", "text": "a\udc80"}]}],
        "input[0].content[0].text",
        "invalid_value",
    ),
]


@pytest.mark.parametrize(("items", "param", "code"), REFUSED)
def test_items_kora_cannot_take_are_refused_naming_the_item(s, items, param, code):
    session = f"refused-{uuid.uuid4().hex}"
    response = s.post({"model": "helper", "input": items, "tools": [TOOL]}, session)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error
    assert error["code"] in CODES
    assert s.agent.events(session) == []
    if "\\ud800" in repr(items) or "\\udc80" in repr(items):
        return  # the SDK cannot encode a lone surrogate to send it
    with pytest.raises(openai.BadRequestError) as refused:  # what the SDK's user sees
        s.client.responses.create(model="helper", input=items, tools=[TOOL])
    assert refused.value.param == param


@pytest.mark.parametrize(
    ("instructions", "code"), [(5, "invalid_type"), (["x"], "invalid_type"), ("be \x00 brief", "invalid_value")]
)
def test_bad_instructions_are_refused_naming_instructions(s, instructions, code):
    session = f"instructions-{uuid.uuid4().hex}"
    response = s.post({"model": "helper", "input": "hi", "instructions": instructions}, session)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("instructions", code), error
    assert "messages" not in error["message"], error
    assert s.agent.events(session) == []


# -- hypothesis: items of every defined shape, hostile -----------------------------------------------------------------

texts = st.text(max_size=6)
parts = st.one_of(
    st.fixed_dictionaries({"type": field(st.just("input_text")), "text": field(texts)}),
    st.fixed_dictionaries(
        {"type": field(st.just("input_image"))},
        optional={
            "image_url": field(st.just(IMAGE)),
            "detail": field(st.sampled_from(["auto", "low", "high", "original"])),
            "file_id": field(texts),
        },
    ),
    st.fixed_dictionaries(
        {"type": field(st.sampled_from(["input_file", "output_text", "refusal", "input_audio"]))},
        optional={"text": field(texts), "annotations": field(st.just([])), "file_data": field(texts)},
    ),
    hostile_values,
)
items = st.one_of(
    st.fixed_dictionaries(
        {
            "role": field(st.sampled_from(["user", "assistant", "system", "developer"])),
            "content": field(st.one_of(texts, st.lists(parts, max_size=3))),
        },
        optional={
            "type": field(st.just("message")),
            "id": field(texts),
            "status": field(st.sampled_from(["completed", "in_progress", "done"])),
            "phase": field(st.just("commentary")),
        },
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": field(st.sampled_from(["c1", "c2"])),
            "name": field(st.sampled_from(["get_weather", "bad name"])),
            "arguments": field(st.sampled_from(["{}", '{"city": "Oslo"}', "[1]", "nope"])),
        },
        optional={"id": field(texts), "status": field(st.just("completed")), "kora_approval": hostile_values},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "output": field(st.one_of(texts, st.lists(parts, max_size=2)))},
        optional={"call_id": field(st.sampled_from(["c1", "c2"])), "status": field(st.just("completed"))},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["reasoning", "item_reference", "web_search_call", "compaction", "mcp_call"])},
        optional={"id": field(texts), "summary": field(st.just([])), "status": field(texts)},
    ),
    st.fixed_dictionaries({"type": field(any_text)}, optional={"id": field(texts)}),
    hostile_values,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(input_items=st.lists(items, min_size=1, max_size=4), stream=st.booleans())
def test_fuzz_input_items(setup, input_items, stream):
    session = f"fuzz-{uuid.uuid4().hex}"
    response = setup.post({"model": "helper", "input": input_items, "tools": [TOOL], "stream": stream}, session)
    event(f"status {response.status_code}")
    assert_handled(response)
    if response.status_code >= 400:
        error = response.json()["error"]
        event(f"code {error['code']}")
        assert error["message"]
        if error["code"] == "invalid_json":  # the body itself, beyond the JSON limits: no field to name
            assert error["param"] is None, error
        else:
            assert error["code"] in CODES, error
            assert error["param"] is not None, error
            assert error["param"].startswith(("input", "tools")), error
        assert setup.agent.events(session) == []
    else:
        assert response.status_code == 200, response.text
