"""Agent-side memory (spec: "Memory implementations").

``Memory`` is the interface; ``LocalMemory`` (bounded, in-process, the default) and ``NullMemory``
(``MEMORY_ENABLED=false``) implement it. ``kora.memory.history`` converts events to and from model
messages.
"""

from kora.memory.base import Memory, MemoryHit, SessionInfo, new_session_id

__all__ = ["Memory", "MemoryHit", "SessionInfo", "new_session_id"]
