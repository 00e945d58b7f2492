"""Which stored events a model sees again, in which order, and as what (the table below).

This module decides *what* is replayed; :mod:`kora.agent.history` renders it as pydantic-ai messages, which
the agent's model adapter sends for every request of a turn. It imports neither pydantic-ai nor an HTTP
client, so the memory layer stays free of model libraries.

The table refines the plain reading of the event types, which would give ``tool_call`` a tool-return part and
delegation events no conversion; replayed that way, the history is rejected by OpenAI-compatible APIs, which
accept a tool message only right after an assistant message carrying that tool call.

==========================  ======================================================================
event                       replayed as
==========================  ======================================================================
user_message                request with a user-prompt part
task_delegation_received    request with a user-prompt part
agent_response              response with a text part
tool_call                   response with a tool-call part, placed right before its matching return
tool_result                 request with a tool-return part
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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, cast

from pydantic import JsonValue

from kora.core.events import EventType, MemoryEvent, content_field, tool_call_id
from kora.core.protocol import DELEGATION_TASK_ARG, DELEGATION_TOOL_PREFIX

PROMPT_EVENTS = frozenset({EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED})
_CALLS = frozenset({EventType.TOOL_CALL, EventType.DELEGATION_REQUEST})
_RETURNS = frozenset({EventType.TOOL_RESULT, EventType.DELEGATION_RESPONSE})

ToolOutcome = Literal["success", "failed", "denied", "interrupted", "retried"]
TOOL_OUTCOMES: frozenset[str] = frozenset({"success", "failed", "denied", "interrupted", "retried"})


@dataclass(frozen=True, slots=True)
class Prompt:
    """A user prompt (or a delegated task) the model is shown again."""

    text: str
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class ToolReturn:
    """A tool's (or a peer agent's) answer to call ``tool_call_id``; ``content`` is JSON data."""

    tool_name: str
    tool_call_id: str
    content: JsonValue
    outcome: ToolOutcome
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class ResponseToolCall:
    """A call the model made: ``args`` is the JSON object of arguments."""

    tool_name: str
    tool_call_id: str
    args: dict[str, JsonValue]


@dataclass(slots=True)
class Request:
    """What was sent to the model, in order: prompts and tool returns."""

    parts: list[Prompt | ToolReturn]
    timestamp: datetime


@dataclass(slots=True)
class Response:
    """What the model answered: text pieces (each a text part) and tool calls."""

    timestamp: datetime
    texts: list[str] = field(default_factory=list)
    calls: list[ResponseToolCall] = field(default_factory=list)


def as_text(value: JsonValue) -> str:
    """``value`` as text: strings as they are, ``None`` as ``""``, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _call_id(event: MemoryEvent) -> str | None:
    return tool_call_id(event) or None  # an empty id pairs nothing


def _delegation_tool(event: MemoryEvent, prefix: str) -> str:
    """The delegation tool's name: as recorded in ``metadata["tool_name"]``, else ``<prefix><agent>``."""
    recorded = event.metadata.get("tool_name")
    if isinstance(recorded, str) and recorded:
        return recorded
    agent = content_field(event, "agent")
    return f"{prefix}{agent if isinstance(agent, str) else ''}"


def _call(event: MemoryEvent, call_id: str, prefix: str) -> ResponseToolCall:
    if event.event_type == EventType.DELEGATION_REQUEST:
        return ResponseToolCall(
            _delegation_tool(event, prefix), call_id, {DELEGATION_TASK_ARG: as_text(content_field(event, "task"))}
        )
    args = content_field(event, "args")
    return ResponseToolCall(as_text(content_field(event, "tool_name")), call_id, args if isinstance(args, dict) else {})


def _return(event: MemoryEvent, call_id: str, tool_name: str) -> ToolReturn:
    payload = (
        content_field(event, "response")
        if event.event_type == EventType.DELEGATION_RESPONSE
        else content_field(event, "content")
    )
    outcome = event.metadata.get("outcome")
    return ToolReturn(
        tool_name,
        call_id,
        payload,
        cast(ToolOutcome, outcome) if isinstance(outcome, str) and outcome in TOOL_OUTCOMES else "success",
        event.timestamp,
    )


class _Builder:
    """Accumulates requests and responses, merging where the module docstring says so."""

    def __init__(self) -> None:
        self.messages: list[Request | Response] = []

    def request(self, parts: list[Prompt | ToolReturn], timestamp: datetime) -> None:
        last = self.messages[-1] if self.messages else None
        if isinstance(last, Request):
            last.parts.extend(parts)
        else:
            self.messages.append(Request(parts, timestamp))

    def text(self, text: str, timestamp: datetime) -> None:
        self.messages.append(Response(timestamp, texts=[text]))

    def calls(self, calls: list[ResponseToolCall], timestamp: datetime) -> None:
        last = self.messages[-1] if self.messages else None
        if isinstance(last, Response) and not last.calls:
            last.calls.extend(calls)
        else:
            self.messages.append(Response(timestamp, calls=calls))


def replay_messages(
    events: Iterable[MemoryEvent], *, delegation_tool_prefix: str = DELEGATION_TOOL_PREFIX
) -> list[Request | Response]:
    """The requests and responses that replay ``events`` (oldest first), per the module docstring's rules.

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
        if kind in PROMPT_EVENTS:
            if text := as_text(event.content):
                builder.request([Prompt(text, event.timestamp)], event.timestamp)
        elif kind == EventType.AGENT_RESPONSE:
            if text := as_text(event.content):
                builder.text(text, event.timestamp)
        elif kind in _CALLS:
            if (call_id := _call_id(event)) is not None:
                pending[call_id] = (i, event)  # a repeated id: the later call is the one answered next
        elif kind in _RETURNS:
            j = i
            while j < n and replayed[j].event_type in _RETURNS:
                j += 1
            calls: list[tuple[int, ResponseToolCall]] = []
            returns: list[Prompt | ToolReturn] = []
            for ret in replayed[i:j]:
                call_id = _call_id(ret)
                if call_id is None or call_id not in pending:
                    continue  # orphan: its call is outside the window (or it answers a call twice)
                position, call_event = pending.pop(call_id)
                call = _call(call_event, call_id, delegation_tool_prefix)
                calls.append((position, call))
                returns.append(_return(ret, call_id, call.tool_name))
            if calls:
                calls.sort(key=lambda item: item[0])
                builder.calls([c for _, c in calls], replayed[calls[0][0]].timestamp)
                builder.request(returns, replayed[i].timestamp)
            i = j
            continue
        i += 1
    return builder.messages  # calls still pending here have no return in the window: dropped
