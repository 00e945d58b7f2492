"""``GET /memory/events`` and ``GET /memory/sessions``: what the agent's memory holds, as JSON.

These read the memory directly, so they answer while the runtime is still loading.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from kora.agent.state import AgentState
from kora.core.protocol import check_session_id


def add_memory_routes(router: APIRouter, state: AgentState) -> None:
    """Add the memory routes to ``router``, reading ``state.memory``.

    ``/memory/events?session_id=&limit=`` answers ``{"agent", "session_id", "events", "total"}`` (``limit``
    1..100000, else 400; a ``session_id`` breaking the session id rule of :mod:`kora.core.protocol`, 400;
    ``total`` counts every event of the session, or of all sessions).
    ``/memory/sessions`` answers ``{"agent", "sessions", "total"}``.
    """
    agent_name = state.settings.agent_name

    @router.get("/memory/events")
    async def memory_events(
        session_id: str | None = None, limit: Annotated[int | None, Query(ge=1, le=100_000)] = None
    ) -> dict[str, Any]:
        if session_id is not None:
            check_session_id(session_id, "'session_id'")
        events = await state.memory.list_events(session_id, limit)
        return {
            "agent": agent_name,
            "session_id": session_id,
            "events": [event.model_dump(mode="json") for event in events],
            "total": await state.memory.count_events(session_id),
        }

    @router.get("/memory/sessions")
    async def memory_sessions() -> dict[str, Any]:
        sessions = await state.memory.list_sessions()
        return {
            "agent": agent_name,
            "sessions": [session.model_dump(mode="json") for session in sessions],
            "total": len(sessions),
        }
