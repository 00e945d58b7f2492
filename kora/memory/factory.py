"""Choosing the memory implementation from the agent's settings (spec: "Memory implementations").

``MEMORY_ENABLED=false`` selects NullMemory; otherwise LocalMemory, bounded by ``MEMORY_MAX_SESSIONS`` and
``MEMORY_MAX_SESSION_EVENTS``. A set ``MEMORY_STORE_ENDPOINT`` selects RemoteMemory, which this build does not
contain yet: that is reported as a ``ValueError`` the agent turns into a start-up error, rather than silently
falling back to pod-local memory the operator did not ask for.
"""

from __future__ import annotations

from kora.memory.base import Memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory


def build_memory(
    enabled: bool,
    max_sessions: int,
    max_session_events: int,
    app_name: str,
    store_endpoint: str = "",
) -> Memory:
    """The agent's memory: NullMemory when not ``enabled`` (whatever the endpoint), else LocalMemory.

    Raises ``ValueError`` when ``store_endpoint`` is set on an enabled memory (RemoteMemory not in this build)
    or when a bound is < 1.
    """
    if not enabled:
        return NullMemory()
    if store_endpoint.strip():
        raise ValueError("MEMORY_STORE_ENDPOINT is set but the remote memory client is not available in this build")
    return LocalMemory(max_sessions=max_sessions, max_session_events=max_session_events, app_name=app_name)
