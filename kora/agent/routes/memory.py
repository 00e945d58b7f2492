"""The memory endpoints: what the agent's memory holds, as JSON, and erasure (docs/identity.md, "Who can read and
erase what").

* ``GET /memory/events?session_id=&limit=`` answers ``{"agent", "session_id", "events", "total"}`` (``limit``
  1..100000, else 400; a ``session_id`` breaking the session id rule of :mod:`kora.core.protocol`, 400).
* ``GET /memory/sessions`` answers ``{"agent", "sessions", "total"}``.
* ``DELETE /memory/sessions/{session_id}`` and ``DELETE /memory/users/{user_id}`` erase from every tier and copy
  the agent's memory reaches and answer ``{"removed": {"<tier>": <count>, ...}}``.

Who sees what (:meth:`kora.agent.identity.IdentityResolver.memory_reader`): the operator (``Authorization: Bearer
<AGENT_ADMIN_TOKEN>``, checked before any user JWT) every session; a verified user their own sessions, and a
session they name when it is theirs or anonymous (another user's: 403 ``session_forbidden``); an anonymous request
lists nothing, and sees a session it names only when that session is anonymous (whoever holds an anonymous
session's id may continue it anyway). Erasure needs the operator, or the verified user erasing themselves or a
session of theirs: 401 without a credential, 403 ``forbidden`` for someone else's. ``total`` counts what the
caller may see. These read the memory directly, so they answer while the runtime is still loading.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from kora.agent.identity import MemoryReader
from kora.agent.state import AgentState
from kora.core.errors import Forbidden, Unauthenticated
from kora.core.protocol import check_session_id

#: A user id in a path: what :func:`kora.agent.identity.user_id_problem` accepts is at most 256 characters.
UserId = Annotated[str, Path(min_length=1, max_length=256)]


def _may_erase(reader: MemoryReader, user_id: str | None) -> None:
    """Refuse an erasure unless ``reader`` is the operator or the verified ``user_id`` itself."""
    if reader.operator:
        return
    if reader.user_id is None:
        raise Unauthenticated("Erasing memory needs the operator's token or the user's own credential.")
    if reader.user_id != user_id:
        raise Forbidden("A user may erase only their own sessions and memories.")


def add_memory_routes(router: APIRouter, state: AgentState) -> None:
    """Add the memory routes to ``router``, reading ``state.memory`` (module docstring)."""
    agent_name = state.settings.agent_name

    @router.get("/memory/events")
    async def memory_events(
        request: Request,
        session_id: str | None = None,
        limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    ) -> dict[str, Any]:
        if session_id is not None:
            check_session_id(session_id, "'session_id'")
        reader = await state.identity.memory_reader(request.headers)
        answer: dict[str, Any] = {"agent": agent_name, "session_id": session_id, "events": [], "total": 0}
        if session_id is not None:
            if not reader.operator:
                await state.memory.check_reader(session_id, reader.user_id)
            user = None
        elif reader.operator:
            user = None
        elif reader.user_id is None:
            return answer  # anonymous: no listing across sessions
        else:
            user = reader.user_id
        events = await state.memory.list_events(session_id, limit, user)
        answer["events"] = [event.model_dump(mode="json") for event in events]
        answer["total"] = await state.memory.count_events(session_id, user)
        return answer

    @router.get("/memory/sessions")
    async def memory_sessions(request: Request) -> dict[str, Any]:
        reader = await state.identity.memory_reader(request.headers)
        if not reader.operator and reader.user_id is None:
            sessions = []
        else:
            sessions = await state.memory.list_sessions(None if reader.operator else reader.user_id)
        return {
            "agent": agent_name,
            "sessions": [session.model_dump(mode="json") for session in sessions],
            "total": len(sessions),
        }

    @router.delete("/memory/sessions/{session_id}")
    async def erase_session(request: Request, session_id: str) -> dict[str, dict[str, int]]:
        check_session_id(session_id, "'session_id'")
        reader = await state.identity.memory_reader(request.headers)
        if not reader.operator:
            _may_erase(reader, reader.user_id)
            # Only a session of the user's own: another user's is refused, and so is an anonymous one, which
            # anyone holding its id may use and which no verified user owns.
            owned = {s.session_id for s in await state.memory.list_sessions(reader.user_id)}
            if session_id not in owned:
                raise Forbidden("A user may erase only sessions they started.")
        await state.forget_session(session_id)
        return {"removed": await state.memory.erase_session(session_id)}

    @router.delete("/memory/users/{user_id}")
    async def erase_user(request: Request, user_id: UserId) -> dict[str, dict[str, int]]:
        reader = await state.identity.memory_reader(request.headers)
        _may_erase(reader, user_id)
        await state.forget_user(user_id)
        return {"removed": await state.memory.erase_user(user_id)}
