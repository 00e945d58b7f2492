"""The OpenAI chat-completions wire format, client side (spec: "What the service does", item 1).

The request body (:func:`request_body`, :func:`function_tool`) and the answer, validated with pydantic models of
the fields Kora reads (:class:`ChatCompletion`, :class:`ChatCompletionChunk`; ``null`` accepted wherever
OpenAI-compatible servers are seen to send it) and read as a :class:`ModelAnswer`. The messages themselves are
mapped from pydantic-ai's by :mod:`kora.agent.chat_model`. Pure functions and data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

#: One OpenAI chat message, or one entry of ``tools``, as sent.
JSONObject = dict[str, JsonValue]


def request_body(
    model: str, messages: list[JSONObject], tools: list[JSONObject], *, stream: bool, required: bool = False
) -> JSONObject:
    """The ``POST /chat/completions`` body. ``tools``: OpenAI function tools (see :func:`function_tool`);
    ``required``: the model must call one of them (``tool_choice: "required"``), else ``"auto"``."""
    body: JSONObject = {"model": model, "stream": stream, "messages": cast(JsonValue, messages)}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tool_choice"] = "required" if required else "auto"
        body["tools"] = cast(JsonValue, tools)
    return body


def function_tool(name: str, description: str, parameters: JSONObject) -> JSONObject:
    """One entry of ``tools``: ``{"type": "function", "function": {name, description, parameters}}``."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


# -- answers ----------------------------------------------------------------------------------------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str | None = None
    arguments: str | None = None


class MessageToolCall(_Lenient):
    id: str | None = None
    function: FunctionCall = Field(default_factory=FunctionCall)


class AssistantMessage(_Lenient):
    content: str | None = None
    tool_calls: list[MessageToolCall] | None = None


class Choice(_Lenient):
    message: AssistantMessage
    finish_reason: str | None = None


class TokenUsage(_Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ChatCompletion(_Lenient):
    """A non-streamed answer: the fields Kora reads (others are ignored; ``null`` is accepted wherever
    OpenAI-compatible servers are seen to send it)."""

    id: str | None = None
    model: str | None = None
    created: float | None = None
    choices: list[Choice] = Field(min_length=1)
    usage: TokenUsage | None = None


class DeltaFunctionCall(_Lenient):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_Lenient):
    index: int = 0
    id: str | None = None
    function: DeltaFunctionCall | None = None


class Delta(_Lenient):
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(_Lenient):
    index: int = 0
    delta: Delta = Field(default_factory=Delta)
    finish_reason: str | None = None


class ChatCompletionChunk(_Lenient):
    """One streamed ``chat.completion.chunk``: the fields Kora reads."""

    id: str | None = None
    model: str | None = None
    created: float | None = None
    choices: list[ChunkChoice] | None = None
    usage: TokenUsage | None = None


@dataclass(frozen=True, slots=True)
class AnsweredCall:
    """A tool call in an answer: ``arguments`` is the JSON text the model sent."""

    tool_call_id: str
    tool_name: str
    arguments: str


@dataclass(slots=True)
class ModelAnswer:
    """One model response: its text (may be empty), tool calls, ``finish_reason`` as sent, token usage, and
    the model's name and response id."""

    text: str = ""
    calls: list[AnsweredCall] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model_name: str = ""
    response_id: str = ""
    created: int = 0

    @classmethod
    def from_completion(cls, completion: ChatCompletion) -> ModelAnswer:
        """The first choice of ``completion``."""
        choice = completion.choices[0]
        usage = completion.usage or TokenUsage()
        calls = [
            AnsweredCall(call.id or "", call.function.name or "", call.function.arguments or "")
            for call in choice.message.tool_calls or []
        ]
        return cls(
            choice.message.content or "",
            calls,
            choice.finish_reason,
            usage.prompt_tokens or 0,
            usage.completion_tokens or 0,
            completion.model or "",
            completion.id or "",
            int(completion.created or 0),
        )
