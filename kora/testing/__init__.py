"""The scripted OpenAI-compatible model: Kora's only stand-in for an LLM in tests and the offline demo.

- :mod:`kora.testing.scripted_model`: reply types, rules, the :class:`ScriptedModel` and its ASGI app
  (script format documented there).
- :mod:`kora.testing.server`: :class:`ScriptedModelServer`, the model served over HTTP in-process.
- :mod:`kora.testing.cli`: ``kora model``, the same as a standalone server.
"""

from kora.testing.scripted_model import (
    ErrorReply,
    Match,
    Reply,
    Rule,
    ScriptedModel,
    ScriptError,
    TextReply,
    ToolCall,
    ToolCallReply,
    Usage,
    count_usage,
    create_app,
    load_script,
    load_script_file,
    reply_from_json,
    reply_to_json,
    split_chunks,
)
from kora.testing.server import ScriptedModelServer

__all__ = [
    "ErrorReply",
    "Match",
    "Reply",
    "Rule",
    "ScriptError",
    "ScriptedModel",
    "ScriptedModelServer",
    "TextReply",
    "ToolCall",
    "ToolCallReply",
    "Usage",
    "count_usage",
    "create_app",
    "load_script",
    "load_script_file",
    "reply_from_json",
    "reply_to_json",
    "split_chunks",
]
