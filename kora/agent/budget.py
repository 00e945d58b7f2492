"""Budgets that bound a turn (``BUDGET_MAX_*``) and travel with delegation (A2A message metadata ``kora.budget``).

A turn may spend at most: ``tool_calls`` tool calls, ``model_requests`` model requests, ``tokens`` tokens (input
plus output, as the model reported them), ``seconds`` of wall-clock time from the turn's start, and ``cost_usd``
dollars at the ModelAPI's prices (``MODEL_PRICE_INPUT_PER_MILLION`` / ``MODEL_PRICE_OUTPUT_PER_MILLION``). An
unset budget is no limit. Each A2A task runs one turn, so a task has the same budget.

Every budget is checked *before* the thing it bounds: before each model request (the runtime's direct first one
and the pydantic-ai loop's, by :class:`BudgetGuard`'s ``before_model_request``) and before each tool call
(``before_tool_execute``). A budget that the next step would exceed raises
:class:`~kora.core.errors.BudgetExhausted`; the runtime ends the turn as it ends a spent step budget. The time
budget also cuts the step in flight at the deadline (:func:`in_time`): a model request (the model adapter reads the
deadline from :data:`TURN_DEADLINE`, which ``BudgetGuard`` sets for the loop's run) or a tool call
(``BudgetGuard``'s ``wrap_tool_execute``) still running then is cancelled and ``BudgetExhausted`` raised.

Delegation: the delegating turn sends what it has left (:meth:`TurnBudget.remaining`, :meth:`Limits.to_metadata`:
``{"tool_calls": int, "model_requests": int, "tokens": int, "cost_usd": float, "deadline": "<ISO 8601 UTC>"}``,
only the bounded ones). The peer's turn takes the smaller of its own budget and the one given
(:meth:`Limits.tighter`), and reports what it spent, its own delegations included, in the metadata
``kora.spent`` of its task's final status message (:meth:`Spend.to_metadata`); the delegating turn adds that to its
own spend (:meth:`TurnBudget.charge`). So a loop of delegations across agents ends within the first agent's
budget.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import JsonValue

from kora.core.errors import BudgetExhausted, RequestError

if TYPE_CHECKING:  # the A2A endpoint reads budgets before pydantic-ai is loaded
    from pydantic_ai.usage import RunUsage

#: A2A message metadata key carrying the delegating turn's remaining budget.
BUDGET_METADATA = "kora.budget"
#: A2A status message metadata key carrying what a delegated task spent.
SPENT_METADATA = "kora.spent"
#: The budgets' names, as ``budget_exhausted: <name>`` and the metrics say them.
BUDGET_NAMES = ("tool_calls", "model_requests", "tokens", "seconds", "cost_usd")
_COUNTS = ("tool_calls", "model_requests", "tokens")
_T = TypeVar("_T")

#: The deadline (``time.time()`` seconds) of the turn whose agentic loop runs in this context; None: no time
#: budget. Set for the loop's run by :class:`~kora.agent.budget_guard.BudgetGuard` (pydantic-ai carries what its
#: ``before_run`` sets into the run's body); the model adapter bounds each request by it (:func:`in_time`).
TURN_DEADLINE: ContextVar[float | None] = ContextVar("kora_turn_deadline", default=None)


def in_time(deadline: float | None) -> AbstractAsyncContextManager[None]:
    """A block bounded by the turn's ``deadline`` (``time.time()`` seconds; None: not bounded): past it, the block
    is cancelled and :class:`~kora.core.errors.BudgetExhausted` ``seconds`` raised. Costs nothing unbounded."""
    return nullcontext() if deadline is None else _until(deadline)


def each_in_time(items: AsyncIterator[_T], deadline: float | None) -> AsyncIterator[_T]:
    """``items`` with each item awaited within ``deadline`` (as :func:`in_time`): a stream that is still going
    at the deadline raises ``BudgetExhausted``. The time between two items spent elsewhere (by the reader) counts,
    the deadline being absolute; no wait spans the reader's own code. None: ``items`` as they are."""
    return items if deadline is None else _each_until(items, deadline)


@asynccontextmanager
async def _until(deadline: float) -> AsyncGenerator[None]:
    try:
        async with asyncio.timeout(max(deadline - time.time(), 0.0)) as scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise
        raise BudgetExhausted.of("seconds", "the turn's time ran out.") from None


async def _each_until(items: AsyncIterator[_T], deadline: float) -> AsyncGenerator[_T]:
    while True:
        async with _until(deadline):
            try:
                item = await anext(items)
            except StopAsyncIteration:
                return
        yield item


@dataclass(frozen=True)
class Limits:
    """What a turn may spend; None: unbounded. ``deadline`` is absolute (seconds since the epoch, UTC)."""

    tool_calls: int | None = None
    model_requests: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    deadline: float | None = None

    @property
    def bounded(self) -> bool:
        """True when any budget is set."""
        return any(getattr(self, name) is not None for name in (*_COUNTS, "cost_usd", "deadline"))

    def tighter(self, other: Limits | None) -> Limits:
        """Each budget the smaller of this one's and ``other``'s (an unset one takes the other's)."""
        if other is None:
            return self

        def least(a: float | None, b: float | None) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return Limits(
            tool_calls=least(self.tool_calls, other.tool_calls),
            model_requests=least(self.model_requests, other.model_requests),
            tokens=least(self.tokens, other.tokens),
            cost_usd=least(self.cost_usd, other.cost_usd),
            deadline=least(self.deadline, other.deadline),
        )

    def to_metadata(self) -> dict[str, JsonValue]:
        """The ``kora.budget`` metadata value: the bounded budgets only (the deadline as ISO 8601 UTC)."""
        data: dict[str, JsonValue] = {name: getattr(self, name) for name in _COUNTS if getattr(self, name) is not None}
        if self.cost_usd is not None:
            data["cost_usd"] = self.cost_usd
        if self.deadline is not None:
            data["deadline"] = datetime.fromtimestamp(self.deadline, UTC).isoformat().replace("+00:00", "Z")
        return data

    @classmethod
    def from_metadata(cls, value: object) -> Limits:
        """Read a ``kora.budget`` metadata value. Raises :class:`~kora.core.errors.RequestError` (JSON-RPC -32602)
        naming the bad field: an object whose counts are integers >= 0, ``cost_usd`` a number >= 0 and ``deadline``
        an ISO 8601 date-time with a time zone; other keys are refused."""
        where = f"Invalid params: message metadata '{BUDGET_METADATA}'"
        if not isinstance(value, Mapping):
            raise RequestError(f"{where} must be an object.", code="invalid_budget")
        unknown = sorted(set(value) - {*_COUNTS, "cost_usd", "deadline"})
        if unknown:
            raise RequestError(f"{where} has unknown fields {unknown}.", code="invalid_budget")
        counts: dict[str, int] = {}
        for name in _COUNTS:
            if name in value:
                count = value[name]
                # protobuf Struct numbers arrive as floats
                if (
                    isinstance(count, bool)
                    or not isinstance(count, int | float)
                    or not math.isfinite(count)
                    or count < 0
                    or count != int(count)
                ):
                    raise RequestError(f"{where}: '{name}' must be an integer >= 0.", code="invalid_budget")
                counts[name] = int(count)
        cost = value.get("cost_usd")
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
        ):
            raise RequestError(f"{where}: 'cost_usd' must be a number >= 0.", code="invalid_budget")
        deadline = value.get("deadline")
        when: float | None = None
        if deadline is not None:
            try:
                parsed = datetime.fromisoformat(str(deadline))
            except ValueError:
                parsed = None
            if not isinstance(deadline, str) or parsed is None or parsed.tzinfo is None:
                raise RequestError(
                    f"{where}: 'deadline' must be an ISO 8601 date-time with a time zone.", code="invalid_budget"
                )
            when = parsed.timestamp()
        return cls(**counts, cost_usd=None if cost is None else float(cost), deadline=when)


@dataclass(frozen=True)
class Prices:
    """USD per million input and output tokens (the ModelAPI's ``spec.pricing``)."""

    input_per_million: float
    output_per_million: float

    @classmethod
    def of(cls, settings: BudgetSettings) -> Prices | None:
        """The prices ``settings`` give, or None unless both are set (tokens are then not priced)."""
        input_price, output_price = settings.model_price_input_per_million, settings.model_price_output_per_million
        return cls(input_price, output_price) if input_price is not None and output_price is not None else None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of the tokens, in USD."""
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1_000_000


@dataclass
class Spend:
    """What a turn spent: counts, tokens and cost (None: no prices to price the tokens with)."""

    tool_calls: int = 0
    model_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def to_metadata(self) -> dict[str, JsonValue]:
        """The ``kora.spent`` metadata value (``cost_usd`` only when known)."""
        data: dict[str, JsonValue] = {
            "tool_calls": self.tool_calls,
            "model_requests": self.model_requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.cost_usd is not None:
            data["cost_usd"] = self.cost_usd
        return data

    @classmethod
    def from_metadata(cls, value: object) -> Spend | None:
        """Read a peer's ``kora.spent``; None when it is missing or malformed (a peer that reports nothing)."""
        if not isinstance(value, Mapping):
            return None
        numbers: dict[str, int] = {}
        for name in ("tool_calls", "model_requests", "input_tokens", "output_tokens"):
            number = value.get(name, 0)
            if (
                isinstance(number, bool)
                or not isinstance(number, int | float)
                or not math.isfinite(number)
                or number < 0
            ):
                return None
            numbers[name] = int(number)
        cost = value.get("cost_usd")
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
        ):
            return None
        return cls(**numbers, cost_usd=None if cost is None else float(cost))


@dataclass
class TurnBudget:
    """One turn's budget: its ``limits`` (already the smaller of the agent's and a delegating turn's), the model's
    ``prices`` (None: cost is not known), when it ``started`` (``time.time()``), the tool calls it ran and what
    its delegations spent (``charged``). The turn's own model usage is pydantic-ai's :class:`RunUsage`, passed in.
    """

    limits: Limits
    prices: Prices | None = None
    started: float = field(default_factory=time.time)
    tool_calls: int = 0
    charged: Spend = field(default_factory=Spend)

    def spent(self, usage: RunUsage) -> Spend:
        """Everything the turn spent: its own requests and tokens (``usage``), its tool calls, and its
        delegations'. The cost is known when the prices are (a peer's unknown cost is priced at ours)."""
        charged = self.charged
        cost: float | None = None
        if self.prices is not None:
            cost = self.prices.cost(usage.input_tokens, usage.output_tokens)
            cost += (
                charged.cost_usd
                if charged.cost_usd is not None
                else self.prices.cost(charged.input_tokens, charged.output_tokens)
            )
        return Spend(
            tool_calls=self.tool_calls + charged.tool_calls,
            model_requests=usage.requests + charged.model_requests,
            input_tokens=usage.input_tokens + charged.input_tokens,
            output_tokens=usage.output_tokens + charged.output_tokens,
            cost_usd=cost,
        )

    def charge(self, peer: Spend) -> None:
        """Add a delegated task's spend to this turn's."""
        charged = self.charged
        cost = charged.cost_usd
        if peer.cost_usd is not None:
            cost = (cost or 0.0) + peer.cost_usd
        elif self.prices is not None:
            cost = (cost or 0.0) + self.prices.cost(peer.input_tokens, peer.output_tokens)
        self.charged = Spend(
            tool_calls=charged.tool_calls + peer.tool_calls,
            model_requests=charged.model_requests + peer.model_requests,
            input_tokens=charged.input_tokens + peer.input_tokens,
            output_tokens=charged.output_tokens + peer.output_tokens,
            cost_usd=cost,
        )

    def remaining(self, usage: RunUsage) -> Limits:
        """What the turn has left, for a peer it delegates to (the deadline stays absolute)."""
        spent = self.spent(usage)
        limits = self.limits

        def left(limit: int | None, used: int) -> int | None:
            return None if limit is None else max(limit - used, 0)

        return replace(
            limits,
            tool_calls=left(limits.tool_calls, spent.tool_calls),
            model_requests=left(limits.model_requests, spent.model_requests),
            tokens=left(limits.tokens, spent.input_tokens + spent.output_tokens),
            cost_usd=None if limits.cost_usd is None else max(limits.cost_usd - (spent.cost_usd or 0.0), 0.0),
        )

    def _check_common(self, spent: Spend) -> None:
        limits = self.limits
        if limits.deadline is not None and time.time() >= limits.deadline:
            raise BudgetExhausted.of("seconds", "the turn's time ran out.")
        if limits.tokens is not None and spent.input_tokens + spent.output_tokens >= limits.tokens:
            raise BudgetExhausted.of(
                "tokens", f"{spent.input_tokens + spent.output_tokens} of {limits.tokens} tokens are spent."
            )
        if limits.cost_usd is not None and (spent.cost_usd or 0.0) >= limits.cost_usd:
            raise BudgetExhausted.of("cost_usd", f"{spent.cost_usd or 0.0:.6f} of {limits.cost_usd:g} USD are spent.")

    def check_before_request(self, usage: RunUsage) -> None:
        """Raise :class:`~kora.core.errors.BudgetExhausted` when the next model request would exceed a budget
        (``usage``: the turn's own model usage so far)."""
        spent = self.spent(usage)
        limits = self.limits
        if limits.model_requests is not None and spent.model_requests >= limits.model_requests:
            raise BudgetExhausted.of(
                "model_requests", f"all {limits.model_requests} model requests of the turn are spent."
            )
        self._check_common(spent)

    def check_before_tool_call(self, usage: RunUsage) -> None:
        """Raise :class:`~kora.core.errors.BudgetExhausted` when the next tool call would exceed a budget; else
        count the call."""
        spent = self.spent(usage)
        limits = self.limits
        if limits.tool_calls is not None and spent.tool_calls >= limits.tool_calls:
            raise BudgetExhausted.of("tool_calls", f"all {limits.tool_calls} tool calls of the turn are spent.")
        self._check_common(spent)
        self.tool_calls += 1


class BudgetSettings(Protocol):
    """The settings an agent's budget and prices are read from, by their agent setting names (``BUDGET_MAX_*``,
    ``MODEL_PRICE_*_PER_MILLION``): the agent's settings object satisfies it and is passed whole."""

    @property
    def budget_max_tool_calls(self) -> int | None:
        """Tool calls a turn may make."""

    @property
    def budget_max_model_requests(self) -> int | None:
        """Model requests a turn may make."""

    @property
    def budget_max_tokens(self) -> int | None:
        """Input plus output tokens a turn may spend."""

    @property
    def budget_max_seconds(self) -> float | None:
        """Seconds a turn may run, from its start."""

    @property
    def budget_max_cost_usd(self) -> float | None:
        """USD a turn may spend (needs both prices)."""

    @property
    def model_price_input_per_million(self) -> float | None:
        """USD per million input tokens."""

    @property
    def model_price_output_per_million(self) -> float | None:
        """USD per million output tokens."""


def own_limits(settings: BudgetSettings, started: float) -> Limits:
    """An agent's own budget for a turn that started at ``started`` (``time.time()``)."""
    seconds = settings.budget_max_seconds
    return Limits(
        tool_calls=settings.budget_max_tool_calls,
        model_requests=settings.budget_max_model_requests,
        tokens=settings.budget_max_tokens,
        cost_usd=settings.budget_max_cost_usd,
        deadline=None if seconds is None else started + seconds,
    )
