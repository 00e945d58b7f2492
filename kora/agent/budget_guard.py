"""The pydantic-ai capability that enforces a turn's budget (:mod:`kora.agent.budget`) inside the agentic loop."""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import ValidatedToolArgs
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from kora.agent.budget import TurnBudget


class BudgetGuard(AbstractCapability[Any]):
    """The pydantic-ai capability that checks the turn's budget (``ctx.deps.budget``, a :class:`TurnBudget` or
    None) before each model request and each tool call of the loop."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Raise :class:`~kora.core.errors.BudgetExhausted` before a request the budget does not allow."""
        budget = getattr(ctx.deps, "budget", None)
        if isinstance(budget, TurnBudget):
            budget.check_before_request(ctx.usage)
        return request_context

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
    ) -> ValidatedToolArgs:
        """Raise :class:`~kora.core.errors.BudgetExhausted` before a call the budget does not allow."""
        budget = getattr(ctx.deps, "budget", None)
        if isinstance(budget, TurnBudget):
            budget.check_before_tool_call(ctx.usage)
        return args
