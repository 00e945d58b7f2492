"""OpenTelemetry of Kora's workloads as real processes, received by a real OTLP receiver (tests.support.otlp).

Covers the telemetry every workload shares: server spans with the wiring's resource attributes, outbound client spans
whose ``traceparent`` reaches the next process, one trace id from an agent through its tool server, ``/metrics`` in
Prometheus text on every workload, nothing loaded or started without an endpoint, the gRPC switch, a clear start-up
error for a bad protocol, and ``kora up --otel-endpoint``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kora.core.net import free_port
from kora.core.telemetry.config import resource_attributes_value
from kora.scripted import TextReply, ToolCall, ToolCallReply
from kora.scripted.model import ScriptedModel, create_app
from tests.support.otlp import GrpcOtlpReceiver, OtlpReceiver, ReceivedSpan
from tests.support.processes import FAST_EXPORT, KORA, HeaderRecorder, clean_env, kora_process, prometheus
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

TOOLS = '''
import math

def hypotenuse(a: float, b: float) -> float:
    """Length of the hypotenuse of a right triangle with legs a and b."""
    return math.hypot(a, b)
'''


def request_count(samples: dict[str, list[tuple[dict[str, str], float]]], route: str) -> float:
    """How many requests ``/metrics`` counted for ``route`` (every method and status)."""
    counts = samples.get("http_server_request_duration_seconds_count", [])
    return sum(value for labels, value in counts if labels.get("http_route") == route)


def traceparent_trace_id(header: str) -> str:
    """The trace id of a W3C ``traceparent`` header (``00-<trace>-<span>-<flags>``)."""
    version, trace_id, span_id, flags = header.split("-")
    assert (version, len(trace_id), len(span_id), len(flags)) == ("00", 32, 16, 2)
    return trace_id


@dataclass
class ToolTurn:
    """What one agent turn calling a tool left behind: the model's request headers, the model's base URL and
    each process's ``/metrics`` samples taken right after the turn."""

    model_headers: list[dict[str, str]]
    model_url: str
    agent_metrics: dict[str, list[tuple[dict[str, str], float]]]
    mcp_metrics: dict[str, list[tuple[dict[str, str], float]]]


def run_tool_turn(receiver: OtlpReceiver) -> ToolTurn:
    """``kora mcp`` (tool server "geometry") and ``kora agent`` ("asker", calling it) as processes exporting to
    ``receiver``, with the resource attributes the wiring writes; one chat turn that calls the tool; both
    processes stopped with SIGTERM (their telemetry flushes on the way out)."""
    model = ScriptedModel()
    model.enqueue(ToolCallReply([ToolCall("hypotenuse", {"a": 3, "b": 4})]), TextReply("It is 5."))
    recorder = HeaderRecorder(create_app(model))
    agent_port, mcp_port = free_port(), free_port()
    mcp_url, agent_url = f"http://127.0.0.1:{mcp_port}", f"http://127.0.0.1:{agent_port}"
    with ThreadedServer(recorder, name="scripted-model", lifespan="off") as model_server:
        mcp_env = clean_env(
            MCP_TOOLS_STRING=TOOLS,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_SERVICE_NAME="mcpserver-geometry",
            OTEL_RESOURCE_ATTRIBUTES=resource_attributes_value("team", "MCPServer", "geometry"),
            **FAST_EXPORT,
        )
        agent_env = clean_env(
            AGENT_NAME="asker",
            AGENT_HOST="127.0.0.1",
            AGENT_PORT=str(agent_port),
            MODEL_API_URL=model_server.root_url + "/v1",
            MODEL_NAME="scripted",
            MCP_SERVERS="geometry",
            MCP_SERVER_GEOMETRY_URL=mcp_url,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_SERVICE_NAME="asker",
            OTEL_RESOURCE_ATTRIBUTES=resource_attributes_value("team", "Agent", "asker"),
            **FAST_EXPORT,
        )
        with (
            kora_process(["mcp", "--host", "127.0.0.1", "--port", str(mcp_port)], mcp_env, mcp_url + "/health"),
            kora_process(["agent"], agent_env, agent_url + "/health"),
        ):
            answer = httpx.post(
                agent_url + "/v1/chat/completions",
                json={"model": "asker", "messages": [{"role": "user", "content": "3,4?"}]},
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "It is 5."
            agent_metrics, mcp_metrics = prometheus(agent_url + "/metrics"), prometheus(mcp_url + "/metrics")
        model_headers = [h for h in recorder.headers if h.get("content-type", "").startswith("application/json")]
        return ToolTurn(model_headers, model_server.root_url, agent_metrics, mcp_metrics)


def is_chat(span: ReceivedSpan) -> bool:
    """The agent's server span of ``POST /v1/chat/completions``."""
    return span.kind == "SERVER" and span.attributes.get("http.route") == "/v1/chat/completions"


@pytest.mark.slow
def test_agent_and_tool_server_share_one_trace_and_serve_metrics():
    with OtlpReceiver() as receiver:
        turn = run_tool_turn(receiver)
        chat = receiver.wait_for_span(is_chat)
        assert chat.service == "asker"
        assert chat.resource["kora.resource.kind"] == "Agent"
        assert chat.resource["kora.resource.name"] == "asker"
        assert chat.resource["service.namespace"] == "team"
        assert chat.attributes["http.request.method"] == "POST"
        assert chat.attributes["http.response.status_code"] == 200
        assert chat.parent_id == ""

        # The tool call: the tool server's server span is in the agent's trace, under an agent client span.
        tool = receiver.wait_for_span(
            lambda s: (
                s.service == "mcpserver-geometry"
                and s.kind == "SERVER"
                and s.trace_id == chat.trace_id
                and s.attributes.get("http.request.method") == "POST"
            )
        )
        assert tool.resource["kora.resource.kind"] == "MCPServer"
        assert tool.resource["kora.resource.name"] == "geometry"
        assert tool.resource["service.namespace"] == "team"
        assert (tool.name, tool.attributes["http.route"]) == ("POST /mcp", "/mcp")
        by_id = {s.span_id: s for s in receiver.spans_of_trace(chat.trace_id)}
        assert (by_id[tool.parent_id].kind, by_id[tool.parent_id].service) == ("CLIENT", "asker")

        # /metrics on both processes, in Prometheus text, counting the requests per route ...
        assert request_count(turn.agent_metrics, "/v1/chat/completions") == 1
        assert request_count(turn.mcp_metrics, "/mcp") >= 1, turn.mcp_metrics.get(
            "http_server_request_duration_seconds_count"
        )
        # ... and the same histogram pushed over OTLP.
        receiver.wait_for_metric(
            "http.server.request.duration", lambda p: p.attributes.get("http.route") == "/v1/chat/completions"
        )


@pytest.mark.slow
def test_the_agents_model_requests_carry_the_turns_traceparent():
    with OtlpReceiver() as receiver:
        turn = run_tool_turn(receiver)
        chat = receiver.wait_for_span(is_chat)
        assert len(turn.model_headers) == 2
        for headers in turn.model_headers:
            assert traceparent_trace_id(headers.get("traceparent", "")) == chat.trace_id
            parent = headers["traceparent"].split("-")[2]
            client = receiver.wait_for_span(lambda s, parent=parent: s.span_id == parent)
            # The GenAI chat span is the request's client span, naming the server it called.
            assert (client.kind, client.service, client.name) == ("CLIENT", "asker", "chat scripted")
            model = urlsplit(turn.model_url)
            server = (client.attributes["server.address"], client.attributes["server.port"])
            assert server == (model.hostname, model.port)


CLIENTS_PROBE = textwrap.dedent(
    """
    import asyncio, json, sys
    import httpx, httpx2
    from httpx_aiohttp.httpx2 import Httpx2AiohttpClient
    from opentelemetry import trace
    from kora.core.telemetry import instrument_http_client, setup_telemetry

    async def main(url):
        # Created before setup, as a workload's module-level or early clients may be.
        clients = {"httpx": httpx.AsyncClient(), "httpx2-aiohttp": Httpx2AiohttpClient()}
        instrument_http_client(clients["httpx2-aiohttp"])
        telemetry = setup_telemetry("Agent", "caller")
        clients["httpx2"] = httpx2.AsyncClient()
        instrument_http_client(clients["httpx2"])  # its own transport: left to the global patch, no second span
        tracer = trace.get_tracer("probe")
        sent = {}
        for name, client in clients.items():
            with tracer.start_as_current_span(name) as span:
                await client.get(url, headers={"x-client": name})
                sent[name] = format(span.get_span_context().trace_id, "032x")
            await client.aclose()
        telemetry.shutdown()
        print(json.dumps(sent))

    asyncio.run(main(sys.argv[1]))
    """
)


def test_httpx_and_httpx2_clients_make_client_spans_and_send_traceparent():
    recorder = HeaderRecorder(create_app(ScriptedModel()))
    with OtlpReceiver() as receiver, ThreadedServer(recorder, name="target", lifespan="off") as target:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, **FAST_EXPORT)
        done = subprocess.run(
            [sys.executable, "-c", CLIENTS_PROBE, target.root_url + "/health"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        traces = json.loads(done.stdout)
        assert set(traces) == {"httpx", "httpx2", "httpx2-aiohttp"}
        for headers in recorder.headers:
            name = headers["x-client"]
            assert traceparent_trace_id(headers["traceparent"]) == traces[name]
            (client,) = [s for s in receiver.spans_of_trace(traces[name]) if s.kind == "CLIENT"]
            assert client.span_id == headers["traceparent"].split("-")[2]
            assert client.attributes["url.full"] == target.root_url + "/health"
        assert len(recorder.headers) == 3


NO_ENDPOINT_PROBE = textwrap.dedent(
    """
    import json, sys, threading
    from fastapi import FastAPI
    from starlette.testclient import TestClient
    from kora.core.telemetry import instrument_app, setup_telemetry

    telemetry = setup_telemetry("Agent", "quiet")
    app = FastAPI()

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    instrument_app(app, telemetry)
    with TestClient(app) as client:
        assert client.get("/hello").status_code == 200
        metrics = client.get("/metrics").text
        threads = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    telemetry.shutdown()
    unwanted = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp", "grpc")
    loaded = sorted(m for m in sys.modules if m.startswith(unwanted))
    print(json.dumps({"threads": threads, "loaded": loaded, "metrics": metrics}))
    """
)


def test_without_an_endpoint_nothing_exports_and_metrics_still_serve():
    done = subprocess.run(
        [sys.executable, "-c", NO_ENDPOINT_PROBE],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["loaded"] == []
    # TestClient runs the app on an anyio portal thread; no exporter or processor thread besides it.
    assert all("portal" in name.lower() or name.startswith("AnyIO") for name in report["threads"]), report["threads"]
    counts = [
        sample
        for family in text_string_to_metric_families(report["metrics"])
        for sample in family.samples
        if sample.name == "http_server_request_duration_seconds_count"
    ]
    # One series: FastAPI's own native telemetry, which would count the request a second time, is off.
    (count,) = counts
    assert (count.labels["http_route"], count.labels["http_request_method"], count.value) == ("/hello", "GET", 1.0)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
    ],
)
@pytest.mark.parametrize("command", ["agent", "mcp"])
def test_a_bad_otel_setting_stops_start_up_with_a_message_naming_it(command, variable, value):
    env = clean_env(
        AGENT_NAME="a",
        MODEL_API_URL="http://127.0.0.1:9/v1",
        MODEL_NAME="m",
        AGENT_PORT=str(free_port()),
        MCP_TOOLS_STRING=TOOLS,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
    )
    env[variable] = value
    args = [command] if command == "agent" else [command, "--port", str(free_port())]
    done = subprocess.run([*KORA, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert variable in done.stderr
    assert repr(value) in done.stderr
    assert "Traceback" not in done.stderr


GRPC_PROBE = textwrap.dedent(
    """
    from opentelemetry import metrics, trace
    from kora.core.telemetry import setup_telemetry

    telemetry = setup_telemetry("MCPServer", "over-grpc", namespace="team")
    with trace.get_tracer("probe").start_as_current_span("probe work", attributes={"answer": 42}):
        metrics.get_meter("probe").create_counter("probe.calls").add(1)
    telemetry.shutdown()
    """
)


def test_grpc_protocol_exports_over_grpc():
    with GrpcOtlpReceiver() as receiver:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
        done = subprocess.run(
            [sys.executable, "-c", GRPC_PROBE], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        span = receiver.wait_for_span(lambda s: s.name == "probe work")
        assert span.attributes == {"answer": 42}
        assert span.resource["service.name"] == "over-grpc"
        assert span.resource["service.namespace"] == "team"
        assert span.resource["kora.resource.kind"] == "MCPServer"
        # shutdown() flushed the metrics reader too, over the gRPC metrics service.
        (point,) = receiver.wait_for_metric("probe.calls")
        assert (point.value, point.resource["service.name"]) == (1, "over-grpc")


MANIFESTS = """\
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm, namespace: team}
spec: {mode: Proxy, proxyConfig: {apiBase: 'http://127.0.0.1:9/v1'}}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: geometry, namespace: team}
spec:
  type: python-runtime
  config:
    toolsString: |
      def ping() -> str:
          '''Ping.'''
          return 'pong'
"""


@pytest.mark.slow
def test_kora_up_passes_the_endpoint_to_every_workload_and_traces_its_gateway(tmp_path):
    (tmp_path / "kora.yaml").write_text(MANIFESTS)
    port = free_port()
    with OtlpReceiver() as receiver:
        env = clean_env(**FAST_EXPORT)
        args = ["up", str(tmp_path / "kora.yaml"), "--port", str(port), "--state-dir", str(tmp_path / "state")]
        args += ["--otel-endpoint", receiver.endpoint, "--pass-env", "OTEL_BSP_SCHEDULE_DELAY"]
        gateway = f"http://127.0.0.1:{port}"
        with kora_process(args, env, gateway + "/team/mcp/geometry/health"):
            proxied = httpx.get(gateway + "/team/modelapi/llm/health", timeout=10)
            assert proxied.status_code == 200
            # Every workload exports under the wiring's resource attributes.
            for kind, name in (("ModelAPI", "llm"), ("MCPServer", "geometry")):
                span = receiver.wait_for_span(
                    lambda s, kind=kind, name=name: (
                        s.kind == "SERVER"
                        and s.resource.get("kora.resource.kind") == kind
                        and s.resource.get("kora.resource.name") == name
                    )
                )
                assert span.resource["service.namespace"] == "team"
            # The gateway's own server span and the proxy's server span are one trace.
            gateway_span = receiver.wait_for_span(
                lambda s: (
                    s.resource.get("kora.resource.kind") == "Gateway"
                    and s.kind == "SERVER"
                    and s.attributes.get("url.path") == "/team/modelapi/llm/health"
                )
            )
            receiver.wait_for_span(
                lambda s: s.trace_id == gateway_span.trace_id and s.resource.get("kora.resource.name") == "llm"
            )
            assert request_count(prometheus(gateway + "/metrics"), "/{path:path}") >= 1
