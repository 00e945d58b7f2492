"""Memory events: what happened in a session, as agents store and replay it.

An event is one thing that happened in a session: a user message, a tool call, the agent's answer,
a delegation, an error. Agents store them in memory, replay the recent ones as model history, and
serve them on ``GET /memory/events``.

Content shapes by type: what Kora writes, typed here so that mypy checks every key written and read. A store
accepts any JSON value as ``content`` (events written by other clients included), so readers never trust the shape:
they read through :func:`content_field` and check each value.

==========================  ==================================================================
event_type                  content
==========================  ==================================================================
user_message                ``str``: the user's text
task_delegation_received    ``str``: the task text a parent agent sent (metadata ``from_agent``)
agent_response              ``str``: the agent's final text
tool_call                   :class:`ToolCallContent`
tool_result                 :class:`ToolResultContent`
delegation_request          :class:`DelegationRequestContent`
delegation_response         :class:`DelegationResponseContent`
error                       :class:`ErrorContent`
==========================  ==================================================================

Events are built by :func:`new_event`, whose overloads pair each event type with its content type.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal, TypedDict, Unpack, cast, overload

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class EventType(StrEnum):
    """The event types; the string values are stored and sent over the wire, so they never change."""

    USER_MESSAGE = "user_message"
    TASK_DELEGATION_RECEIVED = "task_delegation_received"
    AGENT_RESPONSE = "agent_response"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    DELEGATION_REQUEST = "delegation_request"
    DELEGATION_RESPONSE = "delegation_response"
    ERROR = "error"


def new_event_id() -> str:
    """A fresh, globally unique event id (``evt_`` + 32 hex digits)."""
    return f"evt_{uuid.uuid4().hex}"


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


class MemoryEvent(BaseModel):
    """One memory event.

    Fields: ``event_id`` (str), ``timestamp`` (UTC datetime), ``event_type`` (:class:`EventType`),
    ``content`` (any JSON value, shape per type in the module docstring), ``metadata`` (free-form map).
    """

    model_config = ConfigDict(frozen=True)

    event_id: str = Field(default_factory=new_event_id)
    timestamp: datetime = Field(default_factory=utc_now)
    event_type: EventType
    content: JsonValue = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


# -- contents -------------------------------------------------------------------------------------------------


class ToolCallContent(TypedDict):
    """``tool_call``: a call the model made to ``tool_name`` with ``args`` (the JSON object of arguments)."""

    tool_name: str
    args: dict[str, JsonValue]
    tool_call_id: str


class ToolResultContent(TypedDict):
    """``tool_result``: what tool ``tool_name`` returned to call ``tool_call_id`` (``content``: JSON data)."""

    tool_name: str
    tool_call_id: str
    content: JsonValue


class DelegationRequestContent(TypedDict):
    """``delegation_request``: the ``task`` text sent to peer ``agent`` by call ``tool_call_id``."""

    agent: str
    task: str
    tool_call_id: str


class DelegationResponseContent(TypedDict):
    """``delegation_response``: peer ``agent``'s answer (as text) to call ``tool_call_id``."""

    agent: str
    response: str
    tool_call_id: str


class ErrorContent(TypedDict):
    """``error``: why a turn failed: ``error_type`` is the error's code (:mod:`kora.core.errors`)."""

    error_type: str
    message: str


#: The event types whose content is text (``str``).
TextEventType = Literal[EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED, EventType.AGENT_RESPONSE]

#: Any content Kora writes.
EventContent = (
    str | ToolCallContent | ToolResultContent | DelegationRequestContent | DelegationResponseContent | ErrorContent
)


#: The keys of every content type above.
ContentKey = Literal[
    "tool_name", "args", "tool_call_id", "content", "agent", "task", "response", "error_type", "message"
]


def content_field(event: MemoryEvent, key: ContentKey) -> JsonValue:
    """The value of ``key`` in ``event``'s content: any JSON value (a store keeps whatever a client wrote), None when
    the content is not a JSON object or lacks the key. ``key`` is typed, so mypy checks every key read."""
    content = event.content
    return content.get(key) if isinstance(content, dict) else None


def tool_call_id(event: MemoryEvent) -> str | None:
    """The ``tool_call_id`` of a tool or delegation event's content; None when it has none or not a string."""
    value = content_field(event, "tool_call_id")
    return value if isinstance(value, str) else None


class EventFields(TypedDict, total=False):
    """What else :func:`new_event` may be given: ``metadata``, ``timestamp`` (default now, UTC) and ``event_id``
    (default a fresh one)."""

    metadata: Mapping[str, JsonValue] | None
    timestamp: datetime | None
    event_id: str | None


@overload
def new_event(event_type: TextEventType, content: str, **fields: Unpack[EventFields]) -> MemoryEvent: ...
@overload
def new_event(
    event_type: Literal[EventType.TOOL_CALL], content: ToolCallContent, **fields: Unpack[EventFields]
) -> MemoryEvent: ...
@overload
def new_event(
    event_type: Literal[EventType.TOOL_RESULT], content: ToolResultContent, **fields: Unpack[EventFields]
) -> MemoryEvent: ...
@overload
def new_event(
    event_type: Literal[EventType.DELEGATION_REQUEST], content: DelegationRequestContent, **fields: Unpack[EventFields]
) -> MemoryEvent: ...
@overload
def new_event(
    event_type: Literal[EventType.DELEGATION_RESPONSE],
    content: DelegationResponseContent,
    **fields: Unpack[EventFields],
) -> MemoryEvent: ...
@overload
def new_event(
    event_type: Literal[EventType.ERROR], content: ErrorContent, **fields: Unpack[EventFields]
) -> MemoryEvent: ...
def new_event(event_type: EventType, content: EventContent, **fields: Unpack[EventFields]) -> MemoryEvent:
    """An event of ``event_type`` with ``content`` of that type's shape (the overloads pair them), ``metadata``,
    ``timestamp`` (default now, UTC) and ``event_id`` (default a fresh one)."""
    # A TypedDict is a JSON object at run time; mypy does not see it as one (its keys are fixed).
    json_content = cast(JsonValue, content)
    metadata = dict(fields.get("metadata") or {})
    timestamp = fields.get("timestamp") or utc_now()
    if (event_id := fields.get("event_id")) is None:
        return MemoryEvent(event_type=event_type, content=json_content, metadata=metadata, timestamp=timestamp)
    return MemoryEvent(
        event_id=event_id, event_type=event_type, content=json_content, metadata=metadata, timestamp=timestamp
    )
