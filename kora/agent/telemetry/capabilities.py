"""The pydantic-ai capabilities the agent's loop runs with: tool-call metrics (:class:`ToolMetrics`, always), and with
tracing on pydantic-ai's ``execute_tool`` spans (:class:`ToolSpans`) and the ``step {n}`` spans of the loop's
nodes (:class:`TurnSteps`)."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from pydantic_ai import CallToolsNode, ModelRequestNode, RunContext
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.capabilities.abstract import (
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapNodeRunHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from kora.agent.telemetry.metrics import record_tool_call
from kora.agent.telemetry.spans import current_steps


class ToolMetrics(AbstractCapability[Any]):
    """Records ``kora.agent.tool.duration`` for every tool call the loop runs."""

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Time the call; ``kora.outcome`` is ``error`` when it raised (a retry asked of the model included)."""
        started = time.perf_counter()
        ok = False
        try:
            result = await handler(args)
            ok = True
            return result
        finally:
            record_tool_call(call.tool_name, time.perf_counter() - started, ok)


class ToolSpans(Instrumentation):
    """pydantic-ai's instrumentation for its ``execute_tool`` spans only: the turn's ``invoke_agent`` span (made by
    the runtime, covering the direct first request too) is the run span, and :class:`ModelRequests` makes the
    ``chat`` spans of every request."""

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """No run span: see the class docstring."""
        return await handler()

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        """No model span: see the class docstring."""
        return await handler(request_context)


class TurnSteps(AbstractCapability[Any]):
    """Opens a ``step {n}`` span for each model-request node and keeps it open through the tool-call node that
    follows (the calls that answer asked for), so a step holds its ``chat`` and ``execute_tool`` spans. A step the
    runtime opened (the direct first request whose answer called tools) is continued by the loop's first tool-call
    node."""

    async def wrap_node_run(self, ctx: RunContext[Any], *, node: Any, handler: WrapNodeRunHandler[Any]) -> Any:
        """Run ``node`` inside its step's span."""
        steps = current_steps.get()
        if steps is None or not isinstance(node, ModelRequestNode | CallToolsNode):
            return await handler(node)
        step = steps.begin() if isinstance(node, ModelRequestNode) or steps.open is None else steps.open
        try:
            with trace.use_span(step, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                result = await handler(node)
        except BaseException as error:
            steps.end(error)
            raise
        if isinstance(node, CallToolsNode):
            steps.end()
        return result
