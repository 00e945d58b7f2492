"""Agent-side memory (spec: "Memory implementations").

``Memory`` is the interface; ``LocalMemory`` (bounded, in-process, the default) and ``NullMemory``
(``MEMORY_ENABLED=false``) implement it; ``build_memory`` picks one from the settings. ``kora.memory.history``
converts events to and from model messages; it imports pydantic-ai, so it is not imported here.
"""

from kora.memory.base import Memory, MemoryHit, SessionInfo, new_session_id
from kora.memory.factory import build_memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory

__all__ = ["LocalMemory", "Memory", "MemoryHit", "NullMemory", "SessionInfo", "build_memory", "new_session_id"]
