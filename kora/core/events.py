"""Memory events: what happened in a session, as agents store and replay it.

An event is one thing that happened in a session: a user message, a tool call, the agent's answer,
a delegation, an error. Agents store them in memory, replay the recent ones as model history, and
serve them on ``GET /memory/events``.

Content shapes by type (what Kora writes; ``content`` may be any JSON value):

==========================  ==================================================================
event_type                  content
==========================  ==================================================================
user_message                ``str``: the user's text
task_delegation_received    ``str``: the task text a parent agent sent (metadata ``from_agent``)
agent_response              ``str``: the agent's final text
tool_call                   ``{"tool_name": str, "args": dict, "tool_call_id": str}``
tool_result                 ``{"tool_name": str, "tool_call_id": str, "content": JSON}``
delegation_request          ``{"agent": str, "task": str, "tool_call_id": str}``
delegation_response         ``{"agent": str, "response": str, "tool_call_id": str}``
error                       ``{"error_type": str, "message": str}``
==========================  ==================================================================
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum

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
