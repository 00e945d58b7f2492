"""Agent-side memory (docs/memory.md).

``Memory`` is the interface; ``LocalMemory`` (bounded, in-process, the default) and ``NullMemory``
(``MEMORY_ENABLED=false``) implement it; ``build_memory`` picks one from the settings. ``kora.memory.replay``
decides which stored events a model sees again; the agent renders that as model messages
(``kora.agent.history``). This package imports no model library.

Other packages import from this package's face, never from its modules, except :mod:`kora.memory.wire`: the
HTTP contract between :class:`~kora.memory.remote.RemoteMemory` and the memory service, which the service
imports whole.
"""

from kora.memory.base import (
    MEMORY_UNAVAILABLE,
    SESSION_FORBIDDEN,
    Memory,
    SessionInfo,
    TurnContext,
    check_owner,
    new_session_id,
)
from kora.memory.factory import build_memory
from kora.memory.local import LocalMemory
from kora.memory.null import NullMemory
from kora.memory.replay import (
    PROMPT_EVENTS,
    Prompt,
    Request,
    Response,
    ResponseToolCall,
    ToolReturn,
    as_text,
    replay_messages,
)
from kora.memory.text import event_text, query_terms, words

__all__ = [
    "MEMORY_UNAVAILABLE",
    "PROMPT_EVENTS",
    "SESSION_FORBIDDEN",
    "LocalMemory",
    "Memory",
    "NullMemory",
    "Prompt",
    "Request",
    "Response",
    "ResponseToolCall",
    "SessionInfo",
    "ToolReturn",
    "TurnContext",
    "as_text",
    "build_memory",
    "check_owner",
    "event_text",
    "new_session_id",
    "query_terms",
    "replay_messages",
    "words",
]
