"""The OpenAI chat-completions wire format of ``POST /v1/chat/completions`` (spec: "Endpoints", item 2).

Parsing of the request, errors in an SSE stream (``{"error": {"message", "type", "code"}}``), and the shapes of the
non-streaming response and of the streamed ``chat.completion.chunk`` objects. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kora.core.errors import InvalidJSON, KoraError, RequestError
from kora.core.openai_errors import error_body


class ChatMessage(BaseModel):
    """One request message. ``content`` may be a string, a list of content parts, or null (tool-call turns)."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text: the string, or the ``text`` of its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return ""


class ChatRequest(BaseModel):
    """The request body Kora reads; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    session_id: str | None = None


@dataclass(frozen=True)
class ParsedChat:
    """What a chat request asks of the agent.

    ``prompt``: the last user message's text. ``history``: earlier user/assistant turns sent by the client,
    as ``(role, text)`` pairs (used only when the session has no stored history). ``system``: system
    messages' text, added to the agent's instructions for this turn.
    """

    request: ChatRequest
    prompt: str
    history: list[tuple[str, str]] = field(default_factory=list)
    system: str = ""

    @property
    def include_usage(self) -> bool:
        """Whether a streaming client asked for the final usage chunk (``stream_options.include_usage``)."""
        options = (self.request.model_extra or {}).get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True


def parse_chat_request(raw: bytes) -> ParsedChat:
    """Parse and check a request body. Raises :class:`~kora.core.errors.RequestError` (400) for malformed JSON,
    missing or empty ``messages``, or no user message with text."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidJSON(f"Request body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    if not data.get("messages"):
        raise RequestError("'messages' is required and must be a non-empty array.", code="missing_messages")
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RequestError(f"Invalid request: {where}: {first['msg']}", code="invalid_request") from None
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=None)
    if last_user is None or not request.messages[last_user].text().strip():
        raise RequestError("The request has no user message with text content.", code="no_user_message")
    history = [(m.role, m.text()) for m in request.messages[:last_user] if m.role in {"user", "assistant"} and m.text()]
    system = "\n\n".join(m.text() for m in request.messages if m.role in {"system", "developer"} and m.text())
    return ParsedChat(request, request.messages[last_user].text(), history, system)


def completion_id() -> str:
    """A fresh ``chatcmpl-`` id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_body(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """OpenAI ``usage``: prompt, completion and total token counts as the model reported them."""
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }


def completion_body(
    id_: str, model: str, text: str, finish_reason: str, usage: dict[str, int], created: int | None = None
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object with one choice."""
    return {
        "id": id_,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


def chunk_line(
    id_: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> bytes:
    """One SSE line ``data: {chat.completion.chunk}\\n\\n``. ``usage`` chunks carry no choices."""
    chunk: dict[str, Any] = {
        "id": id_,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


DONE_LINE = b"data: [DONE]\n\n"


def error_line(error: KoraError) -> bytes:
    """An error reported inside an already-started SSE stream (the status line is already sent)."""
    return b"data: " + json.dumps(error_body(error), separators=(",", ":")).encode() + b"\n\n"
