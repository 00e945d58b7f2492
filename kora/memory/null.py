"""NullMemory: memory switched off (``MEMORY_ENABLED=false``).

Every operation is a no-op: reads return empty results, writes are dropped, ``enabled`` is False (the memory
endpoints then answer with empty results). Session operations still return usable ids so the agent's turn
logic does not need a special case.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import JsonValue

from kora.core.events import EventType, MemoryEvent
from kora.memory.base import Memory, MemoryHit, SessionInfo, new_session_id
from kora.memory.local import new_fact_id


class NullMemory(Memory):
    """A memory that remembers nothing. Never raises, whatever the scope or session: with nothing kept, no session
    has anything of its user to refuse."""

    enabled = False

    async def create_session(self, app_name: str, user_id: str | None = None) -> str:
        """A fresh ``ses_`` id; nothing is stored."""
        return new_session_id()

    async def get_or_create_session(self, session_id: str | None, app_name: str, user_id: str | None = None) -> str:
        """``session_id`` as given, or a fresh id when None or empty; nothing is stored."""
        return session_id or new_session_id()

    async def list_sessions(self, user_id: str | None = None) -> list[SessionInfo]:
        """Always ``[]``."""
        return []

    async def delete_session(self, session_id: str) -> bool:
        """Always False: there is never a session to delete."""
        return False

    async def add_event(self, session_id: str, event: MemoryEvent) -> None:
        """Drops the event."""

    async def add_events(self, session_id: str, events: Sequence[MemoryEvent]) -> None:
        """Drops the events."""

    async def get_session_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
    ) -> list[MemoryEvent]:
        """Always ``[]``."""
        return []

    async def list_events(
        self, session_id: str | None = None, limit: int | None = None, user_id: str | None = None
    ) -> list[MemoryEvent]:
        """Always ``[]``."""
        return []

    async def count_events(self, session_id: str | None = None, user_id: str | None = None) -> int:
        """Always 0."""
        return 0

    async def erase_session(self, session_id: str) -> dict[str, int]:
        """Nothing to erase: ``{}``."""
        return {}

    async def erase_user(self, user_id: str) -> dict[str, int]:
        """Nothing to erase: ``{}``."""
        return {}

    async def search(
        self, session_id: str, query: str, scope: str = "session", limit: int = 5, user_id: str | None = None
    ) -> list[MemoryHit]:
        """Always ``[]``, for every scope."""
        return []

    async def save(
        self,
        session_id: str,
        content: str,
        metadata: dict[str, JsonValue] | None = None,
        user_id: str | None = None,
    ) -> str:
        """Drops the fact; returns a fresh ``fact_`` id so callers need no special case."""
        return new_fact_id()
