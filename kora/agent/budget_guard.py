"""The pydantic-ai capability that enforces a turn's budget (:mod:`kora.agent.budget`) inside the agentic loop."""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from kora.agent.budget import TURN_DEADLINE, TurnBudget, in_time


class BudgetGuard(AbstractCapability[Any]):
    """The pydantic-ai capability that checks the turn's budget (``ctx.deps.budget``, a :class:`TurnBudget` or
    None) before each model request and each tool call of the loop, and holds each step to the time budget: a model
    request by the deadline it sets for the run (:data:`~kora.agent.budget.TURN_DEADLINE`, read by the model
    adapter), a tool call by :meth:`wrap_tool_execute`."""

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Set the turn's deadline for the run's model requests (pydantic-ai carries it into the run's body)."""
        deadline = _deadline(ctx)
        if deadline is not None:
            TURN_DEADLINE.set(deadline)

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

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Run the call within the turn's time budget: still running at the deadline, it is cancelled and
        :class:`~kora.core.errors.BudgetExhausted` ``seconds`` raised (the turn ends; the call has no result)."""
        async with in_time(_deadline(ctx)):
            return await handler(args)


def _deadline(ctx: RunContext[Any]) -> float | None:
    """The turn's deadline (``time.time()`` seconds), None without a time budget."""
    budget = getattr(ctx.deps, "budget", None)
    return budget.limits.deadline if isinstance(budget, TurnBudget) else None
