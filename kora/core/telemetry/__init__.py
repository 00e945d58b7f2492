"""OpenTelemetry for every Kora workload: configuration from the standard ``OTEL_*`` variables, the process's
providers, and the HTTP side (server spans, request metrics, ``/metrics``, client spans). User
documentation: docs/telemetry.md.

Importing this package loads no OpenTelemetry SDK, exporter or grpc: :func:`setup_telemetry` imports what the
environment switches on, so a workload without an endpoint pays for the metrics SDK and Prometheus only.

Each workload's start::

    telemetry = setup_telemetry("Agent", settings.agent_name, component="kora agent")  # SettingsError if bad
    instrument_app(app, telemetry)  # /metrics, request metrics, server spans when tracing
    ...
    telemetry.shutdown()  # flush on exit

Everything else uses the global API: ``opentelemetry.trace.get_tracer(__name__)``,
``opentelemetry.metrics.get_meter(__name__)``.
"""

from __future__ import annotations

from kora.core.telemetry.config import (
    TelemetryConfig,
    content_capture_enabled,
    metrics_export_enabled,
    read_telemetry_config,
    tracing_enabled,
)
from kora.core.telemetry.http import METRICS_PATH, RequestMetrics, instrument_app, instrument_http_client
from kora.core.telemetry.setup import Telemetry, current_telemetry, setup_telemetry

__all__ = [
    "METRICS_PATH",
    "RequestMetrics",
    "Telemetry",
    "TelemetryConfig",
    "content_capture_enabled",
    "current_telemetry",
    "instrument_app",
    "instrument_http_client",
    "metrics_export_enabled",
    "read_telemetry_config",
    "setup_telemetry",
    "tracing_enabled",
]
