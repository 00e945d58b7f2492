"""The ModelAPI wire, client side: request messages, tool returns, answers and streamed answers."""

from datetime import UTC, datetime

import pydantic
import pytest

from kora.agent.model_wire import (
    ChatCompletion,
    ChatCompletionChunk,
    ModelAnswer,
    StreamedAnswer,
    chat_messages,
    function_tool,
    request_body,
    tool_return_text,
)
from kora.memory.replay import Prompt, Request, Response, ToolCall, ToolReturn

T = datetime(2026, 1, 1, tzinfo=UTC)


def ret(content, outcome="success") -> ToolReturn:
    return ToolReturn("weather", "c1", content, outcome, T)


def test_tool_return_text():
    assert tool_return_text(ret("cold")) == "cold"
    assert tool_return_text(ret(None)) == ""
    assert tool_return_text(ret({"t": 21, "city": "Zürich"})) == '{"t":21,"city":"Zürich"}'
    assert tool_return_text(ret([1, 2.5, True])) == "[1,2.5,true]"
    assert tool_return_text(ret("boom", "failed")) == '{"error":"boom"}'
    assert tool_return_text(ret({"code": 1}, "failed")) == '{"error":"{\\"code\\":1}"}'
    assert tool_return_text(ret("denied by policy", "denied")) == "denied by policy"


def test_chat_messages_render_every_step_kind():
    history = [
        Request([Prompt("weather?", T)], T),
        Response(T, texts=["Let me check."], calls=[ToolCall("weather", "c1", {"city": "Oslo"})]),
        Request([ret("cold"), Prompt("and now?", T)], T),
        Response(T, texts=["Still cold."]),
    ]
    assert chat_messages(["Be brief.", "", "Extra."], history, "thanks") == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Extra."},
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


def test_request_body_lists_tools_only_when_there_are_some():
    messages = chat_messages([], [], "hi")
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
    assert not answer.is_final_text
    assert ModelAnswer(text="hi").is_final_text
    assert not ModelAnswer(text="  ").is_final_text


def test_answers_with_nulls_and_float_times_from_other_servers_are_read():
    completion = ChatCompletion.model_validate_json(
        '{"id": null, "model": null, "created": 1763700000.5, "choices": [{"message": {"content": "hi",'
        ' "tool_calls": null}, "finish_reason": null}], "usage": {"prompt_tokens": null, "completion_tokens": 2}}'
    )
    answer = ModelAnswer.from_completion(completion)
    assert (answer.text, answer.input_tokens, answer.output_tokens, answer.created) == ("hi", 0, 2, 1763700000)
    streamed = StreamedAnswer()
    streamed.add(ChatCompletionChunk.model_validate_json('{"id": null, "choices": null, "usage": null}'))
    streamed.add(ChatCompletionChunk.model_validate_json('{"choices": [{"delta": {"content": "ok"}}]}'))
    assert streamed.finish().text == "ok"


@pytest.mark.parametrize("body", ['{"choices": []}', '{"object": "list"}', '{"choices": [{"message": 3}]}'])
def test_answers_that_are_not_completions_are_rejected(body):
    with pytest.raises(pydantic.ValidationError):
        ChatCompletion.model_validate_json(body)


def test_streamed_answer_assembles_text_and_tool_calls_by_index():
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
    streamed = StreamedAnswer()
    texts = [streamed.add(ChatCompletionChunk.model_validate(c)) for c in chunks]
    assert [t for t in texts if t] == ["Let me ", "check."]
    answer = streamed.finish()
    assert (answer.text, answer.finish_reason, answer.response_id, answer.model_name) == (
        "Let me check.",
        "tool_calls",
        "s1",
        "m",
    )
    assert (answer.input_tokens, answer.output_tokens, answer.created) == (4, 2, 9)
    assert [(c.tool_call_id, c.tool_name, c.arguments) for c in answer.calls] == [("a", "x", ""), ("b", "y", "{}")]
