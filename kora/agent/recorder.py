"""What a turn leaves in memory, a failed one included (its steps, then an ``error`` event): the one place a
turn's events are built and stored, whichever stage ended it.

A turn's messages (its prompt request, the model's responses and the tool returns, as pydantic-ai messages)
become events by :func:`kora.agent.history.messages_to_events`; a turn that failed adds one ``error`` event
whose ``error_type`` is the error's code (:mod:`kora.core.errors`). The prompt is stored as ``user_message``,
or ``task_delegation_received`` (metadata ``from_agent``) when a parent agent delegated the turn. With tracing on,
every event's metadata carries the turn's ``trace_id`` and ``span_id``, so a stored turn links to its trace. A turn
of the Responses API is stamped as :class:`~kora.agent.turn.ResponseRecord` says, or not stored at all
(``store: false``). The ``tool_call`` event of a call that waits for approval carries the call's ``kora_approval``
marker in its metadata (``{"id", "target", "expires_at"}``), so a response read back names it as the answer did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from pydantic_ai.messages import ImageUrl, ModelMessage, ModelRequest, UserContent, UserPromptPart

from kora.agent.history import messages_to_events, request_event_count
from kora.agent.telemetry import AgentTracing
from kora.agent.turn import ResponseRecord, TurnRequest
from kora.core.errors import KoraError
from kora.core.events import ErrorContent, EventType, MemoryEvent, new_event, tool_call_id
from kora.core.protocol import APPROVAL_FIELD
from kora.memory import Memory

if TYPE_CHECKING:
    from kora.agent.approval_calls import PendingApproval


def prompt_request(turn: TurnRequest) -> ModelRequest:
    """The turn's prompt as the model request that opens it (timestamped when the turn started): its text, or its
    parts (texts and images) when it has several."""
    content: str | list[UserContent] = turn.prompt
    if turn.prompt_parts:
        content = [
            part if isinstance(part, str) else ImageUrl(part.url, vendor_metadata=_detail(part.detail))
            for part in turn.prompt_parts
        ]
    return ModelRequest(parts=[UserPromptPart(content, timestamp=turn.started)], timestamp=turn.started)


def _detail(detail: str | None) -> dict[str, Any] | None:
    """OpenAI's image ``detail``, where pydantic-ai keeps it (``vendor_metadata``)."""
    return {"detail": detail} if detail else None


class TurnRecorder:
    """Stores turns in ``memory``; ``delegation_agents`` maps delegation tool names to peer agent names, so their
    calls are stored as ``delegation_request`` / ``delegation_response``."""

    def __init__(
        self, memory: Memory, delegation_agents: Mapping[str, str], tracing: AgentTracing | None = None
    ) -> None:
        self.memory = memory
        self._delegation_agents = dict(delegation_agents)
        self._tracing = tracing or AgentTracing("", "")

    async def record(
        self,
        turn: TurnRequest,
        messages: Sequence[ModelMessage],
        error: KoraError | None = None,
        *,
        tokens: tuple[int, int] = (0, 0),
        finish_reason: str | None = None,
        approvals: Sequence[PendingApproval] = (),
    ) -> None:
        """Store the events of ``turn``: those of ``messages`` (which start with the prompt request; the prompt
        alone when empty), then an ``error`` event for ``error``. ``tokens`` (input, output) and ``finish_reason``
        (None for a failed turn) are what a response of the Responses API keeps with its events; ``approvals``
        the calls the turn paused at (their ``tool_call`` events marked)."""
        if turn.response is not None and not turn.response.store:
            return
        messages = messages or [prompt_request(turn)]
        # The trace's ids go in every event's metadata as it is made (copying each event after costs ~2 us).
        trace_ids = self._tracing.event_metadata()
        events = self._events(turn, messages, trace_ids)
        if approvals:
            events = _marked(events, {a.tool_call_id: a.marker() for a in approvals})
        if error is not None:
            failure: ErrorContent = {"error_type": error.code, "message": error.message}
            events.append(new_event(EventType.ERROR, failure, metadata=trace_ids))
        if turn.response is not None:
            # The turn's input: the events of its opening, up to its first request (the prompt, or the client's
            # tool results and the calls they answer).
            opening = next((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), len(messages) - 1)
            first = messages[0]
            if opening == 0 and isinstance(first, ModelRequest):  # a turn opened by its prompt: counted, not rebuilt
                inputs = request_event_count(first)
            else:
                inputs = len(self._events(turn, messages[: opening + 1]))
            events = _stamped(events, turn.response, inputs, tokens, finish_reason)
        with self._tracing.memory("write", turn.session_id):
            await self.memory.add_events(turn.session_id, events)

    def _events(
        self, turn: TurnRequest, messages: Sequence[ModelMessage], trace_ids: Mapping[str, str] | None = None
    ) -> list[MemoryEvent]:
        """The events of ``messages``, each with ``trace_ids`` (``trace_id``, ``span_id``) in its metadata."""
        return messages_to_events(
            messages,
            prompt_event_type=EventType.TASK_DELEGATION_RECEIVED if turn.delegated_by else EventType.USER_MESSAGE,
            prompt_metadata={"from_agent": turn.delegated_by} if turn.delegated_by else None,
            metadata=trace_ids,
            delegation_agents=self._delegation_agents,
        )


def _marked(events: list[MemoryEvent], markers: Mapping[str, JsonValue]) -> list[MemoryEvent]:
    """``events`` with each ``tool_call`` event of a call in ``markers`` (tool call id -> marker) carrying its marker
    in its metadata (:data:`~kora.core.protocol.APPROVAL_FIELD`)."""
    marked = []
    for event in events:
        call_id = tool_call_id(event)
        if event.event_type == EventType.TOOL_CALL and call_id is not None and call_id in markers:
            event = event.model_copy(update={"metadata": {**event.metadata, APPROVAL_FIELD: markers[call_id]}})
        marked.append(event)
    return marked


def _stamped(
    events: list[MemoryEvent],
    response: ResponseRecord,
    inputs: int,
    tokens: tuple[int, int],
    finish_reason: str | None,
) -> list[MemoryEvent]:
    """``events`` with the metadata :class:`~kora.agent.turn.ResponseRecord` describes; the first ``inputs``
    are the turn's input (metadata ``input: true``). ``events`` are the ones :meth:`TurnRecorder.record` just built,
    each with a metadata dict of its own (:func:`~kora.core.events.new_event` copies the one it is given, a copy
    with an update makes a new one): it is stamped in place, not copied with the event (a copy of each event cost
    a Responses turn ~25 us more than a chat turn)."""
    last = len(events) - 1
    for index, event in enumerate(events):
        metadata = event.metadata
        metadata["response_id"] = response.id
        if index < inputs:
            metadata["input"] = True
        if index == 0:
            metadata["response"] = dict(response.request)
        if index == last:
            metadata["usage"] = {"input_tokens": tokens[0], "output_tokens": tokens[1]}
            metadata["finish_reason"] = finish_reason
    return events
