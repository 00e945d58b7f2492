"""A real OTLP receiver for tests: what a collector would see from Kora's processes.

:class:`OtlpReceiver` serves OTLP/HTTP (protobuf; ``gzip`` bodies too) on ``127.0.0.1`` from a background
thread: ``POST /v1/traces`` decodes an ``ExportTraceServiceRequest``, ``POST /v1/metrics`` an
``ExportMetricsServiceRequest``. :class:`GrpcOtlpReceiver` is the same over OTLP/gRPC (grpcio and
opentelemetry-proto's service stubs). Both keep everything they received and flatten it::

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        ...  # start processes with env, drive them
        server = receiver.wait_for_span(lambda s: s.kind == "SERVER" and s.name == "POST /mcp")
        trace = receiver.spans_of_trace(server.trace_id)
        points = receiver.wait_for_metric("http.server.request.duration")

Spans come as :class:`ReceivedSpan` (ids as lower-case hex, attributes and resource attributes as plain dicts,
kind and status code as their short names), metric data points as :class:`ReceivedPoint`. Waiting helpers poll
until a predicate holds or raise ``AssertionError`` with what did arrive, so a failing test says why. Set
``OTEL_BSP_SCHEDULE_DELAY`` / ``OTEL_METRIC_EXPORT_INTERVAL`` (milliseconds) low in the processes' environment
to keep the waits short.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Self

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

if TYPE_CHECKING:
    import grpc

__all__ = ["GrpcOtlpReceiver", "OtlpReceiver", "ReceivedPoint", "ReceivedSpan"]

AttributeValue = str | bool | int | float | bytes | list["AttributeValue"] | dict[str, "AttributeValue"] | None


def _value(value: AnyValue) -> AttributeValue:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    result: AttributeValue = getattr(value, which)
    return result


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, AttributeValue]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened. ``kind``: ``SERVER``, ``CLIENT``, ``INTERNAL``, ``PRODUCER``,
    ``CONSUMER``; ``status``: ``UNSET``, ``OK`` or ``ERROR`` (``status_message`` its description);
    ``parent_id`` is ``""`` for a root span; times in nanoseconds since the epoch."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    attributes: dict[str, AttributeValue]
    status: str
    status_message: str
    resource: dict[str, AttributeValue]
    scope: str
    start_ns: int
    end_ns: int
    events: tuple[tuple[str, dict[str, AttributeValue]], ...] = ()

    @property
    def service(self) -> str:
        """``service.name`` of the process that sent the span."""
        return str(self.resource.get("service.name", ""))


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point: the metric's ``name`` and ``unit``, the point's ``attributes``, ``value`` (a sum's or
    gauge's value, a histogram's sum) and ``count`` (a histogram's count; 1 otherwise)."""

    name: str
    unit: str
    attributes: dict[str, AttributeValue]
    value: float
    count: int
    resource: dict[str, AttributeValue]


def _spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        attributes=_attributes(span.attributes),
                        status=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        events=tuple((event.name, _attributes(event.attributes)) for event in span.events),
                    )
                )
    return spans


def _points_of(request: ExportMetricsServiceRequest) -> list[ReceivedPoint]:
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                data = metric.WhichOneof("data")
                for point in getattr(metric, data).data_points if data else ():
                    if data == "histogram":
                        value, count = point.sum, point.count
                    else:
                        value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                        count = 1
                    points.append(
                        ReceivedPoint(metric.name, metric.unit, _attributes(point.attributes), value, count, resource)
                    )
    return points


@dataclass
class _Store:
    """What a receiver got, shared with its serving thread(s)."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def add(self, spans: list[ReceivedSpan], points: list[ReceivedPoint], headers: dict[str, str]) -> None:
        with self.lock:
            self.spans += spans
            self.points += points
            self.headers.append(headers)
            self.lock.notify_all()


class _Receiving:
    """The query side shared by both receivers."""

    _store: _Store

    @property
    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far (a copy)."""
        with self._store.lock:
            return list(self._store.spans)

    @property
    def points(self) -> list[ReceivedPoint]:
        """Every metric data point received so far (a copy; each export of a cumulative metric repeats it)."""
        with self._store.lock:
            return list(self._store.points)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers (lower-case names) of every export request, in order (to check OTEL_EXPORTER_OTLP_HEADERS)."""
        with self._store.lock:
            return list(self._store.headers)

    def spans_of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        """The spans of one trace received so far, in start order."""
        return sorted((s for s in self.spans if s.trace_id == trace_id), key=lambda s: s.start_ns)

    def wait_for_spans(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """Wait until ``predicate(all spans received)`` is true and return those spans; ``AssertionError``
        listing the spans' names after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._store.lock:
            while not predicate(list(self._store.spans)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = sorted({f"{s.service}: {s.kind} {s.name}" for s in self._store.spans})
                    raise AssertionError(f"spans not received within {timeout} s; got {names}")
                self._store.lock.wait(remaining)
            return list(self._store.spans)

    def wait_for_span(self, predicate: Callable[[ReceivedSpan], bool], timeout: float = 15.0) -> ReceivedSpan:
        """Wait for the first span satisfying ``predicate`` and return it (``AssertionError`` after ``timeout``)."""
        spans = self.wait_for_spans(lambda spans: any(predicate(s) for s in spans), timeout)
        return next(s for s in spans if predicate(s))

    def wait_for_metric(
        self,
        name: str,
        predicate: Callable[[ReceivedPoint], bool] = lambda point: True,
        timeout: float = 15.0,
    ) -> list[ReceivedPoint]:
        """Wait until a data point of metric ``name`` satisfying ``predicate`` arrived; return every such point
        (``AssertionError`` naming the metrics that did arrive after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._store.lock:
            while True:
                found = [p for p in self._store.points if p.name == name and predicate(p)]
                if found:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = sorted({p.name for p in self._store.points})
                    raise AssertionError(f"metric {name!r} not received within {timeout} s; got {names}")
                self._store.lock.wait(remaining)


class _Handler(BaseHTTPRequestHandler):
    store: _Store

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        headers = {key.lower(): value for key, value in self.headers.items()}
        if self.path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(body)
            self.store.add(_spans_of(traces), [], headers)
            answer = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest.FromString(body)
            self.store.add([], _points_of(metrics), headers)
            answer = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per export would drown a test's output


class OtlpReceiver(_Receiving):
    """OTLP/HTTP receiver on ``127.0.0.1`` and a free port (context manager). :attr:`endpoint` is the value for
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporters append ``/v1/traces`` and ``/v1/metrics``)."""

    def __init__(self) -> None:
        self._store = _Store()
        handler = type("Handler", (_Handler,), {"store": self._store})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class GrpcOtlpReceiver(_Receiving):
    """OTLP/gRPC receiver (plaintext) on ``127.0.0.1`` and a free port (context manager). :attr:`endpoint` is
    ``http://127.0.0.1:<port>``, for ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        store = self._store = _Store()

        def metadata(context: grpc.ServicerContext) -> dict[str, str]:
            return {key: str(value) for key, value in context.invocation_metadata()}

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
            ) -> ExportTraceServiceResponse:
                store.add(_spans_of(request), [], metadata(context))
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(
                self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext
            ) -> ExportMetricsServiceResponse:
                store.add([], _points_of(request), metadata(context))
                return ExportMetricsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)  # type: ignore[no-untyped-call]
        self._port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._server.stop(grace=1).wait(5)
