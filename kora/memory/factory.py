"""Choosing the memory implementation from the agent's settings.

``MEMORY_ENABLED=false`` selects NullMemory; a set ``MEMORY_STORE_ENDPOINT`` selects RemoteMemory (the memory
service's client); otherwise LocalMemory, bounded by ``MEMORY_MAX_SESSIONS`` and ``MEMORY_MAX_SESSION_EVENTS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kora.memory.base import Memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory


@dataclass(frozen=True)
class RemoteOptions:
    """RemoteMemory's settings: the agent's read scope ceiling, ``MEMORY_FAILURE_MODE``,
    ``MEMORY_ROLLING_SUMMARY``, ``MEMORY_CLIENT_TOKEN_BUDGET`` and ``MEMORY_STORE_TOKEN``."""

    max_read_scope: str = "session"
    failure_mode: Literal["soft", "strict"] = "soft"
    rolling_summary: bool = False
    token_budget: int = 2000
    #: ``MEMORY_STORE_TOKEN``: the bearer token the memory service knows bound agents by.
    token: str = ""


def build_memory(
    enabled: bool,
    max_sessions: int,
    max_session_events: int,
    app_name: str,
    store_endpoint: str = "",
    remote: RemoteOptions | None = None,
) -> Memory:
    """The agent's memory: NullMemory when not ``enabled`` (whatever the endpoint), RemoteMemory when
    ``store_endpoint`` is set, else LocalMemory. Raises ``ValueError`` when a bound is < 1."""
    if not enabled:
        return NullMemory()
    if store_endpoint.strip():
        from kora.memory.remote import RemoteMemory

        options = remote or RemoteOptions()
        return RemoteMemory(
            store_endpoint.strip(),
            app_name,
            max_read_scope=options.max_read_scope,
            failure_mode=options.failure_mode,
            rolling_summary=options.rolling_summary,
            token_budget=options.token_budget,
            token=options.token,
            local_sessions=max_sessions,
            local_session_events=max_session_events,
        )
    return LocalMemory(max_sessions=max_sessions, max_session_events=max_session_events, app_name=app_name)
