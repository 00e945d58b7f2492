"""Turns of one agent (spec: "What the service does" items 1-3, "Events" rules 1-2, "Errors", "Limits").

:class:`AgentRuntime` runs a turn in two stages:

1. **The first model request, sent directly.** The session's last ``memory_context_limit`` events are
   replayed (:func:`kora.memory.replay.replay_messages`) and sent with the agent's instructions and tools to
   the ModelAPI (:class:`~kora.agent.model_client.ModelClient`), whole or streamed. When the model answers
   with text and calls no tool, which is most turns, that answer ends the turn: it is stored as
   ``user_message`` + ``agent_response`` and returned.
2. **The agentic loop**, when the answer calls tools (or is empty): the turn continues in pydantic-ai
   (:class:`~kora.agent.loop.AgenticLoop`) from that answer; the loop runs the calls and the following model
   requests, within ``agentic_loop_max_steps`` requests in all.

Both stages build the same model request for the same history (``tests/unit/test_model_wire.py`` compares
them), and the stored events and outcome of a turn do not depend on which stage ended it. Why two stages: a
pydantic-ai run costs ~2.5 ms of CPU before any I/O, the ``openai`` client ~1 ms more per request, and
importing both ~40 MB; the direct request costs ~0.3 ms and nothing to import (``bench/README.md``).

The loop (pydantic-ai, openai, the MCP client) loads at :meth:`AgentRuntime.start` for agents that offer
tools, since the first request must list them, and otherwise on the first answer that needs it.

Turns in one session run one at a time (a later turn sees the earlier one); turns in different sessions run
concurrently.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from kora.agent.model_client import ModelCallError, ModelClient
from kora.agent.model_wire import JSONObject, ModelAnswer, StreamedAnswer, chat_messages, request_body
from kora.agent.settings import AgentSettings
from kora.agent.turn import StepLimitReached, TurnFailed, TurnOutcome, TurnRequest
from kora.core.events import EventType, MemoryEvent
from kora.memory import Memory
from kora.memory.replay import Prompt, Request, Response, replay_messages

if TYPE_CHECKING:
    from kora.agent.loop import AgenticLoop, LoopResult

log = logging.getLogger("kora.agent")


class SessionLocks:
    """One asyncio lock per session id, dropped when no turn holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lock for the duration of the ``async with`` block."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


class AgentRuntime:
    """Runs turns for one agent. Create, ``await start()``, use, ``await close()``.

    Errors: :meth:`run` and :meth:`stream` raise :class:`TurnFailed` after storing an ``error`` event.
    A spent step budget is not an error of the request: the turn ends with ``finish_reason = "length"`` and a
    message saying so (also stored as an ``error`` event).
    """

    def __init__(self, settings: AgentSettings, memory: Memory) -> None:
        self.settings = settings
        self.memory = memory
        self.model = ModelClient(
            settings.model_api_url,
            settings.model_api_key,
            timeout=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
        )
        self._loop: AgenticLoop | None = None
        self._loop_lock = asyncio.Lock()
        self._locks = SessionLocks()

    @property
    def offers_tools(self) -> bool:
        """Whether the agent offers the model any tool (MCP servers, sub-agents or memory tools)."""
        settings = self.settings
        return bool(settings.mcp_server_urls or settings.sub_agent_urls or settings.memory_tools)

    async def start(self) -> None:
        """Load the agentic loop if the agent offers tools, and connect its tool servers (each tried once;
        failures are retried in the background)."""
        if self.offers_tools:
            await self.agentic_loop()

    async def close(self) -> None:
        """Close tool-server sessions and HTTP clients."""
        if self._loop is not None:
            await self._loop.close()
        await self.model.aclose()

    async def agentic_loop(self) -> AgenticLoop:
        """The agentic loop, imported (in a thread, ~1 s) and started on first use."""
        async with self._loop_lock:
            if self._loop is None:
                module = await asyncio.to_thread(importlib.import_module, "kora.agent.loop")
                loop: AgenticLoop = module.AgenticLoop(self.settings, self.memory, self.model.http)
                await loop.start()
                self._loop = loop
            return self._loop

    def problems(self) -> list[str]:
        """Why the agent cannot fully serve now (empty when ready)."""
        return self._loop.problems() if self._loop is not None else []

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every tool the model can call now: ``{name, description, parameters, source}``."""
        return self._loop.tool_definitions() if self._loop is not None else []

    async def run(self, turn: TurnRequest) -> TurnOutcome:
        """Run a turn to its end and return the answer (the model is asked for whole responses)."""
        async with self._locks.hold(turn.session_id):
            try:
                history = await self._history(turn)
                first = await self.model.complete(self._first_request(turn, history, stream=False))
                if first.is_final_text:
                    return await self._answered(turn, first)
                loop = await self.agentic_loop()
                return await self._finish(turn, await loop.run(turn, history, first))
            except (Exception, asyncio.CancelledError) as error:
                return await self._failed(turn, error)

    async def stream(self, turn: TurnRequest) -> AsyncGenerator[str | TurnOutcome]:
        """Run a turn, yielding answer text deltas as the model streams them, then the :class:`TurnOutcome`.

        Tool calls and delegation happen inside the turn and yield no text. Closing the iterator early
        (a client that went away) cancels the model request and tool calls in flight.
        """
        async with self._locks.hold(turn.session_id):
            try:
                history = await self._history(turn)
                streamed = StreamedAnswer()
                async with self.model.stream(self._first_request(turn, history, stream=True)) as chunks:
                    async for chunk in chunks:
                        if text := streamed.add(chunk):
                            yield text
                first = streamed.finish()
                if first.is_final_text:
                    yield await self._answered(turn, first)
                    return
                loop = await self.agentic_loop()
                async for item in loop.stream(turn, history, first):
                    yield item if isinstance(item, str) else await self._finish(turn, item)
            except GeneratorExit:
                # The consumer stopped reading (aclose): the request above is already cancelled; keep the record.
                await self._store_failure(turn, "cancelled", "The turn was stopped before it finished.")
                raise
            except (Exception, asyncio.CancelledError) as error:
                outcome = await self._failed(turn, error)
                yield outcome.text
                yield outcome

    def _first_request(self, turn: TurnRequest, history: list[Request | Response], *, stream: bool) -> JSONObject:
        tools = self._loop.openai_tools() if self._loop is not None else []
        messages = chat_messages([self.settings.agent_instructions, turn.system], history, turn.prompt)
        return request_body(self.settings.model_name, messages, tools, stream=stream)

    async def _history(self, turn: TurnRequest) -> list[Request | Response]:
        """What the model is shown before the prompt: the session's last events, else the client's history."""
        limit = self.settings.memory_context_limit
        if limit == 0:
            return []
        events = await self.memory.get_session_events(turn.session_id, limit=limit)
        if events:
            return replay_messages(events)
        # A client that keeps the conversation itself (plain OpenAI usage) sends it every time.
        return [
            Request([Prompt(text, turn.started)], turn.started)
            if role == "user"
            else Response(turn.started, texts=[text])
            for role, text in turn.client_history[-limit:]
        ]

    async def _answered(self, turn: TurnRequest, answer: ModelAnswer) -> TurnOutcome:
        """Store a turn the first answer ended (prompt and answer events); the outcome."""
        await self.memory.add_events(
            turn.session_id, [self._prompt_event(turn), self.memory.create_event(EventType.AGENT_RESPONSE, answer.text)]
        )
        return TurnOutcome(answer.text, "stop", answer.input_tokens, answer.output_tokens, 1)

    async def _finish(self, turn: TurnRequest, result: LoopResult) -> TurnOutcome:
        """Store the events of a turn the loop ended; the outcome."""
        await self.memory.add_events(turn.session_id, result.events)
        return TurnOutcome(result.text, "stop", result.input_tokens, result.output_tokens, result.requests)

    async def _failed(self, turn: TurnRequest, error: BaseException) -> TurnOutcome:
        """Store ``error`` as the turn's ``error`` event; the outcome of a spent step budget, else raise
        :class:`TurnFailed` (cancellation is re-raised)."""
        if isinstance(error, StepLimitReached):
            message = (
                f"I stopped before finishing: this turn reached its limit of "
                f"{self.settings.agentic_loop_max_steps} model requests."
            )
            await self._store_failure(turn, "step_limit", message)
            return TurnOutcome(message, "length", 0, 0, self.settings.agentic_loop_max_steps)
        if isinstance(error, asyncio.CancelledError):
            await asyncio.shield(self._store_failure(turn, "cancelled", "The turn was cancelled."))
            raise error
        if isinstance(error, ModelCallError):
            await self._fail(turn, error.kind, error.message)
        log.error("turn failed in session %s", turn.session_id, exc_info=error)
        await self._fail(turn, "internal_error", f"Internal error: {type(error).__name__}: {error}")

    @staticmethod
    def _prompt_event(turn: TurnRequest) -> MemoryEvent:
        """The turn's prompt as an event: ``user_message``, or ``task_delegation_received`` from a parent."""
        if turn.delegated_by:
            return MemoryEvent(
                event_type=EventType.TASK_DELEGATION_RECEIVED,
                content=turn.prompt,
                metadata={"from_agent": turn.delegated_by},
                timestamp=turn.started,
            )
        return MemoryEvent(event_type=EventType.USER_MESSAGE, content=turn.prompt, timestamp=turn.started)

    async def _store_failure(self, turn: TurnRequest, kind: str, message: str) -> None:
        error = self.memory.create_event(EventType.ERROR, {"error_type": kind, "message": message})
        await self.memory.add_events(turn.session_id, [self._prompt_event(turn), error])

    async def _fail(self, turn: TurnRequest, kind: str, message: str) -> NoReturn:
        await self._store_failure(turn, kind, message)
        raise TurnFailed(kind, message)
