"""Memory events <-> pydantic-ai model messages (the conversion table is in :mod:`kora.memory.replay`).

Before a run the session's recent events become the model's message history (:func:`events_to_messages`);
after it the run's new messages become events (:func:`messages_to_events`). Content shapes are those of
:mod:`kora.core.events`.

Events -> messages: :func:`kora.memory.replay.replay_messages` decides what is replayed and in which order
(its docstring has the table and the pairing, orphan and merging rules); this module renders that as
pydantic-ai requests and responses.

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

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import cast

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

from kora.core.events import (
    DelegationRequestContent,
    DelegationResponseContent,
    EventType,
    MemoryEvent,
    TextEventType,
    ToolCallContent,
    ToolResultContent,
    new_event,
)
from kora.core.protocol import DELEGATION_TASK_ARG, DELEGATION_TOOL_PREFIX
from kora.memory import (
    PROMPT_EVENTS,
    Prompt,
    Request,
    Response,
    TurnContext,
    as_text,
    replay_messages,
)

__all__ = [
    "events_to_messages",
    "messages_to_events",
    "replay_to_messages",
]


# -- events -> messages ---------------------------------------------------------------------------------------


def events_to_messages(
    events: Iterable[MemoryEvent], *, delegation_tool_prefix: str = DELEGATION_TOOL_PREFIX
) -> list[ModelMessage]:
    """Model message history for ``events`` (oldest first), per :func:`~kora.memory.replay.replay_messages`.

    ``delegation_tool_prefix`` names replayed delegation tools whose events do not record their tool name.
    Never raises on malformed content: an event whose content lacks what its type needs is dropped.
    """
    return replay_to_messages(replay_messages(events, delegation_tool_prefix=delegation_tool_prefix))


def replay_to_messages(steps: Iterable[Request | Response]) -> list[ModelMessage]:
    """pydantic-ai requests and responses for replayed ``steps``, one message each."""
    messages: list[ModelMessage] = []
    for step in steps:
        if isinstance(step, Request):
            parts: list[ModelRequestPart] = [
                UserPromptPart(part.text, timestamp=part.timestamp)
                if isinstance(part, Prompt)
                else ToolReturnPart(
                    part.tool_name, part.content, part.tool_call_id, timestamp=part.timestamp, outcome=part.outcome
                )
                for part in step.parts
            ]
            messages.append(ModelRequest(parts=parts, timestamp=step.timestamp))
        else:
            response_parts: list[ModelResponsePart] = [TextPart(text) for text in step.texts]
            response_parts += [ToolCallPart(c.tool_name, c.args, c.tool_call_id) for c in step.calls]
            messages.append(ModelResponse(parts=response_parts, timestamp=step.timestamp))
    return messages


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
    return texts[0] if len(texts) == 1 else as_text(args)


def _is_rejected(messages: Sequence[ModelMessage], index: int) -> bool:
    """True when the response at ``index`` was answered with retry feedback (its output was not accepted)."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return isinstance(following, ModelRequest) and any(isinstance(p, RetryFeedbackPart) for p in following.parts)


def _return_event(
    part: ToolReturnPart, common: dict[str, JsonValue], prefix: str, agents: Mapping[str, str] | None
) -> MemoryEvent:
    """The ``tool_result`` or ``delegation_response`` event of a tool return (its outcome kept when not success)."""
    extra = dict(common)
    if part.outcome != "success":
        extra["outcome"] = part.outcome
    agent = _delegated_agent(part.tool_name, prefix, agents)
    if agent is None:
        result: ToolResultContent = {
            "tool_name": part.tool_name,
            "tool_call_id": part.tool_call_id,
            "content": _jsonable(part.content),
        }
        return new_event(EventType.TOOL_RESULT, result, metadata=extra, timestamp=part.timestamp)
    extra["tool_name"] = part.tool_name
    response: DelegationResponseContent = {
        "agent": agent,
        "response": as_text(_jsonable(part.content)),
        "tool_call_id": part.tool_call_id,
    }
    return new_event(EventType.DELEGATION_RESPONSE, response, metadata=extra, timestamp=part.timestamp)


def _call_event(
    call: ToolCallPart, when: datetime, common: dict[str, JsonValue], prefix: str, agents: Mapping[str, str] | None
) -> MemoryEvent:
    """The ``tool_call`` or ``delegation_request`` event of a call the model made (at ``when``)."""
    args = cast(dict[str, JsonValue], _jsonable(call.args_as_dict()))
    agent = _delegated_agent(call.tool_name, prefix, agents)
    if agent is None:
        content: ToolCallContent = {"tool_name": call.tool_name, "args": args, "tool_call_id": call.tool_call_id}
        return new_event(EventType.TOOL_CALL, content, metadata=common, timestamp=when)
    request: DelegationRequestContent = {
        "agent": agent,
        "task": _delegation_task(args),
        "tool_call_id": call.tool_call_id,
    }
    return new_event(
        EventType.DELEGATION_REQUEST, request, metadata={**common, "tool_name": call.tool_name}, timestamp=when
    )


def _stored(part: ModelRequestPart) -> bool:
    """Whether a request part becomes an event: a prompt with text, or a tool return that was not retried."""
    if isinstance(part, UserPromptPart):
        return bool(_prompt_text(part.content).strip())
    return isinstance(part, ToolReturnPart) and part.outcome != "retried"


def request_event_count(request: ModelRequest) -> int:
    """How many events :func:`messages_to_events` makes of ``request`` (where it stands in a run changes nothing:
    a request's events depend on its own parts only), without making them."""
    return sum(1 for part in request.parts if _stored(part))


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
    if prompt_event_type not in PROMPT_EVENTS:
        raise ValueError(f"prompt_event_type must be user_message or task_delegation_received, not {prompt_event_type}")
    prompt_type = cast(TextEventType, prompt_event_type)  # one of PROMPT_EVENTS, checked above
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
    for index, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if not _stored(part):
                    continue
                if isinstance(part, UserPromptPart):
                    text = _prompt_text(part.content)
                    events.append(new_event(prompt_type, text, metadata=prompt_meta, timestamp=part.timestamp))
                elif isinstance(part, ToolReturnPart):
                    events.append(_return_event(part, common, delegation_tool_prefix, delegation_agents))
        else:
            calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
            text = message.text or ""
            when = message.timestamp
            if text.strip() and not calls and not _is_rejected(messages, index):
                events.append(new_event(EventType.AGENT_RESPONSE, text, metadata=common, timestamp=when))
            elif text.strip() and calls and include_intermediate_text:
                events.append(
                    new_event(EventType.AGENT_RESPONSE, text, metadata={**common, "intermediate": True}, timestamp=when)
                )
            events += [
                _call_event(call, when, common, delegation_tool_prefix, delegation_agents)
                for call in calls
                if call.tool_call_id not in retried
            ]
    return events


def memory_instructions(context: TurnContext) -> str:
    """What memory recalled for a turn (rolling summary, long-term facts), as instructions for the model; empty
    when it recalled nothing (the medium and long memory tiers enter the model's context here)."""
    parts = []
    if context.summary:
        parts.append(f"Summary of this conversation's earlier turns:\n{context.summary}")
    if context.facts:
        facts = "\n".join(f"- {hit.text}" for hit in context.facts)
        parts.append(f"What you remember from earlier conversations (use it when it helps):\n{facts}")
    return "\n\n".join(parts)
