"""How the agent spells the OpenTelemetry GenAI semantic conventions: its instrumentation scope and provider name,
the ``error.type`` of a failure, and the ``gen_ai.*`` message formats recorded when content capture is on
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``). Pure functions and constants."""

from __future__ import annotations

import asyncio

from pydantic import JsonValue
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

from kora.core.errors import KoraError
from kora.core.openai_wire import JSONObject

#: The instrumentation scope of the agent's spans and metrics.
SCOPE = "kora.agent"
#: ``gen_ai.provider.name`` of every ModelAPI, and the provider pydantic-ai records on its responses: an
#: OpenAI-compatible API.
PROVIDER = "openai"


def error_type(error: BaseException) -> str:
    """``error.type`` per the conventions: Kora's error code, ``cancelled`` for a request stopped by its caller,
    else the exception's class name."""
    if isinstance(error, KoraError):
        return error.code
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        return "cancelled"
    return type(error).__qualname__


def otel_input_messages(messages: JsonValue) -> tuple[list[JSONObject], list[JSONObject]]:
    """The GenAI conventions' ``gen_ai.system_instructions`` parts and ``gen_ai.input.messages`` for OpenAI chat
    ``messages``: ``{"role", "parts": [{"type": "text", "content"} | {"type": "tool_call", "id", "name",
    "arguments"} | {"type": "tool_call_response", "id", "response"}]}``."""
    system: list[JSONObject] = []
    result: list[JSONObject] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append({"type": "text", "content": content})
            continue
        parts: list[JsonValue] = []
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content})
        elif content:
            parts.append({"type": "text", "content": content})
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(call, dict) and isinstance(function, dict):
                parts.append(
                    {
                        "type": "tool_call",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments"),
                    }
                )
        result.append({"role": role, "parts": parts})
    return system, result


def otel_output_message(response: ModelResponse) -> JSONObject:
    """The GenAI conventions' output message of ``response``: its text and tool calls, and the finish reason."""
    parts: list[JsonValue] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "content": part.content})
        elif isinstance(part, ToolCallPart):
            parts.append(
                {
                    "type": "tool_call",
                    "id": part.tool_call_id,
                    "name": part.tool_name,
                    "arguments": part.args_as_json_str(),
                }
            )
    return {"role": "assistant", "parts": parts, "finish_reason": response.finish_reason or ""}
