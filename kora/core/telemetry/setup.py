"""Install the process's OpenTelemetry providers once, at a workload's start
(docs/telemetry.md).

Always: a global ``MeterProvider`` whose one reader is a ``PrometheusMetricReader`` (pull only, no thread), so
``/metrics`` answers without a collector. When :func:`~kora.core.telemetry.config.tracing_enabled`: a global
``TracerProvider`` with a ``BatchSpanProcessor`` over an OTLP span exporter (HTTP/protobuf, or gRPC per
``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``) and the httpx / httpx2 client instrumentation (spans on every outbound
request, W3C ``traceparent`` injected). When metrics export is enabled: a ``PeriodicExportingMetricReader`` with
the OTLP metric exporter. The SDK, its exporters and grpc are imported here, inside :func:`setup_telemetry`,
only for what is switched on.

Code elsewhere in Kora uses the global API only (``opentelemetry.trace.get_tracer(...)``,
``opentelemetry.metrics.get_meter(...)``): with tracing off those tracers are no-ops.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kora.core.telemetry.config import (
    KORA_RESOURCE_KIND,
    KORA_RESOURCE_NAME,
    SERVICE_NAMESPACE,
    Protocol,
    TelemetryConfig,
    read_telemetry_config,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer
    from prometheus_client import CollectorRegistry

__all__ = [
    "Telemetry",
    "current_telemetry",
    "prefer_stable_http_conventions",
    "setup_telemetry",
]

_log = logging.getLogger(__name__)

_SEMCONV_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"

_lock = threading.Lock()
_current: Telemetry | None = None


@dataclass
class Telemetry:
    """The providers :func:`setup_telemetry` installed for this process.

    ``registry`` is the Prometheus registry ``/metrics`` serves; ``tracer_provider`` is None when tracing is off.
    ``shutdown()`` flushes pending spans and metrics and stops the exporters (idempotent).
    """

    config: TelemetryConfig
    resource: Resource
    registry: CollectorRegistry
    meter_provider: MeterProvider
    tracer_provider: TracerProvider | None = None
    _stopped: bool = field(default=False, repr=False)

    def shutdown(self) -> None:
        """Flush and stop every provider: pending spans are exported (the batch processor's flush) and the
        periodic metric reader exports once more. Safe to call twice; never raises (a collector that is gone at
        exit must not turn a clean stop into a traceback)."""
        if self._stopped:
            return
        self._stopped = True
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is None:
                continue
            try:
                provider.shutdown()
            except Exception:  # the exporters log their own failures; exit goes on
                _log.warning("telemetry: shutting down %s failed", type(provider).__name__, exc_info=True)


def current_telemetry() -> Telemetry | None:
    """The telemetry :func:`setup_telemetry` installed in this process, or None before it ran."""
    return _current


def prefer_stable_http_conventions() -> None:
    """Make the HTTP instrumentations emit the stable HTTP semantic conventions (``http.server.request.duration``
    in seconds with ``http.route``, ``http.request.method``...) unless ``OTEL_SEMCONV_STABILITY_OPT_IN`` already
    says otherwise. Must run before the first instrumentation is created: they read the variable once."""
    if not os.environ.get(_SEMCONV_OPT_IN, "").strip():
        os.environ[_SEMCONV_OPT_IN] = "http"


def _resource(kind: str, name: str | None, namespace: str | None) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector
    from opentelemetry.sdk.resources import Resource as SdkResource

    defaults: dict[str, str] = {KORA_RESOURCE_KIND: kind}
    if name:
        defaults[KORA_RESOURCE_NAME] = name
        defaults[SERVICE_NAME] = name
    else:
        defaults[SERVICE_NAME] = f"kora-{kind.lower()}"
    if namespace:
        defaults[SERVICE_NAMESPACE] = namespace
    # Resource.create lets its arguments override OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; Kora's values
    # are only defaults, so the environment (the wiring's and the user's) is merged over them again.
    return _hashed_once(SdkResource.create(defaults).merge(OTELResourceDetector().detect()))


def _hashed_once(resource: Resource) -> Resource:
    """``resource`` (same attributes, same schema URL, equal to it) as a ``Resource`` whose hash is worked out once.
    The SDK's ``Resource.__hash__`` dumps the attributes to sorted JSON on every call, and the OTLP span exporter
    hashes the resource of every span it encodes (it groups a batch by resource): 3.4 us a span for an agent's
    resource, four spans a traced text turn, on the exporter's thread. A resource never changes once made."""
    from opentelemetry.sdk.resources import Resource as SdkResource

    class HashedOnceResource(SdkResource):
        _hash: int | None = None

        def __hash__(self) -> int:
            if self._hash is None:
                self._hash = super().__hash__()
            return self._hash

    return HashedOnceResource(resource.attributes, resource.schema_url)


def _span_exporter(protocol: Protocol) -> SpanExporter:
    # No arguments: the exporters read OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,HEADERS,TIMEOUT,COMPRESSION,...}.
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _metric_exporter(protocol: Protocol) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        return GrpcMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


def _muting(base: type[TracerProvider], muted: frozenset[str]) -> type[TracerProvider]:
    """``base`` whose ``get_tracer`` answers the API's no-op tracer for the scopes in ``muted`` (its spans are
    never made, so they cost almost nothing and their children attach to the span around them)."""
    if not muted:
        return base
    from opentelemetry.trace import NoOpTracer

    silent = NoOpTracer()

    class MutingTracerProvider(base):  # type: ignore[valid-type,misc]
        def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> Tracer:
            if instrumenting_module_name in muted:
                return silent
            return super().get_tracer(instrumenting_module_name, *args, **kwargs)  # type: ignore[no-any-return]

    return MutingTracerProvider


def _instrument_http_clients() -> None:
    # Class-level patches of httpx's and httpx2's own transports (AsyncHTTPTransport/HTTPTransport), so clients
    # created before this ran are covered too. Other transports (httpx_aiohttp's) need
    # kora.core.telemetry.instrument_http_client per client.
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor

    for instrumentor in (HTTPXClientInstrumentor(), HTTPX2ClientInstrumentor()):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def setup_telemetry(
    kind: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    component: str = "kora",
    muted_scopes: Collection[str] = (),
) -> Telemetry:
    """Install this process's telemetry and return it; call once at a workload's start, before serving, and
    ``shutdown()`` the result on exit. A second call returns the first call's telemetry.

    ``kind`` / ``name`` / ``namespace`` are the Kora resource the process runs (``"Agent"``, ``"helper"``,
    ``"default"``): they become ``kora.resource.kind``, ``kora.resource.name``, ``service.namespace`` and the
    default ``service.name``; ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` override them (the wiring
    writes both). ``component`` (``"kora agent"``) prefixes error messages. ``muted_scopes``: instrumentation
    scopes (the names libraries pass to ``get_tracer``) whose tracers make no spans, e.g. a library that traces its
    own internals far below what an operator reads.

    Raises :class:`kora.core.settings_errors.SettingsError` naming each bad ``OTEL_*`` variable (an endpoint that
    is not an http(s) URL, an unknown protocol); nothing is installed then.
    """
    global _current
    config = read_telemetry_config(os.environ, component)
    with _lock:
        if _current is not None:
            return _current
        prefer_stable_http_conventions()
        from opentelemetry import metrics
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from prometheus_client import CollectorRegistry as PromRegistry
        from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

        resource = _resource(kind, name, namespace)
        registry = PromRegistry(auto_describe=True)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=registry)
        readers: list[MetricReader] = [PrometheusMetricReader(registry=registry)]
        if config.metrics:
            readers.append(PeriodicExportingMetricReader(_metric_exporter(config.metrics_protocol)))
        meter_provider = SdkMeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
        telemetry = Telemetry(config, resource, registry, meter_provider)
        if config.traces:
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            tracer_provider = _muting(SdkTracerProvider, frozenset(muted_scopes))(resource=resource)
            tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(config.traces_protocol)))
            trace.set_tracer_provider(tracer_provider)
            telemetry.tracer_provider = tracer_provider
            _instrument_http_clients()
        _current = telemetry
        _log.debug("telemetry: %s, service %s", config, resource.attributes.get("service.name"))
        return telemetry
