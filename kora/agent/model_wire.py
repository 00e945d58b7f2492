"""The ModelAPI's OpenAI chat-completions wire format, client side (spec: "What the service does", item 1).

A turn's first model request is sent directly (:mod:`kora.agent.model_client`), without the agentic loop's
machinery; this module builds that request and reads its answer. The request is the one pydantic-ai's
``OpenAIChatModel`` would send for the same history, tools and instructions (a test compares the two on
generated histories), so a turn that continues in the loop, or a turn served wholly by it, looks the same to
the model:

* messages: one ``system`` message per instruction text, then the replayed history
  (:func:`kora.memory.replay.replay_messages`; consecutive responses merged into one assistant message, texts
  joined by a blank line), then the user prompt;
* tool returns: strings as they are, other JSON compact, and a ``failed`` outcome wrapped as ``{"error": …}``;
  the returns that answer the calls of the response just before come in the order of those calls;
* tool calls: arguments as compact JSON text;
* ``tools`` and ``tool_choice: "auto"`` only when the agent offers tools; ``stream_options.include_usage``
  when streaming.

Answers are validated with pydantic models of the fields Kora reads (:class:`ChatCompletion`,
:class:`ChatCompletionChunk`); :class:`StreamedAnswer` assembles a streamed answer's text and tool calls.
Pure functions and data, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from kora.memory.replay import Prompt, Request, Response, ToolReturn

#: One OpenAI chat message, or one entry of ``tools``, as sent.
JSONObject = dict[str, JsonValue]


def _json(value: JsonValue) -> str:
    """Compact JSON text, non-ASCII kept (as pydantic-ai serialises tool arguments and returns)."""
    return pydantic_core.to_json(value).decode()


def tool_return_text(part: ToolReturn) -> str:
    """What the model is shown for a tool return: strings as they are, ``None`` and ``[]`` as ``""``, other
    values as JSON; a ``failed`` call's content wrapped as ``{"error": <text>}``."""
    content = part.content
    text = "" if content is None or content == [] else content if isinstance(content, str) else _json(content)
    return _json({"error": text}) if part.outcome == "failed" else text


def chat_messages(instructions: Sequence[str], history: Sequence[Request | Response], prompt: str) -> list[JSONObject]:
    """OpenAI ``messages`` for a turn: ``instructions`` (non-empty texts, each a system message), the replayed
    ``history``, then ``prompt`` as the last user message."""
    messages: list[JSONObject] = [{"role": "system", "content": text} for text in instructions if text]
    previous: Request | Response | None = None
    for step in _merge_responses(history):
        if isinstance(step, Request):
            for part in _returns_in_call_order(step, previous):
                if isinstance(part, Prompt):
                    messages.append({"role": "user", "content": part.text})
                else:
                    text = tool_return_text(part)
                    messages.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": text})
        else:
            message: JSONObject = {"role": "assistant", "content": "\n\n".join(step.texts) or None}
            if step.calls:
                message["tool_calls"] = [
                    {
                        "id": call.tool_call_id,
                        "type": "function",
                        "function": {"name": call.tool_name, "arguments": _json(call.args)},
                    }
                    for call in step.calls
                ]
            messages.append(message)
        previous = step
    messages.append({"role": "user", "content": prompt})
    return messages


def _merge_responses(history: Sequence[Request | Response]) -> list[Request | Response]:
    """Consecutive responses merged into one (texts, then calls, in order), as pydantic-ai merges replayed
    responses before sending them."""
    merged: list[Request | Response] = []
    for step in history:
        last = merged[-1] if merged else None
        if isinstance(step, Response) and isinstance(last, Response):
            merged[-1] = Response(last.timestamp, [*last.texts, *step.texts], [*last.calls, *step.calls])
        else:
            merged.append(step)
    return merged


def _returns_in_call_order(request: Request, previous: Request | Response | None) -> list[Prompt | ToolReturn]:
    """``request``'s parts with the returns that answer ``previous``'s calls put in the order of those calls
    (other parts keep their places), as pydantic-ai sends them."""
    if not isinstance(previous, Response) or not previous.calls:
        return request.parts
    order = {call.tool_call_id: i for i, call in reversed(list(enumerate(previous.calls)))}
    slots = [i for i, p in enumerate(request.parts) if isinstance(p, ToolReturn) and p.tool_call_id in order]
    answers = sorted((request.parts[i] for i in slots), key=lambda p: order[cast(ToolReturn, p).tool_call_id])
    parts = list(request.parts)
    for slot, answer in zip(slots, answers, strict=True):
        parts[slot] = answer
    return parts


def request_body(model: str, messages: list[JSONObject], tools: list[JSONObject], *, stream: bool) -> JSONObject:
    """The ``POST /chat/completions`` body. ``tools``: OpenAI function tools (see :func:`function_tool`)."""
    body: JSONObject = {"model": model, "stream": stream, "messages": cast(JsonValue, messages)}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tool_choice"] = "auto"
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

    @property
    def is_final_text(self) -> bool:
        """True when this answer ends a turn by itself: non-blank text and no tool calls."""
        return not self.calls and bool(self.text.strip())

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


class StreamedAnswer:
    """Assembles a streamed answer from its chunks: text deltas in order, tool calls by ``index`` (id and name
    from their first delta, argument text concatenated), the last ``finish_reason`` and the usage chunk."""

    def __init__(self) -> None:
        self.answer = ModelAnswer()
        self._texts: list[str] = []
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take one chunk; returns its text delta (``""`` when it has none)."""
        answer = self.answer
        answer.model_name = answer.model_name or chunk.model or ""
        answer.response_id = answer.response_id or chunk.id or ""
        answer.created = answer.created or int(chunk.created or 0)
        if chunk.usage is not None:
            answer.input_tokens = chunk.usage.prompt_tokens or 0
            answer.output_tokens = chunk.usage.completion_tokens or 0
        text = ""
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            if choice.finish_reason:
                answer.finish_reason = choice.finish_reason
            if choice.delta.content:
                text = choice.delta.content
                self._texts.append(text)
            for call in choice.delta.tool_calls or []:
                parts = self._calls.setdefault(call.index, ["", ""])
                if call.id:
                    parts[0] = call.id
                if call.function is not None:
                    if call.function.name:
                        parts[1] = call.function.name
                    if call.function.arguments:
                        parts.append(call.function.arguments)
        return text

    def finish(self) -> ModelAnswer:
        """The whole answer."""
        self.answer.text = "".join(self._texts)
        self.answer.calls = [
            AnsweredCall(parts[0], parts[1], "".join(parts[2:])) for _, parts in sorted(self._calls.items())
        ]
        return self.answer
