"""The ModelAPI wire and the model adapter, client side: request messages, tool returns, answers and streamed
answers (no I/O: the adapter's mapping functions and its streamed response over given chunks)."""

from datetime import UTC, datetime

import pydantic
import pytest
from pydantic_ai.messages import (
    AudioUrl,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters

from kora.agent.chat_model import KoraChatModel, KoraStreamedResponse, chat_messages, model_response
from kora.agent.runtime import ends_turn
from kora.core.errors import RequestError
from kora.core.openai_wire import ChatCompletion, ChatCompletionChunk, ModelAnswer, function_tool, request_body

pytestmark = pytest.mark.unit

T = datetime(2026, 1, 1, tzinfo=UTC)


def ret(content, outcome="success", call_id="c1") -> ToolReturnPart:
    return ToolReturnPart("weather", content, call_id, timestamp=T, outcome=outcome)


def tool_text(part: ToolReturnPart) -> str:
    return chat_messages([ModelRequest(parts=[part])])[0]["content"]


def test_tool_returns_are_rendered_as_pydantic_ai_renders_them():
    assert tool_text(ret("cold")) == "cold"
    assert tool_text(ret({"t": 21, "city": "Zürich"})) == '{"t":21,"city":"Zürich"}'
    assert tool_text(ret([1, 2.5, True])) == "[1,2.5,true]"
    assert tool_text(ret("denied by policy", "denied")) == "denied by policy"


def test_chat_messages_render_every_step_kind():
    history = [
        ModelRequest(parts=[UserPromptPart("weather?", timestamp=T)]),
        ModelResponse(parts=[TextPart("Let me check."), ToolCallPart("weather", {"city": "Oslo"}, "c1")]),
        ModelRequest(parts=[ret("cold"), UserPromptPart("and now?", timestamp=T)]),
        ModelResponse(parts=[TextPart("Still cold.")]),
        ModelRequest(parts=[UserPromptPart("thanks", timestamp=T)], instructions="Be brief."),
    ]
    model = KoraChatModel("http://127.0.0.1:9/v1", "k", "m", timeout=1, max_retries=0)
    body = model.request_body(history, ModelRequestParameters(), stream=False)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
        {"role": "user", "content": "and now?"},
        {"role": "assistant", "content": "Still cold."},
        {"role": "user", "content": "thanks"},
    ]


def test_consecutive_responses_merge_and_returns_follow_call_order():
    history = [
        ModelResponse(parts=[TextPart("Checking.")]),
        ModelResponse(parts=[ToolCallPart("weather", "{}", "a"), ToolCallPart("weather", "{}", "b")]),
        ModelRequest(parts=[ret("second", call_id="b"), ret("first", call_id="a")]),
    ]
    messages = chat_messages(history)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool"]
    assert messages[0]["content"] == "Checking."
    assert [m["content"] for m in messages[1:]] == ["first", "second"]


def test_prompt_parts_stay_separate_and_images_are_sent():
    image = ImageUrl("http://x/y.png", vendor_metadata={"detail": "low"})
    (message,) = chat_messages([ModelRequest(parts=[UserPromptPart(["alpha", "beta", image])])])
    assert message["content"] == [
        {"type": "text", "text": "alpha"},
        {"type": "text", "text": "beta"},
        {"type": "image_url", "image_url": {"url": "http://x/y.png", "detail": "low"}},
    ]


def test_content_that_is_neither_text_nor_image_is_refused_not_dropped():
    with pytest.raises(RequestError, match="AudioUrl"):
        chat_messages([ModelRequest(parts=[UserPromptPart(["listen", AudioUrl("http://x/y.mp3")])])])


@pytest.mark.parametrize(
    ("sent", "mapped"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_call"),
        ("content_filter", "content_filter"),
        ("something_new", None),
        (None, None),
    ],
)
def test_finish_reasons_map_once(sent, mapped):
    assert model_response(ModelAnswer("x", finish_reason=sent), "m").finish_reason == mapped


def test_request_body_lists_tools_only_when_there_are_some():
    messages: list = [{"role": "user", "content": "hi"}]
    assert request_body("m", messages, [], stream=False) == {"model": "m", "stream": False, "messages": messages}
    tool = function_tool("add", "Add two numbers.", {"type": "object", "properties": {}})
    streamed = request_body("m", messages, [tool], stream=True)
    assert streamed["stream_options"] == {"include_usage": True}
    assert (streamed["tool_choice"], streamed["tools"]) == ("auto", [tool])


def test_answer_from_completion():
    completion = ChatCompletion.model_validate_json(
        '{"id": "x1", "model": "m", "created": 5, "object": "chat.completion", "choices": [{"index": 0,'
        ' "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",'
        ' "function": {"name": "add", "arguments": "{\\"a\\": 1}"}}]}, "finish_reason": "tool_calls"}],'
        ' "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}'
    )
    answer = ModelAnswer.from_completion(completion)
    assert (answer.text, answer.finish_reason, answer.input_tokens, answer.output_tokens) == ("", "tool_calls", 7, 3)
    assert [(c.tool_call_id, c.tool_name, c.arguments) for c in answer.calls] == [("c1", "add", '{"a": 1}')]
    assert not ends_turn(model_response(answer, "m"))
    assert ends_turn(model_response(ModelAnswer(text="hi"), "m"))
    assert not ends_turn(model_response(ModelAnswer(text="  "), "m"))


async def test_answers_with_nulls_and_float_times_from_other_servers_are_read():
    completion = ChatCompletion.model_validate_json(
        '{"id": null, "model": null, "created": 1763700000.5, "choices": [{"message": {"content": "hi",'
        ' "tool_calls": null}, "finish_reason": null}], "usage": {"prompt_tokens": null, "completion_tokens": 2}}'
    )
    answer = ModelAnswer.from_completion(completion)
    assert (answer.text, answer.input_tokens, answer.output_tokens, answer.created) == ("hi", 0, 2, 1763700000)
    chunks = [{"id": None, "choices": None, "usage": None}, {"choices": [{"delta": {"content": "ok"}}]}]
    streamed = KoraStreamedResponse(
        model_request_parameters=ModelRequestParameters(), _model_name="m", _chunks=chunks_of(chunks)
    )
    assert [event async for event in streamed]
    assert streamed.get().text == "ok"


@pytest.mark.parametrize("body", ['{"choices": []}', '{"object": "list"}', '{"choices": [{"message": 3}]}'])
def test_answers_that_are_not_completions_are_rejected(body):
    with pytest.raises(pydantic.ValidationError):
        ChatCompletion.model_validate_json(body)


async def chunks_of(items):
    for item in items:
        yield ChatCompletionChunk.model_validate(item)


async def test_streamed_response_assembles_text_and_tool_calls_by_index():
    chunks = [
        {"id": "s1", "model": "m", "created": 9, "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Let me "}}]},
        {"choices": [{"index": 0, "delta": {"content": "check."}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "y", "arguments": "{"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "x"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
    ]
    streamed = KoraStreamedResponse(
        model_request_parameters=ModelRequestParameters(), _model_name="m", _chunks=chunks_of(chunks)
    )
    events = [event async for event in streamed]
    assert events
    answer = streamed.get()
    assert (answer.text, answer.finish_reason, answer.provider_response_id) == ("Let me check.", "tool_call", "s1")
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (4, 2)
    assert answer.provider_details == {"timestamp": datetime.fromtimestamp(9, UTC)}
    assert sorted((c.tool_call_id, c.tool_name, c.args) for c in answer.tool_calls) == [
        ("a", "x", None),
        ("b", "y", "{}"),
    ]


def test_tool_schemas_are_adapted_as_pydantic_ais_openai_model_adapts_them():
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.tools import ToolDefinition

    schema = {
        "type": "object",
        "title": "Args",
        "properties": {"a": {"type": "integer", "title": "A"}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["a"],
    }
    parameters = ModelRequestParameters(function_tools=[ToolDefinition(name="t", parameters_json_schema=schema)])
    reference = OpenAIChatModel(
        "m",
        provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="k"),
        profile=OpenAIModelProfile(openai_supports_strict_tool_definition=False),
    )
    kora = KoraChatModel("http://127.0.0.1:9/v1", "k", "m", timeout=1, max_retries=0)
    (expected,) = reference.prepare_request(None, parameters)[1].function_tools
    (prepared,) = kora.prepare_request(None, parameters)[1].function_tools
    assert prepared.parameters_json_schema == expected.parameters_json_schema
    assert "title" not in prepared.parameters_json_schema
