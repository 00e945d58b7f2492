"""The approval endpoints, for consoles and operators (docs/approvals.md).

* ``GET /approvals`` (``?session_id=`` filters) answers ``{"agent", "approvals": [...], "total", "local_only"}``:
  the tool calls waiting for a decision (:meth:`kora.agent.approvals.PendingApproval.to_json`), oldest first. With
  the shared task store, those of every replica; ``local_only`` is true when its database could not be reached and
  the list holds only the calls this process holds (a warning is logged).
* ``POST /approvals/{id}`` with a decision object ``{"decision": "approve" | "reject", "reason"?, "arguments"?}``
  records it and, when it was the paused turn's last undecided call, resumes the turn and waits for it: answers
  ``{"approval": {...}, "turn": null | {"finish_reason", "text", "approvals": [...]}}`` (``turn`` null while other
  calls of the same turn still wait; its ``approvals`` are the calls a resumed turn paused at next).

Who sees and decides what (:meth:`kora.agent.identity.IdentityResolver.memory_reader`, as for ``/memory``): the
operator (``AGENT_ADMIN_TOKEN``) every call; a verified user the calls of their own turns; an anonymous request
the calls of anonymous turns in the session it names (``GET``), or by id (``POST``, as whoever holds an anonymous
session's id may continue it). Refusals, OpenAI's error body, nothing changed: 400 for a bad decision, 404 for an
unknown id, 403 (``approval_forbidden``) for another user's call, 409 (``approval_decided``) for a call already
decided or expired.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request

from kora.agent.approval_calls import Decision, PendingApproval
from kora.agent.identity import MemoryReader
from kora.agent.openai_api import decode_body
from kora.agent.state import AgentState
from kora.agent.turn import TurnOutcome
from kora.core.errors import JournalUnavailable
from kora.core.protocol import check_session_id

log = logging.getLogger("kora.agent")


def _visible(reader: MemoryReader, approval: PendingApproval, session_id: str | None) -> bool:
    if reader.operator:
        return True
    if reader.user_id is not None:
        return approval.user_id == reader.user_id
    return session_id is not None and approval.user_id is None


def turn_json(outcome: TurnOutcome) -> dict[str, Any]:
    """A resumed turn's outcome as ``POST /approvals/{id}`` answers it."""
    return {
        "finish_reason": outcome.finish_reason,
        "text": outcome.text,
        "approvals": [approval.to_json() for approval in outcome.approvals],
    }


def add_approval_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``/approvals`` and ``/approvals/{id}`` to ``router`` (module docstring)."""
    agent_name = state.settings.agent_name

    @router.get("/approvals")
    async def list_approvals(request: Request, session_id: str | None = None) -> dict[str, Any]:
        if session_id is not None:
            check_session_id(session_id, "'session_id'")
        reader = await state.identity.memory_reader(request.headers)
        runtime = await state.wait_runtime()
        local_only = False
        try:
            await runtime.sync_paused()  # the shared task store: other replicas' calls too
        except JournalUnavailable as error:
            log.warning("GET /approvals lists only the calls this process holds: %s", error)
            local_only = True
        pending = [a for a in runtime.approvals.pending(session_id) if _visible(reader, a, session_id)]
        approvals = [a.to_json() for a in pending]
        return {"agent": agent_name, "approvals": approvals, "total": len(pending), "local_only": local_only}

    @router.post("/approvals/{approval_id}")
    async def decide_approval(request: Request, approval_id: str) -> dict[str, Any]:
        reader = await state.identity.memory_reader(request.headers)
        decision = Decision.parse(decode_body(await request.body()), "the request body")
        runtime = await state.wait_runtime()
        if runtime.approvals.paused_turn(approval_id) is None:
            await runtime.sync_paused()  # the shared task store: a call another replica paused
        paused = runtime.decide(approval_id, decision, reader.user_id, by="operator" if reader.operator else "")
        approval = next(a for a in paused.approvals if a.id == approval_id)
        answer: dict[str, Any] = {"approval": approval.to_json(), "turn": None}
        if paused.decided:
            # The turn goes on whether or not this request waits for it to the end.
            resumed = asyncio.ensure_future(runtime.resume(paused, notify=True))
            outcome = await asyncio.shield(resumed)
            if outcome is not None:
                answer["turn"] = turn_json(outcome)
        return answer
