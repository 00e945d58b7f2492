"""Agent-side memory (docs/memory.md).

``Memory`` is the interface; ``LocalMemory`` (bounded, in-process, the default) and ``NullMemory``
(``MEMORY_ENABLED=false``) implement it; ``build_memory`` picks one from the settings. ``kora.memory.replay``
decides which stored events a model sees again; the agent renders that as model messages
(``kora.agent.history``). This package imports no model library.
"""

from kora.memory.base import Memory, MemoryHit, SessionInfo, new_session_id
from kora.memory.factory import build_memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory

__all__ = ["LocalMemory", "Memory", "MemoryHit", "NullMemory", "SessionInfo", "build_memory", "new_session_id"]
