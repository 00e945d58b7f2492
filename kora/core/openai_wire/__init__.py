"""The OpenAI wire format, both sides, in one package (docs/openai.md; the agent's requests to its ModelAPI):
chat completions and error bodies here, the chat request as a server reads it in
:mod:`kora.core.openai_wire.chat_request`, embeddings in :mod:`kora.core.openai_wire.embeddings`.

Every Kora surface that speaks or fronts the OpenAI API uses this package: the agent server's
``/v1/chat/completions`` (it reads requests with :mod:`kora.core.openai_wire.chat_request` and writes
:func:`completion_body` and :class:`ChunkWriter` chunks), the agent's model adapter (:mod:`kora.agent.chat_model`
writes :func:`request_body`; it and the model client read :class:`ChatCompletion` / :class:`ChatCompletionChunk`),
the scripted model (it writes what the agent server writes), the model proxy and local gateway (they write
:func:`openai_error_body`), every client of an OpenAI-compatible server (they read :func:`parse_error_body`), and
the hosted and scripted models' ``/v1/embeddings`` and the memory service's embedding client.

The ``openai`` package's own types are not used: it is the user's side only (``kora chat``), and the agent server
must answer ``/health`` before heavy imports load.

What is read (a model's answers) is validated by pydantic models of the fields Kora uses: unknown fields are
ignored and ``null`` is accepted wherever OpenAI-compatible servers are seen to send it. What is written is
built by plain functions returning JSON-ready dicts or SSE bytes. Pure functions and data, no I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from kora.core.errors import KoraError

#: A JSON object as sent or received: one chat message, one entry of ``tools``, a whole body.
JSONObject = dict[str, JsonValue]

# -- errors -------------------------------------------------------------------------------------------------------


def openai_error_body(message: str, type_: str, code: str | None = None, **extra: JsonValue) -> JSONObject:
    """``{"error": {"message", "type", "param": null, "code", **extra}}``: the error body OpenAI clients parse."""
    error: JSONObject = {"message": message, "type": type_, "param": None, "code": code}
    error.update(extra)
    return {"error": error}


def error_body(error: KoraError) -> JSONObject:
    """``error`` (see :mod:`kora.core.errors`) as OpenAI's error body (``param`` names the request field, if any)."""
    body = openai_error_body(error.message, error.openai_type, error.code)
    if error.param is not None:
        cast(JSONObject, body["error"])["param"] = error.param
    return body


@dataclass(frozen=True, slots=True)
class ErrorObject:
    """The ``error`` object of an OpenAI error body as a client reads it: ``message``, and ``type``, ``code`` and
    ``param`` as sent (``None`` when absent; a numeric ``code`` as text)."""

    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None


def _text(value: JsonValue) -> str | None:
    return None if value is None else str(value)


def parse_error_body(content: bytes | str) -> ErrorObject | None:
    """The error an OpenAI-compatible server's error answer carries: ``{"error": {"message", ...}}`` as OpenAI
    sends it, or the bare error object ``{"message", "type", "code"}`` as some compatible servers (vLLM) send it.
    ``None`` when ``content`` is neither (not JSON, no ``message``): the caller says what it got instead."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return None
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict) or error.get("message") is None:
        return None
    return ErrorObject(
        str(error["message"]), _text(error.get("type")), _text(error.get("code")), _text(error.get("param"))
    )


#: Longest field location an error message spells out whole.
_MAX_LOCATION_CHARS = 160


def invalid_request_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """``Invalid request: <dotted location>: <message>`` for the first of pydantic's validation ``errors``."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"])
    if len(where) > _MAX_LOCATION_CHARS:  # a deeply nested value: its start and end say where
        where = f"{where[:60]}...{where[-60:]}"
    return f"Invalid request: {where}: {first['msg']}"


# -- requests -----------------------------------------------------------------------------------------------------


def request_body(
    model: str, messages: list[JSONObject], tools: list[JSONObject], *, stream: bool, required: bool = False
) -> JSONObject:
    """A ``POST /chat/completions`` body as a client sends it. ``tools``: OpenAI function tools (see
    :func:`function_tool`); ``required``: the model must call one of them (``tool_choice: "required"``), else
    ``"auto"``. Streaming asks for the final usage chunk."""
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


# -- answers, as a client reads them ------------------------------------------------------------------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AnswerFunctionCall(_Lenient):
    name: str | None = None
    arguments: str | None = None


class MessageToolCall(_Lenient):
    id: str | None = None
    function: AnswerFunctionCall = Field(default_factory=AnswerFunctionCall)


class AnswerMessage(_Lenient):
    content: str | None = None
    tool_calls: list[MessageToolCall] | None = None


class Choice(_Lenient):
    message: AnswerMessage
    finish_reason: str | None = None


class TokenUsage(_Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ChatCompletion(_Lenient):
    """A non-streamed answer: the fields Kora reads."""

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
    """One model response: its text (may be empty), tool calls, ``finish_reason`` as sent, token usage, the
    model's name and response id, and ``created`` (Unix seconds; 0 when not sent)."""

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


# -- answers, as a server writes them -----------------------------------------------------------------------------


def completion_id() -> str:
    """A fresh ``chatcmpl-`` id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_body(prompt_tokens: int, completion_tokens: int) -> JSONObject:
    """OpenAI ``usage``: prompt, completion and total token counts."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def tool_call_body(call_id: str, name: str, arguments: str) -> JSONObject:
    """One entry of an assistant message's ``tool_calls``; ``arguments`` is JSON text."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_message(content: str | None, tool_calls: list[JSONObject] | None = None) -> JSONObject:
    """An answer's ``message``: ``{"role": "assistant", "content", "refusal": null[, "tool_calls"]}``."""
    message: JSONObject = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = cast(JsonValue, tool_calls)
    return message


def completion_body(
    id_: str, model: str, message: JSONObject, finish_reason: str, usage: JSONObject, created: int | None = None
) -> JSONObject:
    """A non-streamed ``chat.completion`` with one choice; ``created`` defaults to now (Unix seconds)."""
    return {
        "id": id_,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage,
    }


def _dumps(value: object) -> bytes:
    # ASCII escapes: a lone surrogate in a model's or tool's text must not make encoding fail mid-stream.
    return json.dumps(value, separators=(",", ":")).encode()


def sse_event(payload: object) -> bytes:
    """One server-sent event ``data: <compact JSON>\\n\\n``."""
    return b"data: " + _dumps(payload) + b"\n\n"


#: The event that ends a stream.
DONE_EVENT: Final = b"data: [DONE]\n\n"


def sse_error(error: KoraError) -> bytes:
    """An error reported inside an already-started stream (its status line is sent): :func:`error_body` as an event."""
    return sse_event(error_body(error))


#: The choices of an answer's first chunk (:meth:`ChunkWriter.role`).
_ROLE_CHOICES: Final = b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'


class ChunkWriter:
    """The SSE events of one streamed completion: every chunk carries the same ``id``, ``created`` (Unix seconds)
    and ``model``, and ``"usage": null`` when the client asked for a final usage chunk (``include_usage``), as
    OpenAI sends them. The fixed fields are serialised once; each chunk only adds its delta."""

    __slots__ = ("_content_head", "_content_tail", "_head", "_tail")

    def __init__(self, id_: str, model: str, created: int, *, include_usage: bool = False) -> None:
        head = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model}
        self._head = b"data: " + _dumps(head)[:-1] + b',"choices":'
        self._tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
        self._content_head = self._head + b'[{"index":0,"delta":{"content":'
        self._content_tail = b'},"logprobs":null,"finish_reason":null}]' + self._tail

    def chunk(self, delta: JSONObject, finish_reason: str | None = None) -> bytes:
        """One ``chat.completion.chunk`` event with one choice: ``delta``, and ``finish_reason`` (null but last)."""
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._head + b"[" + _dumps(choice) + b"]" + self._tail

    def role(self) -> bytes:
        """The first chunk of an assistant's answer: :meth:`chunk` of ``{"role": "assistant", "content": ""}``, the same
        bytes, without encoding its constant choice again."""
        return self._head + _ROLE_CHOICES + self._tail

    def content(self, text: str) -> bytes:
        """:meth:`chunk` of a ``{"content": text}`` delta, the same bytes, with only ``text`` encoded (once per text
        delta of a stream; the rest of the chunk is the writer's)."""
        return self._content_head + _dumps(text) + self._content_tail

    def usage(self, usage: JSONObject) -> bytes:
        """The final usage chunk: no choices, ``usage`` (see :func:`usage_body`)."""
        return self._head + b'[],"usage":' + _dumps(usage) + b"}\n\n"


def model_object(name: str, owned_by: str, created: int = 0) -> JSONObject:
    """One model: ``{"id", "object": "model", "created", "owned_by"}`` (``GET /models/{id}``)."""
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by}


def model_list_body(names: list[str], owned_by: str, created: int = 0) -> JSONObject:
    """``GET /models``: ``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``."""
    data: list[JsonValue] = [model_object(name, owned_by, created) for name in names]
    return {"object": "list", "data": data}
