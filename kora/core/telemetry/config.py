"""Which OpenTelemetry signals a workload exports, read from the standard ``OTEL_*`` variables (chiefly
``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_SERVICE_NAME``; docs/telemetry.md "Switching it on").

Pure parsing, no OpenTelemetry import: :func:`tracing_enabled` is asked on hot-ish paths (client construction)
and by processes that never load the SDK. The SDK itself still reads every other ``OTEL_*`` variable it knows
(headers, timeouts, compression, certificates, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*`` ...); Kora only
decides *whether* and *over which protocol* to export, and refuses values the SDK would otherwise only complain
about in its log at the first export.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

from kora.core.env import OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
from kora.core.settings_errors import SettingsError

__all__ = [
    "KORA_RESOURCE_KIND",
    "KORA_RESOURCE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "SERVICE_NAMESPACE",
    "Protocol",
    "TelemetryConfig",
    "content_capture_enabled",
    "metrics_export_enabled",
    "read_telemetry_config",
    "resource_attributes_value",
    "tracing_enabled",
]

#: Resource attributes naming the Kora resource a workload runs (besides the semantic conventions' namespace).
KORA_RESOURCE_KIND = "kora.resource.kind"
KORA_RESOURCE_NAME = "kora.resource.name"
SERVICE_NAMESPACE = "service.namespace"

OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
OTEL_EXPORTER_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTEL_EXPORTER_OTLP_METRICS_PROTOCOL = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
#: The GenAI semantic conventions' switch for exporting prompts, completions, tool arguments and results.
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

#: OTLP transports Kora can export over. The SDK's Python exporters have no ``http/json``.
Protocol = Literal["http/protobuf", "grpc"]
_PROTOCOLS: tuple[Protocol, ...] = ("http/protobuf", "grpc")


def _set(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def _sdk_disabled(environ: Mapping[str, str]) -> bool:
    # The SDK's own reading of the variable: only "true", any case, disables it.
    return _set(environ, OTEL_SDK_DISABLED).lower() == "true"


def tracing_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """True when spans are exported: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
    set and not blank, and ``OTEL_SDK_DISABLED`` is not ``true``. Never raises (values are checked by
    :func:`read_telemetry_config`)."""
    if _sdk_disabled(environ):
        return False
    return bool(_set(environ, OTEL_EXPORTER_OTLP_ENDPOINT) or _set(environ, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT))


def metrics_export_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """True when metrics are pushed over OTLP (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._METRICS_ENDPOINT`` set,
    SDK not disabled). ``/metrics`` is served either way."""
    if _sdk_disabled(environ):
        return False
    return bool(_set(environ, OTEL_EXPORTER_OTLP_ENDPOINT) or _set(environ, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT))


def content_capture_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """True when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` (any case): only then may spans
    carry message contents, tool arguments and tool results. Secrets are never exported either way."""
    return _set(environ, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).lower() == "true"


@dataclass(frozen=True)
class TelemetryConfig:
    """What :func:`kora.core.telemetry.setup_telemetry` installs.

    ``traces`` / ``metrics``: export spans / metrics over OTLP; ``traces_protocol`` / ``metrics_protocol``: the
    transport of each (the per-signal variable over ``OTEL_EXPORTER_OTLP_PROTOCOL``, default ``http/protobuf``);
    ``capture_content``: :func:`content_capture_enabled`.
    """

    traces: bool
    metrics: bool
    traces_protocol: Protocol = "http/protobuf"
    metrics_protocol: Protocol = "http/protobuf"
    capture_content: bool = False


def _protocol(environ: Mapping[str, str], signal_variable: str, problems: list[str]) -> Protocol:
    for name in (signal_variable, OTEL_EXPORTER_OTLP_PROTOCOL):
        raw = _set(environ, name)
        if not raw:
            continue
        for protocol in _PROTOCOLS:
            if raw.lower() == protocol:
                return protocol
        problems.append(f"{name}: must be one of {', '.join(_PROTOCOLS)} (got {raw!r})")
        return "http/protobuf"
    return "http/protobuf"


def _check_endpoint(environ: Mapping[str, str], name: str, problems: list[str]) -> None:
    raw = _set(environ, name)
    if not raw:
        return
    reason = "must be an http:// or https:// URL with a host"
    try:
        parts = urlsplit(raw)
        # Reading .port raises ValueError for a port that is not a number in range.
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        valid = False
    if valid and any(ord(char) < 0x21 or ord(char) == 0x7F for char in raw):
        valid, reason = False, "must not contain spaces or control characters"
    if not valid:
        problems.append(f"{name}: {reason} (got {raw!r})")


def read_telemetry_config(environ: Mapping[str, str] = os.environ, component: str = "kora") -> TelemetryConfig:
    """Read and check the ``OTEL_*`` variables Kora acts on.

    Raises :class:`kora.core.settings_errors.SettingsError` (``component`` names the command, ``"kora agent"``)
    listing every bad variable: an endpoint that is not an http(s) URL with a host, or a protocol other than
    ``http/protobuf`` and ``grpc``. Only the variables of a signal that is exported are checked, so a stray
    protocol in a workload that exports nothing does not stop it.
    """
    problems: list[str] = []
    traces, metrics = tracing_enabled(environ), metrics_export_enabled(environ)
    traces_protocol: Protocol = "http/protobuf"
    metrics_protocol: Protocol = "http/protobuf"
    if traces:
        _check_endpoint(environ, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, problems)
        traces_protocol = _protocol(environ, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, problems)
    if metrics:
        _check_endpoint(environ, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, problems)
        metrics_protocol = _protocol(environ, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, problems)
    if traces or metrics:
        _check_endpoint(environ, OTEL_EXPORTER_OTLP_ENDPOINT, problems)
    if problems:
        # One line per variable even when both signals fall back on the same shared one.
        raise SettingsError(component, dict.fromkeys(problems))
    return TelemetryConfig(
        traces=traces,
        metrics=metrics,
        traces_protocol=traces_protocol,
        metrics_protocol=metrics_protocol,
        capture_content=content_capture_enabled(environ),
    )


def resource_attributes_value(namespace: str, kind: str, name: str) -> str:
    """The ``OTEL_RESOURCE_ATTRIBUTES`` value naming a workload's resource:
    ``service.namespace=<namespace>,kora.resource.kind=<kind>,kora.resource.name=<name>``, values percent-encoded
    as the SDK decodes them.

    >>> resource_attributes_value("default", "Agent", "helper")
    'service.namespace=default,kora.resource.kind=Agent,kora.resource.name=helper'
    """
    pairs = ((SERVICE_NAMESPACE, namespace), (KORA_RESOURCE_KIND, kind), (KORA_RESOURCE_NAME, name))
    return ",".join(f"{key}={quote(value, safe='')}" for key, value in pairs)
