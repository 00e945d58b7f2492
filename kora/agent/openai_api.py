"""What an agent reads from ``POST /v1/chat/completions`` (spec: "Endpoints", item 2): the prompt, the history a
plain OpenAI client sent, and system instructions, with a 400 for every malformed request. The wire shapes
themselves are :mod:`kora.core.openai_wire`'s. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from kora.core.errors import InvalidJSON, RequestError
from kora.core.openai_wire import ChatRequest, invalid_request_message
from kora.core.text import UNSTORABLE_MESSAGE, unstorable_location


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


def parse_chat_request(raw: bytes) -> ParsedChat:
    """Parse and check a request body. Raises :class:`~kora.core.errors.RequestError` (400) for malformed JSON,
    a string anywhere holding a NUL or a lone surrogate (no store could keep it), missing or empty ``messages``,
    or no user message with text."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidJSON(f"Request body is not valid JSON: {error}") from None
    except (ValueError, RecursionError):  # beyond the limits RequestLimits checks on the bytes
        raise InvalidJSON("Request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    bad_text = unstorable_location(data)
    if bad_text is not None:
        raise RequestError(invalid_request_message([{"loc": bad_text.split("."), "msg": UNSTORABLE_MESSAGE}]))
    if not data.get("messages"):
        raise RequestError("'messages' is required and must be a non-empty array.", code="missing_messages")
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as error:
        raise RequestError(invalid_request_message(error.errors(include_url=False))) from None
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=None)
    if last_user is None or not request.messages[last_user].text().strip():
        raise RequestError("The request has no user message with text content.", code="no_user_message")
    history = [(m.role, m.text()) for m in request.messages[:last_user] if m.role in {"user", "assistant"} and m.text()]
    system = "\n\n".join(m.text() for m in request.messages if m.role in {"system", "developer"} and m.text())
    return ParsedChat(request, request.messages[last_user].text(), history, system)
