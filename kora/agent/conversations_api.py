"""OpenAI's Conversations API (``/v1/conversations``) over Kora sessions: request bodies checked field by field
(:func:`create_body`, :func:`update_body`, :func:`items_body`), items turned into the memory events a turn would
store (:func:`item_events`), and a session's events shown as conversation items (:func:`conversation_items`).

A conversation is a session: its ``id`` is the session id (what ``conversation`` names on ``POST
/v1/responses``), its ``created_at`` the session's, its ``metadata`` kept with the session
(:meth:`kora.memory.Memory.set_session_metadata`). Its items are the session's events:

==================================  ==================================================================
item                                event
==================================  ==================================================================
``message``, role ``user``          ``user_message`` (its text parts joined by a line break)
``message``, role ``assistant``     ``agent_response``
``function_call``                   ``tool_call`` (``arguments`` parsed: a JSON object)
``function_call_output``            ``tool_result`` (answers a ``function_call`` of the conversation)
==================================  ==================================================================

Listed, ``task_delegation_received`` is a user message too and the delegation events are ``function_call`` /
``function_call_output`` items of the tool ``delegate_to_<agent>``; ``error`` events are no items. An item's id
is the event's id with the item's prefix (``msg_``, ``fc_``, ``fco_``) for the ``evt_`` ids Kora gives, or the
id the client gave the item when it added it. Memory keeps text only, so image, file and audio parts are refused,
as are ``system`` / ``developer`` messages (a session keeps no instructions: the agent's are its own) and the
item types of OpenAI's hosted tools. Every refusal is a :class:`~kora.core.errors.RequestError` (HTTP 400,
OpenAI's error body) whose ``param`` names the field. Pure functions, no I/O; no ``openai`` import (the agent's
import contracts), the tests validate every shape with ``openai``'s own types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from pydantic import JsonValue

from kora.core.errors import RequestError
from kora.core.events import (
    EventType,
    MemoryEvent,
    TextEventType,
    ToolCallContent,
    ToolResultContent,
    content_field,
    new_event,
    tool_call_id,
)
from kora.core.protocol import DELEGATION_TASK_ARG, DELEGATION_TOOL_PREFIX, is_session_id
from kora.core.text import UNSTORABLE_MESSAGE, unstorable_location

#: At most this many items per request (OpenAI's limit on create and on adding items).
MAX_ITEMS: Final = 20
#: OpenAI's metadata bounds: pairs, key and value length.
_MAX_PAIRS, _MAX_KEY, _MAX_VALUE = 16, 64, 512
#: OpenAI's function name rule.
_TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The fields each item type takes (OpenAI's input item params); ``status`` is taken when ``completed``.
_ITEM_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "call_id", "name", "arguments", "id", "status"}),
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status"}),
}
_TEXT_PARTS: Final = frozenset({"input_text", "output_text"})
#: Item id prefix per event type, for the ``evt_`` ids Kora gives events.
_PREFIX: Final[Mapping[EventType, str]] = {
    EventType.USER_MESSAGE: "msg",
    EventType.TASK_DELEGATION_RECEIVED: "msg",
    EventType.AGENT_RESPONSE: "msg",
    EventType.TOOL_CALL: "fc",
    EventType.DELEGATION_REQUEST: "fc",
    EventType.TOOL_RESULT: "fco",
    EventType.DELEGATION_RESPONSE: "fco",
}


def _refuse(message: str, param: str | None, code: str) -> RequestError:
    return RequestError(message, code=code, param=param)


def check_storable(body: Mapping[str, Any]) -> None:
    """Refuse a body with a string memory cannot keep (a NUL or an unpaired surrogate, keys included): 400
    ``invalid_value`` naming where (``items[0].content``)."""
    where = unstorable_location(body)
    if where is not None:
        param = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", where)
        raise _refuse(f"Invalid value for '{param}': {UNSTORABLE_MESSAGE}.", param or None, "invalid_value")


def _only(body: Mapping[str, Any], served: Iterable[str]) -> None:
    """Refuse the first field of ``body`` not ``served`` (400 ``unsupported_parameter`` naming it)."""
    for name in body:
        if name not in served:
            raise _refuse(f"Unsupported parameter: '{name}' is not supported here.", name, "unsupported_parameter")


def metadata_of(value: object) -> dict[str, str]:
    """``metadata`` as OpenAI bounds it: at most 16 pairs, string keys of at most 64 characters and string values
    of at most 512 (null: none). Raises :class:`~kora.core.errors.RequestError` (``param: "metadata"``)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _refuse("Invalid type for 'metadata': expected an object of strings.", "metadata", "invalid_type")
    if len(value) > _MAX_PAIRS or any(len(k) > _MAX_KEY or len(v) > _MAX_VALUE for k, v in value.items()):
        raise _refuse(
            f"Invalid value for 'metadata': at most {_MAX_PAIRS} pairs, keys of at most {_MAX_KEY} characters "
            f"and values of at most {_MAX_VALUE}.",
            "metadata",
            "invalid_value",
        )
    return dict(value)


def _items(value: object, required: bool) -> list[Mapping[str, Any]]:
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise _refuse("Invalid type for 'items': expected an array of items.", "items", "invalid_type")
    if len(value) > MAX_ITEMS or (required and not value):
        raise _refuse(f"Invalid value for 'items': give 1 to {MAX_ITEMS} items.", "items", "invalid_value")
    return value


def create_body(body: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], dict[str, str]]:
    """The ``items`` and ``metadata`` of a ``POST /v1/conversations`` body (both optional); any other field is
    refused."""
    check_storable(body)
    _only(body, ("items", "metadata"))
    return _items(body.get("items"), required=False), metadata_of(body.get("metadata"))


def update_body(body: Mapping[str, Any]) -> dict[str, str]:
    """The ``metadata`` of a ``POST /v1/conversations/{id}`` body (required; null clears it)."""
    check_storable(body)
    _only(body, ("metadata",))
    if "metadata" not in body:
        raise _refuse("Missing required parameter: 'metadata'.", "metadata", "invalid_value")
    return metadata_of(body["metadata"])


def items_body(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``items`` of a ``POST /v1/conversations/{id}/items`` body (1 to 20)."""
    check_storable(body)
    _only(body, ("items",))
    return _items(body.get("items"), required=True)


def _text(content: object, param: str) -> str:
    """A message's content as the text memory keeps: a string, or its text parts joined by a line break."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise _refuse(
            f"Invalid type for '{param}': expected a string or an array of text parts.", param, "invalid_type"
        )
    texts = []
    for index, part in enumerate(content):
        at = f"{param}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise _refuse(
                f"Unsupported value: '{kind}' content is not kept by this agent's memory (text parts only).",
                f"{at}.type",
                "unsupported_value",
            )
        assert isinstance(part, dict)
        for name, value in part.items():
            if name in ("annotations", "logprobs") and value in ([], None) and kind == "output_text":
                continue
            if name not in ("type", "text"):
                raise _refuse(f"Unsupported parameter: '{at}.{name}'.", f"{at}.{name}", "unsupported_parameter")
        if not isinstance(part.get("text"), str):
            raise _refuse(f"Invalid type for '{at}.text': expected a string.", f"{at}.text", "invalid_type")
        texts.append(part["text"])
    return "\n".join(texts)


def _string(item: Mapping[str, Any], name: str, param: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise _refuse(
            f"Invalid type for '{param}.{name}': expected a non-empty string.", f"{param}.{name}", "invalid_type"
        )
    return value


def item_events(
    items: Sequence[Mapping[str, Any]], stored: Sequence[MemoryEvent], now: datetime | None = None
) -> list[MemoryEvent]:
    """The events that add ``items`` to a session holding ``stored``, in order. Each item is checked against its
    type's fields (module docstring); an ``id`` the client gives becomes the event id (it must follow the session
    id rule and be new to the session); a ``function_call``'s ``call_id`` must be new and a
    ``function_call_output`` must answer a ``function_call`` of the session or of ``items`` not answered yet.
    Raises :class:`~kora.core.errors.RequestError` naming ``items[i]...``; nothing is built then."""
    ids = {item_id(event) for event in stored}
    calls: dict[str, str] = {}  # call id -> tool name, of the calls not answered yet
    for event in stored:
        call_id = tool_call_id(event)
        if call_id is None:
            continue
        if event.event_type in (EventType.TOOL_CALL, EventType.DELEGATION_REQUEST):
            calls[call_id] = _tool_name(event)
        else:
            calls.pop(call_id, None)
    seen_calls = {
        tool_call_id(e) for e in stored if e.event_type in (EventType.TOOL_CALL, EventType.DELEGATION_REQUEST)
    }
    events: list[MemoryEvent] = []
    for index, item in enumerate(items):
        param = f"items[{index}]"
        if not isinstance(item, dict):
            raise _refuse(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
        kind = item.get("type", "message")
        fields = _ITEM_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise _refuse(
                f"Unsupported value: '{kind}' items are not supported by this agent (messages, function calls and "
                "their outputs).",
                f"{param}.type",
                "unsupported_value",
            )
        for name in item:
            if name not in fields:
                raise _refuse(
                    f"Unsupported parameter: '{param}.{name}' is not supported here.",
                    f"{param}.{name}",
                    "unsupported_parameter",
                )
        if item.get("status") not in (None, "completed"):
            raise _refuse(
                "Unsupported value: an added item's 'status' can only be 'completed'.",
                f"{param}.status",
                "unsupported_value",
            )
        extra: dict[str, Any] = {}
        if item.get("id") is not None:
            given = item["id"]
            if not is_session_id(given) or given.startswith("evt_"):
                raise _refuse(
                    f"Invalid value for '{param}.id': an item id must be 1-128 characters from A-Z, a-z, 0-9, '.', "
                    "'_', ':' and '-', not starting with 'evt_'.",
                    f"{param}.id",
                    "invalid_value",
                )
            if given in ids:
                raise _refuse(
                    f"Invalid value for '{param}.id': the conversation already holds an item '{given}'.",
                    f"{param}.id",
                    "invalid_value",
                )
            ids.add(given)
            extra["event_id"] = given
        if now is not None:
            extra["timestamp"] = now
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant"):
                code = "unsupported_value" if role in ("system", "developer") else "invalid_value"
                raise _refuse(
                    f"Unsupported value for '{param}.role': a conversation keeps 'user' and 'assistant' messages "
                    "(the agent's instructions are its own).",
                    f"{param}.role",
                    code,
                )
            text = _text(item.get("content"), f"{param}.content")
            event_type: TextEventType = EventType.USER_MESSAGE if role == "user" else EventType.AGENT_RESPONSE
            events.append(new_event(event_type, text, **extra))
        elif kind == "function_call":
            call_id = _string(item, "call_id", param)
            name = _string(item, "name", param)
            if not _TOOL_NAME.match(name):
                raise _refuse(
                    f"Invalid value for '{param}.name': a function name must match ^[a-zA-Z0-9_-]{{1,64}}$.",
                    f"{param}.name",
                    "invalid_value",
                )
            arguments = item.get("arguments")
            try:
                args = json.loads(arguments) if isinstance(arguments, str) else None
            except ValueError:
                args = None
            if not isinstance(args, dict):
                raise _refuse(
                    f"Invalid value for '{param}.arguments': expected the JSON text of an object.",
                    f"{param}.arguments",
                    "invalid_value",
                )
            if call_id in seen_calls:
                raise _refuse(
                    f"Invalid value for '{param}.call_id': the conversation already holds a call '{call_id}'.",
                    f"{param}.call_id",
                    "invalid_value",
                )
            seen_calls.add(call_id)
            calls[call_id] = name
            content: ToolCallContent = {"tool_name": name, "args": args, "tool_call_id": call_id}
            events.append(new_event(EventType.TOOL_CALL, content, **extra))
        else:
            call_id = _string(item, "call_id", param)
            if call_id not in calls:
                raise _refuse(
                    f"Invalid value for '{param}.call_id': no function_call of the conversation with this call_id "
                    "is waiting for its output.",
                    f"{param}.call_id",
                    "invalid_value",
                )
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{param}.output")
            result: ToolResultContent = {"tool_name": calls.pop(call_id), "tool_call_id": call_id, "content": text}
            events.append(new_event(EventType.TOOL_RESULT, result, **extra))
    return events


# -- events as items --------------------------------------------------------------------------------------------


def _tool_name(event: MemoryEvent) -> str:
    name = content_field(event, "tool_name")
    if isinstance(name, str):
        return name
    agent = content_field(event, "agent")
    return f"{DELEGATION_TOOL_PREFIX}{agent}" if isinstance(agent, str) else ""


def item_id(event: MemoryEvent) -> str:
    """The id of the item ``event`` is (module docstring)."""
    prefix = _PREFIX.get(event.event_type)
    if prefix is None or not event.event_id.startswith("evt_"):
        return event.event_id
    return f"{prefix}_{event.event_id.removeprefix('evt_')}"


def _as_text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def conversation_item(event: MemoryEvent) -> dict[str, JsonValue] | None:
    """The conversation item ``event`` is (None for an event that is no item: errors, malformed content)."""
    id_ = item_id(event)
    kind = event.event_type
    if kind in (EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED):
        part: JsonValue = {"type": "input_text", "text": _as_text(event.content)}
        return {"type": "message", "id": id_, "role": "user", "status": "completed", "content": [part]}
    if kind == EventType.AGENT_RESPONSE:
        part = {"type": "output_text", "text": _as_text(event.content), "annotations": [], "logprobs": []}
        return {"type": "message", "id": id_, "role": "assistant", "status": "completed", "content": [part]}
    call_id = tool_call_id(event)
    if call_id is None:
        return None
    if kind in (EventType.TOOL_CALL, EventType.DELEGATION_REQUEST):
        args = content_field(event, "args")
        if kind == EventType.DELEGATION_REQUEST:
            args = {DELEGATION_TASK_ARG: content_field(event, "task")}
        # Compact, as pydantic-ai renders a call's arguments (a store may keep them parsed).
        arguments = args if isinstance(args, str) else json.dumps(args or {}, separators=(",", ":"), ensure_ascii=False)
        return {
            "type": "function_call",
            "id": id_,
            "call_id": call_id,
            "name": _tool_name(event),
            "arguments": arguments,
            "status": "completed",
        }
    if kind in (EventType.TOOL_RESULT, EventType.DELEGATION_RESPONSE):
        output = (
            content_field(event, "response")
            if kind == EventType.DELEGATION_RESPONSE
            else content_field(event, "content")
        )
        return {
            "type": "function_call_output",
            "id": id_,
            "call_id": call_id,
            "output": _as_text(output),
            "status": "completed",
        }
    return None


def conversation_items(events: Iterable[MemoryEvent]) -> list[dict[str, JsonValue]]:
    """A session's ``events`` (oldest first) as its conversation items, oldest first."""
    return [item for event in events if (item := conversation_item(event)) is not None]


def conversation(session_id: str, created_at: datetime, metadata: Mapping[str, str]) -> dict[str, JsonValue]:
    """The ``conversation`` object of a session."""
    return {
        "id": session_id,
        "object": "conversation",
        "created_at": int(created_at.timestamp()),
        "metadata": dict(metadata),
    }
