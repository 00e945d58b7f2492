"""LocalMemory: bounded, in-process session memory, the default.

Bounds:

* ``max_sessions`` (``MEMORY_MAX_SESSIONS``, default 1000): when a new session makes the count exceed it,
  the least recently active ``ceil(max_sessions / 10)`` sessions (at least 1) are evicted with their events
  and facts; 1000 sessions plus one new one leave 901. The session being created is never evicted: it is
  the most recently active one and the batch is smaller than the number of older sessions.
* ``max_session_events`` (``MEMORY_MAX_SESSION_EVENTS``, default 500): when a session would exceed it, its
  oldest events are dropped (a ``deque`` with ``maxlen``). Saved facts have the same bound of their own.

Ownership (:func:`kora.memory.base.check_owner`): a session remembers the verified user who started it
(``owner``; None when started anonymously, listed as the user ``default``); ``get_or_create_session`` and
``check_access`` refuse it to anyone else with :class:`~kora.core.errors.Forbidden` before touching it, one dict
lookup. Writes (``add_event(s)``, ``save``) carry no user: they belong to a turn that was let in. An evicted
session is forgotten with its owner and events, so a later request that names it starts an empty one.

"Activity" is creation, ``get_or_create_session`` (a turn is starting) and every write (``add_event(s)``,
``save``). Reads never reorder sessions, so inspecting memory does not keep a session alive. Recency is an
``OrderedDict`` ordered least recently active first; ``move_to_end`` and ``popitem(last=False)`` are O(1).

Cost of each operation: O(1) for session lookup/creation, writes and counts; O(result) for
``get_session_events``/``list_events`` of one session with a ``limit`` (it walks back from the newest end,
further only when filtering by type skips events); ``list_events`` across sessions is a lazy k-way merge,
O(sessions + result x log sessions); ``list_sessions`` and ``search`` are O(sessions) and O(session size).

Concurrency: no operation awaits anything inside, so on one event loop every operation, ``add_events``
included, is atomic with respect to other coroutines: a turn's events stay contiguous and no write is lost
below the bounds. The class is not thread-safe; use it from the event loop's thread only.
"""

from __future__ import annotations

import heapq
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import NamedTuple

from pydantic import JsonValue

from kora.core.events import EventType, MemoryEvent, utc_now
from kora.memory.base import Memory, MemoryHit, SessionInfo, check_owner, new_session_id
from kora.memory.text import event_text, keyword_score, query_terms

#: The one scope LocalMemory can search (pooled scopes need a bound MemoryStore).
SESSION_SCOPE = "session"


def new_fact_id() -> str:
    """A fresh fact id: ``fact_`` followed by 32 hex digits."""
    return f"fact_{uuid.uuid4().hex}"


@dataclass(slots=True, frozen=True)
class _Fact:
    """A fact kept by ``save``; ``metadata`` carries attribution."""

    fact_id: str
    text: str
    metadata: dict[str, JsonValue]
    timestamp: datetime


class _Stored(NamedTuple):
    """An event as LocalMemory keeps it: ~300 bytes where the pydantic model takes ~750 (measured on 20k
    events), since a model also holds a ``__dict__``, a fields-set and an empty metadata dict. Events are
    validated when they are created, so reads rebuild them with ``model_construct`` (~3.5 µs each)."""

    event_id: str
    timestamp: datetime
    event_type: EventType
    content: JsonValue
    metadata: dict[str, JsonValue] | None  # None when empty

    @classmethod
    def of(cls, event: MemoryEvent) -> _Stored:
        return cls(event.event_id, event.timestamp, event.event_type, event.content, event.metadata or None)

    def event(self) -> MemoryEvent:
        return MemoryEvent.model_construct(
            event_id=self.event_id,
            timestamp=self.timestamp,
            event_type=self.event_type,
            content=self.content,
            metadata=dict(self.metadata) if self.metadata else {},
        )


#: The user a session started anonymously is listed under (as before identities existed).
ANONYMOUS_USER = "default"


@dataclass(slots=True)
class _Session:
    session_id: str
    app_name: str
    owner: str | None  # the verified user who started it; None: started anonymously
    created_at: datetime
    updated_at: datetime
    events: deque[_Stored]
    # Allocated on the first save: most sessions never get a fact, and an empty deque costs ~600 bytes.
    facts: deque[_Fact] | None = None
    # Set by set_session_metadata (a conversation's metadata); None for the many sessions that have none.
    metadata: dict[str, str] | None = None


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def _newest(
    events: deque[_Stored], event_types: Sequence[EventType | str] | None, limit: int | None
) -> list[MemoryEvent]:
    """The newest ``limit`` events (all when None) of ``events`` whose type is in ``event_types``, oldest first."""
    if event_types is None:
        if limit is None:
            return [stored.event() for stored in events]
        # Walk back from the newest end: O(limit), unlike slicing from the front of a deque.
        newest_first = list(islice(reversed(events), limit))
    else:
        # StrEnum members hash and compare like their values, so plain strings match too.
        wanted = frozenset(str(t) for t in event_types)
        matching = (e for e in reversed(events) if e.event_type in wanted)
        newest_first = list(matching if limit is None else islice(matching, limit))
    return [stored.event() for stored in reversed(newest_first)]


def _timestamp(stored: _Stored) -> datetime:
    return stored.timestamp


class LocalMemory(Memory):
    """In-process memory bounded by session count and events per session (see the module docstring).

    ``app_name`` names the sessions ``add_event``/``save`` create implicitly (the agent's name). Raises
    ``ValueError`` when a bound is < 1. Sessions are listed least recently active first, the eviction order.
    """

    #: A session's metadata is kept with it (a conversation's, ``/v1/conversations``), evicted with it.
    keeps_session_metadata = True

    def __init__(self, max_sessions: int = 1000, max_session_events: int = 500, app_name: str = "agent") -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if max_session_events < 1:
            raise ValueError(f"max_session_events must be >= 1, got {max_session_events}")
        self._max_sessions = max_sessions
        self._max_session_events = max_session_events
        self._evict_batch = max(1, -(-max_sessions // 10))  # ceil(10 %), at least one
        self.app_name = app_name
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._total_events = 0
        #: Sessions evicted for exceeding ``max_sessions`` since start (for logs and metrics).
        self.evicted_sessions = 0

    @property
    def max_sessions(self) -> int:
        """The session bound (``MEMORY_MAX_SESSIONS``)."""
        return self._max_sessions

    @property
    def max_session_events(self) -> int:
        """The per-session event bound (``MEMORY_MAX_SESSION_EVENTS``)."""
        return self._max_session_events

    # -- sessions -------------------------------------------------------------------------------------------

    def _touch(self, session_id: str, app_name: str, owner: str | None) -> _Session:
        """The session, marked most recently active; created for ``owner`` (then bounds applied) when missing."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
            return session
        now = utc_now()
        session = _Session(
            session_id=session_id,
            app_name=app_name,
            owner=owner,
            created_at=now,
            updated_at=now,
            events=deque(maxlen=self._max_session_events),
        )
        self._sessions[session_id] = session
        if len(self._sessions) > self._max_sessions:
            self._evict_oldest()
        return session

    def _evict_oldest(self) -> None:
        # The batch is <= max_sessions < len(sessions) and the new session is last, so it survives.
        for _ in range(self._evict_batch):
            _, old = self._sessions.popitem(last=False)
            self._total_events -= len(old.events)
        self.evicted_sessions += self._evict_batch

    async def create_session(self, app_name: str, user_id: str | None = None) -> str:
        """Create an empty session of ``user_id`` with a fresh ``ses_`` id and return the id (may evict old
        sessions)."""
        session_id = new_session_id()
        self._touch(session_id, app_name, user_id)
        return session_id

    async def get_or_create_session(self, session_id: str | None, app_name: str, user_id: str | None = None) -> str:
        """Return ``session_id``, creating it under that id for ``user_id`` if missing (a fresh id when None or
        empty). Raises :class:`~kora.core.errors.Forbidden` for another user's session (module docstring).

        Marks the session most recently active, so a session whose turn is starting is the last one evicted.
        """
        sid = session_id or new_session_id()
        self.check_access(sid, user_id)
        self._touch(sid, app_name, user_id)
        return sid

    def holds(self, session_id: str) -> bool:
        """Whether this memory holds ``session_id`` now (not evicted); O(1)."""
        return session_id in self._sessions

    def holds_any(self) -> bool:
        """Whether this memory holds any session; O(1)."""
        return bool(self._sessions)

    def check_access(self, session_id: str, user_id: str | None) -> None:
        """Raise :class:`~kora.core.errors.Forbidden` when the session belongs to another user; O(1)."""
        session = self._sessions.get(session_id)
        if session is not None:
            check_owner(session_id, session.owner, user_id)

    async def list_sessions(self, user_id: str | None = None) -> list[SessionInfo]:
        """All sessions (with ``user_id``, those that user started), least recently active first (the order in
        which they would be evicted)."""
        return [self._info(s) for s in self._sessions.values() if user_id is None or s.owner == user_id]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session as :meth:`list_sessions` lists it, None when not held; O(1), no reordering."""
        session = self._sessions.get(session_id)
        return None if session is None else self._info(session)

    def _info(self, session: _Session) -> SessionInfo:
        return SessionInfo(
            session_id=session.session_id,
            app_name=session.app_name,
            user_id=session.owner if session.owner is not None else ANONYMOUS_USER,
            created_at=session.created_at,
            updated_at=session.updated_at,
            event_count=len(session.events),
        )

    async def session_metadata(self, session_id: str) -> dict[str, str]:
        """The metadata set on the session (``{}``: none, or the session is not held); O(1)."""
        session = self._sessions.get(session_id)
        return dict(session.metadata) if session is not None and session.metadata else {}

    async def set_session_metadata(self, session_id: str, metadata: dict[str, str], user_id: str | None = None) -> None:
        """Replace the session's metadata (nothing when the session is not held: ``user_id`` creates nothing);
        O(size of ``metadata``)."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.metadata = dict(metadata) or None

    async def delete_session(self, session_id: str) -> bool:
        """Remove the session with its events and facts; True if it existed."""
        return self._remove(session_id) is not None

    def _remove(self, session_id: str) -> _Session | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._total_events -= len(session.events)
        return session

    def _erased(self, removed: Iterable[_Session]) -> dict[str, int]:
        counts = {"sessions": 0, "events": 0, "facts": 0}
        for session in removed:
            counts["sessions"] += 1
            counts["events"] += len(session.events)
            counts["facts"] += len(session.facts or ())
        return counts

    async def erase_session(self, session_id: str) -> dict[str, int]:
        """Remove the session with its events and facts: ``{"sessions", "events", "facts"}`` removed. O(size)."""
        session = self._remove(session_id)
        return self._erased([session] if session is not None else [])

    async def erase_user(self, user_id: str) -> dict[str, int]:
        """Remove every session ``user_id`` started, with their events and facts; counts as
        :meth:`erase_session`. O(sessions)."""
        owned = [sid for sid, session in self._sessions.items() if session.owner == user_id]
        return self._erased([session for sid in owned if (session := self._remove(sid)) is not None])

    # -- events ---------------------------------------------------------------------------------------------

    def _append(self, session: _Session, events: Iterable[MemoryEvent]) -> None:
        buffer = session.events
        bound = self._max_session_events
        for event in events:
            # A full deque drops its oldest event on append, so the total only grows below the bound.
            if len(buffer) < bound:
                self._total_events += 1
            buffer.append(_Stored.of(event))
        session.updated_at = utc_now()

    async def add_event(self, session_id: str, event: MemoryEvent) -> None:
        """Append ``event`` (creating the session under ``app_name`` if needed); drops the oldest beyond the bound."""
        self._append(self._touch(session_id, self.app_name, None), (event,))

    async def add_events(self, session_id: str, events: Sequence[MemoryEvent]) -> None:
        """Append ``events`` in order in one atomic step, so concurrent turns never interleave their events."""
        self._append(self._touch(session_id, self.app_name, None), events)

    async def get_session_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
    ) -> list[MemoryEvent]:
        """The session's events oldest first, filtered to ``event_types`` and then cut to the newest ``limit``.

        Unknown session: ``[]``; type strings that are no event type match nothing; ``limit=0`` gives ``[]``.
        Raises ``ValueError`` for a negative ``limit``.
        """
        _check_limit(limit)
        session = self._sessions.get(session_id)
        if session is None:
            return []
        return _newest(session.events, event_types, limit)

    async def list_events(
        self, session_id: str | None = None, limit: int | None = None, user_id: str | None = None
    ) -> list[MemoryEvent]:
        """The newest ``limit`` events of one session, or of all sessions when None (with ``user_id``: of the
        sessions that user started); newest last.

        Across sessions events are ordered by timestamp (a merge of the sessions' newest-first streams;
        within one session insertion order is kept). Raises ``ValueError`` for a negative ``limit``.
        """
        _check_limit(limit)
        if session_id is not None:
            return await self.get_session_events(session_id, None, limit)
        streams: list[Iterator[_Stored]] = [
            reversed(s.events) for s in self._sessions.values() if s.events and (user_id is None or s.owner == user_id)
        ]
        merged = heapq.merge(*streams, key=_timestamp, reverse=True)
        newest_first = list(merged if limit is None else islice(merged, limit))
        return [stored.event() for stored in reversed(newest_first)]

    async def count_events(self, session_id: str | None = None, user_id: str | None = None) -> int:
        """Events held by one session (0 if unknown) or by all sessions, O(1); with ``user_id``, by that user's
        sessions, O(sessions)."""
        if session_id is None and user_id is not None:
            return sum(len(s.events) for s in self._sessions.values() if s.owner == user_id)
        if session_id is None:
            return self._total_events
        session = self._sessions.get(session_id)
        return 0 if session is None else len(session.events)

    # -- recall ---------------------------------------------------------------------------------------------

    async def search(
        self, session_id: str, query: str, scope: str = SESSION_SCOPE, limit: int = 5, user_id: str | None = None
    ) -> list[MemoryHit]:
        """Keyword recall over the session's events and saved facts, best first, at most ``limit`` hits.

        Score: share of the query's words found in the text (:func:`kora.memory.text.keyword_score`), in
        ``[0, 1]``; only hits above 0; ties go to the newer text. Raises ``ValueError`` (message meant for the
        model) for any scope other than ``"session"``.
        """
        if scope != SESSION_SCOPE:
            raise ValueError(
                f"Memory level {scope!r} is not available to this agent: it keeps only pod-local session memory. "
                "A pooled scope needs a bound MemoryStore. Search with level 'session' instead."
            )
        session = self._sessions.get(session_id)
        terms = query_terms(query)
        if session is None or not terms or limit <= 0:
            return []
        # Ties go to the newer text: by timestamp, then by position (events and facts are each kept in order).
        scored: list[tuple[float, datetime, int, MemoryHit]] = []
        for rank, stored in enumerate(session.events):
            event = stored.event()
            text = event_text(event)
            score = keyword_score(terms, text)
            if score > 0:
                hit = MemoryHit(
                    text=text, score=score, source="event", event_id=event.event_id, timestamp=event.timestamp
                )
                scored.append((score, event.timestamp, rank, hit))
        for rank, fact in enumerate(session.facts or ()):
            score = keyword_score(terms, fact.text)
            if score > 0:
                hit = MemoryHit(text=fact.text, score=score, source="fact", timestamp=fact.timestamp)
                scored.append((score, fact.timestamp, rank, hit))
        best = heapq.nlargest(limit, scored, key=lambda item: (item[0], item[1], item[2]))
        return [hit for *_, hit in best]

    async def save(
        self,
        session_id: str,
        content: str,
        metadata: dict[str, JsonValue] | None = None,
        user_id: str | None = None,
    ) -> str:
        """Keep ``content`` as a fact of the session (created if needed); returns its ``fact_`` id.

        At most ``max_session_events`` facts per session (oldest dropped); facts go with their session.
        """
        session = self._touch(session_id, self.app_name, None)
        fact = _Fact(fact_id=new_fact_id(), text=content, metadata=dict(metadata or {}), timestamp=utc_now())
        if session.facts is None:
            session.facts = deque(maxlen=self._max_session_events)
        session.facts.append(fact)
        session.updated_at = fact.timestamp
        return fact.fact_id
