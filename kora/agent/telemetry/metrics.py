"""The agent's metrics, per the OpenTelemetry GenAI semantic conventions (docs/telemetry.md "An agent's turn"):
recorded always (``/metrics`` serves them whether or not an OTLP endpoint is set) through the global meter, a no-op
until :func:`kora.core.telemetry.setup_telemetry` installs one.

* ``gen_ai.client.token.usage`` ({token}, histogram; ``gen_ai.token.type`` input/output) and
  ``gen_ai.client.operation.duration`` (s, histogram) per model request, recorded by
  :class:`~kora.agent.chat_model.KoraChatModel` (:func:`record_model_request`);
* ``kora.agent.tool.duration`` (s, histogram: its count is the number of calls) per tool call, with
  ``gen_ai.tool.name`` and ``kora.outcome`` (``ok`` / ``error``) (:func:`record_tool_call`);
* ``kora.agent.delegation.duration`` (s, histogram) per delegated task, with the peer's ``gen_ai.agent.name``;
* ``kora.agent.active_sessions`` ({session}, observable up-down counter, read when metrics are collected):
  sessions with a turn running or waiting (:func:`observe_sessions`);
* ``kora.agent.spend.tokens`` ({token}, counter; ``gen_ai.agent.name``, ``gen_ai.token.type`` input/output) and
  ``kora.agent.spend.cost`` (USD, counter; only with the model's prices): what each agent's own model requests
  spent, added per turn (:func:`record_turn_spend`; a delegation's spend is counted by the peer that made it) and
  read when the metrics are collected (observable counters: no exemplars);
* ``kora.agent.budget.exhausted`` ({turn}, counter; ``gen_ai.agent.name``, ``kora.budget`` the budget's name):
  turns ended by a budget (:func:`record_budget_exhausted`);
* ``kora.agent.approvals`` ({call}, counter; ``kora.approval.status`` requested, approved, rejected, expired) and
  ``kora.agent.approval.wait`` (s, histogram): tool calls that waited for a person's decision
  (:func:`record_approvals_requested`, :func:`record_approval_decided`);
* ``kora.memory.degraded`` (gauge, 0/1): the memory store is unreachable (:func:`observe_memory`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from kora.agent.approval_calls import PendingApproval
from kora.agent.telemetry.conventions import PROVIDER, SCOPE, error_type
from kora.memory import Memory

#: Duration buckets (s) for model requests, tool calls and delegations: from a cached answer to a slow tool.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
#: Token-count buckets, as the GenAI conventions advise.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


_meter = metrics.get_meter(SCOPE)
_token_usage = _meter.create_histogram(
    "gen_ai.client.token.usage",
    unit="{token}",
    description="Tokens used per model request.",
    explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
)
_operation_duration = _meter.create_histogram(
    "gen_ai.client.operation.duration",
    unit="s",
    description="Duration of each model request.",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
)
_tool_duration = _meter.create_histogram(
    "kora.agent.tool.duration",
    unit="s",
    description="Duration of each tool call (its count is the number of calls).",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
)
_delegation_duration = _meter.create_histogram(
    "kora.agent.delegation.duration",
    unit="s",
    description="Duration of each task delegated to a peer agent (its count is the number of delegations).",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
)
#: The session-lock tables whose sizes add up to ``kora.agent.active_sessions`` (weakly held, as the memories below).
_session_tables: weakref.WeakSet[SessionTable] = weakref.WeakSet()


class SessionTable(Protocol):
    """What ``kora.agent.active_sessions`` counts: ``len()`` is the number of sessions with a turn running or
    waiting."""

    def __len__(self) -> int: ...


def _active_sessions(_options: CallbackOptions) -> Iterator[Observation]:
    # Read when the metrics are collected (a scrape, an export): a turn pays nothing for it.
    yield Observation(sum(len(table) for table in list(_session_tables)))


_meter.create_observable_up_down_counter(
    "kora.agent.active_sessions",
    callbacks=[_active_sessions],
    unit="{session}",
    description="Sessions with a turn running or waiting to run.",
)


@dataclass
class _Spend:
    """What one agent's own model requests spent so far (the spend counters' values)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


#: Each agent's spend, by agent name. A turn adds to it (:func:`record_turn_spend`); the spend counters report it
#: when the metrics are collected, as ``kora.agent.active_sessions`` does: two SDK measurements a turn cost ~15 us,
#: the same sums kept here cost a dict update. A series appears once something was spent, as a counter's does.
_spend: dict[str, _Spend] = {}


def _spent_tokens(_options: CallbackOptions) -> Iterator[Observation]:
    for agent, spend in list(_spend.items()):
        inputs, outputs, _ = _spend_attributes(agent)
        if spend.input_tokens:
            yield Observation(spend.input_tokens, inputs)
        if spend.output_tokens:
            yield Observation(spend.output_tokens, outputs)


def _spent_cost(_options: CallbackOptions) -> Iterator[Observation]:
    for agent, spend in list(_spend.items()):
        if spend.cost_usd:
            yield Observation(spend.cost_usd, _spend_attributes(agent)[2])


_meter.create_observable_counter(
    "kora.agent.spend.tokens",
    callbacks=[_spent_tokens],
    unit="{token}",
    description="Tokens the agent's own model requests spent.",
)
_meter.create_observable_counter(
    "kora.agent.spend.cost",
    callbacks=[_spent_cost],
    unit="USD",
    description="Cost of the agent's own model requests, at its model's prices.",
)
_budget_exhausted = _meter.create_counter(
    "kora.agent.budget.exhausted", unit="{turn}", description="Turns ended because a budget ran out, by budget."
)
_approvals = _meter.create_counter(
    "kora.agent.approvals",
    unit="{call}",
    description="Tool calls that needed a person's approval, by status: requested, approved, rejected, expired.",
)
_approval_wait = _meter.create_histogram(
    "kora.agent.approval.wait",
    unit="s",
    description="Time a tool call waited for its decision, by status: approved, rejected, expired.",
)


def observe_sessions(table: SessionTable) -> None:
    """Count ``table``'s sessions in ``kora.agent.active_sessions``."""
    _session_tables.add(table)


#: The memories whose state ``kora.memory.degraded`` reports (the agent's; weakly held, so tests may make many).
_observed_memories: weakref.WeakKeyDictionary[Memory, str] = weakref.WeakKeyDictionary()


def _memory_degradation(_options: CallbackOptions) -> Iterator[Observation]:
    for memory, agent_name in list(_observed_memories.items()):
        status = memory.status()
        degraded = bool(status.problems) or "memory" in status.details
        yield Observation(int(degraded), {"gen_ai.agent.name": agent_name})


_meter.create_observable_gauge(
    "kora.memory.degraded",
    callbacks=[_memory_degradation],
    unit="1",
    description="1 while the agent's memory store is unreachable (serving degraded or not ready), else 0.",
)


def observe_memory(memory: Memory, agent_name: str) -> None:
    """Report ``memory``'s degradation as ``kora.memory.degraded`` for ``agent_name``."""
    _observed_memories[memory] = agent_name


def record_model_request(
    model: str, seconds: float, input_tokens: int, output_tokens: int, error: BaseException | None = None
) -> None:
    """Record one model request: its duration (s) and, when it answered, the tokens the model reported."""
    if error is not None:
        attributes: dict[str, str] = {**_model_attributes(model)[0], "error.type": error_type(error)}
        _operation_duration.record(seconds, attributes)
        return
    ok, inputs, outputs = _model_attributes(model)
    _operation_duration.record(seconds, ok)
    if input_tokens:
        _token_usage.record(input_tokens, inputs)
    if output_tokens:
        _token_usage.record(output_tokens, outputs)


# The SDK copies the attributes it is given (``Measurement`` cleans them into a new dict), so one set per model
# and per agent serves every turn; an agent has one model and one name, the bound only guards a misuse.
@lru_cache(maxsize=64)
def _model_attributes(model: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """A model request's attributes (answered), and the same with ``gen_ai.token.type`` input and output."""
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": model}
    return (
        attributes,
        {**attributes, "gen_ai.token.type": "input"},
        {**attributes, "gen_ai.token.type": "output"},
    )


@lru_cache(maxsize=64)
def _spend_attributes(agent: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """An agent's spend attributes: ``gen_ai.token.type`` input, output, and the agent alone (cost)."""
    return (
        {"gen_ai.agent.name": agent, "gen_ai.token.type": "input"},
        {"gen_ai.agent.name": agent, "gen_ai.token.type": "output"},
        {"gen_ai.agent.name": agent},
    )


def record_tool_call(tool: str, seconds: float, ok: bool) -> None:
    """Record one tool call to ``tool``: its duration (s) and whether it returned (``kora.outcome`` ``ok``) or
    raised (``error``, a retry asked of the model included)."""
    _tool_duration.record(seconds, {"gen_ai.tool.name": tool, "kora.outcome": "ok" if ok else "error"})


def record_delegation(peer: str, seconds: float, ok: bool) -> None:
    """Record one delegated task to ``peer``: its duration (s) and whether the peer answered."""
    _delegation_duration.record(seconds, {"gen_ai.agent.name": peer, "kora.outcome": "ok" if ok else "error"})


def record_turn_spend(agent: str, input_tokens: int, output_tokens: int, cost_usd: float | None) -> None:
    """Record what one turn of ``agent`` spent on its own model requests (tokens, and USD when priced)."""
    spend = _spend.get(agent)
    if spend is None:
        spend = _spend[agent] = _Spend()
    spend.input_tokens += input_tokens
    spend.output_tokens += output_tokens
    if cost_usd:
        spend.cost_usd += cost_usd


def record_budget_exhausted(agent: str, budget: str) -> None:
    """Record a turn of ``agent`` ended by ``budget`` (``tool_calls``, ``model_requests``, ...)."""
    _budget_exhausted.add(1, {"gen_ai.agent.name": agent, "kora.budget": budget})


def record_approvals_requested(agent: str, calls: int) -> None:
    """Record ``calls`` tool calls of ``agent`` that wait for approval (``kora.agent.approvals``, requested)."""
    _approvals.add(calls, {"gen_ai.agent.name": agent, "kora.approval.status": "requested"})


def record_approval_decided(agent: str, approval: PendingApproval) -> None:
    """Record a decided approval: its status (approved, rejected, expired) and how long it waited (s)."""
    attributes = {"gen_ai.agent.name": agent, "kora.approval.status": approval.status}
    _approvals.add(1, attributes)
    _approval_wait.record(max(time.time() - approval.requested_at, 0.0), attributes)
