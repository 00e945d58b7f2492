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

Other packages import from this package's face, never from its modules, except :mod:`kora.core.telemetry.routing`
(a Starlette route that names its span): the face stays free of Starlette, so the resource wiring, which reads
the telemetry configuration, does not load a web framework.
"""

from __future__ import annotations

from kora.core.telemetry.config import (
    content_capture_enabled,
    read_telemetry_config,
    resource_attributes_value,
    tracing_enabled,
)
from kora.core.telemetry.http import METRICS_PATH, instrument_app, instrument_http_client
from kora.core.telemetry.setup import Telemetry, setup_telemetry

__all__ = [
    "METRICS_PATH",
    "Telemetry",
    "content_capture_enabled",
    "instrument_app",
    "instrument_http_client",
    "read_telemetry_config",
    "resource_attributes_value",
    "setup_telemetry",
    "tracing_enabled",
]
