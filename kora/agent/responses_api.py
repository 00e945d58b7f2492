"""OpenAI's Responses API (``POST /v1/responses``) over Kora turns: requests translated to the Chat Completions
request they mean (:func:`chat_body`, then the same rules as :mod:`kora.agent.openai_api`), and what an answer is
made of (:func:`response_fields`, :func:`output_calls`); the answers themselves are built from the ``openai``
package's types by :mod:`kora.agent.responses_answers`, loaded on the first Responses request (this module
imports no ``openai``: it serves requests before that package has loaded).

Sessions: a response's ``id`` names the session its turn ran in (``resp_<session id, hex>_<random>``), so
``previous_response_id`` continues that session; its stored events are the conversation, nothing else is kept.
A ``conversation`` (an id, or ``{"id": ...}``) is a session named by the client: its id is the session id
(:func:`conversation_of`), and the response echoes it as ``{"id": ...}``.
``function_call_output`` items answer the calls of the previous response: the calls are read back from the
session (:func:`pending_calls`). A stored response is its turn's events, stamped as
:class:`~kora.agent.turn.ResponseRecord` says (its request fields under :data:`REQUEST_FIELDS`), and is read back
from them (:func:`kora.agent.responses_answers.stored_response`). Pure functions and data, no I/O.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from pydantic import JsonValue

from kora.agent.turn import ClientCall, TurnOutcome
from kora.core.errors import NotFound, RequestError
from kora.core.events import EventType, MemoryEvent
from kora.core.protocol import SESSION_ID_RULE, check_session_id, is_session_id

#: Responses fields and the Chat Completions field each becomes (same name unless given).
_RENAMED: Final[Mapping[str, str]] = {"max_output_tokens": "max_tokens"}
#: Responses fields passed to the chat translation as they are.
_SAME: Final = frozenset({"model", "stream", "temperature", "top_p", "parallel_tool_calls", "metadata", "user"})
#: Responses fields this module reads itself.
_OWN: Final = frozenset(
    {
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "previous_response_id",
        "conversation",
        "store",
        "background",
        "include",
    }
)
#: Metadata keys of the events a Responses turn stores (:class:`~kora.agent.turn.ResponseRecord`).
RESPONSE_ID: Final = "response_id"
#: Metadata key of a Responses turn's first event: the response's own fields (:func:`response_fields`).
REQUEST_FIELDS: Final = "response"


def _refuse(message: str, param: str, code: str) -> RequestError:
    return RequestError(message, code=code, param=param)


def response_id(session_id: str) -> str:
    """A fresh response id naming ``session_id``."""
    return f"resp_{session_id.encode().hex()}_{uuid.uuid4().hex[:16]}"


def session_in(response_id: object) -> str | None:
    """The session a response id names; None for a string this agent never gives as a response id."""
    if isinstance(response_id, str) and response_id.startswith("resp_"):
        encoded, _, rest = response_id[5:].partition("_")
        try:
            session = bytes.fromhex(encoded).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        if session and rest and check_session_id_ok(session):
            return session
    return None


def check_session_id_ok(session_id: str) -> bool:
    """True when ``session_id`` keeps the session id rule (:mod:`kora.core.protocol`)."""
    try:
        check_session_id(session_id, "session")
    except RequestError:
        return False
    return True


def session_of(previous_response_id: object) -> str:
    """The session a ``previous_response_id`` names. Raises :class:`~kora.core.errors.RequestError` (400,
    ``invalid_value``) for an id this agent did not give."""
    session = session_in(previous_response_id)
    if session is None:
        raise _refuse(
            "Invalid value: 'previous_response_id' is not the id of a response of this agent.",
            "previous_response_id",
            "invalid_value",
        )
    return session


def conversation_of(body: Mapping[str, Any]) -> str | None:
    """The session a request's ``conversation`` names (its id: a conversation is a session), None without one.
    Raises :class:`~kora.core.errors.RequestError` (400, ``param: "conversation"``): ``invalid_type`` for a value
    that is neither a string nor ``{"id": <string>}``, ``invalid_value`` for an id that breaks the session id rule
    (:mod:`kora.core.protocol`, the value is never echoed) and for ``conversation`` with ``previous_response_id``
    (OpenAI takes one or the other)."""
    value = body.get("conversation")
    if value is None:
        return None
    if body.get("previous_response_id") is not None:
        raise _refuse(
            "Invalid value: 'conversation' cannot be used together with 'previous_response_id': give one of them "
            "(a response continues its own conversation).",
            "conversation",
            "invalid_value",
        )
    if isinstance(value, dict):
        if set(value) != {"id"}:
            raise _refuse(
                "Invalid type for 'conversation': expected a conversation id or an object with only 'id'.",
                "conversation",
                "invalid_type",
            )
        value = value["id"]
    if not isinstance(value, str):
        raise _refuse(
            "Invalid type for 'conversation': expected a conversation id (a string) or {\"id\": <string>}.",
            "conversation",
            "invalid_type",
        )
    if not is_session_id(value):
        raise _refuse(
            f"Invalid value: 'conversation' is a session id and {SESSION_ID_RULE}.", "conversation", "invalid_value"
        )
    return value


def response_not_found(response_id: str, param: str | None = None) -> NotFound:
    """The 404 for a response this agent does not hold (never stored, ``store: false``, deleted, or evicted from
    its session); ``param`` names the request field that named it."""
    if param is not None:
        return NotFound(
            f"Previous response with id '{response_id}' not found.", code="previous_response_not_found", param=param
        )
    return NotFound(f"Response with id '{response_id}' not found.", code="response_not_found")


def turn_events(events: Iterable[MemoryEvent], response_id: str) -> list[MemoryEvent]:
    """The events of a session that the turn of ``response_id`` stored, oldest first (none when it is not held)."""
    return [event for event in events if event.metadata.get(RESPONSE_ID) == response_id]


def latest_response(events: Sequence[MemoryEvent]) -> JsonValue:
    """The id of the latest response among ``events`` (a session's, oldest first); None when none is there."""
    return next((e.metadata[RESPONSE_ID] for e in reversed(events) if RESPONSE_ID in e.metadata), None)


def check_previous(events: Sequence[MemoryEvent], previous_response_id: str) -> None:
    """Refuse a ``previous_response_id`` its session does not hold (404 ``previous_response_not_found``) or that
    is not the session's latest response (400 ``invalid_value``: a response continues its session, so
    branching from an earlier response would silently carry the later turns along)."""
    latest = latest_response(events)
    if latest == previous_response_id:
        return
    if not turn_events(events, previous_response_id):
        raise response_not_found(previous_response_id, "previous_response_id")
    raise _refuse(
        "Invalid value: 'previous_response_id' must name the latest response of its conversation: a response "
        f"continues its session, and '{latest}' came after it (branching from an earlier response is not "
        "supported).",
        "previous_response_id",
        "invalid_value",
    )


@dataclass(frozen=True)
class Origin:
    """Where a Chat Completions message of a translated request came from: ``param``, the Responses field
    (``input[2]``, ``instructions``); ``calls``, for an assistant message made of ``function_call`` items, the
    item of each of its ``tool_calls``; ``output``, whether it is a ``function_call_output`` (a ``tool`` message)."""

    param: str
    calls: tuple[str, ...] = ()
    output: bool = False


_MESSAGE: Final = re.compile(r"^messages\[(\d+)\](.*)$")
_CALL: Final = re.compile(r"^\.tool_calls\[(\d+)\](?:\.function)?(.*)$")
#: A chat content part's fields as the Responses part's (an image part's URL and detail are its own fields).
_PART_FIELDS: Final = (
    (re.compile(r"\.image_url\.url$"), ".image_url"),
    (re.compile(r"\.image_url\.detail$"), ".detail"),
)


def input_param(param: str, origins: Sequence[Origin]) -> str:
    """A chat refusal's ``param`` (``messages[3].tool_call_id``) as the Responses field it came from
    (``input[2].call_id``); ``origins``: the translated request's (:func:`chat_body`). A message that came from no
    single item is ``input``; a param naming no message is returned as it is."""
    found = _MESSAGE.match(param)
    if found is None:
        return "input" if param == "messages" else param
    index, rest = int(found[1]), found[2]
    if index >= len(origins):
        return "input"
    origin = origins[index]
    if "[" not in origin.param:  # ``instructions`` or a string ``input``: the field itself
        return origin.param
    call = _CALL.match(rest)
    if call is not None:
        number, field = int(call[1]), call[2]
        if number >= len(origin.calls):
            return origin.param
        return origin.calls[number] + (".call_id" + field[3:] if field.startswith(".id") else field)
    if origin.output and rest.startswith((".tool_call_id", ".role")):
        return origin.param + ".call_id"
    if origin.output and rest.startswith(".content"):
        return origin.param + ".output" + rest.removeprefix(".content")
    for pattern, name in _PART_FIELDS:
        rest = pattern.sub(name, rest)
    return origin.param + rest


def _tools(tools: object) -> object:
    if not isinstance(tools, list):
        return tools
    chat: list[object] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise _refuse(
                f"Unsupported value: '{kind}' tools are not supported by this agent (function tools only).",
                f"tools[{index}].type",
                "unsupported_value",
            )
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        chat.append({"type": "function", "function": function})
    return chat


def _tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _response_format(text: object) -> object:
    if text is None:
        return None
    if not isinstance(text, dict) or set(text) - {"format"}:
        raise _refuse("Unsupported value: 'text' takes only 'format'.", "text", "unsupported_value")
    spec = text.get("format")
    if not isinstance(spec, dict) or spec.get("type") != "json_schema":
        return spec
    schema = {k: spec[k] for k in ("name", "description", "schema", "strict") if k in spec}
    return {"type": "json_schema", "json_schema": schema}


def chat_body(
    body: Mapping[str, Any],
    messages: Sequence[dict[str, Any]],
    origins: list[Origin],
    pending: list[ClientCall] | None = None,
) -> dict[str, Any]:
    """The Chat Completions body a Responses request means; ``messages`` and ``origins``: its ``input`` and
    ``instructions`` as chat messages and where each came from
    (:func:`kora.agent.responses_input.input_messages`); ``pending``: the calls of the previous response, shown
    before ``function_call_output`` items that answer them (an origin is added for their message). Fields neither
    API knows keep their names, so the chat rules refuse them. Raises :class:`~kora.core.errors.RequestError` for
    tools Kora does not serve, and for ``background`` with ``store: false`` or ``stream`` (it is polled from the
    store)."""
    for name in ("store", "background"):
        if body.get(name) is not None and not isinstance(body.get(name), bool):
            raise _refuse(f"Invalid type for '{name}': expected a boolean.", name, "invalid_type")
    if body.get("background"):
        if body.get("store") is False:
            raise _refuse(
                "Invalid value: 'background' needs 'store': a background response is polled with GET "
                "/v1/responses/{id}, and store: false keeps nothing to poll.",
                "background",
                "invalid_value",
            )
        if body.get("stream"):
            raise _refuse(
                "Unsupported value: a background response is not streamed here: poll it with GET "
                "/v1/responses/{id}, or stream a response that is not in the background.",
                "background",
                "unsupported_value",
            )
    include = body.get("include")
    if include is not None and not isinstance(include, list):
        raise _refuse("Invalid type for 'include': expected an array of strings.", "include", "invalid_type")
    if include:  # an empty list asks for nothing more than the response (what the OpenAI Agents SDK sends)
        raise _refuse(
            "Unsupported value: 'include' must be empty: this agent adds no extra output data to a response.",
            "include",
            "unsupported_value",
        )
    messages = list(messages)
    if pending:
        at = next((i for i, m in enumerate(messages) if m.get("role") == "tool"), None)
        if at is not None:
            calls = [
                {"id": c.tool_call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in pending
            ]
            messages.insert(at, {"role": "assistant", "content": None, "tool_calls": calls})
            origins.insert(at, Origin("input"))
    chat: dict[str, Any] = {"messages": messages}
    for name, value in body.items():
        if name in _OWN:
            continue
        chat[_RENAMED.get(name, name)] = value
    for name, value in (
        ("tools", _tools(body.get("tools"))),
        ("tool_choice", _tool_choice(body.get("tool_choice"))),
        ("response_format", _response_format(body.get("text"))),
    ):
        if value is not None:
            chat[name] = value
    return chat


def pending_calls(events: Iterable[MemoryEvent]) -> list[ClientCall]:
    """The tool calls of the session's last turn that no result answers yet (the calls a previous response
    handed to the client), in order."""
    calls: dict[str, ClientCall] = {}
    for event in events:
        content = event.content if isinstance(event.content, dict) else {}
        call_id = content.get("tool_call_id")
        if not isinstance(call_id, str):
            continue
        if event.event_type == EventType.TOOL_CALL:
            calls[call_id] = client_call(event)
        elif event.event_type == EventType.TOOL_RESULT:
            calls.pop(call_id, None)
    return list(calls.values())


# -- answers ----------------------------------------------------------------------------------------------------


def output_calls(outcome: TurnOutcome) -> list[tuple[ClientCall, JsonValue]]:
    """The ``function_call`` items an outcome answers with: its client calls, or its calls waiting for approval
    with their ``kora_approval`` marker."""
    if outcome.approvals:
        return [(ClientCall(a.tool_call_id, a.tool_name, a.arguments), a.marker()) for a in outcome.approvals]
    return [(call, None) for call in outcome.tool_calls]


#: The request fields a response echoes (with their defaults), kept with its events to be retrieved as answered.
_ECHOED: Final[Mapping[str, JsonValue]] = {
    "instructions": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "temperature": None,
    "top_p": None,
    "max_output_tokens": None,
    "tool_choice": "auto",
    "tools": [],
    "text": {"format": {"type": "text"}},
    "store": True,
    "background": False,
}


def response_fields(
    id_: str, model: str, request: Mapping[str, Any], conversation: str | None = None
) -> dict[str, JsonValue]:
    """What a response object takes from its request: ``id``, ``model``, ``created_at`` (now, Unix seconds), the
    echoed request fields (a field given as null takes its default) and ``conversation`` as OpenAI's
    ``{"id": ...}`` (None when the request named none: :func:`conversation_of`)."""
    fields: dict[str, JsonValue] = {"id": id_, "model": model, "created_at": int(time.time())}
    for name, default in _ECHOED.items():
        value = request.get(name)
        fields[name] = default if value is None else value
    fields["conversation"] = {"id": conversation} if conversation is not None else None
    return fields


def item_page(items: Sequence[dict[str, JsonValue]], after: str | None, limit: int, order: str) -> dict[str, JsonValue]:
    """One page of ``items`` in OpenAI's list shape: in ``order`` (``asc``: oldest first, ``desc``), those after
    the item ``after`` (from the start when None or not an item's id), at most ``limit``."""
    ordered = list(items) if order == "asc" else list(reversed(items))
    ids = [item["id"] for item in ordered]
    start = ids.index(after) + 1 if after in ids else 0
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": cast(JsonValue, page),
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }


def client_call(event: MemoryEvent) -> ClientCall:
    """A stored ``tool_call`` event as the call it was."""
    content = event.content if isinstance(event.content, dict) else {}
    args = content.get("args")
    # Compact, as pydantic-ai renders a call's arguments (a store may keep them parsed).
    arguments = args if isinstance(args, str) else json.dumps(args or {}, separators=(",", ":"), ensure_ascii=False)
    return ClientCall(str(content.get("tool_call_id") or ""), str(content.get("tool_name") or ""), arguments)
