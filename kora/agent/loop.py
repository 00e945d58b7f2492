"""The agentic loop on pydantic-ai: tools, delegation and memory tools, at most ``AGENTIC_LOOP_MAX_STEPS`` requests.

:class:`AgenticLoop` holds a pydantic-ai ``Agent`` on the agent's :class:`~kora.agent.chat_model.KoraChatModel`
with the MCP, delegation and memory toolsets. The runtime (:mod:`kora.agent.runtime`) usually sends a turn's first
model request itself, through the same model object; when that answer calls tools, the turn continues here:
pydantic-ai runs the calls and the following model requests, at most ``agentic_loop_max_steps`` requests in all,
counting the first. A turn may also run here from its start (the runtime's ``direct_first_request=False``).

pydantic-ai's failures become Kora's (:func:`turn_error`): a spent step budget is
:class:`~kora.core.errors.StepLimitReached`, a model that misbehaves past pydantic-ai's retries a
:class:`~kora.core.errors.ModelError`; the model adapter's own errors pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict, cast

import httpx
from pydantic_ai import (
    Agent,
    AgentRunResult,
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UsageLimits,
    capture_run_messages,
)
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import InstructionPart, ModelResponse, repair_messages
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset, ExternalToolset
from pydantic_ai.usage import RunUsage

from kora.agent.approvals import AGENTS_SOURCE, ApprovalPolicy
from kora.agent.budget import TurnBudget
from kora.agent.budget_guard import BudgetGuard
from kora.agent.chat_model import KoraChatModel
from kora.agent.delegation import Delegation
from kora.agent.memory_tools import memory_toolset
from kora.agent.settings import AgentSettings
from kora.agent.structured import check_schema, output_spec, response_format_body
from kora.agent.telemetry import AgentTracing
from kora.agent.turn import ClientCall, ToolCalled, ToolReturned, ToolStep, TurnDeps, TurnRequest
from kora.core.errors import KoraError, ModelError, RequestError, StepLimitReached, internal_error
from kora.core.net import POOL_KEEPALIVE_SECONDS
from kora.memory import Memory
from kora.memory.wire import MEMORY_TOOL_NAMES

if TYPE_CHECKING:
    from kora.agent.mcp_servers import McpServers


class _RunArgs(TypedDict):
    message_history: list[ModelMessage]
    deps: TurnDeps
    usage: RunUsage
    usage_limits: UsageLimits
    toolsets: list[AbstractToolset[Any]]
    instructions: str | None
    model_settings: ModelSettings | Callable[[RunContext[TurnDeps]], ModelSettings] | None
    deferred_tool_results: DeferredToolResults | None


@dataclass(frozen=True)
class LoopResult:
    """A turn finished by the loop: the answer, the usage summed over the whole turn (the first request
    included), the messages the loop added (responses and tool returns, in order), the client tool calls it
    ended with (if any), the last response's ``finish_reason`` (pydantic-ai's) and the calls that wait for a
    person's approval (``approvals``: the turn paused, :mod:`kora.agent.approvals`)."""

    text: str
    usage: RunUsage
    new_messages: list[ModelMessage]
    calls: tuple[ClientCall, ...] = ()
    finish_reason: str | None = None
    approvals: tuple[ClientCall, ...] = ()


def text_delta(event: object) -> str:
    """The answer text a streamed event adds (``""`` for any other event)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def steps_usage(usage: RunUsage, steps: Sequence[ModelMessage]) -> RunUsage:
    """``usage`` (what the turn spent before the loop) plus the requests and tokens of the model responses in
    ``steps``: what a turn that stopped in the loop really spent."""
    total = RunUsage(requests=usage.requests, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
    for message in steps:
        if isinstance(message, ModelResponse):
            total.requests += 1
            total.input_tokens += message.usage.input_tokens
            total.output_tokens += message.usage.output_tokens
    return total


@contextmanager
def _recording_steps(history: Sequence[ModelMessage], steps: list[ModelMessage]) -> Iterator[None]:
    """Fill ``steps`` with the messages the run inside the block added after ``history``, when the block ends
    however it ends: model responses cut before they were complete (``state == "interrupted"``: a stream cut or
    cancelled mid-answer) are left out, being no answer; tool returns are kept with their outcome.

    ``history`` is already repaired as pydantic-ai repairs it (:func:`repair_messages` is idempotent), so the
    run's messages start at ``len(history)``.
    """
    with capture_run_messages() as captured:
        try:
            yield
        finally:
            steps[:] = [
                message
                for message in captured[len(history) :]
                if not (isinstance(message, ModelResponse) and message.state == "interrupted")
            ]


#: The code of a structured answer that still did not validate after pydantic-ai's output retries.
INVALID_MODEL_OUTPUT = "invalid_model_output"


def turn_error(error: BaseException) -> KoraError:
    """A failure of a turn as Kora reports it: Kora's errors as they are, pydantic-ai's translated, anything
    else an internal error. An answer that failed output validation past the retries is a
    :class:`~kora.core.errors.ModelError` with code ``invalid_model_output``."""
    if isinstance(error, UsageLimitExceeded):
        return StepLimitReached(str(error))
    if isinstance(error, UnexpectedModelBehavior) and str(error).startswith("Exceeded maximum output retries"):
        return ModelError(
            f"The model's answer did not match the requested response_format: {error}", code=INVALID_MODEL_OUTPUT
        )
    if isinstance(error, UnexpectedModelBehavior):
        return ModelError(f"The model API failed: {error}")
    return internal_error(error)


class AgenticLoop:
    """The pydantic-ai agent of one agent server. Create, ``await start()``, use, ``await close()``.

    ``model`` is the agent's model adapter (shared with the runtime's first request; not closed here); ``tracing``
    adds the step, model and tool spans (:mod:`kora.agent.telemetry`; default: none, tool metrics only).
    """

    def __init__(
        self, settings: AgentSettings, memory: Memory, model: KoraChatModel, tracing: AgentTracing | None = None
    ) -> None:
        self.settings = settings
        # Only delegation sends with this client: an agent without sub-agents builds none (nor imports httpcore and
        # h2, nor loads an SSL context's CA bundle: ~3 MB of RSS and ~80 ms of start-up).
        self._http = (
            httpx.AsyncClient(
                timeout=settings.delegation_timeout_seconds,
                limits=httpx.Limits(keepalive_expiry=POOL_KEEPALIVE_SECONDS),
            )
            if settings.sub_agent_urls
            else None
        )
        self.delegation = Delegation(settings, self._http)
        self.approval = ApprovalPolicy.from_setting(settings.tool_approval_required)
        static: list[AbstractToolset[TurnDeps]] = []
        agent_toolsets: list[AbstractToolset[TurnDeps]] = []
        if settings.sub_agent_urls:
            static.append(self.delegation.toolset())
            agent_toolsets.append(self._approved(static[-1], self.delegation.tool_agents))
        memory_tools = memory_toolset(memory, settings.memory_tools, settings.memory_max_read_scope)
        if memory_tools is not None:
            static.append(memory_tools)
            agent_toolsets.append(memory_tools)
        self._static_toolsets = static
        # The MCP client stack costs ~40 MB and ~1 s of imports: only agents with tool servers load it.
        self.mcp: McpServers | None = None
        if settings.mcp_server_urls:
            from kora.agent.mcp_servers import McpServers

            self.mcp = McpServers(
                settings.mcp_server_urls,
                reserved=[*self.delegation.tool_agents, *MEMORY_TOOL_NAMES],
                approval=self.approval,
                call_timeout=settings.mcp_call_timeout_seconds,
            )
        self.agent: Agent[TurnDeps, str] = Agent(
            model,
            instructions=settings.agent_instructions,
            deps_type=TurnDeps,
            name=settings.agent_name,
            toolsets=agent_toolsets,
            capabilities=[
                BudgetGuard(),
                *(tracing or AgentTracing(settings.agent_name, settings.model_name)).capabilities(),
            ],
        )
        self._limits = UsageLimits(request_limit=settings.agentic_loop_max_steps)
        self._parameters = ModelRequestParameters()
        self._parameters_key: tuple[tuple[str, str, int], ...] | None = None
        self._cards: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect the tool servers (each tried once; failures are retried in the background) and start reading
        the peers' cards in the background (their descriptions complete the delegation tools')."""
        if self.mcp is not None:
            await self.mcp.start()
        if self.settings.sub_agent_urls:
            self._cards = asyncio.create_task(self.delegation.learn_cards(), name="kora-peer-cards")

    async def close(self) -> None:
        """Stop reading cards; close tool-server sessions and the delegation HTTP client (if any)."""
        if self._cards is not None:
            self._cards.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cards
        if self.mcp is not None:
            await self.mcp.close()
        if self._http is not None:
            await self._http.aclose()

    def _approved(self, toolset: AbstractToolset[TurnDeps], peers: dict[str, str]) -> AbstractToolset[TurnDeps]:
        """The delegation ``toolset``, its calls needing approval where the policy names ``agents/<peer>``
        (``peers``: tool name to peer name); as it is when no pattern could match."""
        policy = self.approval
        if not any(policy.requires(AGENTS_SOURCE, peer) for peer in peers.values()):
            return toolset
        return ApprovalRequiredToolset(
            toolset, approval_required_func=lambda _, tool, __: policy.requires(AGENTS_SOURCE, peers[tool.name])
        )

    def approval_target(self, tool_name: str) -> str:
        """A tool as approval patterns name it: ``agents/<peer>`` for a delegation, ``<server>/<tool>`` for an MCP
        tool (its own name), else its name."""
        if peer := self.delegation.tool_agents.get(tool_name):
            return f"{AGENTS_SOURCE}/{peer}"
        source = self.mcp.source_of(tool_name) if self.mcp is not None else None
        return f"{source[0]}/{source[1]}" if source is not None else tool_name

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

    def check(self, turn: TurnRequest) -> None:
        """Refuse, before the turn does anything, what the agent's tools make impossible: a client tool named like
        one of the agent's own tools or like another client tool, ``tool_choice`` ``required`` with no tool at
        all, a named ``tool_choice`` that is no tool, or a ``response_format`` schema that is no JSON schema.
        Raises :class:`~kora.core.errors.RequestError` (400)."""
        if turn.output is not None:
            check_schema(turn.output.schema, "response_format.json_schema.schema")
        own = {t["name"] for t in self.tool_definitions()}
        seen: set[str] = set()
        for index, tool in enumerate(turn.client_tools):
            param = f"tools[{index}].function.name"
            if tool.name in own:
                raise RequestError(
                    f"Invalid value: the client tool '{tool.name}' has the name of one of the agent's own tools "
                    "(GET /tools lists them); rename it.",
                    code="invalid_value",
                    param=param,
                )
            if tool.name in seen:
                raise RequestError(
                    f"Invalid value: two tools are named '{tool.name}'.", code="invalid_value", param=param
                )
            seen.add(tool.name)
        choice = turn.tool_choice
        if choice == "required" and not (own or seen):
            raise RequestError(
                "Invalid value: 'tool_choice' is 'required' but neither the request nor the agent offers a tool.",
                code="invalid_value",
                param="tool_choice",
            )
        if choice not in (None, "auto", "none", "required") and choice not in own | seen:
            raise RequestError(
                f"Invalid value: 'tool_choice' names '{choice}', which is no tool of the request or the agent.",
                code="invalid_value",
                param="tool_choice",
            )

    def request_parameters(self, turn: TurnRequest) -> ModelRequestParameters:
        """What a turn's first model request offers the model, as the ``Agent`` would: the instructions
        (the agent's, then the turn's) and every tool. Without per-turn instructions the same object is
        returned until the set of tools changes (the model adapter then reuses its preparation)."""
        definitions = self.tool_definitions()
        key = tuple((t["name"], t["description"], id(t["parameters"])) for t in definitions)
        if key != self._parameters_key:
            tools = [
                ToolDefinition(name=t["name"], parameters_json_schema=t["parameters"], description=t["description"])
                for t in definitions
            ]
            self._parameters = self._with_instructions(ModelRequestParameters(function_tools=tools), "")
            self._parameters_key = key
        parameters = self._parameters
        if turn.client_tools:  # after the agent's own, as the Agent lists the run's ExternalToolset
            parameters = replace(parameters, function_tools=[*parameters.function_tools, *client_definitions(turn)])
        return self._with_instructions(parameters, turn.system) if turn.system else parameters

    def _with_instructions(self, parameters: ModelRequestParameters, system: str) -> ModelRequestParameters:
        texts = (self.settings.agent_instructions, system)
        parts = [InstructionPart(text) for text in texts if text]
        return replace(parameters, instruction_parts=parts)

    async def run(
        self,
        turn: TurnRequest,
        messages: list[ModelMessage],
        usage: RunUsage,
        steps: list[ModelMessage],
        budget: TurnBudget | None = None,
        decided: DeferredToolResults | None = None,
    ) -> LoopResult:
        """Continue a turn from ``messages``, which end with its prompt request (the loop sends it) or with the
        first answer's tool calls (the loop runs them). ``usage`` is what the turn has spent so far; ``budget``
        bounds it (checked before each model request and tool call: :class:`~kora.agent.budget_guard.BudgetGuard`).
        ``decided``: a paused turn resumes, the decisions on its calls given (``messages`` end with them).

        ``steps`` is filled with the messages of the steps that ran (model responses, tool returns) however the
        run ends, so a turn that fails or is cancelled can still store them (every step that ran is kept).

        Raises :class:`~kora.core.errors.KoraError` (see :func:`turn_error`).
        """
        history = repair_messages(messages, repair_last_response=False)
        with _recording_steps(history, steps):
            try:
                result = await self.agent.run(
                    None,
                    output_type=output_spec(turn, deferrable=bool(self.approval)),
                    **self._run_args(turn, history, usage, budget, decided),
                )
            except Exception as error:
                raise turn_error(error) from error
        return self._result(result)

    async def stream(
        self,
        turn: TurnRequest,
        messages: list[ModelMessage],
        usage: RunUsage,
        steps: list[ModelMessage],
        budget: TurnBudget | None = None,
        decided: DeferredToolResults | None = None,
        *,
        said_text: bool,
        tool_steps: bool = False,
    ) -> AsyncGenerator[str | ToolStep | LoopResult]:
        """Like :meth:`run`, yielding the answer's text deltas as the model streams them, then the result; with
        ``tool_steps``, also each call of the agent's own tools as it starts (:class:`ToolCalled`) and its
        result (:class:`ToolReturned`).

        Text of a later model response (after tools ran) starts a new paragraph, so a plain client never sees
        "Let me check." run into the answer (``said_text``: the turn already streamed text). Closing the
        iterator cancels the model request and tool calls; ``steps`` then holds the steps that ran.
        """
        history = repair_messages(messages, repair_last_response=False)
        with _recording_steps(history, steps):
            stream = self._stream(turn, history, usage, budget, decided, said_text=said_text, tool_steps=tool_steps)
            async with aclosing(stream) as items:
                async for item in items:
                    yield item

    async def _stream(
        self,
        turn: TurnRequest,
        messages: list[ModelMessage],
        usage: RunUsage,
        budget: TurnBudget | None,
        decided: DeferredToolResults | None,
        *,
        said_text: bool,
        tool_steps: bool,
    ) -> AsyncGenerator[str | ToolStep | LoopResult]:
        tools_ran = False
        result = None
        client = {tool.name for tool in turn.client_tools}
        try:
            run_args = self._run_args(turn, messages, usage, budget, decided)
            output = output_spec(turn, deferrable=bool(self.approval))
            async with self.agent.run_stream_events(None, output_type=output, **run_args) as events:
                async for event in events:
                    text = text_delta(event)
                    if isinstance(event, FunctionToolResultEvent):
                        tools_ran = True
                        if tool_steps and event.part.tool_name not in client:
                            yield tool_returned(event)
                    elif isinstance(event, AgentRunResultEvent):
                        result = event.result
                    elif tool_steps and isinstance(event, FunctionToolCallEvent) and event.part.tool_name not in client:
                        part = event.part
                        yield ToolCalled(part.tool_call_id, part.tool_name, part.args_as_json_str())
                    if text:
                        if said_text and tools_ran:
                            yield "\n\n"
                        said_text, tools_ran = True, False
                        yield text
        except Exception as error:
            raise turn_error(error) from error
        assert result is not None
        yield self._result(result)

    def _run_args(
        self,
        turn: TurnRequest,
        messages: Sequence[ModelMessage],
        usage: RunUsage,
        budget: TurnBudget | None,
        decided: DeferredToolResults | None = None,
    ) -> _RunArgs:
        """What both run paths pass to pydantic-ai besides the (absent) prompt."""
        return {
            "message_history": list(messages),
            "deps": TurnDeps(
                session_id=turn.session_id,
                agent_name=self.settings.agent_name,
                delegated_by=turn.delegated_by,
                user_id=turn.user_id,
                credential=turn.credential,
                budget=budget,
            ),
            # A copy: pydantic-ai adds to the usage it is given, and the caller's stays what was spent before the
            # loop (steps_usage adds the loop's steps to it when a turn stops short).
            "usage": copy.copy(usage),
            "usage_limits": self._limits,
            "toolsets": self._toolsets(turn),
            "instructions": turn.system or None,
            "model_settings": turn_settings(turn),
            "deferred_tool_results": decided,
        }

    def _toolsets(self, turn: TurnRequest) -> list[AbstractToolset[Any]]:
        """The turn's toolsets besides the agent's static ones: the MCP servers' and the client's tools (run by
        the client: pydantic-ai ends the run with :class:`DeferredToolRequests` when the model calls one)."""
        toolsets: list[AbstractToolset[Any]] = self.mcp.toolsets() if self.mcp is not None else []
        if turn.client_tools:
            toolsets = [*toolsets, ExternalToolset(client_definitions(turn), id="client")]
        return toolsets

    @staticmethod
    def _result(result: AgentRunResult[Any]) -> LoopResult:
        output = result.output
        calls: tuple[ClientCall, ...] = ()
        approvals: tuple[ClientCall, ...] = ()
        if isinstance(output, DeferredToolRequests):
            calls = tuple(ClientCall(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in output.calls)
            approvals = tuple(ClientCall(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in output.approvals)
            text = result.response.text or ""
        else:
            text = output if isinstance(output, str) else str(output)
        finish = result.response.finish_reason
        return LoopResult(text, result.usage, result.new_messages(), calls, finish, approvals)


def tool_returned(event: FunctionToolResultEvent) -> ToolReturned:
    """A tool's result as the model is shown it (a retry prompt's text for a call that failed or was refused)."""
    part = event.part
    failed = part.outcome != "success"
    return ToolReturned(part.tool_call_id, part.tool_name, part.model_response_str(), failed)


def client_definitions(turn: TurnRequest) -> list[ToolDefinition]:
    """The client's tools as pydantic-ai tool definitions of kind ``external`` (run outside the agent)."""
    return [
        ToolDefinition(
            name=tool.name,
            parameters_json_schema=tool.parameters,
            description=tool.description or None,
            strict=tool.strict,
            kind="external",
        )
        for tool in turn.client_tools
    ]


def turn_settings(turn: TurnRequest) -> ModelSettings | Callable[[RunContext[TurnDeps]], ModelSettings] | None:
    """The model settings of each model request of ``turn``: the client's sampling fields, and its ``tool_choice``.
    ``none`` holds for every request; ``required`` and a named tool only for the turn's first request (a later
    step answers with what the tools returned, as a client does after running the calls)."""
    settings = cast(ModelSettings, dict(turn.model_settings)) if turn.model_settings else None
    if turn.output is not None:
        extra = cast(dict[str, Any], (settings or {}).get("extra_body") or {})
        settings = {**(settings or {}), "extra_body": {**extra, "response_format": response_format_body(turn.output)}}
    choice = turn.tool_choice
    if choice in (None, "auto"):
        return settings
    if choice == "none":
        return {**(settings or {}), "tool_choice": "none"}
    forced: ModelSettings = {**(settings or {}), "tool_choice": "required" if choice == "required" else [choice]}

    def per_step(context: RunContext[TurnDeps]) -> ModelSettings:
        return forced if context.run_step <= 1 else (settings or {})

    return per_step
