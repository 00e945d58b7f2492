"""The agentic loop (spec: "What the service does" items 1-3, "Events" rules 1-2, "Errors", "Limits").

:class:`AgentRuntime` runs turns with a pydantic-ai ``Agent`` on the ModelAPI as an OpenAI-compatible model:
it replays the session's last ``memory_context_limit`` events as history, runs at most
``agentic_loop_max_steps`` model requests with the MCP, delegation and memory tools, and stores the turn's
new messages as events afterwards. Turns in one session run one at a time (a later turn sees the earlier
one); turns in different sessions run concurrently.

This module imports pydantic-ai, the MCP client and openai (about 2 s): the app loads it in the background
so ``/health`` answers at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import httpx
from openai import AsyncOpenAI
from pydantic_ai import (
    Agent,
    AgentRunResult,
    AgentRunResultEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UsageLimits,
    UserPromptPart,
)
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelHTTPError,
    ModelTimeoutError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets import AbstractToolset

from kora.agent.delegation import Delegation
from kora.agent.memory_tools import MEMORY_TOOL_NAMES, memory_toolset
from kora.agent.settings import AgentSettings
from kora.agent.turn import TurnDeps, TurnFailed, TurnOutcome, TurnRequest
from kora.core.events import EventType, MemoryEvent
from kora.memory import Memory
from kora.memory.history import events_to_messages, messages_to_events

if TYPE_CHECKING:
    from kora.agent.mcp_servers import McpServers

log = logging.getLogger("kora.agent")


class _RunArgs(TypedDict):
    message_history: list[ModelMessage]
    deps: TurnDeps
    usage_limits: UsageLimits
    toolsets: list[AbstractToolset[Any]]
    instructions: str | None


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
        self._http = httpx.AsyncClient(timeout=settings.delegation_timeout_seconds)
        self._openai = AsyncOpenAI(
            base_url=settings.model_api_url,
            api_key=settings.model_api_key,
            timeout=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
        )
        model = OpenAIChatModel(
            settings.model_name,
            provider=OpenAIProvider(openai_client=self._openai),
            # Many OpenAI-compatible servers reject "strict" tool schemas; plain schemas work everywhere.
            profile=OpenAIModelProfile(openai_supports_strict_tool_definition=False),
        )
        self.delegation = Delegation(
            settings.agent_name, settings.sub_agent_urls, settings.delegation_timeout_seconds, self._http
        )
        static: list[AbstractToolset[TurnDeps]] = []
        if settings.sub_agent_urls:
            static.append(self.delegation.toolset())
        memory_tools = memory_toolset(memory, settings.memory_tools, settings.memory_max_read_scope)
        if memory_tools is not None:
            static.append(memory_tools)
        self._static_toolsets = static
        # The MCP client stack costs ~40 MB and ~1 s of imports: only agents with tool servers load it.
        self.mcp: McpServers | None = None
        if settings.mcp_server_urls:
            from kora.agent.mcp_servers import McpServers

            self.mcp = McpServers(
                settings.mcp_server_urls,
                reserved=[*self.delegation.tool_agents, *MEMORY_TOOL_NAMES],
            )
        self.agent: Agent[TurnDeps, str] = Agent(
            model,
            instructions=settings.agent_instructions,
            deps_type=TurnDeps,
            name=settings.agent_name,
            toolsets=static,
        )
        self._limits = UsageLimits(request_limit=settings.agentic_loop_max_steps)
        self._locks = SessionLocks()

    async def start(self) -> None:
        """Connect the tool servers (each tried once; failures are retried in the background)."""
        if self.mcp is not None:
            await self.mcp.start()

    async def close(self) -> None:
        """Close tool-server sessions and HTTP clients."""
        if self.mcp is not None:
            await self.mcp.close()
        await self._http.aclose()
        await self._openai.close()

    def problems(self) -> list[str]:
        """Why the agent cannot fully serve now (empty when ready)."""
        return self.mcp.problems() if self.mcp is not None else []

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every tool the model can call now: ``{name, description, parameters, source}``."""
        result = []
        for toolset in self._static_toolsets:
            assert hasattr(toolset, "tools")
            for tool in toolset.tools.values():
                source = "delegation" if tool.name in self.delegation.tool_agents else "memory"
                result.append(
                    {
                        "name": tool.name,
                        "description": tool.description or "",
                        "parameters": tool.tool_def.parameters_json_schema,
                        "source": source,
                    }
                )
        return result + (self.mcp.tool_definitions() if self.mcp is not None else [])

    async def run(self, turn: TurnRequest) -> TurnOutcome:
        """Run a turn to its end and return the answer.

        Same turn as :meth:`stream`, but the model is asked for a whole (non-streamed) response: no SSE
        parsing nor event stream per turn (about a third less CPU per turn on the agent server).
        """
        async with self._locks.hold(turn.session_id):
            run_args = await self._run_args(turn)
            try:
                result = await self.agent.run(turn.prompt, **run_args)
            except UsageLimitExceeded:
                message = await self._step_limit(turn)
                return TurnOutcome(message, "length", 0, 0, self.settings.agentic_loop_max_steps)
            except (Exception, asyncio.CancelledError) as error:
                await self._turn_failed(turn, error)
            return await self._finish(turn, result)

    async def stream(self, turn: TurnRequest) -> AsyncGenerator[str | TurnOutcome]:
        """Run a turn, yielding answer text deltas as the model streams them, then the :class:`TurnOutcome`.

        Tool calls and delegation happen inside the turn and yield no text. Closing the iterator early
        (a client that went away) cancels the model request and tool calls in flight.
        """
        async with self._locks.hold(turn.session_id):
            run_args = await self._run_args(turn)
            result = None
            try:
                async with self.agent.run_stream_events(turn.prompt, **run_args) as events:
                    # Text of a later model response (after tools ran) starts a new paragraph, so a plain
                    # client never sees "Let me check." run into the answer.
                    said_text, tools_ran = False, False
                    async for event in events:
                        text = ""
                        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                            text = event.part.content
                        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                            text = event.delta.content_delta
                        elif isinstance(event, FunctionToolResultEvent):
                            tools_ran = True
                        elif isinstance(event, AgentRunResultEvent):
                            result = event.result
                        if text:
                            if said_text and tools_ran:
                                yield "\n\n"
                            said_text, tools_ran = True, False
                            yield text
            except UsageLimitExceeded:
                message = await self._step_limit(turn)
                yield message
                yield TurnOutcome(message, "length", 0, 0, self.settings.agentic_loop_max_steps)
                return
            except GeneratorExit:
                # The consumer stopped reading (aclose): the run above is already cancelled; keep the record.
                await self._store_failure(turn, "cancelled", "The turn was stopped before it finished.")
                raise
            except (Exception, asyncio.CancelledError) as error:
                await self._turn_failed(turn, error)
            assert result is not None
            yield await self._finish(turn, result)

    async def _finish(self, turn: TurnRequest, result: AgentRunResult[str]) -> TurnOutcome:
        """Store the turn's new messages as events; the outcome."""
        new_events = messages_to_events(
            result.new_messages(),
            prompt_event_type=(EventType.TASK_DELEGATION_RECEIVED if turn.delegated_by else EventType.USER_MESSAGE),
            prompt_metadata={"from_agent": turn.delegated_by} if turn.delegated_by else None,
            delegation_agents=self.delegation.tool_agents,
        )
        await self.memory.add_events(turn.session_id, new_events)
        usage = result.usage
        return TurnOutcome(result.output, "stop", usage.input_tokens, usage.output_tokens, usage.requests)

    async def _step_limit(self, turn: TurnRequest) -> str:
        """Store the spent step budget as an error event; the message that ends the turn."""
        message = (
            f"I stopped before finishing: this turn reached its limit of "
            f"{self.settings.agentic_loop_max_steps} model requests."
        )
        await self._store_failure(turn, "step_limit", message)
        return message

    async def _turn_failed(self, turn: TurnRequest, error: BaseException) -> NoReturn:
        """Store ``error`` as the turn's error event and raise :class:`TurnFailed` (cancellation re-raised)."""
        if isinstance(error, asyncio.CancelledError):
            await asyncio.shield(self._store_failure(turn, "cancelled", "The turn was cancelled."))
            raise error
        if isinstance(error, ModelTimeoutError):
            await self._fail(turn, "model_timeout", f"The model API did not answer in time: {error.message}")
        if isinstance(error, ModelHTTPError):
            await self._fail(
                turn, "model_error", f"The model API answered HTTP {error.status_code}: {_body_text(error.body)}"
            )
        if isinstance(error, ModelAPIError | UnexpectedModelBehavior):
            await self._fail(turn, "model_error", f"The model API failed: {error}")
        log.error("turn failed in session %s", turn.session_id, exc_info=error)
        await self._fail(turn, "internal_error", f"Internal error: {type(error).__name__}: {error}")

    async def _run_args(self, turn: TurnRequest) -> _RunArgs:
        """What both run paths pass to pydantic-ai besides the prompt (reads the session's history)."""
        return {
            "message_history": await self._history(turn),
            "deps": TurnDeps(turn.session_id, self.settings.agent_name, turn.delegated_by),
            "usage_limits": self._limits,
            "toolsets": self.mcp.toolsets() if self.mcp is not None else [],
            "instructions": turn.system or None,
        }

    async def _history(self, turn: TurnRequest) -> list[ModelMessage]:
        limit = self.settings.memory_context_limit
        if limit == 0:
            return []
        events = await self.memory.get_session_events(turn.session_id, limit=limit)
        if events:
            return events_to_messages(events)
        # A client that keeps the conversation itself (plain OpenAI usage) sends it every time.
        messages: list[ModelMessage] = []
        for role, text in turn.client_history[-limit:]:
            if role == "user":
                messages.append(ModelRequest(parts=[UserPromptPart(content=text)]))
            else:
                messages.append(ModelResponse(parts=[TextPart(content=text)]))
        return messages

    async def _store_failure(self, turn: TurnRequest, kind: str, message: str) -> None:
        prompt_type = EventType.TASK_DELEGATION_RECEIVED if turn.delegated_by else EventType.USER_MESSAGE
        events: list[MemoryEvent] = [
            self.memory.create_event(
                prompt_type, turn.prompt, {"from_agent": turn.delegated_by} if turn.delegated_by else None
            ),
            self.memory.create_event(EventType.ERROR, {"error_type": kind, "message": message}),
        ]
        await self.memory.add_events(turn.session_id, events)

    async def _fail(self, turn: TurnRequest, kind: str, message: str) -> NoReturn:
        await self._store_failure(turn, kind, message)
        raise TurnFailed(kind, message)


def _body_text(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
    return str(body)[:300] if body is not None else "no body"
