"""The memory interface every implementation shares.

The agent server holds one :class:`Memory` and never asks which implementation it is: LocalMemory
(bounded, in-process, default), NullMemory (disabled) and RemoteMemory (client of the memory service).

All operations are coroutines so a remote implementation fits the same interface; local ones do not
await anything inside an operation, so each operation is atomic with respect to other coroutines on the
event loop. Session ids are opaque strings chosen by the caller or generated (``ses_`` + 32 hex digits).

**Who a session belongs to** (docs/identity.md "Who a session belongs to").
A session started by a verified user is that user's: a turn, read or write naming it for another verified user
or for an anonymous request is refused with :func:`session_forbidden` and reads and changes nothing. A session
started anonymously stays anonymous: any request that knows its id may continue it, a verified user too (the
session does not become theirs; what they say there stays readable by whoever holds the id, as it was before
identities existed). :func:`check_owner` is this rule, the one copy LocalMemory, RemoteMemory (its local window)
and the memory service apply.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, JsonValue

from kora.core.errors import Forbidden
from kora.core.events import EventType, MemoryEvent

#: The error ``code`` of a refusal by :func:`check_owner` (OpenAI ``code`` on ``/v1``, ``data.type`` on A2A).
SESSION_FORBIDDEN = "session_forbidden"
#: The code of the :class:`~kora.core.errors.Unavailable` raised when a strict-mode store cannot be reached.
MEMORY_UNAVAILABLE = "memory_unavailable"


def new_session_id() -> str:
    """A fresh session id: ``ses_`` followed by 32 hex digits."""
    return f"ses_{uuid.uuid4().hex}"


def session_forbidden(session_id: str) -> Forbidden:
    """The refusal of a session that belongs to another user: HTTP 403, code :data:`SESSION_FORBIDDEN`. It names
    the session the caller sent and nothing of its owner or content."""
    return Forbidden(
        f"Session {session_id!r} belongs to another user; start a new session or use one of yours.",
        code=SESSION_FORBIDDEN,
    )


def check_owner(session_id: str, owner: str | None, user_id: str | None) -> None:
    """The ownership rule (module docstring): a request of ``user_id`` (None: anonymous) may use a session whose
    ``owner`` is ``user_id`` or None (started anonymously). Raises :func:`session_forbidden` otherwise."""
    if owner is not None and owner != user_id:
        raise session_forbidden(session_id)


class SessionInfo(BaseModel):
    """A session as listed by ``GET /memory/sessions``.

    ``created_at`` / ``updated_at`` are UTC datetimes; ``event_count`` is how many events the session
    holds now (after any eviction).
    """

    session_id: str
    app_name: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    event_count: int


class MemoryHit(BaseModel):
    """One result of :meth:`Memory.search`: the matching text, its relevance in ``[0, 1]`` and where it came from.

    ``source`` is ``"event"`` (a stored event; ``event_id`` set) or ``"fact"`` (saved with ``save_memory``).
    """

    text: str
    score: float
    source: str
    event_id: str | None = None
    timestamp: datetime


@dataclass(frozen=True)
class TurnContext:
    """What memory puts before a turn (its three tiers): the rolling ``summary`` of earlier turns (None when
    there is none), the short-term window ``events`` (oldest first) and the long-term ``facts`` recalled for the
    prompt (best first)."""

    summary: str | None = None
    events: list[MemoryEvent] = field(default_factory=list)
    facts: list[MemoryHit] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryStatus:
    """How a memory is doing: ``problems`` make the agent not ready (``/ready`` 503); ``details`` are reported
    without (e.g. ``{"memory": "degraded: ..."}`` while a soft-mode store is unreachable)."""

    problems: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)


class Memory(ABC):
    """Sessions of memory events for one agent (``app_name`` is the agent's name).

    Errors: operations on an unknown session id raise nothing; reads return empty results and
    ``add_event`` creates the session (a memory never loses an event because a session was evicted).
    """

    #: False only for NullMemory; lets endpoints say "memory disabled" without isinstance checks.
    enabled: bool = True
    #: True when its calls leave the process (RemoteMemory): only then are they worth a span of their own.
    remote: bool = False

    @abstractmethod
    async def create_session(self, app_name: str, user_id: str | None = None) -> str:
        """Create a new, empty session of ``user_id`` (None: anonymous) and return its id."""

    @abstractmethod
    async def get_or_create_session(self, session_id: str | None, app_name: str, user_id: str | None = None) -> str:
        """Return ``session_id`` if it exists, else create it under that id (a fresh id when None) for ``user_id``,
        the turn's verified user (None: anonymous).

        Idempotent: calling it twice with the same id yields one session. Raises
        :class:`~kora.core.errors.Forbidden` (:func:`session_forbidden`) when the memory knows the session belongs
        to another user (:func:`check_owner`), changing nothing.
        """

    def check_access(self, session_id: str, user_id: str | None) -> None:  # noqa: B027 - NullMemory holds nothing
        """Raise :func:`session_forbidden` when this memory knows that ``session_id`` belongs to a user other than
        ``user_id`` (None: anonymous); O(1), no I/O, for a refusal before any work (A2A checks a task's context
        before the task exists). A memory that does not know the session raises nothing: a remote store still
        checks when the turn reads it."""

    @abstractmethod
    async def list_sessions(self, user_id: str | None = None) -> list[SessionInfo]:
        """All sessions, oldest first; with ``user_id``, only the sessions that verified user started."""

    async def check_reader(self, session_id: str, user_id: str | None) -> None:
        """Raise :func:`session_forbidden` when ``session_id`` belongs to a user other than ``user_id`` (None:
        anonymous), before a memory endpoint shows it. Unlike :meth:`check_access` this may ask a remote store
        about a session the agent does not hold; it never creates anything."""
        self.check_access(session_id, user_id)

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session ``session_id`` as :meth:`list_sessions` lists it (None when this memory does not hold it).
        The default reads the whole listing; in-process memories answer in O(1)."""
        return next((s for s in await self.list_sessions() if s.session_id == session_id), None)

    #: True when the memory keeps a session's metadata (:meth:`set_session_metadata`): LocalMemory, and RemoteMemory
    #: in the memory service; NullMemory keeps nothing.
    keeps_session_metadata: bool = False

    async def session_metadata(self, session_id: str) -> dict[str, str]:
        """The metadata set on ``session_id`` (``{}`` when none was set or the memory keeps none)."""
        return {}

    async def set_session_metadata(self, session_id: str, metadata: dict[str, str], user_id: str | None = None) -> None:
        """Replace the metadata of ``session_id`` (a session the caller opened or may use; ``user_id`` is whom a
        store that has not created it yet creates it for) with ``metadata``. Raises ``NotImplementedError`` when
        :attr:`keeps_session_metadata` is False: callers refuse metadata first."""
        raise NotImplementedError(f"{type(self).__name__} keeps no session metadata")

    @abstractmethod
    async def delete_session(self, session_id: str) -> bool:
        """Remove a session and its events; True if it existed."""

    def create_event(
        self,
        event_type: EventType | str,
        content: JsonValue,
        metadata: dict[str, JsonValue] | None = None,
    ) -> MemoryEvent:
        """Build (but do not store) an event with a fresh id and the current UTC time.

        Raises ``ValueError`` if ``event_type`` is not one of :class:`~kora.core.events.EventType`'s values.
        """
        return MemoryEvent(event_type=EventType(event_type), content=content, metadata=metadata or {})

    @abstractmethod
    async def add_event(self, session_id: str, event: MemoryEvent) -> None:
        """Append ``event`` to the session (creating the session if needed), applying the bounds."""

    async def add_events(self, session_id: str, events: Sequence[MemoryEvent]) -> None:
        """Append several events in order; implementations may do it in one round trip."""
        for event in events:
            await self.add_event(session_id, event)

    @abstractmethod
    async def get_session_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
    ) -> list[MemoryEvent]:
        """The session's events, oldest first.

        ``event_types`` keeps only events of those types; ``limit`` keeps only the most recent ``limit``
        (after filtering). Unknown session: ``[]``.
        """

    @abstractmethod
    async def list_events(
        self, session_id: str | None = None, limit: int | None = None, user_id: str | None = None
    ) -> list[MemoryEvent]:
        """Events of one session, or of all sessions when ``session_id`` is None (with ``user_id``: of that
        verified user's sessions only), oldest first (newest last).

        ``limit`` keeps only the most recent ``limit`` events.
        """

    @abstractmethod
    async def count_events(self, session_id: str | None = None, user_id: str | None = None) -> int:
        """How many events one session (or all sessions; with ``user_id`` that user's) holds; the ``total`` of
        ``GET /memory/events``."""

    @abstractmethod
    async def erase_session(self, session_id: str) -> dict[str, int]:
        """Erase ``session_id`` from every tier and copy this memory reaches (docs/identity.md, "Erasure"); what
        was removed, counted per tier (e.g. ``{"sessions": 1, "events": 4}``). Raises
        :class:`~kora.core.errors.Unavailable` when a remote part cannot be reached (the local copies are erased
        first, whatever happens)."""

    @abstractmethod
    async def erase_user(self, user_id: str) -> dict[str, int]:
        """Erase every session the verified user ``user_id`` started, and their facts, from every tier and copy
        this memory reaches; counts per tier. Raises :class:`~kora.core.errors.Unavailable` as
        :meth:`erase_session`."""

    @abstractmethod
    async def search(
        self, session_id: str, query: str, scope: str = "session", limit: int = 5, user_id: str | None = None
    ) -> list[MemoryHit]:
        """Recall what matches ``query`` within ``scope``, best first, at most ``limit`` hits.

        ``user_id`` is the turn's verified user (scopes ``agent`` and ``user`` need one). Scopes an implementation
        cannot serve (LocalMemory serves only ``"session"``) raise ``ValueError`` with a message meant for the
        model. NullMemory returns ``[]``.
        """

    @abstractmethod
    async def save(
        self,
        session_id: str,
        content: str,
        metadata: dict[str, JsonValue] | None = None,
        user_id: str | None = None,
    ) -> str:
        """Keep ``content`` as a fact for later recall; returns its id. ``metadata`` carries attribution and
        ``user_id`` the verified user the fact is about. Raises ``ValueError`` (a message for the model) when it
        cannot be kept now."""

    async def turn_context(self, session_id: str, prompt: str, limit: int, user_id: str | None = None) -> TurnContext:
        """What memory puts before a turn whose prompt is ``prompt``: at most ``limit`` window events, and for
        memories with long-term tiers the summary and recalled facts (within the agent's read scope, narrowed to the
        session without a verified ``user_id``). The default is the session's newest ``limit`` events.

        Raises :class:`~kora.core.errors.Unavailable` when the memory cannot serve and must not fall back
        (RemoteMemory in strict mode).
        """
        return TurnContext(events=await self.get_session_events(session_id, limit=limit) if limit else [])

    def status(self) -> MemoryStatus:
        """How the memory is doing now (in-process memories are always fine)."""
        return MemoryStatus()

    async def start(self) -> None:  # noqa: B027 - optional hook, a no-op for in-process memories
        """Start background work (RemoteMemory's sender of queued writes); the default has none."""

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op for in-process memories
        """Release connections; the default has nothing to release."""
