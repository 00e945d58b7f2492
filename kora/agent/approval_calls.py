"""A tool call waiting for a person's approval (:class:`PendingApproval`) and a person's decision on it
(:class:`Decision`): the records a paused turn's outcome carries (:attr:`kora.agent.turn.TurnOutcome.approvals`)
and :mod:`kora.agent.approvals` keeps. Imports nothing of the turn, so both can name them."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from kora.core.errors import RequestError

#: Who decided a call that waited too long (:attr:`PendingApproval.decided_by`): the agent itself, rejecting it.
EXPIRED = "expired"


@dataclass(frozen=True)
class Decision:
    """A person's decision on a pending call: ``approve`` (else reject), ``reason`` (given to the model with a
    rejection) and ``arguments`` (approve with these arguments instead of the model's)."""

    approve: bool
    reason: str = ""
    arguments: dict[str, JsonValue] | None = None

    @classmethod
    def parse(cls, value: object, where: str = "the decision") -> Decision:
        """Read a decision object ``{"decision": "approve" | "reject", "reason"?: str, "arguments"?: object}``.
        Raises :class:`~kora.core.errors.RequestError` naming ``where`` and the bad field; other keys are refused,
        and so are ``arguments`` with a rejection."""
        if not isinstance(value, Mapping):
            raise RequestError(f"Invalid value: {where} must be an object with 'decision'.", code="invalid_decision")
        unknown = sorted(set(value) - {"decision", "reason", "arguments"})
        if unknown:
            raise RequestError(f"Invalid value: {where} has unknown fields {unknown}.", code="invalid_decision")
        decision = value.get("decision")
        if decision not in ("approve", "reject"):
            raise RequestError(
                f"Invalid value: {where}: 'decision' must be 'approve' or 'reject'.", code="invalid_decision"
            )
        reason = value.get("reason", "")
        if not isinstance(reason, str):
            raise RequestError(f"Invalid value: {where}: 'reason' must be a string.", code="invalid_decision")
        arguments = value.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise RequestError(f"Invalid value: {where}: 'arguments' must be an object.", code="invalid_decision")
        if arguments is not None and decision == "reject":
            raise RequestError(f"Invalid value: {where}: 'arguments' go with 'approve' only.", code="invalid_decision")
        return cls(decision == "approve", reason, arguments)

    @classmethod
    def parse_text(cls, text: str, where: str) -> Decision:
        """:meth:`parse` of a JSON text (a tool message's content)."""
        try:
            value = json.loads(text)
        except ValueError:
            raise RequestError(
                f"Invalid value: {where} must be a JSON decision object "
                '{"decision": "approve" | "reject", "reason": "...", "arguments": {...}}.',
                code="invalid_decision",
            ) from None
        return cls.parse(value, where)


@dataclass
class PendingApproval:
    """One call waiting for a decision: ``id`` (``appr_<hex>``), the turn's ``session_id`` and ``user_id`` (None:
    anonymous), the model's ``tool_call_id``, ``tool_name`` (as the model called it), ``target``
    (``<server>/<tool>`` as patterns name it), ``arguments`` (the JSON text the model sent), ``requested_at`` and
    ``expires_at`` (seconds since the epoch). ``decision`` is None while it waits; ``decided_by`` then says who
    decided: the user's id, ``anonymous``, ``operator``, or :data:`EXPIRED`; ``decided_at`` when (seconds since the
    epoch)."""

    id: str
    session_id: str
    user_id: str | None
    tool_call_id: str
    tool_name: str
    target: str
    arguments: str
    requested_at: float
    expires_at: float
    decision: Decision | None = None
    decided_by: str = ""
    decided_at: float | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The approval as ``GET /approvals`` lists it: ``{id, session_id, tool_call_id, tool, target, arguments
        (object), requested_at, expires_at (ISO 8601 UTC), status}``."""
        try:
            arguments: JsonValue = json.loads(self.arguments or "{}")
        except ValueError:
            arguments = self.arguments
        return {
            "id": self.id,
            "session_id": self.session_id,
            "tool_call_id": self.tool_call_id,
            "tool": self.tool_name,
            "target": self.target,
            "arguments": arguments,
            "requested_at": _iso(self.requested_at),
            "expires_at": _iso(self.expires_at),
            "status": self.status,
        }

    def marker(self) -> dict[str, JsonValue]:
        """The :data:`~kora.core.protocol.APPROVAL_FIELD` value of the call: ``{"id", "target", "expires_at"}``."""
        return {"id": self.id, "target": self.target, "expires_at": _iso(self.expires_at)}

    @property
    def status(self) -> Literal["pending", "approved", "rejected", "expired"]:
        """Where the approval stands."""
        if self.decision is None:
            return "pending"
        if self.decided_by == EXPIRED:
            return "expired"
        return "approved" if self.decision.approve else "rejected"


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
