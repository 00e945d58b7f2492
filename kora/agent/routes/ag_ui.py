"""``POST /ag-ui``: one agent turn over AG-UI (a ``RunAgentInput`` body, an answer of AG-UI events as server-sent
events). What a run may ask and the events it gets: :mod:`kora.agent.ag_ui`.

The rules are the chat endpoint's (:mod:`kora.agent.routes.chat`): the run's ``threadId`` is the Kora session
(an ``X-Session-ID`` header, when sent, must name the same one; the answer carries it back in ``X-Session-ID``);
the turn's user is the request's verified identity; a session of another user is a 403 (``session_forbidden``).
What is refused before the stream starts is an HTTP error in OpenAI's error body (400, 401, 403, 503, and 409
``approval_pending`` for a session whose turn waits for approval decisions); a failure after it started is a
``RUN_ERROR`` event.

The SDK (~80 ms of imports) loads with the first run, not at start-up: ``/health`` answers before it.
"""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kora.agent.identity import open_session
from kora.agent.routes.chat import chat_turn, event_stream
from kora.agent.routes.request_route import request_route
from kora.agent.state import AgentState
from kora.core.errors import RequestError
from kora.core.protocol import SESSION_HEADER


def add_ag_ui_routes(router: APIRouter, state: AgentState) -> None:
    """Add ``POST /ag-ui`` to ``router``, serving turns with ``state``'s runtime and memory."""
    agent_name = state.settings.agent_name

    @request_route(router, "/ag-ui", methods=["POST"])
    async def ag_ui_run(request: Request) -> Response:
        from kora.agent import ag_ui

        identity = await state.identity.resolve(request.headers)
        run = ag_ui.parse_run(await request.body())
        header = request.headers.get(SESSION_HEADER)
        if header is not None and header != run.thread_id:
            raise RequestError(
                f"Invalid request: the {SESSION_HEADER} header and 'threadId' name different sessions; the run's "
                "session is its threadId.",
                code="invalid_session_id",
                param="threadId",
            )
        runtime = await state.wait_runtime()
        turn = chat_turn(run.chat, request, identity)
        with ag_ui.ag_ui_params():
            runtime.check(turn)
        session_id = await open_session(state.memory, run.thread_id, agent_name, identity)
        turn = replace(turn, session_id=session_id)
        # Refused before the stream starts, as HTTP errors: a session whose turn waits for decisions (409
        # approval_pending; a run decides nothing), then results for calls of the agent's own tools no paused turn
        # holds (not shown to the model).
        await runtime.refuse_waiting(session_id)
        runtime.refuse_unknown_decisions(turn)
        return event_stream(ag_ui.run_events(runtime, turn, run, agent_name), {SESSION_HEADER: session_id})
