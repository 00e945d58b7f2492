"""The scripted OpenAI-compatible model: Kora's only stand-in for an LLM, in tests and in the offline demo.

It ships as the ``kora model`` workload, which a ModelAPI in Scripted mode runs.

- :mod:`kora.scripted.script`: reply types, rules and the script format.
- :mod:`kora.scripted.model`: the :class:`ScriptedModel` and its ASGI app (script format documented there).
- :mod:`kora.scripted.defaults`: the answers when nothing scripted answers (facts, summaries, echo).
- :mod:`kora.scripted.embedding`: deterministic feature-hashing embeddings for ``/v1/embeddings``.
- :mod:`kora.scripted.cli`: ``kora model``, the model as a standalone server.
"""

from kora.scripted.embedding import embed
from kora.scripted.model import (
    ErrorReply,
    Match,
    Rule,
    ScriptedModel,
    ScriptError,
    TextReply,
    ToolCall,
    ToolCallReply,
    count_usage,
    create_app,
    load_script,
    load_script_file,
    reply_from_json,
    reply_to_json,
    split_chunks,
)

__all__ = [
    "ErrorReply",
    "Match",
    "Rule",
    "ScriptError",
    "ScriptedModel",
    "TextReply",
    "ToolCall",
    "ToolCallReply",
    "count_usage",
    "create_app",
    "embed",
    "load_script",
    "load_script_file",
    "reply_from_json",
    "reply_to_json",
    "split_chunks",
]
