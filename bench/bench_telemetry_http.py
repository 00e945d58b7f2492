"""Per-request CPU of Kora's inbound-HTTP telemetry, against no telemetry at all, in one process.

Run: ``python bench/bench_telemetry_http.py`` (about 30 s). Each mode runs in a subprocess of its own (global
providers are per process) and drives a one-route FastAPI app directly over ASGI (no sockets, no client: only
the server side's cost), ``--requests`` requests after a warm-up; the figure is ``time.process_time()`` per
request, median of ``--repeats`` runs. Modes:

- ``none``: the app alone (today's cost).
- ``kora-off``: ``instrument_app`` with tracing off: Kora's ``RequestMetrics`` (the ``http.server.request.duration``
  histogram, Prometheus reader) and ``/metrics``. What every workload pays without an OTLP endpoint.
- ``otel-noop``: the OpenTelemetry ASGI instrumentation with a no-op tracer and a real meter provider: what
  tracing-off would cost had Kora used the instrumentation for metrics (the alternative not taken).
- ``kora-on``: ``instrument_app`` with tracing on (SDK tracer, batch processor, exporter to a port nothing
  listens on, so exports fail quietly off the request path): spans + metrics. The server span is FastAPI's own.
- ``asgi-on``: the same, with the server span made by the OpenTelemetry ASGI instrumentation instead (what
  ``instrument_app`` did for FastAPI apps before November 27, and still does for plain Starlette apps).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("none", "kora-off", "otel-noop", "kora-on", "asgi-on")


def _app():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: str) -> JSONResponse:
        return JSONResponse({"item": item})

    return app


SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/items/abc",
    "raw_path": b"/items/abc",
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench")],
    "client": ("127.0.0.1", 5000),
    "server": ("127.0.0.1", 8000),
}


async def _drive(app, requests: int) -> float:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        pass

    for _ in range(500):
        await app(dict(SCOPE), receive, send)
    started = time.process_time()
    for _ in range(requests):
        await app(dict(SCOPE), receive, send)
    return (time.process_time() - started) / requests * 1e6


def _child(mode: str, requests: int) -> None:
    app = _app()
    if mode in ("kora-off", "kora-on"):
        from kora.core.telemetry import instrument_app, setup_telemetry

        instrument_app(app, setup_telemetry("Agent", "bench"))
    elif mode == "asgi-on":
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.metrics import NoOpMeterProvider

        from kora.core.telemetry import setup_telemetry
        from kora.core.telemetry.http import (
            RequestMetrics,
            _provisional_span_details,
            _switch_off_fastapi_native_telemetry,
        )

        telemetry = setup_telemetry("Agent", "bench")
        _switch_off_fastapi_native_telemetry(app)
        app.add_middleware(RequestMetrics, meter_provider=telemetry.meter_provider, name_spans=True)
        app.add_middleware(
            OpenTelemetryMiddleware,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=NoOpMeterProvider(),
            excluded_urls="/metrics",
            exclude_spans=["receive", "send"],
            default_span_details=_provisional_span_details,
        )
    elif mode == "otel-noop":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import CollectorRegistry

        meters = MeterProvider(metric_readers=[PrometheusMetricReader(registry=CollectorRegistry())])
        app.add_middleware(OpenTelemetryMiddleware, meter_provider=meters, exclude_spans=["receive", "send"])
    print(f"{asyncio.run(_drive(app, requests)):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.requests)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"PYTHONPATH": str(ROOT)}
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:  # interleaved, so machine load drifts over all modes alike
            mode_env = env | ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"} if mode.endswith("-on") else {})
            command = [sys.executable, __file__, "--child", mode, "--requests", str(args.requests)]
            out = subprocess.run(command, env=mode_env, capture_output=True, text=True, check=True, timeout=300)
            results[mode].append(float(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(results["none"])
    print(f"{'mode':<10} {'CPU us/request':>15} {'added':>8}")
    for mode in MODES:
        median = statistics.median(results[mode])
        print(f"{mode:<10} {median:>15.1f} {median - base:>+8.1f}")


if __name__ == "__main__":
    main()
