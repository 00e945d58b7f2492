"""The observer of the agent's model requests (:class:`ModelRequests`): the GenAI client metrics of every request and,
with tracing on, its ``chat {model}`` CLIENT span."""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue
from pydantic_ai.messages import ModelResponse

from kora.agent.telemetry.conventions import PROVIDER, otel_input_messages, otel_output_message
from kora.agent.telemetry.metrics import record_model_request
from kora.agent.telemetry.spans import Current, fail
from kora.core.openai_wire import JSONObject


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

    def observe(self, body: JSONObject) -> AbstractContextManager[RequestRecord]:
        """Around one request with ``body`` (the chat-completions body sent); the adapter sets
        ``record.response`` when the answer is complete. An exception leaving the block is recorded as the
        request's failure and re-raised."""
        return _Observation(self, body)

    def _record(self, record: RequestRecord, started: float) -> None:
        """The request's metrics (its duration and, when it answered, the tokens the model reported)."""
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


class _Observation:
    """The block of :meth:`ModelRequests.observe` (a class rather than a generator: it runs around every model
    request, traced or not)."""

    __slots__ = ("_body", "_current", "_observer", "_record", "_span", "_started")
    _record: RequestRecord
    _started: float
    _span: Span | None
    _current: Current | None

    def __init__(self, observer: ModelRequests, body: JSONObject) -> None:
        self._observer = observer
        self._body = body

    def __enter__(self) -> RequestRecord:
        observer = self._observer
        self._record = RequestRecord()
        self._started = time.perf_counter()
        self._span = self._current = None
        if observer.tracer is not None:
            self._span = observer.tracer.start_span(
                f"chat {observer.model}", kind=SpanKind.CLIENT, attributes=observer._attributes(self._body)
            )
            self._current = Current(self._span)
            self._current.__enter__()
        return self._record

    def __exit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        observer, span, record = self._observer, self._span, self._record
        if self._current is not None:
            self._current.__exit__()
        if error is not None:
            record_model_request(observer.model, time.perf_counter() - self._started, 0, 0, error)
            if span is not None:
                fail(span, error)
                span.end()
            return
        observer._record(record, self._started)
        if span is not None:
            if record.response is not None:
                span.set_attributes(observer._response_attributes(record.response))
            span.end()
