"""What one agent turn takes and gives, independent of the protocol that asked for it.

The chat endpoint and A2A turn a request into a :class:`TurnRequest`, run it through the runtime, and render
the :class:`TurnOutcome`, or the :class:`~kora.core.errors.TurnError` it raised, in their own wire format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kora.core.events import utc_now


@dataclass(frozen=True)
class TurnDeps:
    """Run context of a turn, visible to tools: the memory session and who the turn is attributed to.

    ``user_id`` is the turn's verified user id (None: anonymous); ``credential`` the headers that prove it to a
    peer agent (see :attr:`TurnRequest.credential`).
    """

    session_id: str
    agent_name: str
    delegated_by: str | None = None
    user_id: str | None = None
    credential: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class TurnRequest:
    """One turn: ``prompt`` (user text) in ``session_id``.

    ``client_history`` are ``(role, text)`` turns the client sent itself (replayed only when the session has
    no stored history); ``system`` is extra instructions for this turn; ``delegated_by`` names the parent
    agent when the turn is a delegated task; ``started`` (UTC) is the prompt's timestamp.

    ``user_id`` is the verified user id of the turn (None when no identity is configured or none was verified:
    see :mod:`kora.agent.identity`); ``credential`` holds the headers it was verified from (the bearer token or
    the trusted gateway's header), forwarded to peer agents on delegation so they verify it themselves. Both
    come from the request's headers only, never from its body.
    """

    session_id: str
    prompt: str
    client_history: list[tuple[str, str]] = field(default_factory=list)
    system: str = ""
    delegated_by: str | None = None
    started: datetime = field(default_factory=utc_now)
    user_id: str | None = None
    credential: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class TurnOutcome:
    """The end of a turn: the answer ``text``, ``finish_reason`` (``stop``, or ``length`` when the step budget
    ran out) and the token usage summed over the turn's model requests, as the model reported it."""

    text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int
    model_requests: int
