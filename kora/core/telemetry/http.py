"""Telemetry of a workload's HTTP surface: server spans and request metrics for inbound requests, ``GET /metrics``
in Prometheus text, and client spans for outbound clients the global instrumentation cannot reach.

:func:`instrument_app` installs the OpenTelemetry ASGI middleware only when tracing is on, because it is not
free even when its tracer is a no-op. Measured per request on a one-route FastAPI app driven in-process
(bench/bench_telemetry.py, 2-core machine, CPU): no middleware ~55 us; the instrumentation with a no-op tracer
+~130 us; FastAPI's own native telemetry +~50 us; :class:`RequestMetrics` +~15 us; spans on (instrumentation +
RequestMetrics, batch export) +~165 us. So the request metrics (``http.server.request.duration``, stable
HTTP conventions: ``http.request.method``, ``http.response.status_code``, ``http.route``, ``url.scheme``;
seconds) always come from :class:`RequestMetrics`, and server spans (W3C context extraction included) are made
only when spans are exported: by FastAPI's own native tracing for a FastAPI app (the agent, the memory service),
by the ASGI instrumentation for a plain Starlette app. Measured per request on the one-route app with spans on
(bench/bench_telemetry_http.py, ``kora-on`` against ``asgi-on``, three runs on a loaded 2-core machine): FastAPI's
native server span costs 10-110 us less than the ASGI instrumentation's, which decodes every header once per
header it looks up, sets each request attribute twice and works out the request's URL twice.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kora.core.telemetry.config import tracing_enabled
from kora.core.telemetry.setup import Telemetry, prefer_stable_http_conventions

if TYPE_CHECKING:
    import httpx
    import httpx2
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, TracerProvider
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["METRICS_PATH", "RequestMetrics", "instrument_app", "instrument_http_client", "metrics_response"]

#: Path of the Prometheus scrape endpoint on every workload.
METRICS_PATH = "/metrics"
#: Instrumentation scope of Kora's own request metrics.
_SCOPE = "kora.http.server"
#: Most distinct attribute sets :class:`RequestMetrics` keeps built (routes x methods x statuses in use).
_MAX_ATTRIBUTE_SETS = 1024
# The stable HTTP conventions' histogram buckets (seconds), as the OpenTelemetry instrumentations use.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class RequestMetrics:
    """Pure ASGI middleware recording ``http.server.request.duration`` (histogram, seconds) per request.

    Attributes: ``http.request.method`` (unknown methods as ``_OTHER``, so a client cannot grow the series),
    ``http.response.status_code`` (500 when the app raised before answering), ``url.scheme`` and ``http.route``
    (the matched route's template, e.g. ``/v1/chat/completions`` or ``/items/{x}``; absent when nothing
    matched). Other ASGI scopes (lifespan, websocket) pass through untouched.

    With ``name_spans`` (tracing on, inside the OpenTelemetry middleware) it also gives the request's server span
    its route once routing is done (``http.route`` and the name ``{method} {route}``): the instrumentation guesses
    the route before routing and misses routes inside mounted apps (the MCP endpoint is ``POST /mcp`` of an app
    mounted at ``/``).
    """

    def __init__(self, app: ASGIApp, meter_provider: MeterProvider, *, name_spans: bool = False) -> None:
        from opentelemetry.util.http import sanitize_method

        self.app = app
        self._sanitize_method = sanitize_method
        self._name_spans = name_spans
        self._attribute_sets: dict[tuple[str, int, str, str | None], dict[str, str | int]] = {}
        meter = meter_provider.get_meter(_SCOPE)
        self._duration: Histogram = meter.create_histogram(
            "http.server.request.duration",
            unit="s",
            description="Duration of HTTP server requests.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        # Taken before the app runs: code inside may leave another span current (the MCP SDK's own).
        server_span = self._current_span() if self._name_spans else None

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if server_span is not None:
                    # Named when the answer starts: routing is done, and a streamed answer may end the span
                    # before the app returns.
                    self._name_span(server_span, scope)
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            self._duration.record(time.perf_counter() - started, self._attributes(scope, status))

    def _attributes(self, scope: Scope, status: int) -> dict[str, str | int]:
        """The request's attributes, one dict per distinct set (the SDK copies what it is given): a route's
        requests share one instead of building and sanitizing it each time."""
        route = _route(scope)
        key = (scope["method"], status, scope.get("scheme", "http"), route)
        attributes = self._attribute_sets.get(key)
        if attributes is None:
            method = self._sanitize_method(scope["method"])
            attributes = {"http.request.method": method, "http.response.status_code": status, "url.scheme": key[2]}
            if route:
                attributes["http.route"] = route
            # A client cannot grow the set: an unknown method is never kept, nor anything past a bound (the
            # OpenTelemetry variable that keeps every method's own name may be set).
            if method != "_OTHER" and len(self._attribute_sets) < _MAX_ATTRIBUTE_SETS:
                self._attribute_sets[key] = attributes
        return attributes

    def _name_span(self, span: Span, scope: Scope) -> None:
        route = _route(scope)
        if route and span.is_recording():
            method = self._sanitize_method(scope["method"])
            span.set_attribute("http.route", route)
            # The instrumentation's own naming: an unknown method is "HTTP".
            span.update_name(f"{'HTTP' if method == '_OTHER' else method} {route}")

    @staticmethod
    def _current_span() -> Span:
        from opentelemetry.trace import get_current_span

        return get_current_span()


def _route(scope: Scope) -> str | None:
    # Starlette's router leaves the matched route in the scope it was handed (the same dict as ours).
    route = getattr(scope.get("route"), "path", None)
    return route if isinstance(route, str) and route else None


def metrics_response(request: Request, telemetry: Telemetry) -> Response:
    """The Prometheus exposition of ``telemetry.registry``: text format 0.0.4, or OpenMetrics when the scraper's
    ``Accept`` asks for it (prometheus_client's negotiation)."""
    from prometheus_client.exposition import choose_encoder
    from starlette.responses import Response

    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(telemetry.registry), media_type=content_type)


def _add_metrics_route(app: Starlette, telemetry: Telemetry) -> None:
    from kora.core.telemetry.routing import NamedRoute

    async def metrics(request: Request) -> Response:
        return metrics_response(request, telemetry)

    # First in the table: the gateway's catch-all and mounted apps (MCP at "/") must not shadow it.
    app.router.routes.insert(0, NamedRoute(METRICS_PATH, metrics, methods=["GET"], include_in_schema=False))


def _switch_off_fastapi_native_telemetry(app: Starlette) -> None:
    # FastAPI (0.165) records its own request metrics, server spans and per-operation spans as soon as a global
    # meter or tracer provider exists. Measured (bench/bench_telemetry.py): +~50 us CPU per request with only the
    # meter provider installed, against +~15 us for RequestMetrics; and with both running every request would be
    # counted twice under one metric name. Its settings are a plain dict the app reads on every request;
    # FastAPI(telemetry=...) sets the same keys, but that would have to be repeated by every app's constructor.
    config = getattr(app, "_telemetry", None)
    if isinstance(config, dict):
        config.update(tracing=False, metrics=False, logs=False, operation_spans=False)


def _fastapi_native_spans(app: Starlette, tracer_provider: TracerProvider) -> bool:
    # FastAPI's native tracing, server spans only, on Kora's provider: a SERVER span per request whose parent is
    # the request's propagated context (OTEL_PROPAGATORS), named "{method} {http.route}" by FastAPI's router as
    # it selects the route (plain Starlette routes included), with the stable HTTP conventions' attributes. Its
    # metrics, logs and per-operation spans stay off (RequestMetrics records the histogram).
    # False, and nothing changed, when ``app`` is not a FastAPI app or mounts another app: FastAPI would name a
    # request to a mounted app "{method} {mount}/{path}" (its http.route too), not by the route matched inside
    # (the MCP endpoint is POST /mcp of an app mounted at /); the ASGI instrumentation and RequestMetrics do.
    from starlette.routing import Mount

    config = getattr(app, "_telemetry", None)
    if not isinstance(config, dict) or any(isinstance(route, Mount) for route in app.router.routes):
        return False
    config.update(
        tracer_provider=tracer_provider,
        tracing=True,
        metrics=False,
        logs=False,
        operation_spans=False,
        exclude=_is_metrics_scrape,
    )
    return True


def _is_metrics_scrape(scope: Scope) -> bool:
    return scope.get("path") == METRICS_PATH


def instrument_app(app: Starlette, telemetry: Telemetry) -> None:
    """Give ``app`` (FastAPI or plain Starlette) its telemetry: ``GET /metrics`` (Prometheus text of
    ``telemetry.registry``) and, per inbound request, ``http.server.request.duration``; when tracing is on, also
    a server span per request (parent taken from the request's W3C ``traceparent``), named ``{method}
    {http.route}`` (FastAPI's native tracing for a FastAPI app, the ASGI instrumentation otherwise; ``/metrics``
    scrapes get none). Call it once, before the app serves its first request (the middleware stack is built then).
    """
    _add_metrics_route(app, telemetry)
    provider = telemetry.tracer_provider
    if provider is not None and _fastapi_native_spans(app, provider):
        app.add_middleware(RequestMetrics, meter_provider=telemetry.meter_provider)
        return
    _switch_off_fastapi_native_telemetry(app)
    app.add_middleware(RequestMetrics, meter_provider=telemetry.meter_provider, name_spans=provider is not None)
    if provider is None:
        return
    prefer_stable_http_conventions()
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.metrics import NoOpMeterProvider

    # A plain Starlette app (model proxy, gateway) or one that mounts another (the MCP server): the ASGI
    # instrumentation itself, not the
    # contrib FastAPI wrapper of it, which finds the route before routing by matching every route of the table
    # (~50 us a request here) to name the span; RequestMetrics names it after routing instead.
    # Its metrics are switched off: RequestMetrics records the same histogram in both modes.
    app.add_middleware(
        OpenTelemetryMiddleware,
        tracer_provider=provider,
        meter_provider=NoOpMeterProvider(),
        excluded_urls=METRICS_PATH,
        exclude_spans=["receive", "send"],
        default_span_details=_provisional_span_details,
    )


def _provisional_span_details(scope: Scope) -> tuple[str, dict[str, str]]:
    # The server span's name until routing is done (the HTTP conventions' name when no route is known: the
    # method alone, so a request that fails before routing cannot add a span name per URL).
    from opentelemetry.util.http import sanitize_method

    method = sanitize_method(str(scope.get("method", "")))
    return ("HTTP" if method == "_OTHER" else method), {}


def instrument_http_client(client: httpx.Client | httpx.AsyncClient | httpx2.Client | httpx2.AsyncClient) -> None:
    """Trace ``client``'s requests (client span + ``traceparent``) when its transport is one the global httpx /
    httpx2 instrumentation does not patch, e.g. ``httpx_aiohttp.httpx2.Httpx2AiohttpClient``'s aiohttp transport.

    Call it right after creating such a client, whether or not telemetry is set up yet: with tracing off (per the
    environment) it does nothing and imports nothing; with tracing on the spans go to the global tracer provider
    once :func:`~kora.core.telemetry.setup_telemetry` has installed it. Clients on httpx's / httpx2's own
    transports are left alone: the global instrumentation covers them, and wrapping twice would give two spans.
    ``TypeError`` for anything else.
    """
    if not tracing_enabled():
        return
    prefer_stable_http_conventions()
    import httpx
    import httpx2
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor

    instrumentor: type[HTTPXClientInstrumentor | HTTPX2ClientInstrumentor]
    covered: tuple[type, ...]
    if isinstance(client, httpx.Client | httpx.AsyncClient):
        instrumentor, covered = HTTPXClientInstrumentor, (httpx.HTTPTransport, httpx.AsyncHTTPTransport)
    elif isinstance(client, httpx2.Client | httpx2.AsyncClient):
        instrumentor, covered = HTTPX2ClientInstrumentor, (httpx2.HTTPTransport, httpx2.AsyncHTTPTransport)
    else:
        raise TypeError(f"not an httpx or httpx2 client: {type(client).__name__}")
    if isinstance(client._transport, covered):
        return
    # The instrumentor's annotation names httpx's classes only; httpx2's are the API-compatible fork it wraps.
    instrumentor.instrument_client(client)  # type: ignore[arg-type]
