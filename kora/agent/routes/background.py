"""Background responses (``POST /v1/responses`` with ``background: true``): the turn runs as a task of the agent
process, the request is answered at once (``status: "queued"``), ``GET /v1/responses/{id}`` shows it
``in_progress`` until it ends and then as its turn stored it (``completed``, ``incomplete``, ``failed``), and
``POST /v1/responses/{id}/cancel`` cancels it (``cancelled``: the steps that ran are stored with a ``cancelled``
error event, as for a client that went away).

A running response is known to the replica that runs it (this registry, kept on the agent's state); once it ended,
every replica reads it from the store. Erasing its session or its user cancels it first; a response still running
when the agent stops is cancelled (and stored so) before the agent closes its memory.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kora.agent.responses_api import turn_events
from kora.agent.turn import TurnRequest
from kora.core.errors import KoraError, TurnCancelled
from kora.memory import Memory

if TYPE_CHECKING:
    from openai.types.responses import Response

    from kora.agent.responses_answers import ResponseEvents
    from kora.agent.runtime import AgentRuntime

log = logging.getLogger("kora.agent")

#: How many of a session's latest events are read to see whether a cancelled turn stored its own end.
_EVENTS_LOOKED_UP = 64


@dataclass
class _Running:
    task: asyncio.Task[None]
    events: ResponseEvents
    runtime: AgentRuntime
    turn: TurnRequest


class BackgroundResponses:
    """The background responses this process runs, by response id (each removed once its turn ended)."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._running: dict[str, _Running] = {}

    def start(self, runtime: AgentRuntime, turn: TurnRequest, events: ResponseEvents) -> Response:
        """Start ``turn`` as a task and return the response object as it is now (``queued``)."""
        if turn.response is not None:
            turn = replace(turn, response=replace(turn.response, acknowledged=True))
        task = asyncio.create_task(self._run(runtime, turn, events.id), name=f"kora-response-{events.id}")
        self._running[events.id] = _Running(task, events, runtime, turn)
        task.add_done_callback(lambda _: self._running.pop(events.id, None))
        return events.body(None, "queued")

    def running(self, response_id: str) -> Response | None:
        """The response object of ``response_id`` while its turn runs here (``in_progress``); None otherwise."""
        running = self._running.get(response_id)
        return running.events.body(None, "in_progress") if running is not None else None

    async def cancel(self, response_id: str) -> bool:
        """Cancel the turn of ``response_id`` and wait until its end is stored; False when none runs here."""
        running = self._running.get(response_id)
        if running is None:
            return False
        running.task.cancel()
        await asyncio.wait([running.task])
        turn = running.turn
        stored = await self._memory.get_session_events(turn.session_id, limit=_EVENTS_LOOKED_UP)
        if not turn_events(stored, response_id):
            # Cancelled before its turn started (not yet scheduled, or queued behind its session's lock): nothing
            # was stored, so its prompt and the cancellation are, and the response reads back as cancelled.
            await running.runtime.recorder.record(turn, [], TurnCancelled("The response was cancelled."))
        return True

    async def cancel_session(self, session_id: str) -> None:
        """Cancel every background response running here in ``session_id`` (before the session is erased, so that
        no turn of it stores anything afterwards)."""
        for response_id in [id_ for id_, running in self._running.items() if running.turn.session_id == session_id]:
            await self.cancel(response_id)

    async def cancel_user(self, user_id: str) -> None:
        """Cancel every background response running here of ``user_id``'s turns (before the user is erased)."""
        for response_id in [id_ for id_, running in self._running.items() if running.turn.user_id == user_id]:
            await self.cancel(response_id)

    async def close(self) -> None:
        """Cancel every background response running here, each awaited and its cancellation stored (shutdown)."""
        for response_id in list(self._running):
            await self.cancel(response_id)

    @staticmethod
    async def _run(runtime: AgentRuntime, turn: TurnRequest, response_id: str) -> None:
        try:
            await runtime.run(turn, checked=True)  # the route refused a session that waits
        except KoraError as failure:  # stored by the turn as its error event: the response reads back as failed
            log.info("background response %s failed: %s", response_id, failure.code)
