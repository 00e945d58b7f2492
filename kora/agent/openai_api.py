"""What an agent reads from ``POST /v1/chat/completions`` (docs/openai.md): the turn a chat request asks
for, with a 400 in OpenAI's error shape for every request Kora cannot honour exactly.

The rule: every field is honoured or refused, never ignored. Types and bounds are
:mod:`kora.core.openai_wire.chat_request`'s (``invalid_type`` / ``invalid_value``); a field Kora does not serve
is ``unsupported_parameter`` and a value it cannot honour ``unsupported_value``; ``error.param`` names the field.
What a request may ask:

* the conversation: ``system`` / ``developer`` messages become the turn's instructions; the last ``user`` message
  is the prompt, its text parts kept apart and its images passed to the model; earlier messages, including
  assistant ``tool_calls`` and ``tool`` results, are the history a client without a session sends;
* a conversation that ends with ``tool`` messages continues a turn that ended with client tool calls: the
  results must answer the calls of the assistant message right before them, each call exactly once;
* ``tools`` (client tools), ``tool_choice`` (``required`` or a named function needs a tool of that name),
  ``parallel_tool_calls``, ``response_format``;
* the sampling and limit fields of :data:`SETTINGS_FIELDS`, sent to the model with each request of the turn
  (``max_tokens`` and ``max_completion_tokens`` both mean the model's ``max_tokens``; giving both is refused).

Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import JsonValue, ValidationError

from kora.agent.turn import ClientTool, ImageRef, OutputFormat
from kora.core.errors import InvalidJSON, RequestError
from kora.core.events import utc_now
from kora.core.openai_wire import chat_request as wire
from kora.core.text import UNSTORABLE_MESSAGE, may_hold_unstorable, unstorable_location
from kora.memory import Prompt, Request, Response, ResponseToolCall, ToolReturn

#: Request field -> the pydantic-ai ``ModelSettings`` key it is sent as.
SETTINGS_FIELDS: Final[Mapping[str, str]] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
}
#: Request fields sent to the model as they are (in the body: ``ModelSettings.extra_body``).
PASSED_FIELDS: Final = ("user", "metadata")


@dataclass(frozen=True)
class ParsedChat:
    """What a chat request asks of the agent.

    ``prompt``: the last user message's text (its parts joined by newlines); ``prompt_parts``: its parts when it
    has more than one text or an image. ``history``: the messages before the prompt (or before the tool calls
    being answered) as replay steps (used only when the session has no stored history). ``system``: system and
    developer messages' text, added to the agent's instructions for this turn. ``tool_results`` and ``answered``:
    see :class:`~kora.agent.turn.TurnRequest`. ``model_settings``: pydantic-ai ``ModelSettings``. ``approvals``:
    the ids in the ``kora_approval`` markers of the calls the results answer (calls Kora said wait for approval).
    """

    request: wire.ChatRequest
    prompt: str
    history: list[Request | Response] = field(default_factory=list)
    system: str = ""
    prompt_parts: tuple[str | ImageRef, ...] = ()
    tool_results: tuple[ToolReturn, ...] = ()
    answered: Response | None = None
    client_tools: tuple[ClientTool, ...] = ()
    tool_choice: str | None = None
    output: OutputFormat | None = None
    model_settings: dict[str, JsonValue] = field(default_factory=dict)
    approvals: tuple[str, ...] = ()

    @property
    def include_usage(self) -> bool:
        """Whether a streaming client asked for the final usage chunk (``stream_options.include_usage``)."""
        options = self.request.stream_options
        return options is not None and options.include_usage is True


def _refuse(message: str, param: str, code: str) -> RequestError:
    return RequestError(message, code=code, param=param)


#: Names pydantic gives union branches in error locations (not fields).
_BRANCHES: Final = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
#: Errors that only say a union branch did not apply.
_BRANCH_MISSES: Final = frozenset({"none_required", "model_type", "model_attributes_type", "literal_error"})


def _param(location: Sequence[int | str]) -> str:
    """A pydantic error location as OpenAI's ``param``: ``messages[2].content``, without the union branch names
    pydantic inserts (tags and type names)."""
    words: list[str] = []
    field: int | str | None = None
    previous: int | str | None = None
    for part in location:
        # Tagged unions (a message's role, a content part's type, response_format's type): the tag comes next.
        tag = previous == "response_format" or (isinstance(previous, int) and field in ("messages", "content"))
        if isinstance(part, int):
            words.append(f"[{part}]")
        elif not tag and part.isidentifier() and not part[:1].isupper() and part not in _BRANCHES:
            words.append(f".{part}")
            field = part
        previous = part
    return "".join(words).lstrip(".")


def _most_telling(errors: Sequence[Any]) -> Any:
    """Of the errors of one field's union branches, the one that says most: a branch whose type fit but whose
    value did not (``stop`` as a list too long), else the first."""
    field = errors[0]["loc"][:1]
    same = [e for e in errors if e["loc"][:1] == field]
    for error in same:
        if not error["type"].endswith("_type") and error["type"] not in _BRANCH_MISSES:
            return error
    return errors[0]


def _validation_error(error: ValidationError) -> RequestError:
    """The first of pydantic's errors as a 400: ``invalid_type`` for a wrong type, ``invalid_value`` else;
    unsupported for an extra field of a message or tool."""
    errors = error.errors(include_url=False)
    first = _most_telling(errors)
    param = _param(first["loc"])
    if first["type"] == "extra_forbidden":
        return _refuse(
            f"Unsupported parameter: '{param}' is not supported by this agent.", param, "unsupported_parameter"
        )
    kind = first["type"]
    code = (
        "invalid_type" if kind.endswith("_type") or kind in {"model_attributes_type", "dict_type"} else "invalid_value"
    )
    if kind == "union_tag_invalid":
        code = "unsupported_value"
    what = "type" if code == "invalid_type" else "value"
    return _refuse(f"Invalid {what} for '{param}': {first['msg']}.", param, code)


def parse_chat_request(raw: bytes) -> ParsedChat:
    """Parse and check a request body (see the module docstring). Raises :class:`~kora.core.errors.RequestError`
    (400) for malformed JSON, a string anywhere holding a NUL or a lone surrogate (no store could keep it), a
    field of the wrong type or out of bounds, a field or value Kora does not honour, missing or empty
    ``messages``, no user message with text, or tool results that do not answer the calls before them."""
    return parse_chat_body(decode_body(raw), text_checked=not may_hold_unstorable(raw))


def decode_body(raw: bytes) -> dict[str, Any]:
    """A request body decoded as a JSON object. Raises :class:`~kora.core.errors.RequestError` (400,
    ``invalid_json``) for text that is no JSON and for JSON that is no object."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidJSON(f"Request body is not valid JSON: {error}") from None
    except (ValueError, RecursionError):  # beyond the limits RequestLimits checks on the bytes
        raise InvalidJSON("Request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    return data


def parse_chat_body(data: dict[str, Any], *, text_checked: bool = False) -> ParsedChat:
    """:func:`parse_chat_request` for a decoded body (the Responses API translates its requests to one).
    ``text_checked``: the raw body was found to hold no string that could be unstorable
    (:func:`~kora.core.text.may_hold_unstorable`), so its decoded strings are not walked again."""
    bad_text = None if text_checked else unstorable_location(data)
    if bad_text is not None:
        param = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in bad_text.split("."))[1:]
        raise _refuse(f"Invalid value for '{param}': {UNSTORABLE_MESSAGE}.", param, "invalid_value")
    if not data.get("messages"):
        raise RequestError(
            "'messages' is required and must be a non-empty array.", code="missing_messages", param="messages"
        )
    try:
        request = wire.ChatRequest.model_validate(data)
    except ValidationError as error:
        raise _validation_error(error) from None
    _refuse_unsupported(request)
    return _parsed(request)


def _refuse_unsupported(request: wire.ChatRequest) -> None:
    for name, value in request.model_extra.items() if request.model_extra else ():
        if value is None:
            continue
        if name in wire.REFUSED_WHEN_SET or name == "modalities":
            if name == "modalities" and value == ["text"]:
                continue
            raise _refuse(
                f"Unsupported parameter: '{name}' is not supported by this agent.", name, "unsupported_parameter"
            )
        raise _refuse(f"Unrecognized request argument supplied: {name}", name, "unsupported_parameter")
    if request.n not in (None, 1):
        raise _refuse("Unsupported value: 'n' must be 1: an agent turn gives one answer.", "n", "unsupported_value")
    if request.logprobs:
        raise _refuse(
            "Unsupported value: 'logprobs' is not available from this agent.", "logprobs", "unsupported_value"
        )
    if request.store:
        raise _refuse(
            "Unsupported value: 'store' must be false (the agent keeps the turn in its session memory).",
            "store",
            "unsupported_value",
        )
    if request.max_tokens is not None and request.max_completion_tokens is not None:
        raise _refuse(
            "Give 'max_tokens' or 'max_completion_tokens', not both.", "max_completion_tokens", "invalid_value"
        )
    for index, message in enumerate(request.messages):
        content = message.content
        if not isinstance(content, list):
            continue
        for number, part in enumerate(content):
            if isinstance(part, wire.UnsupportedPart) or (
                isinstance(part, wire.ImagePart) and not isinstance(message, wire.UserMessage)
            ):
                raise _refuse(
                    f"Unsupported value: '{part.type}' content is not supported by this agent"
                    + (" in user messages." if part.type != "image_url" else " outside user messages."),
                    f"messages[{index}].content[{number}].type",
                    "unsupported_value",
                )


def _parsed(request: wire.ChatRequest) -> ParsedChat:
    messages = request.messages
    systems: list[str] = []
    conversation: list[tuple[int, wire.Message]] = []
    last_user = -1
    for index, message in enumerate(messages):
        if isinstance(message, wire.SystemMessage):
            if text := wire.message_text(message.content):
                systems.append(text)
            continue
        conversation.append((index, message))
        if isinstance(message, wire.UserMessage):
            last_user = index
    prompt_message = messages[last_user] if last_user >= 0 else None
    continues = bool(conversation) and isinstance(conversation[-1][1], wire.ToolMessage)
    if not continues and (not isinstance(prompt_message, wire.UserMessage) or not _has_content(prompt_message)):
        raise RequestError(
            "The request has no user message with text content.", code="no_user_message", param="messages"
        )
    tool_results: tuple[ToolReturn, ...] = ()
    answered: Response | None = None
    approvals: tuple[str, ...] = ()
    history: list[Request | Response] = []
    if conversation[-1][0] != last_user or len(conversation) > 1:
        now = utc_now()
        results = 0
        while results < len(conversation) and isinstance(conversation[-1 - results][1], wire.ToolMessage):
            results += 1
        history_end = max(last_user, 0)
        if results:
            history_end, answered, tool_results = _continuation(conversation[-1 - results :], now)
            assistant = conversation[-1 - results][1]
            if isinstance(assistant, wire.AssistantMessage):
                markers = [call.kora_approval for call in assistant.tool_calls or [] if call.kora_approval]
                approvals = tuple(str(marker.get("id")) for marker in markers)
        elif conversation[-1][0] != last_user:
            raise _refuse(
                "Unsupported value: the conversation must end with a user message, or with the 'tool' results of "
                "the assistant's tool calls (the agent writes the next assistant message).",
                f"messages[{conversation[-1][0]}].role",
                "unsupported_value",
            )
        history = _history(messages[:history_end], now)
    tools = tuple(
        ClientTool(
            t.function.name,
            t.function.description or "",
            dict(t.function.parameters or _EMPTY_SCHEMA),
            t.function.strict,
        )
        for t in request.tools or ()
    )
    given = request.model_fields_set
    prompt_content = prompt_message.content if isinstance(prompt_message, wire.UserMessage) else ""
    return ParsedChat(
        request=request,
        prompt=wire.message_text(prompt_content),
        history=history,
        system="\n\n".join(systems),
        prompt_parts=_prompt_parts(prompt_content),
        tool_results=tool_results,
        answered=answered,
        client_tools=tools,
        tool_choice=_tool_choice(request, tools),
        output=_output(request.response_format),
        model_settings=_model_settings(request) if not given <= _PLAIN_FIELDS else {},
        approvals=approvals,
    )


#: Fields of a request that asks for no model settings.
_PLAIN_FIELDS: Final = frozenset({"model", "messages", "stream", "stream_options", "session_id", "n", "store"})

_EMPTY_SCHEMA: Final[dict[str, JsonValue]] = {"type": "object", "properties": {}}


def _has_content(message: wire.UserMessage) -> bool:
    if isinstance(message.content, str):
        return bool(message.content.strip())
    return any(
        isinstance(p, wire.ImagePart) or (isinstance(p, wire.TextPart) and p.text.strip()) for p in message.content
    )


def _prompt_parts(content: str | list[wire.ContentPart]) -> tuple[str | ImageRef, ...]:
    """The prompt's parts when they are more than one text (texts stay separate parts) or hold an image."""
    if isinstance(content, str):
        return ()
    parts: list[str | ImageRef] = []
    for part in content:
        if isinstance(part, wire.TextPart):
            parts.append(part.text)
        elif isinstance(part, wire.ImagePart):
            parts.append(ImageRef(part.image_url.url, part.image_url.detail))
    if len(parts) == 1 and isinstance(parts[0], str):
        return ()
    return tuple(parts)


def _arguments(text: str, param: str) -> dict[str, JsonValue]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise _refuse("Invalid value: a tool call's 'arguments' must be a JSON object as text.", param, "invalid_value")
    return value


def _calls(message: wire.AssistantMessage, index: int) -> list[ResponseToolCall]:
    return [
        ResponseToolCall(
            call.function.name,
            call.id,
            _arguments(call.function.arguments, f"messages[{index}].tool_calls[{n}].function.arguments"),
        )
        for n, call in enumerate(message.tool_calls or [])
    ]


def _continuation(tail: list[tuple[int, Any]], now: datetime) -> tuple[int, Response, tuple[ToolReturn, ...]]:
    """The end of the conversation: one assistant message with ``tool_calls``, then one ``tool`` message per
    call. Returns where the history ends, the assistant's calls and the results in call order."""
    if len(tail) == len([m for _, m in tail if isinstance(m, wire.ToolMessage)]):
        raise _refuse(
            "Invalid value: 'tool' messages must follow an assistant message with 'tool_calls'.",
            f"messages[{tail[0][0]}].role",
            "invalid_value",
        )
    (first_index, assistant), results = tail[0], tail[1:]
    if not isinstance(assistant, wire.AssistantMessage) or not assistant.tool_calls:
        raise _refuse(
            "Invalid value: 'tool' messages must follow an assistant message with 'tool_calls'.",
            f"messages[{results[0][0]}].role",
            "invalid_value",
        )
    calls = _calls(assistant, first_index)
    by_id = {call.tool_call_id: call for call in calls}
    returns: dict[str, ToolReturn] = {}
    for index, message in results:
        param = f"messages[{index}]"
        if not isinstance(message, wire.ToolMessage):
            raise _refuse(
                "Invalid value: only 'tool' messages may follow an assistant message with 'tool_calls'.",
                f"{param}.role",
                "invalid_value",
            )
        call = by_id.get(message.tool_call_id)
        if call is None or message.tool_call_id in returns:
            what = "answers no call of" if call is None else "answers a call already answered in"
            raise _refuse(
                f"Invalid value: tool_call_id '{message.tool_call_id}' {what} the assistant message before it.",
                f"{param}.tool_call_id",
                "invalid_value",
            )
        content = wire.message_text(message.content)
        returns[call.tool_call_id] = ToolReturn(call.tool_name, call.tool_call_id, content, "success", now)
    missing = [call.tool_call_id for call in calls if call.tool_call_id not in returns]
    if missing:
        raise _refuse(
            f"Invalid value: an assistant message with 'tool_calls' must be followed by a 'tool' message for each "
            f"call; missing: {', '.join(missing)}.",
            "messages",
            "invalid_value",
        )
    texts = [text] if (text := wire.message_text(assistant.content)) else []
    answered = Response(now, texts=texts, calls=calls)
    return first_index, answered, tuple(returns[call.tool_call_id] for call in calls)


def _history(messages: Sequence[Any], now: datetime) -> list[Request | Response]:
    """Earlier conversation as replay steps: user texts, assistant texts and calls, tool results answering them
    (a result for an unknown call is refused; calls never answered are left out, as the replay of stored events
    leaves them out)."""
    steps: list[Request | Response] = []
    open_calls: dict[str, ResponseToolCall] = {}
    for index, message in enumerate(messages):
        if isinstance(message, wire.UserMessage):
            if text := wire.message_text(message.content):
                steps.append(Request([Prompt(text, now)], now))
        elif isinstance(message, wire.AssistantMessage):
            calls = _calls(message, index)
            open_calls = {call.tool_call_id: call for call in calls}
            texts = [text] if (text := wire.message_text(message.content)) else []
            if texts or calls:
                steps.append(Response(now, texts=texts, calls=calls))
        elif isinstance(message, wire.ToolMessage):
            call = open_calls.pop(message.tool_call_id, None)
            if call is None:
                raise _refuse(
                    f"Invalid value: tool_call_id '{message.tool_call_id}' answers no call of the assistant message "
                    "before it.",
                    f"messages[{index}].tool_call_id",
                    "invalid_value",
                )
            result = ToolReturn(call.tool_name, call.tool_call_id, wire.message_text(message.content), "success", now)
            previous = steps[-1] if steps else None
            if isinstance(previous, Request) and all(isinstance(p, ToolReturn) for p in previous.parts):
                previous.parts.append(result)
            else:
                steps.append(Request([result], now))
    return _drop_unanswered(steps)


def _drop_unanswered(steps: list[Request | Response]) -> list[Request | Response]:
    """``steps`` without calls no result answers (a model API rejects them)."""
    answered = {p.tool_call_id for s in steps if isinstance(s, Request) for p in s.parts if isinstance(p, ToolReturn)}
    kept: list[Request | Response] = []
    for step in steps:
        if isinstance(step, Response) and any(c.tool_call_id not in answered for c in step.calls):
            step = Response(step.timestamp, step.texts, [c for c in step.calls if c.tool_call_id in answered])
            if not step.texts and not step.calls:
                continue
        kept.append(step)
    return kept


def _tool_choice(request: wire.ChatRequest, tools: tuple[ClientTool, ...]) -> str | None:
    """``tool_choice`` as a turn takes it. ``required`` without any client tool is refused here only when the
    request names no tools at all and the agent's own tools are checked by the runtime; a named function must
    be a client tool or one of the agent's (the runtime checks the latter)."""
    choice = request.tool_choice
    if choice is None:
        return None
    if isinstance(choice, wire.NamedToolChoice):
        return choice.function.name
    return choice


def _output(
    response_format: wire.TextFormat | wire.JSONObjectFormat | wire.JSONSchemaResponseFormat | None,
) -> OutputFormat | None:
    if response_format is None or isinstance(response_format, wire.TextFormat):
        return None
    if isinstance(response_format, wire.JSONObjectFormat):
        return OutputFormat("json_object")
    spec = response_format.json_schema
    return OutputFormat("json_schema", spec.name, spec.description, spec.schema_, spec.strict)


def _model_settings(request: wire.ChatRequest) -> dict[str, JsonValue]:
    settings: dict[str, JsonValue] = {}
    for name, key in SETTINGS_FIELDS.items():
        value = getattr(request, name)
        if value is not None:
            settings[key] = value
    if isinstance(request.stop, str):
        settings["stop_sequences"] = [request.stop]
    elif request.stop:
        settings["stop_sequences"] = list(request.stop)
    if request.parallel_tool_calls is not None:
        settings["parallel_tool_calls"] = request.parallel_tool_calls
    passed: dict[str, JsonValue] = {name: getattr(request, name) for name in PASSED_FIELDS if getattr(request, name)}
    if passed:
        settings["extra_body"] = passed
    return settings
