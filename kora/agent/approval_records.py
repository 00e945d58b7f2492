"""Paused turns as JSON records (:mod:`kora.agent.approvals`' journal): :func:`paused_record` writes one,
:func:`paused_from_record` reads it back. The messages are pydantic-ai's own JSON (``ModelMessagesTypeAdapter``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessagesTypeAdapter

from kora.agent.approval_calls import PendingApproval
from kora.agent.approvals import CarriedBudget, PausedTurn, TaskRef
from kora.agent.turn import TurnRequest


@dataclass(frozen=True)
class _Record:
    """A paused turn as a journal stores it (the messages as pydantic-ai's JSON, decoded on load)."""

    turn: TurnRequest
    messages: bytes
    approvals: list[PendingApproval]
    task: TaskRef | None = None
    budget: CarriedBudget | None = None


def paused_record(paused: PausedTurn) -> bytes:
    """``paused`` as the JSON a journal stores. Left out: the client's own copy of the conversation (the messages
    hold the turn) and the turn's credential (a bearer token is not written to the database: a turn resumed by
    another process delegates without it)."""
    turn = replace(paused.turn, credential={}, client_history=[], answered=None, tool_results=())
    record = _Record(
        turn, ModelMessagesTypeAdapter.dump_json(paused.messages), paused.approvals, paused.task, paused.budget
    )
    return _RECORD.dump_json(record)


def paused_from_record(data: bytes | str) -> PausedTurn:
    """A paused turn read back from :func:`paused_record`'s JSON (no resumer, no timer yet). Raises pydantic's
    ``ValidationError`` for a record that is no paused turn."""
    record = _RECORD.validate_json(data)
    messages = ModelMessagesTypeAdapter.validate_json(record.messages)
    return PausedTurn(record.turn, messages, list(record.approvals), task=record.task, budget=record.budget)


_RECORD = TypeAdapter(_Record)
