"""The agent's spans and metrics, per the OpenTelemetry GenAI semantic conventions
(docs/telemetry.md "An agent's turn").

**Spans** (only when tracing is on: ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, see :mod:`kora.core.telemetry`; with it
off, a turn makes no span objects at all):

* ``invoke_agent {agent}`` (INTERNAL), one per turn: ``gen_ai.operation.name``, ``gen_ai.agent.name``,
  ``gen_ai.conversation.id`` (the session id), ``gen_ai.request.model``, and at the end
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons`` and
  ``kora.turn.model_requests``; an error status with the exception recorded when the turn fails.
* ``step {n}`` (INTERNAL), one per loop step: one model request and the tool calls it asked for. The runtime
  opens step 1 for a turn's direct first request; :class:`TurnSpans` (a pydantic-ai capability) opens the later
  ones around pydantic-ai's model-request and tool-call nodes, and closes a step the runtime handed over.
* ``chat {model}`` (CLIENT), one per model request, the first one included, made by the one model adapter
  (:class:`ModelRequests`, used by :class:`~kora.agent.chat_model.KoraChatModel`): ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``, ``gen_ai.usage.*``,
  ``server.address`` / ``server.port``. pydantic-ai's own model spans cost ~0.7 ms of CPU per request here (they
  re-prepare the messages and look the model up in a price table on every request), over twice the cost of the
  request itself, so they are not used.
* ``execute_tool {tool}`` (INTERNAL), one per tool call: pydantic-ai's own instrumentation (its ``Instrumentation``
  capability, :class:`_ToolSpans`), so ``gen_ai.tool.name`` and ``gen_ai.tool.call.id`` follow its implementation
  of the conventions. Its run and model spans are left out: the turn span above is the run span.
* ``memory recall`` and ``memory write`` (INTERNAL) around the calls of a memory that leaves the process
  (RemoteMemory, whose HTTP client spans they hold). LocalMemory's calls take microseconds in-process, less than
  a span costs to make and export (~50-80 us of CPU each), so they get none (``trace_memory`` False).
  Delegation spans are made by :mod:`kora.agent.delegation`.

Message contents, tool arguments and results are recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

**Metrics** (always: ``/metrics`` serves them whether or not an OTLP endpoint is set; recorded through the global
meter, a no-op until :func:`kora.core.telemetry.setup_telemetry` installs one):

* ``gen_ai.client.token.usage`` ({token}, histogram; ``gen_ai.token.type`` input/output) and
  ``gen_ai.client.operation.duration`` (s, histogram) per model request, recorded by
  :class:`~kora.agent.chat_model.KoraChatModel` (:func:`record_model_request`);
* ``kora.agent.tool.duration`` (s, histogram: its count is the number of calls) per tool call, with
  ``gen_ai.tool.name`` and ``kora.outcome`` (``ok`` / ``error``);
* ``kora.agent.delegation.duration`` (s, histogram) per delegated task, with the peer's ``gen_ai.agent.name``;
* ``kora.agent.active_sessions`` ({session}, observable up-down counter, read when metrics are collected):
  sessions with a turn running or waiting (:func:`observe_sessions`);
* ``kora.agent.spend.tokens`` ({token}, counter; ``gen_ai.agent.name``, ``gen_ai.token.type`` input/output) and
  ``kora.agent.spend.cost`` (USD, counter; only with the model's prices): what each agent's own model requests
  spent, per turn (:func:`record_turn_spend`; a delegation's spend is counted by the peer that made it);
* ``kora.agent.budget.exhausted`` ({turn}, counter; ``gen_ai.agent.name``, ``kora.budget`` the budget's name):
  turns ended by a budget (:func:`record_budget_exhausted`);
* ``kora.memory.degraded`` (gauge, 0/1): the memory store is unreachable (:func:`observe_memory`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from pydantic import JsonValue
from pydantic_ai import CallToolsNode, ModelRequestNode, RunContext
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.capabilities.abstract import (
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapNodeRunHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from kora.agent.approval_calls import PendingApproval
from kora.agent.approvals import PausedTurn
from kora.agent.turn import TurnOutcome
from kora.core.errors import KoraError
from kora.core.openai_wire import JSONObject
from kora.core.telemetry import content_capture_enabled, tracing_enabled
from kora.memory import Memory

#: The instrumentation scope of the agent's spans and metrics.
SCOPE = "kora.agent"
#: ``gen_ai.provider.name`` of every ModelAPI: an OpenAI-compatible API.
PROVIDER = "openai"
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
_spend_tokens = _meter.create_counter(
    "kora.agent.spend.tokens", unit="{token}", description="Tokens the agent's own model requests spent."
)
_spend_cost = _meter.create_counter(
    "kora.agent.spend.cost", unit="USD", description="Cost of the agent's own model requests, at its model's prices."
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


# -- metrics ------------------------------------------------------------------------------------------------------


def record_model_request(
    model: str, seconds: float, input_tokens: int, output_tokens: int, error: BaseException | None = None
) -> None:
    """Record one model request: its duration (s) and, when it answered, the tokens the model reported."""
    attributes: dict[str, str] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model,
    }
    if error is not None:
        attributes["error.type"] = _error_type(error)
    _operation_duration.record(seconds, attributes)
    if error is None:
        if input_tokens:
            _token_usage.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
        if output_tokens:
            _token_usage.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})


def record_delegation(peer: str, seconds: float, ok: bool) -> None:
    """Record one delegated task to ``peer``: its duration (s) and whether the peer answered."""
    _delegation_duration.record(seconds, {"gen_ai.agent.name": peer, "kora.outcome": "ok" if ok else "error"})


def record_turn_spend(agent: str, input_tokens: int, output_tokens: int, cost_usd: float | None) -> None:
    """Record what one turn of ``agent`` spent on its own model requests (tokens, and USD when priced)."""
    if input_tokens:
        _spend_tokens.add(input_tokens, {"gen_ai.agent.name": agent, "gen_ai.token.type": "input"})
    if output_tokens:
        _spend_tokens.add(output_tokens, {"gen_ai.agent.name": agent, "gen_ai.token.type": "output"})
    if cost_usd:
        _spend_cost.add(cost_usd, {"gen_ai.agent.name": agent})


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


def _error_type(error: BaseException) -> str:
    """``error.type`` per the conventions: Kora's error code, ``cancelled`` for a request stopped by its caller,
    else the exception's class name."""
    if isinstance(error, KoraError):
        return error.code
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        return "cancelled"
    return type(error).__qualname__


# -- spans ----------------------------------------------------------------------------------------------------------


@dataclass
class StepSpans:
    """The loop steps of one turn: the open ``step {n}`` span, if any, and how many steps began."""

    tracer: Tracer
    count: int = 0
    open: Span | None = None

    def begin(self) -> Span:
        """End the open step, if any, and start the next one (not made current: see :func:`trace.use_span`)."""
        self.end()
        self.count += 1
        self.open = self.tracer.start_span(f"step {self.count}", attributes={"kora.turn.step": self.count})
        return self.open

    def end(self, error: BaseException | None = None) -> None:
        """End the open step, marking it failed with ``error``."""
        if self.open is not None:
            if error is not None:
                _fail(self.open, error)
            self.open.end()
            self.open = None


#: The steps of the turn running in this context (set by :meth:`AgentTracing.turn`; None with tracing off).
current_steps: contextvars.ContextVar[StepSpans | None] = contextvars.ContextVar("kora_turn_steps", default=None)


@dataclass
class TurnSpan:
    """The ``invoke_agent`` span of a running turn; the runtime reports the outcome with :meth:`finish`."""

    span: Span
    steps: StepSpans

    def finish(self, outcome: TurnOutcome) -> None:
        """Record the turn's outcome on its span: finish reason, token usage summed over its model requests, and
        an error status when the turn stopped short of an answer (its step budget ran out)."""
        self.span.set_attributes(
            {
                "gen_ai.response.finish_reasons": [outcome.finish_reason],
                "gen_ai.usage.input_tokens": outcome.input_tokens,
                "gen_ai.usage.output_tokens": outcome.output_tokens,
                "kora.turn.model_requests": outcome.model_requests,
            }
        )
        if outcome.spent is not None:
            # Everything the turn spent, its delegations included (kora.agent.budget).
            self.span.set_attributes(
                {
                    "kora.turn.tool_calls": outcome.spent.tool_calls,
                    "kora.turn.spent_model_requests": outcome.spent.model_requests,
                    "kora.turn.spent_input_tokens": outcome.spent.input_tokens,
                    "kora.turn.spent_output_tokens": outcome.spent.output_tokens,
                }
            )
            if outcome.spent.cost_usd is not None:
                self.span.set_attribute("kora.turn.cost_usd", outcome.spent.cost_usd)
        if outcome.exhausted is not None:
            self.span.set_attribute("kora.budget.exhausted", outcome.exhausted)
        if outcome.approvals:
            # The turn paused at calls that wait for a person's decision.
            self.span.set_attributes(
                {
                    "kora.approval.requested": len(outcome.approvals),
                    "kora.approval.ids": [a.id for a in outcome.approvals],
                    "kora.approval.targets": [a.target for a in outcome.approvals],
                }
            )
        if outcome.finish_reason != "stop":
            self.span.set_status(Status(StatusCode.ERROR, outcome.text))

    def resumed(self, paused: PausedTurn) -> None:
        """Record on the span of a turn that resumes a paused one how its calls were decided: their ids, their
        statuses (``approved``, ``rejected``, ``expired``) and the seconds each waited for its decision."""
        approvals = paused.approvals
        self.span.set_attributes(
            {
                "kora.approval.ids": [a.id for a in approvals],
                "kora.approval.statuses": [a.status for a in approvals],
                "kora.approval.waited_seconds": [
                    max((a.decided_at or time.time()) - a.requested_at, 0.0) for a in approvals
                ],
            }
        )


@dataclass
class AgentTracing:
    """Spans of one agent (see the module docstring). ``tracer`` None: tracing off, every method a no-op that
    allocates nothing."""

    agent_name: str
    model_name: str
    tracer: Tracer | None = None
    capture_content: bool = False
    settings: InstrumentationSettings | None = field(default=None, repr=False)
    #: Whether memory calls get spans (:meth:`memory`); the runtime sets it from :attr:`Memory.remote`.
    trace_memory: bool = True

    @classmethod
    def from_env(cls, agent_name: str, model_name: str, environ: Mapping[str, str] = os.environ) -> AgentTracing:
        """Tracing as the environment says (:func:`~kora.core.telemetry.tracing_enabled`,
        :func:`~kora.core.telemetry.content_capture_enabled`), on the global tracer
        provider (installed by :func:`kora.core.telemetry.setup_telemetry`)."""
        if not tracing_enabled(environ):
            return cls(agent_name, model_name)
        capture = content_capture_enabled(environ)
        return cls.on(agent_name, model_name, trace.get_tracer_provider(), capture_content=capture)

    @classmethod
    def on(
        cls, agent_name: str, model_name: str, provider: trace.TracerProvider, *, capture_content: bool
    ) -> AgentTracing:
        """Tracing on ``provider``."""
        settings = InstrumentationSettings(
            tracer_provider=provider,
            # Model metrics are Kora's own (record_model_request), recorded with tracing on or off.
            meter_provider=metrics.NoOpMeterProvider(),
            include_content=capture_content,
            include_binary_content=capture_content,
            include_model_request_parameters=capture_content,
        )
        return cls(agent_name, model_name, provider.get_tracer(SCOPE), capture_content, settings)

    @property
    def enabled(self) -> bool:
        """Whether spans are made."""
        return self.tracer is not None

    def capabilities(self) -> list[AbstractCapability[Any]]:
        """pydantic-ai capabilities for the agent's ``Agent``: tool metrics always; with tracing on, step spans and
        pydantic-ai's model and tool spans."""
        if self.settings is None:
            return [ToolMetrics()]
        return [ToolMetrics(), _ToolSpans(settings=self.settings), TurnSteps()]

    @contextmanager
    def turn(self, session_id: str) -> Iterator[TurnSpan | None]:
        """The ``invoke_agent`` span of a turn, current inside the block; None with tracing off. An exception
        leaving the block marks it failed; cancellation too (``error.type`` ``cancelled``)."""
        if self.tracer is None:
            yield None
            return
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.conversation.id": session_id,
            "gen_ai.request.model": self.model_name,
            "gen_ai.provider.name": "openai",
        }
        with self.tracer.start_as_current_span(
            f"invoke_agent {self.agent_name}",
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            steps = StepSpans(self.tracer)
            token = current_steps.set(steps)
            try:
                yield TurnSpan(span, steps)
            except BaseException as error:
                steps.end(error)
                _fail(span, error)
                raise
            finally:
                steps.end()
                # A streamed turn closed by its consumer from another context cannot reset its own token there.
                with suppress(ValueError):
                    current_steps.reset(token)

    def model_requests(self, base_url: str) -> ModelRequests:
        """The observer of the agent's model requests (metrics always; ``chat`` spans with tracing on)."""
        return ModelRequests(self.model_name, base_url, self.tracer, self.capture_content)

    @contextmanager
    def first_step(self, turn: TurnSpan | None) -> Iterator[None]:
        """Step 1 of ``turn`` around its direct first request, current inside the block. It stays open after the
        block so the loop's first tool-call node continues it (see :class:`TurnSteps`); :meth:`end_step` or the
        turn's end closes it. An exception leaving the block ends it failed."""
        if turn is None:
            yield
            return
        step = turn.steps.begin()
        try:
            with trace.use_span(step, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield
        except BaseException as error:
            turn.steps.end(error)
            raise

    def end_step(self) -> None:
        """End the current turn's open step, if any (a turn whose answer came: nothing more runs in the step)."""
        if self.tracer is not None and (steps := current_steps.get()) is not None:
            steps.end()

    @contextmanager
    def memory(self, operation: str, session_id: str) -> Iterator[None]:
        """A ``memory {operation}`` span (``recall``, ``write``) around a memory client call (none when
        ``trace_memory`` is False)."""
        if self.tracer is None or not self.trace_memory:
            yield
            return
        with self.tracer.start_as_current_span(
            f"memory {operation}",
            attributes={"kora.memory.operation": operation, "gen_ai.conversation.id": session_id},
        ):
            yield

    def event_metadata(self) -> dict[str, str]:
        """``trace_id`` and ``span_id`` (hex) of the current span, for a stored event to link to its trace; empty
        with tracing off or outside a span."""
        if self.tracer is None:
            return {}
        return span_ids(trace.get_current_span())


@dataclass
class RequestRecord:
    """What a model request answered, handed back to :meth:`ModelRequests.observe` by the adapter."""

    response: ModelResponse | None = None


@dataclass
class ModelRequests:
    """Observes one model's requests: the GenAI client metrics always; with a ``tracer``, a ``chat {model}`` CLIENT
    span per request, current while it runs (the model client injects its ``traceparent``: the ``chat`` span is
    the request's client span, with no HTTP span of its own below it).
    ``base_url`` is ``MODEL_API_URL``; ``capture_content`` adds the messages (see the module docstring)."""

    model: str
    base_url: str
    tracer: Tracer | None = None
    capture_content: bool = False
    _server: dict[str, str | int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        url = urlsplit(self.base_url)
        if url.hostname:
            self._server["server.address"] = url.hostname
        with suppress(ValueError):
            self._server["server.port"] = url.port or (443 if url.scheme == "https" else 80)

    @contextmanager
    def observe(self, body: JSONObject) -> Iterator[RequestRecord]:
        """Around one request with ``body`` (the chat-completions body sent); the adapter sets
        ``record.response`` when the answer is complete. An exception leaving the block is recorded as the
        request's failure and re-raised."""
        record = RequestRecord()
        started = time.perf_counter()
        span = None
        if self.tracer is not None:
            span = self.tracer.start_span(f"chat {self.model}", kind=SpanKind.CLIENT, attributes=self._attributes(body))
        current = (
            trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)
            if span is not None
            else nullcontext()
        )
        try:
            with current:
                yield record
        except BaseException as error:
            record_model_request(self.model, time.perf_counter() - started, 0, 0, error)
            if span is not None:
                _fail(span, error)
                span.end()
            raise
        self._record(record, started)
        if span is not None:
            if record.response is not None:
                span.set_attributes(self._response_attributes(record.response))
            span.end()

    def _record(self, record: RequestRecord, started: float) -> None:
        usage = record.response.usage if record.response is not None else None
        record_model_request(
            self.model,
            time.perf_counter() - started,
            usage.input_tokens if usage else 0,
            usage.output_tokens if usage else 0,
        )

    def _attributes(self, body: JSONObject) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": self.model,
            **self._server,
        }
        if self.capture_content:
            system, messages = otel_input_messages(body.get("messages"))
            attributes["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)
            if system:
                attributes["gen_ai.system_instructions"] = json.dumps(system, ensure_ascii=False)
        return attributes

    def _response_attributes(self, response: ModelResponse) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.response.model": response.model_name or self.model,
            "gen_ai.usage.input_tokens": response.usage.input_tokens,
            "gen_ai.usage.output_tokens": response.usage.output_tokens,
        }
        if response.provider_response_id:
            attributes["gen_ai.response.id"] = response.provider_response_id
        if response.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [response.finish_reason]
        if self.capture_content:
            attributes["gen_ai.output.messages"] = json.dumps([otel_output_message(response)], ensure_ascii=False)
        return attributes


def otel_input_messages(messages: JsonValue) -> tuple[list[JSONObject], list[JSONObject]]:
    """The GenAI conventions' ``gen_ai.system_instructions`` parts and ``gen_ai.input.messages`` for OpenAI chat
    ``messages``: ``{"role", "parts": [{"type": "text", "content"} | {"type": "tool_call", "id", "name",
    "arguments"} | {"type": "tool_call_response", "id", "response"}]}``."""
    system: list[JSONObject] = []
    result: list[JSONObject] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append({"type": "text", "content": content})
            continue
        parts: list[JsonValue] = []
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content})
        elif content:
            parts.append({"type": "text", "content": content})
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(call, dict) and isinstance(function, dict):
                parts.append(
                    {
                        "type": "tool_call",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments"),
                    }
                )
        result.append({"role": role, "parts": parts})
    return system, result


def otel_output_message(response: ModelResponse) -> JSONObject:
    """The GenAI conventions' output message of ``response``: its text and tool calls, and the finish reason."""
    parts: list[JsonValue] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "content": part.content})
        elif isinstance(part, ToolCallPart):
            parts.append(
                {
                    "type": "tool_call",
                    "id": part.tool_call_id,
                    "name": part.tool_name,
                    "arguments": part.args_as_json_str(),
                }
            )
    return {"role": "assistant", "parts": parts, "finish_reason": response.finish_reason or ""}


def span_ids(span: Span) -> dict[str, str]:
    """``{"trace_id": 32 hex digits, "span_id": 16 hex digits}`` of ``span``; empty when it is not valid."""
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": trace.format_trace_id(context.trace_id), "span_id": trace.format_span_id(context.span_id)}


def _fail(span: Span, error: BaseException) -> None:
    """Mark ``span`` failed by ``error``: status ERROR with the message, the exception recorded, ``error.type``."""
    message = error.message if isinstance(error, KoraError) else str(error)
    span.set_attribute("error.type", _error_type(error))
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, message or type(error).__name__))


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
        outcome = "error"
        try:
            result = await handler(args)
            outcome = "ok"
            return result
        finally:
            _tool_duration.record(
                time.perf_counter() - started, {"gen_ai.tool.name": call.tool_name, "kora.outcome": outcome}
            )


class _ToolSpans(Instrumentation):
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
