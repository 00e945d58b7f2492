"""What the OpenTelemetry SDK itself costs for the spans of one traced text turn, measured alone (no server).

Run: ``python bench/bench_otel_sdk.py [--turns 3000] [--repeats 5]`` (~30 s). CPU (``time.process_time``) per
text turn's four spans (the server span, ``invoke_agent``, ``step 1``, ``chat``, with the attributes an agent
gives them), median of ``--repeats`` interleaved runs:

- making them: ``start_span`` / ``end`` with their attributes, with a span processor that does nothing, and with
  the batch processor (the exporter thread's share not counted);
- encoding them to OTLP protobuf, in batches of 512 as the batch processor hands them to the exporter: the
  exporter's own encoder (``opentelemetry-exporter-otlp-proto-common``: each child message is built first and
  passed to its parent's constructor, which copies it, at every level: attribute value -> key/value -> span ->
  scope spans -> resource spans), and the same messages filled top-down in place (``add()`` on repeated fields,
  scalars set on the message that holds them). The two requests are checked equal. The top-down encoder exists
  here only to measure the change proposed upstream (bench/README.md); Kora exports with the SDK's exporter.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _SPAN_KIND_MAP, _span_flags
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Tracer, set_span_in_context, use_span
from opentelemetry.util.types import AttributeValue

HOST = "127.0.0.1"
SERVER = {
    "url.scheme": "http",
    "server.address": HOST,
    "server.port": 8000,
    "url.path": "/v1/chat/completions",
    "http.request.method": "POST",
    "network.protocol.version": "1.1",
}
GENAI = {"gen_ai.provider.name": "openai", "gen_ai.request.model": "scripted"}
USAGE = {"gen_ai.usage.input_tokens": 8, "gen_ai.usage.output_tokens": 5, "gen_ai.response.finish_reasons": ["stop"]}
RESOURCE = Resource.create({"service.name": "bench-agent", "kora.resource.kind": "Agent"})


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def turn(tracer: Tracer, i: int) -> None:
    """The four spans of a text turn, parented as the agent parents them."""
    server = tracer.start_span("POST", kind=SpanKind.SERVER, attributes=SERVER)
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench", **GENAI}
    invoke = tracer.start_span(
        "invoke_agent bench",
        context=set_span_in_context(server),
        attributes={**agent, "gen_ai.conversation.id": f"session-{i}"},
    )
    step = tracer.start_span("step 1", context=set_span_in_context(invoke), attributes={"kora.turn.step": 1})
    chat = tracer.start_span(
        "chat scripted",
        context=set_span_in_context(step),
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat", **GENAI, "server.address": HOST, "server.port": 9000},
    )
    chat.set_attributes({"gen_ai.response.model": "scripted", "gen_ai.response.id": f"chatcmpl-{i}", **USAGE})
    chat.end()
    step.end()
    spent = {"kora.turn.tool_calls": 0, "kora.turn.spent_model_requests": 1}
    invoke.set_attributes({**USAGE, "kora.turn.model_requests": 1, **spent})
    invoke.end()
    server.update_name("POST /v1/chat/completions")
    server.set_attributes({"http.route": "/v1/chat/completions", "http.response.status_code": 200})
    server.end()


def _set_value(value: AnyValue, item: AttributeValue) -> None:
    if isinstance(item, bool):
        value.bool_value = item
    elif isinstance(item, str):
        value.string_value = item
    elif isinstance(item, int):
        value.int_value = item
    elif isinstance(item, float):
        value.double_value = item
    elif isinstance(item, bytes):
        value.bytes_value = item
    else:
        values = value.array_value.values
        for element in item:
            _set_value(values.add(), element)


def encode_top_down(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The request ``encode_spans`` builds, filled top-down in place (spans without events or links)."""
    request = ExportTraceServiceRequest()
    grouped: dict[object, dict[object, list[ReadableSpan]]] = {}
    for span in spans:
        grouped.setdefault(span.resource, {}).setdefault(span.instrumentation_scope, []).append(span)
    for resource, scopes in grouped.items():
        assert isinstance(resource, Resource)
        resource_spans = request.resource_spans.add()
        for key, item in resource.attributes.items():
            pair = resource_spans.resource.attributes.add()
            pair.key = key
            _set_value(pair.value, item)
        if resource.schema_url:
            resource_spans.schema_url = resource.schema_url
        for scope, members in scopes.items():
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope.name  # type: ignore[attr-defined]
            if scope.version:  # type: ignore[attr-defined]
                scope_spans.scope.version = scope.version  # type: ignore[attr-defined]
            if scope.schema_url:  # type: ignore[attr-defined]
                scope_spans.schema_url = scope.schema_url  # type: ignore[attr-defined]
            for span in members:
                out = scope_spans.spans.add()
                context = span.get_span_context()
                assert context is not None
                out.trace_id = context.trace_id.to_bytes(16, "big")
                out.span_id = context.span_id.to_bytes(8, "big")
                if span.parent is not None:
                    out.parent_span_id = span.parent.span_id.to_bytes(8, "big")
                out.name = span.name
                out.kind = _SPAN_KIND_MAP[span.kind]  # type: ignore[assignment]
                out.start_time_unix_nano = span.start_time or 0
                out.end_time_unix_nano = span.end_time or 0
                for key, item in (span.attributes or {}).items():
                    pair = out.attributes.add()
                    pair.key = key
                    _set_value(pair.value, item)
                out.status.code = span.status.status_code.value  # type: ignore[assignment]
                if span.status.description:
                    out.status.message = span.status.description
                out.flags = _span_flags(span.parent)
    return request


def _metric_cases(turns: int, tracer: Tracer) -> dict[str, Callable[[], None]]:
    """The four histogram records of a text turn (request duration, model operation duration, input and output
    tokens) made inside a sampled span, with the readers an agent has: Prometheus only (no OTLP endpoint), and
    Prometheus plus the periodic OTLP reader (an endpoint set: each measurement is aggregated once per reader),
    with exemplars as the SDK defaults (``trace_based``) and off."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider, TraceBasedExemplarFilter
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
        PeriodicExportingMetricReader,
    )
    from prometheus_client import CollectorRegistry

    class NoExport(MetricExporter):
        def __init__(self) -> None:
            super().__init__(preferred_temporality={}, preferred_aggregation={})

        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
        ) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
            pass

    def records(otlp: bool, exemplars: bool) -> Callable[[], None]:
        readers = [PrometheusMetricReader(registry=CollectorRegistry())]
        if otlp:
            readers.append(PeriodicExportingMetricReader(NoExport(), export_interval_millis=3_600_000))
        exemplar_filter = TraceBasedExemplarFilter() if exemplars else AlwaysOffExemplarFilter()
        meter = MeterProvider(metric_readers=readers, exemplar_filter=exemplar_filter).get_meter("bench")
        duration, operation = meter.create_histogram("http.server.request.duration"), meter.create_histogram("op")
        tokens = meter.create_histogram("gen_ai.client.token.usage")
        http = {"http.request.method": "POST", "http.response.status_code": 200, "url.scheme": "http"}
        http["http.route"] = "/v1/chat/completions"
        model = {"gen_ai.operation.name": "chat", **GENAI, "gen_ai.response.model": "scripted"}

        def run() -> None:
            span = tracer.start_span("turn")
            with use_span(span, end_on_exit=True):
                for _ in range(turns):
                    operation.record(0.001, model)
                    tokens.record(8, {**model, "gen_ai.token.type": "input"})
                    tokens.record(5, {**model, "gen_ai.token.type": "output"})
                    duration.record(0.002, http)

        return run

    return {
        "4 histogram records, Prometheus reader (no endpoint)": records(False, True),
        "4 histogram records, Prometheus + OTLP readers, exemplars trace_based": records(True, True),
        "4 histogram records, Prometheus + OTLP readers, exemplars always_off": records(True, False),
    }


def _cpu_us(run: Callable[[], None], turns: int) -> float:
    started = time.process_time()
    run()
    return (time.process_time() - started) / turns * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    turns = args.turns

    kept = _Keep()
    keeping = TracerProvider(resource=RESOURCE)
    keeping.add_span_processor(BatchSpanProcessor(kept, max_queue_size=turns * 8))
    for i in range(turns):
        turn(keeping.get_tracer("bench"), i)
    keeping.force_flush()
    spans = kept.spans
    batches = [spans[start : start + 512] for start in range(0, len(spans), 512)]
    theirs = ExportTraceServiceRequest.FromString(encode_spans(batches[0]).SerializeToString())
    ours = ExportTraceServiceRequest.FromString(encode_top_down(batches[0]).SerializeToString())
    assert theirs == ours, "the top-down encoder must build the exporter's request"

    idle = TracerProvider(resource=RESOURCE)
    idle.add_span_processor(SpanProcessor())
    batching = TracerProvider(resource=RESOURCE)
    batching.add_span_processor(BatchSpanProcessor(_Drop()))
    idle_tracer, batch_tracer = idle.get_tracer("bench"), batching.get_tracer("bench")
    cases: dict[str, Callable[[], None]] = {
        "make the 4 spans, no-op span processor": lambda: [turn(idle_tracer, i) for i in range(turns)] and None,
        "make the 4 spans, batch span processor (its thread batching for a no-op exporter)": lambda: (
            [turn(batch_tracer, i) for i in range(turns)] and None
        ),
        "encode + serialize, the exporter's encoder": lambda: (
            [encode_spans(batch).SerializePartialToString() for batch in batches] and None
        ),
        "encode + serialize, top-down in place": lambda: (
            [encode_top_down(batch).SerializePartialToString() for batch in batches] and None
        ),
    }
    cases |= _metric_cases(turns, batch_tracer)
    results: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # interleaved, so the machine's load drifts over all cases alike
        for name, run in cases.items():
            results[name].append(_cpu_us(run, turns))
    print(f"{'CPU per text turn (4 spans)':<70} {'us':>7}  runs")
    for name, values in results.items():
        runs = " ".join(f"{value:.0f}" for value in values)
        print(f"{name:<70} {statistics.median(values):7.1f}  {runs}")
    batching.shutdown()


if __name__ == "__main__":
    main()
