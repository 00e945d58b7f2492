"""One agent's tracing (:class:`AgentTracing`): whether spans are made, and the spans of its turns, steps, model
requests and memory calls. What each span carries: :mod:`kora.agent.telemetry`."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Tracer
from opentelemetry.util.types import AttributeValue
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models.instrumented import InstrumentationSettings

from kora.agent.telemetry.capabilities import ToolMetrics, ToolSpans, TurnSteps
from kora.agent.telemetry.conventions import PROVIDER, SCOPE
from kora.agent.telemetry.model_requests import ModelRequests
from kora.agent.telemetry.spans import StepSpans, TurnSpan, current_steps, fail, span_ids
from kora.core.telemetry import content_capture_enabled, tracing_enabled


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

    @contextmanager
    def turn(self, session_id: str) -> Iterator[TurnSpan | None]:
        """The ``invoke_agent`` span of a turn, current inside the block; None with tracing off. An exception
        leaving the block marks it failed; cancellation too (``error.type`` ``cancelled``)."""
        if self.tracer is None:
            yield None
            return
        with self.tracer.start_as_current_span(
            self._turn_name,
            attributes={**self._turn_attributes, "gen_ai.conversation.id": session_id},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            steps = StepSpans(self.tracer)
            token = current_steps.set(steps)
            try:
                yield TurnSpan(span, steps)
            except BaseException as error:
                steps.end(error)
                fail(span, error)
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
