"""``GET /tools``: every tool the agent's model can call now (waits for the runtime; 503 if it cannot start)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from kora.agent.state import AgentState


def add_tool_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``/tools`` to ``router``: ``{"agent": name, "tools": [{name, description, parameters, source}, ...]}``."""
    agent_name = state.settings.agent_name

    @router.get("/tools")
    async def tools() -> dict[str, Any]:
        runtime = await state.wait_runtime()
        return {"agent": agent_name, "tools": runtime.tool_definitions()}
