"""One agent's tracing (:class:`AgentTracing`): whether spans are made, and the spans of its turns, steps, model
requests and memory calls. What each span carries: :mod:`kora.agent.telemetry`."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Tracer
from opentelemetry.util.types import AttributeValue
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models.instrumented import InstrumentationSettings

from kora.agent.telemetry.capabilities import ToolMetrics, ToolSpans, TurnSteps
from kora.agent.telemetry.conventions import PROVIDER, SCOPE
from kora.agent.telemetry.model_requests import ModelRequests
from kora.agent.telemetry.spans import Current, StepSpans, TurnSpan, current_steps, span_ids
from kora.core.telemetry import content_capture_enabled, tracing_enabled

#: What :meth:`AgentTracing.turn` and :meth:`AgentTracing.first_step` answer with tracing off (reusable).
_NO_SPAN = nullcontext(None)


class _FirstStep:
    """The block of :meth:`AgentTracing.first_step`: the turn's next step begun and current inside it."""

    __slots__ = ("_current", "_steps")
    _current: Current

    def __init__(self, steps: StepSpans) -> None:
        self._steps = steps

    def __enter__(self) -> None:
        self._current = Current(self._steps.begin())
        self._current.__enter__()

    def __exit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._current.__exit__()
        if error is not None:
            self._steps.end(error)


@dataclass
class AgentTracing:
    """Spans of one agent (:mod:`kora.agent.telemetry` says which). ``tracer`` None: tracing off, every method a
    no-op that allocates nothing."""

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

    def __post_init__(self) -> None:
        # What every turn span of this agent carries, built once.
        self._turn_name = f"invoke_agent {self.agent_name}"
        self._turn_attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.request.model": self.model_name,
            "gen_ai.provider.name": PROVIDER,
        }

    @property
    def enabled(self) -> bool:
        """Whether spans are made."""
        return self.tracer is not None

    def capabilities(self) -> list[AbstractCapability[Any]]:
        """pydantic-ai capabilities for the agent's ``Agent``: tool metrics always; with tracing on, step spans and
        pydantic-ai's model and tool spans."""
        if self.settings is None:
            return [ToolMetrics()]
        return [ToolMetrics(), ToolSpans(settings=self.settings), TurnSteps()]

    def turn(self, session_id: str) -> AbstractContextManager[TurnSpan | None]:
        """The ``invoke_agent`` span of a turn, current inside the block (a :class:`TurnSpan`); None with tracing
        off. An exception leaving the block marks it failed; cancellation too (``error.type`` ``cancelled``)."""
        if self.tracer is None:
            return _NO_SPAN
        span = self.tracer.start_span(
            self._turn_name, attributes={**self._turn_attributes, "gen_ai.conversation.id": session_id}
        )
        return TurnSpan(span, StepSpans(self.tracer))

    def model_requests(self, base_url: str) -> ModelRequests:
        """The observer of the agent's model requests (metrics always; ``chat`` spans with tracing on)."""
        return ModelRequests(self.model_name, base_url, self.tracer, self.capture_content)

    def first_step(self, turn: TurnSpan | None) -> AbstractContextManager[object]:
        """Step 1 of ``turn`` around its direct first request, current inside the block. It stays open after the
        block so the loop's first tool-call node continues it (see :class:`TurnSteps`); :meth:`end_step` or the
        turn's end closes it. An exception leaving the block ends it failed."""
        if turn is None:
            return _NO_SPAN
        return _FirstStep(turn.steps)

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
