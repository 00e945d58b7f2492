"""Memory events <-> pydantic-ai model messages (spec: "Events", rules 1 and 2, and its conversion table).

Before a run the session's recent events become the model's message history (:func:`events_to_messages`);
after it the run's new messages become events (:func:`messages_to_events`). Content shapes are those of
:mod:`kora.core.events`.

Events -> messages. This refines the spec's table, which shows ``tool_call`` as a tool-return part and gives
no conversion for delegation events; replayed literally, that history is rejected by OpenAI-compatible APIs,
which accept a tool message only right after an assistant message carrying that tool call.

==========================  ======================================================================
event                       message
==========================  ======================================================================
user_message                request with a user-prompt part (as in the spec)
task_delegation_received    request with a user-prompt part (as in the spec)
agent_response              response with a text part (as in the spec)
tool_call                   response with a tool-call part, placed right before its matching return
tool_result                 request with a tool-return part (as in the spec)
delegation_request          like tool_call: tool ``delegate_to_<agent>``, arguments ``{"task": task}``
delegation_response         like tool_result: tool ``delegate_to_<agent>``, content = the response text
error                       not replayed
==========================  ======================================================================

* Pairing is by ``tool_call_id``. Calls are held back until their returns: each run of consecutive return
  events becomes one response carrying the matching calls (in call order), immediately followed by one
  request carrying the returns. So every tool return the model sees follows its call, even when other events
  sit between a call and its return.
* Orphans are dropped: a return whose call is not in the window (the window cut it off) and a call without a
  later return (the run failed or was interrupted). A model API would reject either.
* Consecutive requests are merged into one request (tool returns then a user prompt, or two prompts of which
  the first got no answer), the shape pydantic-ai itself builds. A response of held-back calls is merged into
  a preceding text-only response (the assistant's text that accompanied the calls); two text-only responses
  in a row stay separate, because pydantic-ai joins the text parts of one response into one text.
* A history may start with a response (the window cut off the prompt before it): OpenAI-compatible APIs
  accept that, and the model keeps its last answer in view.

Messages -> events (the run's new messages):

* user-prompt parts -> ``user_message``, or the given ``prompt_event_type`` (``task_delegation_received``
  for a delegated turn, with ``prompt_metadata`` such as ``{"from_agent": ...}``). Non-text prompt content
  keeps only its text pieces.
* tool-call parts -> ``tool_call``, or ``delegation_request`` when the tool name starts with the delegation
  prefix; tool-return parts -> ``tool_result`` / ``delegation_response``. A non-success outcome (``failed``,
  ``denied``, ``interrupted``) is kept as ``metadata["outcome"]`` and restored on replay.
* the text of a response without tool calls -> ``agent_response``. Intermediate text that accompanied tool
  calls is dropped unless ``include_intermediate_text`` (then an ``agent_response`` with
  ``metadata["intermediate"] = True``): the replay window is only ``memory_context_limit`` (6) events, and a
  "let me look that up" would push out a user message or an answer.
* skipped: system prompts and instructions, retry feedback, calls retried by pydantic-ai (a call whose return
  has outcome ``retried``: both are skipped; the model's corrected call follows), a text response that was
  rejected by output validation (followed by retry feedback), thinking parts, provider-native tool calls,
  and empty texts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal, cast

import pydantic_core
from pydantic import JsonValue
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)

from kora.core.events import EventType, MemoryEvent, utc_now

#: Name prefix of the delegation tools the agent offers the model: ``delegate_to_<agent>``.
DELEGATION_TOOL_PREFIX = "delegate_to_"
#: The single argument of a delegation tool: the task text sent to the peer agent.
DELEGATION_TASK_ARG = "task"

_PROMPTS = frozenset({EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED})
_CALLS = frozenset({EventType.TOOL_CALL, EventType.DELEGATION_REQUEST})
_RETURNS = frozenset({EventType.TOOL_RESULT, EventType.DELEGATION_RESPONSE})

ToolOutcome = Literal["success", "failed", "denied", "interrupted", "retried"]
_OUTCOMES: frozenset[str] = frozenset({"success", "failed", "denied", "interrupted", "retried"})


# -- events -> messages ---------------------------------------------------------------------------------------


def _as_text(value: JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _call_id(event: MemoryEvent) -> str | None:
    content = event.content
    if isinstance(content, dict):
        call_id = content.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            return call_id
    return None


def _delegation_tool(event: MemoryEvent, prefix: str) -> str:
    """The delegation tool's name: as recorded in ``metadata["tool_name"]``, else ``<prefix><agent>``."""
    recorded = event.metadata.get("tool_name")
    if isinstance(recorded, str) and recorded:
        return recorded
    content = event.content
    agent = content.get("agent") if isinstance(content, dict) else None
    return f"{prefix}{agent if isinstance(agent, str) else ''}"


def _call_part(event: MemoryEvent, call_id: str, prefix: str) -> ToolCallPart:
    content = cast(dict[str, JsonValue], event.content)  # _call_id checked it is a dict
    if event.event_type == EventType.DELEGATION_REQUEST:
        return ToolCallPart(
            _delegation_tool(event, prefix), {DELEGATION_TASK_ARG: _as_text(content.get("task"))}, call_id
        )
    args = content.get("args")
    return ToolCallPart(_as_text(content.get("tool_name")), args if isinstance(args, dict) else {}, call_id)


def _return_part(event: MemoryEvent, call_id: str, tool_name: str) -> ToolReturnPart:
    content = cast(dict[str, JsonValue], event.content)
    payload = content.get("response") if event.event_type == EventType.DELEGATION_RESPONSE else content.get("content")
    outcome = event.metadata.get("outcome")
    return ToolReturnPart(
        tool_name,
        payload,
        call_id,
        timestamp=event.timestamp,
        outcome=cast(ToolOutcome, outcome) if isinstance(outcome, str) and outcome in _OUTCOMES else "success",
    )


class _Builder:
    """Accumulates messages, merging where the module docstring says so."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []

    def request(self, parts: Sequence[ModelRequestPart], timestamp: datetime) -> None:
        last = self.messages[-1] if self.messages else None
        if isinstance(last, ModelRequest):
            last.parts = [*last.parts, *parts]
        else:
            self.messages.append(ModelRequest(parts=list(parts), timestamp=timestamp))

    def response(self, parts: Sequence[ModelResponsePart], timestamp: datetime, *, calls: bool) -> None:
        last = self.messages[-1] if self.messages else None
        if calls and isinstance(last, ModelResponse) and not last.tool_calls:
            last.parts = [*last.parts, *parts]
        else:
            self.messages.append(ModelResponse(parts=list(parts), timestamp=timestamp))


def events_to_messages(
    events: Iterable[MemoryEvent], *, delegation_tool_prefix: str = DELEGATION_TOOL_PREFIX
) -> list[ModelMessage]:
    """Model message history for ``events`` (oldest first), per the table and rules in the module docstring.

    ``delegation_tool_prefix`` names replayed delegation tools whose events do not record their tool name.
    Never raises on malformed content: an event whose content lacks what its type needs is dropped.
    """
    replayed = [e for e in events if e.event_type != EventType.ERROR]
    builder = _Builder()
    pending: dict[str, tuple[int, MemoryEvent]] = {}  # tool_call_id -> (position, call event)
    i, n = 0, len(replayed)
    while i < n:
        event = replayed[i]
        kind = event.event_type
        if kind in _PROMPTS:
            if text := _as_text(event.content):
                builder.request([UserPromptPart(text, timestamp=event.timestamp)], event.timestamp)
        elif kind == EventType.AGENT_RESPONSE:
            if text := _as_text(event.content):
                builder.response([TextPart(text)], event.timestamp, calls=False)
        elif kind in _CALLS:
            if (call_id := _call_id(event)) is not None:
                pending[call_id] = (i, event)  # a repeated id: the later call is the one answered next
        elif kind in _RETURNS:
            j = i
            while j < n and replayed[j].event_type in _RETURNS:
                j += 1
            calls: list[tuple[int, ToolCallPart]] = []
            returns: list[ModelRequestPart] = []
            for ret in replayed[i:j]:
                call_id = _call_id(ret)
                if call_id is None or call_id not in pending:
                    continue  # orphan: its call is outside the window (or it answers a call twice)
                position, call = pending.pop(call_id)
                part = _call_part(call, call_id, delegation_tool_prefix)
                calls.append((position, part))
                returns.append(_return_part(ret, call_id, part.tool_name))
            if calls:
                calls.sort(key=lambda item: item[0])
                builder.response([part for _, part in calls], replayed[calls[0][0]].timestamp, calls=True)
                builder.request(returns, replayed[i].timestamp)
            i = j
            continue
        i += 1
    return builder.messages  # calls still pending here have no return in the window: dropped


# -- messages -> events ---------------------------------------------------------------------------------------


def _jsonable(value: object) -> JsonValue:
    """``value`` as JSON data; objects pydantic cannot serialise become their ``str``."""
    try:
        return cast(JsonValue, pydantic_core.to_jsonable_python(value, fallback=str, bytes_mode="base64"))
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return str(value)


def _prompt_text(content: str | Sequence[UserContent]) -> str:
    if isinstance(content, str):
        return content
    pieces = [c if isinstance(c, str) else c.content for c in content if isinstance(c, str | TextContent)]
    return "\n".join(p for p in pieces if p)


def _delegated_agent(tool_name: str, prefix: str, agents: Mapping[str, str] | None) -> str | None:
    """The peer agent a tool delegates to, or None when it is an ordinary tool."""
    if agents is not None and tool_name in agents:
        return agents[tool_name]
    if prefix and tool_name.startswith(prefix) and len(tool_name) > len(prefix):
        return tool_name[len(prefix) :]
    return None


def _delegation_task(args: dict[str, JsonValue]) -> str:
    task = args.get(DELEGATION_TASK_ARG)
    if isinstance(task, str):
        return task
    texts = [v for v in args.values() if isinstance(v, str)]
    # A tool with another argument name: its only text argument is the task; else keep everything.
    return texts[0] if len(texts) == 1 else _as_text(args)


def _is_rejected(messages: Sequence[ModelMessage], index: int) -> bool:
    """True when the response at ``index`` was answered with retry feedback (its output was not accepted)."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return isinstance(following, ModelRequest) and any(isinstance(p, RetryFeedbackPart) for p in following.parts)


def messages_to_events(
    messages: Sequence[ModelMessage],
    *,
    prompt_event_type: EventType = EventType.USER_MESSAGE,
    prompt_metadata: Mapping[str, JsonValue] | None = None,
    metadata: Mapping[str, JsonValue] | None = None,
    delegation_tool_prefix: str = DELEGATION_TOOL_PREFIX,
    delegation_agents: Mapping[str, str] | None = None,
    include_intermediate_text: bool = False,
) -> list[MemoryEvent]:
    """Events for a run's new messages, in message order, per the rules in the module docstring.

    ``prompt_event_type``: ``USER_MESSAGE`` or ``TASK_DELEGATION_RECEIVED`` (raises ``ValueError`` otherwise);
    ``prompt_metadata`` is added to prompt events (e.g. ``{"from_agent": "planner"}``) and ``metadata`` to every
    event (e.g. attribution). A tool is a delegation when ``delegation_agents`` maps its name to an agent, or
    when its name starts with ``delegation_tool_prefix`` (the agent is the rest of the name). Event timestamps
    are those of the parts and messages (UTC), falling back to now.
    """
    if prompt_event_type not in _PROMPTS:
        raise ValueError(f"prompt_event_type must be user_message or task_delegation_received, not {prompt_event_type}")
    common: dict[str, JsonValue] = dict(metadata or {})
    prompt_meta = {**common, **(prompt_metadata or {})}
    retried = {
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.outcome == "retried"
    }
    events: list[MemoryEvent] = []

    def emit(kind: EventType, content: JsonValue, when: datetime | None, extra: Mapping[str, JsonValue]) -> None:
        events.append(MemoryEvent(event_type=kind, content=content, metadata=dict(extra), timestamp=when or utc_now()))

    for index, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    if (text := _prompt_text(part.content)).strip():
                        emit(prompt_event_type, text, part.timestamp, prompt_meta)
                elif isinstance(part, ToolReturnPart) and part.outcome != "retried":
                    extra = dict(common)
                    if part.outcome != "success":
                        extra["outcome"] = part.outcome
                    agent = _delegated_agent(part.tool_name, delegation_tool_prefix, delegation_agents)
                    if agent is None:
                        content: JsonValue = {
                            "tool_name": part.tool_name,
                            "tool_call_id": part.tool_call_id,
                            "content": _jsonable(part.content),
                        }
                        emit(EventType.TOOL_RESULT, content, part.timestamp, extra)
                    else:
                        extra["tool_name"] = part.tool_name
                        response = _jsonable(part.content)
                        content = {"agent": agent, "response": _as_text(response), "tool_call_id": part.tool_call_id}
                        emit(EventType.DELEGATION_RESPONSE, content, part.timestamp, extra)
        else:
            calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
            text = message.text or ""
            if text.strip() and not calls and not _is_rejected(messages, index):
                emit(EventType.AGENT_RESPONSE, text, message.timestamp, common)
            elif text.strip() and calls and include_intermediate_text:
                emit(EventType.AGENT_RESPONSE, text, message.timestamp, {**common, "intermediate": True})
            for call in calls:
                if call.tool_call_id in retried:
                    continue
                args = cast(dict[str, JsonValue], _jsonable(call.args_as_dict()))
                agent = _delegated_agent(call.tool_name, delegation_tool_prefix, delegation_agents)
                if agent is None:
                    content = {"tool_name": call.tool_name, "args": args, "tool_call_id": call.tool_call_id}
                    emit(EventType.TOOL_CALL, content, message.timestamp, common)
                else:
                    content = {"agent": agent, "task": _delegation_task(args), "tool_call_id": call.tool_call_id}
                    emit(
                        EventType.DELEGATION_REQUEST,
                        content,
                        message.timestamp,
                        {**common, "tool_name": call.tool_name},
                    )
    return events
