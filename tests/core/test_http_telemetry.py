"""Server spans of ``instrument_app`` on a real server: named by the matched route once routing is done, the
method alone when nothing matched, an error status with the exception recorded when the app raises, the caller's
W3C trace context continued, and no span for ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kora.core.telemetry import instrument_app
from kora.core.telemetry.config import read_telemetry_config
from kora.core.telemetry.setup import Telemetry
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


async def item(request: Request) -> JSONResponse:
    return JSONResponse({"item": request.path_params["name"]})


async def boom(_: Request) -> JSONResponse:
    raise RuntimeError("the handler failed")


@pytest.fixture
def served() -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    telemetry = Telemetry(
        read_telemetry_config({}), Resource.create({}), registry, MeterProvider(), tracer_provider=tracer_provider
    )
    app = Starlette(routes=[Route("/items/{name}", item), Route("/boom", boom)])
    instrument_app(app, telemetry)
    with ThreadedServer(app) as server:
        yield server.root_url, exporter
    tracer_provider.shutdown()


def server_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.kind == SpanKind.SERVER]


def test_a_server_span_is_named_by_its_route_and_continues_the_callers_trace(served) -> None:
    url, exporter = served
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    assert httpx.get(f"{url}/items/tea", headers={"traceparent": traceparent}).json() == {"item": "tea"}
    (span,) = server_spans(exporter)
    assert span.name == "GET /items/{name}"
    assert span.attributes is not None
    assert span.attributes["http.route"] == "/items/{name}"
    assert span.attributes["http.response.status_code"] == 200
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == PARENT_ID


def test_an_unmatched_request_is_named_by_its_method_alone(served) -> None:
    url, exporter = served
    assert httpx.get(f"{url}/nowhere/at/all").status_code == 404
    (span,) = server_spans(exporter)
    # Never the raw path: a client could otherwise mint a span name per URL.
    assert span.name == "GET"


def test_a_failing_handler_leaves_an_error_span_with_the_exception(served) -> None:
    url, exporter = served
    assert httpx.get(f"{url}/boom").status_code == 500
    (span,) = server_spans(exporter)
    assert span.status.status_code == StatusCode.ERROR
    exceptions = [event for event in span.events if event.name == "exception"]
    assert exceptions
    assert exceptions[0].attributes is not None
    assert exceptions[0].attributes["exception.type"] == "RuntimeError"


def test_the_metrics_endpoint_makes_no_span(served) -> None:
    url, exporter = served
    assert httpx.get(f"{url}/metrics").status_code == 200
    assert server_spans(exporter) == []
