"""Choosing the memory implementation from the agent's settings.

``MEMORY_ENABLED=false`` selects NullMemory; a set ``MEMORY_STORE_ENDPOINT`` selects RemoteMemory (the memory
service's client); otherwise LocalMemory, bounded by ``MEMORY_MAX_SESSIONS`` and ``MEMORY_MAX_SESSION_EVENTS``.
"""

from __future__ import annotations

from typing import Literal, Protocol

from kora.memory.base import Memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory


class MemorySettings(Protocol):
    """The settings :func:`build_memory` reads, by their agent setting names (``MEMORY_ENABLED``, ...): the
    agent's settings object satisfies it, so it is passed whole rather than unpacked on the way."""

    @property
    def agent_name(self) -> str:
        """The app name events and sessions are kept under."""

    @property
    def memory_enabled(self) -> bool:
        """``false`` selects NullMemory."""

    @property
    def memory_max_sessions(self) -> int:
        """LocalMemory's bound on sessions (RemoteMemory's local window too)."""

    @property
    def memory_max_session_events(self) -> int:
        """LocalMemory's bound on events per session (RemoteMemory's local window too)."""

    @property
    def memory_store_endpoint(self) -> str:
        """The memory service's URL; empty: LocalMemory."""

    @property
    def memory_store_token(self) -> str:
        """The bearer token the memory service knows bound agents by."""

    @property
    def memory_max_read_scope(self) -> str:
        """The widest scope a request may read: ``session``, ``user`` or ``agent``."""

    @property
    def memory_failure_mode(self) -> Literal["soft", "strict"]:
        """What a turn does when the store is unreachable."""

    @property
    def memory_rolling_summary(self) -> bool:
        """Whether the store's rolling summary replaces the oldest events in the context."""

    @property
    def memory_client_token_budget(self) -> int:
        """Tokens of context RemoteMemory asks the store for."""


def build_memory(settings: MemorySettings) -> Memory:
    """The agent's memory: NullMemory when not ``memory_enabled`` (whatever the endpoint), RemoteMemory when
    ``memory_store_endpoint`` is set, else LocalMemory. Raises ``ValueError`` when a bound is < 1."""
    if not settings.memory_enabled:
        return NullMemory()
    endpoint = settings.memory_store_endpoint.strip()
    if endpoint:
        from kora.memory.remote import RemoteMemory

        return RemoteMemory(
            endpoint,
            settings.agent_name,
            max_read_scope=settings.memory_max_read_scope,
            failure_mode=settings.memory_failure_mode,
            rolling_summary=settings.memory_rolling_summary,
            token_budget=settings.memory_client_token_budget,
            token=settings.memory_store_token,
            local_sessions=settings.memory_max_sessions,
            local_session_events=settings.memory_max_session_events,
        )
    return LocalMemory(
        max_sessions=settings.memory_max_sessions,
        max_session_events=settings.memory_max_session_events,
        app_name=settings.agent_name,
    )
