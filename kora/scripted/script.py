"""Scripts of the scripted model: reply types, rules, matching, placeholders and the JSON/YAML form.

Pure logic, no I/O besides reading a script file. The script format, the reply selection order and the
placeholder rules are documented in :mod:`kora.scripted.model`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

from kora.core.errors import ScriptError

__all__ = [
    "Conversation",
    "ErrorReply",
    "JSONObject",
    "Match",
    "Reply",
    "Rule",
    "ScriptError",
    "TextReply",
    "ToolCall",
    "ToolCallReply",
    "content_text",
    "instantiate",
    "load_script",
    "load_script_file",
    "reply_from_json",
    "reply_to_json",
]

# A decoded JSON object (request bodies, tool arguments): its values are arbitrary JSON.
JSONObject: TypeAlias = dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Replies and rules
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextReply:
    """An assistant message with text content.

    ``chunks`` are the streamed pieces; when ``None`` the text is split into word-ish tokens
    (:func:`split_chunks`). Explicit chunks must concatenate to ``text`` (else :class:`ScriptError`).
    ``delay_seconds`` delays the start of the response, ``chunk_delay_seconds`` separates streamed
    chunks, ``disconnect_after_chunks`` drops a streamed response after that many content chunks, and
    ``end_after_chunks`` ends it cleanly after that many, with no finish chunk and no ``[DONE]`` (an answer cut
    by a proxy or a backend that closed the response as if it were whole).
    """

    text: str
    chunks: list[str] | None = None
    delay_seconds: float = 0.0
    chunk_delay_seconds: float = 0.0
    disconnect_after_chunks: int | None = None
    end_after_chunks: int | None = None

    def __post_init__(self) -> None:
        if self.chunks is not None and "".join(self.chunks) != self.text:
            raise ScriptError("TextReply.chunks must concatenate exactly to text")


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asks for: tool ``name`` and its JSON ``arguments`` object."""

    name: str
    arguments: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCallReply:
    """An assistant message asking for one or more tool calls (``finish_reason`` ``tool_calls``).

    ``text`` is optional content sent alongside the calls. Timing fields as in :class:`TextReply`;
    ``disconnect_after_chunks`` and ``end_after_chunks`` count text and tool-call chunks together.
    """

    calls: list[ToolCall]
    text: str | None = None
    delay_seconds: float = 0.0
    chunk_delay_seconds: float = 0.0
    disconnect_after_chunks: int | None = None
    end_after_chunks: int | None = None

    def __post_init__(self) -> None:
        if not self.calls:
            raise ScriptError("ToolCallReply needs at least one call")


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with an OpenAI error body ``{"error": {"message", "type", "code"}}``.

    ``status`` is the HTTP status (400..599), ``type`` the OpenAI error type, ``code`` an optional
    machine-readable code. Sent after ``delay_seconds``, also for streaming requests (as OpenAI does).
    """

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    delay_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ScriptError(f"ErrorReply.status must be 400..599, got {self.status}")


Reply: TypeAlias = TextReply | ToolCallReply | ErrorReply


@dataclass(frozen=True)
class Match:
    """Conditions on a request; all given ones must hold (an empty Match matches every request).

    - ``user_matches``: regex searched (``re.search``) in the last user message's text; its named
      groups become placeholders for the reply.
    - ``after_tool``: ``True`` if the last message must be a tool result, ``False`` if it must not.
    - ``tool_available``: name of a tool that must be offered in the request's ``tools``.
    - ``response_format``: the structured output the request asks for: the ``json_schema.name`` of a
      ``{"type": "json_schema", ...}`` response format, or ``json_object`` for ``{"type": "json_object"}``.
    - ``system_matches``: regex searched in the text of the system (and developer) messages, joined by
      newlines; its named groups become placeholders too (``user_matches``' win on a clash).

    Raises :class:`ScriptError` for an invalid regex.
    """

    user_matches: str | None = None
    after_tool: bool | None = None
    tool_available: str | None = None
    response_format: str | None = None
    system_matches: str | None = None
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)
    _system_pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        for name, attribute in (("user_matches", "_pattern"), ("system_matches", "_system_pattern")):
            regex = getattr(self, name)
            if regex is None:
                continue
            try:
                object.__setattr__(self, attribute, re.compile(regex))
            except re.error as exc:
                raise ScriptError(f"invalid {name} regex {regex!r}: {exc}") from exc

    def match(self, conversation: Conversation) -> dict[str, str] | None:
        """The placeholder values (regex named groups) if the request fits, else ``None``."""
        if self.after_tool is not None and conversation.last_is_tool != self.after_tool:
            return None
        if self.tool_available is not None and self.tool_available not in conversation.tool_schemas:
            return None
        if self.response_format is not None and self.response_format != conversation.response_format:
            return None
        groups: dict[str, str] = {}
        for pattern, text in ((self._system_pattern, None), (self._pattern, conversation.user_text)):
            if pattern is None:
                continue
            found = pattern.search(conversation.system_text() if text is None else text)
            if found is None:
                return None
            groups.update((name, value or "") for name, value in found.groupdict().items())
        return groups


@dataclass(frozen=True)
class Rule:
    """When a request fits ``when``, answer with ``reply``; at most ``times`` times (``None``: always)."""

    when: Match
    reply: Reply
    times: int | None = None


# --------------------------------------------------------------------------------------------------
# Reading the request
# --------------------------------------------------------------------------------------------------


def content_text(content: object) -> str:
    """The text of a message ``content``: a string, or the ``text`` of each part of a part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        return "\n".join(text for text in texts if isinstance(text, str))
    return ""


class Conversation:
    """What rules look at in a request body: last user text, last tool result, offered tools, the
    structured output asked for and the system messages.

    ``tool_schemas`` maps each offered tool's name to its JSON-schema ``parameters`` object.
    ``response_kind`` is the ``response_format.type`` asked for, ``"json_schema"`` or ``"json_object"``
    (``None`` for plain text); ``response_format`` is what :attr:`Match.response_format` compares with:
    the json_schema's ``name`` (``""`` if it has none), ``"json_object"``, or ``None``.
    """

    __slots__ = (
        "last_is_tool",
        "messages",
        "response_format",
        "response_kind",
        "tool_result",
        "tool_schemas",
        "user_text",
    )

    def __init__(self, body: Mapping[str, Any]) -> None:
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        self.messages: list[object] = messages
        self.user_text = ""
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                self.user_text = content_text(message.get("content"))
                break
        last = messages[-1] if messages else None
        self.last_is_tool = isinstance(last, dict) and last.get("role") == "tool"
        self.tool_result = content_text(last.get("content")) if isinstance(last, dict) and self.last_is_tool else ""
        self.tool_schemas: dict[str, JSONObject] = {}
        tools = body.get("tools")
        for tool in tools if isinstance(tools, list) else []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                parameters = function.get("parameters")
                self.tool_schemas[function["name"]] = parameters if isinstance(parameters, dict) else {}
        self.response_kind: str | None = None
        self.response_format: str | None = None
        response_format = body.get("response_format")
        response_format = response_format if isinstance(response_format, dict) else {}
        kind = response_format.get("type")
        if kind == "json_object":
            self.response_kind = self.response_format = "json_object"
        elif kind == "json_schema":
            self.response_kind = "json_schema"
            spec = response_format.get("json_schema")
            name = spec.get("name") if isinstance(spec, dict) else None
            self.response_format = name if isinstance(name, str) else ""

    def system_text(self) -> str:
        """The text of every ``system`` and ``developer`` message, in order, joined by newlines."""
        return "\n".join(
            content_text(message.get("content"))
            for message in self.messages
            if isinstance(message, dict) and message.get("role") in ("system", "developer")
        )


# --------------------------------------------------------------------------------------------------
# Placeholders and argument coercion
# --------------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` whose name is in ``values`` replaced; others are left as written."""
    if "{" not in text:
        return text
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    """The JSON types a schema allows (``type`` as string or list, plus ``anyOf``/``oneOf`` branches)."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else [t for t in declared or [] if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            if isinstance(branch, dict):
                types += _schema_types(branch)
    return types


def _coerce_scalar(value: str, types: list[str]) -> object:
    """``value`` converted to the first of ``types`` it parses as; unchanged if none applies."""
    if "string" in types:
        return value
    text = value.strip()
    for kind in types:
        if kind == "boolean" and text.lower() in {"true", "false", "yes", "no", "1", "0"}:
            return text.lower() in {"true", "yes", "1"}
        if kind in {"integer", "number"}:
            try:
                return int(text)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                continue
            if kind == "number":
                return number
            if number.is_integer():
                return int(number)
    return value


def _fill_value(value: object, schema: Mapping[str, Any], values: Mapping[str, str]) -> object:
    """A tool argument with placeholders filled, converted per its JSON ``schema`` (recursively)."""
    if isinstance(value, str):
        filled = _fill(value, values)
        return _coerce_scalar(filled, _schema_types(schema)) if schema else filled
    if isinstance(value, dict):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        filled_object: JSONObject = {}
        for key, item in value.items():
            item_schema = properties.get(key)
            filled_object[key] = _fill_value(item, item_schema if isinstance(item_schema, dict) else {}, values)
        return filled_object
    if isinstance(value, list):
        items = schema.get("items")
        return [_fill_value(item, items if isinstance(items, dict) else {}, values) for item in value]
    return value


def instantiate(reply: Reply, values: Mapping[str, str], conversation: Conversation) -> Reply:
    """``reply`` with placeholders filled from ``values`` and tool arguments coerced to their schemas."""
    if isinstance(reply, ErrorReply):
        return ErrorReply(reply.status, _fill(reply.message, values), reply.type, reply.code, reply.delay_seconds)
    if isinstance(reply, TextReply):
        chunks = [_fill(chunk, values) for chunk in reply.chunks] if reply.chunks is not None else None
        text = "".join(chunks) if chunks is not None else _fill(reply.text, values)
        return replace(reply, text=text, chunks=chunks)
    calls = []
    for call in reply.calls:
        schema = {"type": "object", "properties": conversation.tool_schemas.get(call.name, {}).get("properties", {})}
        arguments = _fill_value(call.arguments, schema, values)
        calls.append(ToolCall(call.name, arguments if isinstance(arguments, dict) else {}))
    call_text = _fill(reply.text, values) if reply.text is not None else None
    return replace(reply, calls=calls, text=call_text)


# --------------------------------------------------------------------------------------------------
# JSON form of replies and scripts
# --------------------------------------------------------------------------------------------------


def _number(data: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScriptError(f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScriptError(f"{key} must be a non-negative integer, got {value!r}")
    return value


def _string(data: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ScriptError(f"{key} must be a string, got {value!r}")
    return value


def reply_from_json(data: object) -> Reply:
    """A reply from its JSON form (see the module docstring); a bare string is a text reply.

    Raises :class:`ScriptError` for an unknown ``kind`` or a missing or mistyped field.
    """
    if isinstance(data, str):
        return TextReply(data)
    if not isinstance(data, dict):
        raise ScriptError(f"a reply must be an object or a string, got {data!r}")
    kind = data.get("kind") or ("tool_calls" if "calls" in data else "error" if "status" in data else "text")
    delay = _number(data, "delay_seconds")
    if kind == "error":
        status = data.get("status")
        if isinstance(status, bool) or not isinstance(status, int):
            raise ScriptError(f"status must be an integer, got {status!r}")
        return ErrorReply(
            status=status,
            message=_string(data, "message") or "",
            type=_string(data, "type", required=False) or "server_error",
            code=_string(data, "code", required=False),
            delay_seconds=delay,
        )
    chunk_delay = _number(data, "chunk_delay_seconds")
    disconnect = _optional_int(data, "disconnect_after_chunks")
    end = _optional_int(data, "end_after_chunks")
    if kind == "text" and "json" in data:  # shorthand for a structured answer: the value as JSON text
        if "text" in data or "chunks" in data:
            raise ScriptError("give 'json' or 'text'/'chunks', not both")
        try:
            json_text = json.dumps(data["json"], ensure_ascii=False)
        except (TypeError, ValueError) as exc:  # YAML dates and the like have no JSON form
            raise ScriptError(f"json must be plain JSON data: {exc}") from exc
        return TextReply(json_text, None, delay, chunk_delay, disconnect, end)
    if kind == "text":
        chunks = data.get("chunks")
        if chunks is not None and not (isinstance(chunks, list) and all(isinstance(c, str) for c in chunks)):
            raise ScriptError(f"chunks must be a list of strings, got {chunks!r}")
        text = _string(data, "text", required=chunks is None)
        if text is None:  # only chunks given: they define the text
            text = "".join(chunks or [])
        return TextReply(text, chunks, delay, chunk_delay, disconnect, end)
    if kind == "tool_calls":
        raw_calls = data.get("calls")
        if not isinstance(raw_calls, list) or not raw_calls:
            raise ScriptError(f"calls must be a non-empty list, got {raw_calls!r}")
        calls = []
        for raw in raw_calls:
            if not isinstance(raw, dict):
                raise ScriptError(f"a call must be an object with name and arguments, got {raw!r}")
            arguments = raw.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise ScriptError(f"arguments must be an object, got {arguments!r}")
            calls.append(ToolCall(_string(raw, "name") or "", arguments))
        return ToolCallReply(calls, _string(data, "text", required=False), delay, chunk_delay, disconnect, end)
    raise ScriptError(f"unknown reply kind {kind!r} (expected text, tool_calls or error)")


def reply_to_json(reply: Reply) -> JSONObject:
    """The JSON form of ``reply``, accepted by :func:`reply_from_json` and ``POST /_script/replies``."""
    if isinstance(reply, ErrorReply):
        return {
            "kind": "error",
            "status": reply.status,
            "message": reply.message,
            "type": reply.type,
            "code": reply.code,
            "delay_seconds": reply.delay_seconds,
        }
    timing = {
        "delay_seconds": reply.delay_seconds,
        "chunk_delay_seconds": reply.chunk_delay_seconds,
        "disconnect_after_chunks": reply.disconnect_after_chunks,
        "end_after_chunks": reply.end_after_chunks,
    }
    if isinstance(reply, TextReply):
        return {"kind": "text", "text": reply.text, "chunks": reply.chunks, **timing}
    calls = [{"name": call.name, "arguments": call.arguments} for call in reply.calls]
    return {"kind": "tool_calls", "calls": calls, "text": reply.text, **timing}


_MATCH_KEYS = frozenset({"user_matches", "after_tool", "tool_available", "response_format", "system_matches"})


def load_script(data: object) -> list[Rule]:
    """Rules from a decoded script: a list of rules or ``{"rules": [...]}``.

    Each rule is ``{"when": {...Match fields}, "reply": <reply>, "times": int?}``; ``when`` may be
    omitted (matches everything). Raises :class:`ScriptError` when malformed.
    """
    if isinstance(data, dict):
        data = data.get("rules")
    if data is None:
        return []
    if not isinstance(data, list):
        raise ScriptError("a script is a list of rules or a mapping with a 'rules' list")
    rules = []
    for index, raw in enumerate(data):
        if not isinstance(raw, dict) or "reply" not in raw:
            raise ScriptError(f"rule {index}: expected a mapping with 'when' and 'reply'")
        when = raw.get("when") or {}
        if not isinstance(when, dict) or set(when) - _MATCH_KEYS:
            raise ScriptError(f"rule {index}: 'when' takes {', '.join(sorted(_MATCH_KEYS))}; got {when!r}")
        after_tool = when.get("after_tool")
        if after_tool is not None and not isinstance(after_tool, bool):
            raise ScriptError(f"rule {index}: after_tool must be true or false")
        try:
            match = Match(
                user_matches=_string(when, "user_matches", required=False),
                after_tool=after_tool,
                tool_available=_string(when, "tool_available", required=False),
                response_format=_string(when, "response_format", required=False),
                system_matches=_string(when, "system_matches", required=False),
            )
            rules.append(Rule(match, reply_from_json(raw["reply"]), _optional_int(raw, "times")))
        except ScriptError as exc:
            raise ScriptError(f"rule {index}: {exc}") from exc
    return rules


def load_script_file(path: str | Path) -> list[Rule]:
    """Rules from a YAML (``.yaml``/``.yml``) or JSON file; see the module docstring for the format.

    Raises ``OSError`` if the file cannot be read and :class:`ScriptError` if it cannot be parsed.
    """
    import yaml  # imported here: only script files need it

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data: object = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: {exc}") from exc
    return load_script(data)
