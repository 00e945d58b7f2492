"""The agentic loop on pydantic-ai (spec: "What the service does" items 1-3, "Limits": ``agentic_loop_max_steps``).

:class:`AgenticLoop` holds a pydantic-ai ``Agent`` on the ModelAPI as an OpenAI-compatible model, with the
MCP, delegation and memory toolsets. The runtime (:mod:`kora.agent.runtime`) sends each turn's first model
request itself; when that answer calls tools, the turn continues here: pydantic-ai runs the calls and the
following model requests, at most ``agentic_loop_max_steps`` requests in all, counting the first.

This module imports pydantic-ai and openai (about 1 s and 40 MB): the runtime loads it at start-up only for
agents that offer tools, and otherwise on the first answer that needs it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import httpx
import httpx2
from openai import AsyncOpenAI
from pydantic_ai import (
    Agent,
    AgentRunResult,
    AgentRunResultEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
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
from pydantic_ai.messages import FinishReason
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RequestUsage, RunUsage

from kora.agent.delegation import Delegation
from kora.agent.memory_tools import MEMORY_TOOL_NAMES, memory_toolset
from kora.agent.model_client import ModelCallError
from kora.agent.model_wire import JSONObject, ModelAnswer, function_tool
from kora.agent.settings import AgentSettings
from kora.agent.turn import StepLimitReached, TurnDeps, TurnRequest
from kora.core.events import EventType, MemoryEvent
from kora.memory import Memory
from kora.memory.history import messages_to_events, replay_to_messages
from kora.memory.replay import Request, Response

if TYPE_CHECKING:
    from kora.agent.mcp_servers import McpServers

#: OpenAI ``finish_reason`` -> pydantic-ai's, for an answer handed to the loop.
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
}


class _RunArgs(TypedDict):
    message_history: list[ModelMessage]
    deps: TurnDeps
    usage: RunUsage
    usage_limits: UsageLimits
    toolsets: list[AbstractToolset[Any]]
    instructions: str | None


@dataclass(frozen=True)
class LoopResult:
    """A turn finished by the loop: the answer, token usage and model requests summed over the whole turn
    (the first request included), and the turn's events, ready to store."""

    text: str
    input_tokens: int
    output_tokens: int
    requests: int
    events: list[MemoryEvent]


class AgenticLoop:
    """The pydantic-ai agent of one agent server. Create, ``await start()``, use, ``await close()``.

    ``model_http`` is the ModelAPI client's HTTP client (shared connection pool; not closed here).
    """

    def __init__(self, settings: AgentSettings, memory: Memory, model_http: httpx2.AsyncClient) -> None:
        self.settings = settings
        self.memory = memory
        self._http = httpx.AsyncClient(timeout=settings.delegation_timeout_seconds)
        openai_client = AsyncOpenAI(
            base_url=settings.model_api_url,
            api_key=settings.model_api_key,
            timeout=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
            http_client=model_http,
        )
        model = OpenAIChatModel(
            settings.model_name,
            provider=OpenAIProvider(openai_client=openai_client),
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
        self.agent_model = model
        self._limits = UsageLimits(request_limit=settings.agentic_loop_max_steps)
        self._openai_tools: list[JSONObject] = []
        self._openai_tools_key: tuple[tuple[str, str, int], ...] = ()

    async def start(self) -> None:
        """Connect the tool servers (each tried once; failures are retried in the background)."""
        if self.mcp is not None:
            await self.mcp.start()

    async def close(self) -> None:
        """Close tool-server sessions and the delegation HTTP client."""
        if self.mcp is not None:
            await self.mcp.close()
        await self._http.aclose()

    def problems(self) -> list[str]:
        """Why the loop cannot fully serve now (empty when ready)."""
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

    def openai_tools(self) -> list[JSONObject]:
        """The tools as the ``tools`` of a chat-completions request, exactly as pydantic-ai sends them (its model
        profile adapts the JSON schemas). Cached until the set of tools changes."""
        definitions = self.tool_definitions()
        key = tuple((t["name"], t["description"], id(t["parameters"])) for t in definitions)
        if key != self._openai_tools_key:
            params = self.agent_model.customize_request_parameters(
                ModelRequestParameters(
                    function_tools=[
                        ToolDefinition(
                            name=t["name"], parameters_json_schema=t["parameters"], description=t["description"]
                        )
                        for t in definitions
                    ]
                )
            )
            self._openai_tools = [
                function_tool(t.name, t.description or "", t.parameters_json_schema) for t in params.function_tools
            ]
            self._openai_tools_key = key
        return self._openai_tools

    async def run(self, turn: TurnRequest, history: Sequence[Request | Response], first: ModelAnswer) -> LoopResult:
        """Finish a turn whose first model request (``history`` then the prompt) was answered with ``first``.

        Raises :class:`StepLimitReached`, :class:`~kora.agent.model_client.ModelCallError`, or whatever a
        tool raised outside pydantic-ai's handling.
        """
        messages = self._resumed(turn, history, first)
        try:
            result = await self.agent.run(None, **self._run_args(turn, messages, first))
        except Exception as error:
            _raise_translated(error)
        return self._result(turn, messages, first, result)

    async def stream(
        self, turn: TurnRequest, history: Sequence[Request | Response], first: ModelAnswer
    ) -> AsyncGenerator[str | LoopResult]:
        """Like :meth:`run`, yielding the answer's text deltas as the model streams them, then the result.

        Text of a later model response (after tools ran) starts a new paragraph, so a plain client never sees
        "Let me check." run into the answer. Closing the iterator cancels the model request and tool calls.
        """
        messages = self._resumed(turn, history, first)
        said_text, tools_ran = bool(first.text), False
        result = None
        try:
            async with self.agent.run_stream_events(None, **self._run_args(turn, messages, first)) as events:
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
        except Exception as error:
            _raise_translated(error)
        assert result is not None
        yield self._result(turn, messages, first, result)

    def _run_args(self, turn: TurnRequest, messages: list[ModelMessage], first: ModelAnswer) -> _RunArgs:
        """What both run paths pass to pydantic-ai besides the (absent) prompt."""
        return {
            "message_history": messages,
            "deps": TurnDeps(turn.session_id, self.settings.agent_name, turn.delegated_by),
            # The first request was made outside pydantic-ai: it counts towards the step budget and the usage.
            "usage": RunUsage(requests=1, input_tokens=first.input_tokens, output_tokens=first.output_tokens),
            "usage_limits": self._limits,
            "toolsets": self.mcp.toolsets() if self.mcp is not None else [],
            "instructions": turn.system or None,
        }

    def _resumed(
        self, turn: TurnRequest, history: Sequence[Request | Response], first: ModelAnswer
    ) -> list[ModelMessage]:
        """The run's message history: the replayed history, the prompt, and the first answer (pending calls)."""
        response_parts: list[ModelResponsePart] = [TextPart(first.text)] if first.text else []
        response_parts += [ToolCallPart(c.tool_name, c.arguments, c.tool_call_id) for c in first.calls]
        prompt: list[ModelRequestPart] = [UserPromptPart(turn.prompt, timestamp=turn.started)]
        return [
            *replay_to_messages(history),
            ModelRequest(parts=prompt, timestamp=turn.started),
            ModelResponse(
                parts=response_parts,
                usage=RequestUsage(input_tokens=first.input_tokens, output_tokens=first.output_tokens),
                model_name=first.model_name or self.settings.model_name,
                timestamp=datetime.fromtimestamp(first.created, UTC) if first.created else turn.started,
                provider_name="openai",
                provider_response_id=first.response_id or None,
                finish_reason=_FINISH_REASONS.get(first.finish_reason or ""),
            ),
        ]

    def _result(
        self, turn: TurnRequest, messages: list[ModelMessage], first: ModelAnswer, result: AgentRunResult[str]
    ) -> LoopResult:
        events = messages_to_events(
            [*messages[-2:], *result.new_messages()],
            prompt_event_type=(EventType.TASK_DELEGATION_RECEIVED if turn.delegated_by else EventType.USER_MESSAGE),
            prompt_metadata={"from_agent": turn.delegated_by} if turn.delegated_by else None,
            delegation_agents=self.delegation.tool_agents,
        )
        usage = result.usage
        return LoopResult(result.output, usage.input_tokens, usage.output_tokens, usage.requests, events)


def _raise_translated(error: Exception) -> NoReturn:
    """Re-raise a pydantic-ai failure as Kora's (:class:`StepLimitReached` or :class:`ModelCallError`)."""
    if isinstance(error, UsageLimitExceeded):
        raise StepLimitReached(str(error)) from error
    if isinstance(error, ModelTimeoutError):
        raise ModelCallError("model_timeout", f"The model API did not answer in time: {error.message}") from error
    if isinstance(error, ModelHTTPError):
        raise ModelCallError(
            "model_error",
            f"The model API answered HTTP {error.status_code}: {_body_text(error.body)}",
            error.status_code,
        ) from error
    if isinstance(error, ModelAPIError | UnexpectedModelBehavior):
        raise ModelCallError("model_error", f"The model API failed: {error}") from error
    raise error


def _body_text(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
    return str(body)[:300] if body is not None else "no body"
