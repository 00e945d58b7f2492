"""The memory tools offered to the model (docs/memory.md "Tools").

``search_memory(query, level)`` is offered when ``MEMORY_TOOLS`` is ``all`` or ``read``; ``level`` is an enum
of the read scopes up to ``MEMORY_MAX_READ_SCOPE`` (``session`` < ``agent`` < ``user``; the administrators' ``store``
scope is never offered). ``save_memory(content)`` is offered for ``all`` or
``write``; attribution (agent, session, delegating parent) comes from the run context, never from arguments.
Both report failures as ``Error: ...`` text.
"""

from __future__ import annotations

from typing import get_args

from pydantic import JsonValue
from pydantic_ai import FunctionToolset, RunContext, Tool

from kora.agent.settings import ReadScope
from kora.agent.turn import TurnDeps
from kora.memory import Memory

#: Read scopes from narrowest to broadest (``session``, ``agent``, ``user``); ``search_memory`` offers those up to
#: the configured maximum.
READ_SCOPES: tuple[str, ...] = get_args(ReadScope)


def read_levels(max_scope: str) -> list[str]:
    """The levels ``search_memory`` offers for ``MEMORY_MAX_READ_SCOPE = max_scope``."""
    return list(READ_SCOPES[: READ_SCOPES.index(max_scope) + 1])


def memory_toolset(memory: Memory, tools: str | None, max_scope: str) -> FunctionToolset[TurnDeps] | None:
    """The memory tools for ``MEMORY_TOOLS = tools`` (``all``, ``read``, ``write`` or None for none)."""
    if tools is None or not memory.enabled:
        return None
    levels = read_levels(max_scope)

    async def search_memory(ctx: RunContext[TurnDeps], query: str, level: str = "session") -> str:
        if level not in levels:
            return f"Error: level must be one of {', '.join(levels)}."
        try:
            hits = await memory.search(ctx.deps.session_id, query, scope=level, limit=5, user_id=ctx.deps.user_id)
        except ValueError as error:
            return f"Error: {error}"
        if not hits:
            return "No matching memories."
        return "\n".join(f"- ({hit.score:.2f}) {hit.text}" for hit in hits)

    async def save_memory(ctx: RunContext[TurnDeps], content: str) -> str:
        if not content.strip():
            return "Error: content is empty."
        attribution: dict[str, JsonValue] = {"agent": ctx.deps.agent_name, "session_id": ctx.deps.session_id}
        if ctx.deps.delegated_by:
            attribution["delegated_by"] = ctx.deps.delegated_by
        if ctx.deps.user_id:
            attribution["user_id"] = ctx.deps.user_id
        try:
            fact_id = await memory.save(
                ctx.deps.session_id, content, {"attribution": attribution}, user_id=ctx.deps.user_id
            )
        except ValueError as error:
            return f"Error: {error}"
        return f"Saved ({fact_id})."

    offered: list[Tool[TurnDeps]] = []
    if tools in {"all", "read"}:
        offered.append(
            Tool.from_schema(
                search_memory,
                name="search_memory",
                description="Search what was said or saved earlier, best matches first.",
                json_schema={
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look for."},
                        "level": {"type": "string", "enum": levels, "default": "session"},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
                takes_ctx=True,
            )
        )
    if tools in {"all", "write"}:
        offered.append(
            Tool.from_schema(
                save_memory,
                name="save_memory",
                description="Remember a fact for later turns.",
                json_schema={
                    "type": "object",
                    "properties": {"content": {"type": "string", "description": "The fact to remember."}},
                    "required": ["content"],
                    "additionalProperties": False,
                },
                takes_ctx=True,
            )
        )
    return FunctionToolset(offered)
