"""The agent's spans and metrics, per the OpenTelemetry GenAI semantic conventions
(docs/telemetry.md "An agent's turn").

**Spans** (only when tracing is on: ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, see :mod:`kora.core.telemetry`; with it
off, a turn makes no span objects at all):

* ``invoke_agent {agent}`` (INTERNAL), one per turn: ``gen_ai.operation.name``, ``gen_ai.agent.name``,
  ``gen_ai.conversation.id`` (the session id), ``gen_ai.request.model``, and at the end
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons`` and
  ``kora.turn.model_requests``; an error status with the exception recorded when the turn fails.
* ``step {n}`` (INTERNAL), one per loop step: one model request and the tool calls it asked for. The runtime
  opens step 1 for a turn's direct first request; :class:`TurnSteps` (a pydantic-ai capability) opens the later
  ones around pydantic-ai's model-request and tool-call nodes, and closes a step the runtime handed over.
* ``chat {model}`` (CLIENT), one per model request, the first one included, made by the one model adapter
  (:class:`ModelRequests`, used by :class:`~kora.agent.chat_model.KoraChatModel`): ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``, ``gen_ai.usage.*``,
  ``server.address`` / ``server.port``. pydantic-ai's own model spans cost ~0.7 ms of CPU per request here (they
  re-prepare the messages and look the model up in a price table on every request), over twice the cost of the
  request itself, so they are not used.
* ``execute_tool {tool}`` (INTERNAL), one per tool call: pydantic-ai's own instrumentation (its ``Instrumentation``
  capability, :class:`~kora.agent.telemetry.capabilities.ToolSpans`), so ``gen_ai.tool.name`` and
  ``gen_ai.tool.call.id`` follow its implementation of the conventions. Its run and model spans are left out: the
  turn span above is the run span.
* ``memory recall`` and ``memory write`` (INTERNAL) around the calls of a memory that leaves the process
  (RemoteMemory, whose HTTP client spans they hold). LocalMemory's calls take microseconds in-process, less than
  a span costs to make and export (~50-80 us of CPU each), so they get none (``trace_memory`` False).
  Delegation spans are made by :mod:`kora.agent.delegation`.

Message contents, tool arguments and results are recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

**Metrics** (always, whether or not an OTLP endpoint is set): :mod:`kora.agent.telemetry.metrics` lists them.

Modules, one job each: :mod:`~kora.agent.telemetry.conventions` (the GenAI conventions' names and message
formats), :mod:`~kora.agent.telemetry.metrics` (instruments and what records them), :mod:`~kora.agent.telemetry.spans`
(turn and step spans), :mod:`~kora.agent.telemetry.model_requests` (the ``chat`` spans and metrics of model
requests), :mod:`~kora.agent.telemetry.capabilities` (the pydantic-ai capabilities) and
:mod:`~kora.agent.telemetry.tracing` (:class:`AgentTracing`, which puts them together). This package's face
exports what the rest of the agent uses.
"""

from __future__ import annotations

from kora.agent.telemetry.capabilities import ToolMetrics
from kora.agent.telemetry.conventions import PROVIDER, SCOPE
from kora.agent.telemetry.metrics import (
    observe_memory,
    observe_sessions,
    record_approval_decided,
    record_approvals_requested,
    record_budget_exhausted,
    record_delegation,
    record_turn_spend,
)
from kora.agent.telemetry.model_requests import ModelRequests
from kora.agent.telemetry.spans import TurnSpan
from kora.agent.telemetry.tracing import AgentTracing

__all__ = [
    "PROVIDER",
    "SCOPE",
    "AgentTracing",
    "ModelRequests",
    "ToolMetrics",
    "TurnSpan",
    "observe_memory",
    "observe_sessions",
    "record_approval_decided",
    "record_approvals_requested",
    "record_budget_exhausted",
    "record_delegation",
    "record_turn_spend",
]
