"""One trace across agents, tools and delegation, as real processes exporting to a real OTLP receiver.

Four processes: agent ``coordinator`` with tool server ``geometry``, and peer agent ``helper`` with tool server
``arith``. One chat turn to the coordinator calls ``hypotenuse``, then delegates to the helper, which calls
``double``. Asserted: one trace id across the four processes; the span tree (parents) from the coordinator's server
span through its turn, steps, tool call and delegation to the helper's task, turn and tool call; the GenAI names
and attributes; token usage equal to what the scripted model reported; no message content without capture; the
stored events carrying the trace id; and the GenAI metrics over OTLP and on ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from kora.core.net import free_port
from kora.core.telemetry.config import resource_attributes_value
from kora.scripted import TextReply, ToolCall, ToolCallReply
from kora.scripted.model import ScriptedModel, create_app
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import FAST_EXPORT, HeaderRecorder, clean_env, kora_process, prometheus
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GEOMETRY = '''
import math

def hypotenuse(a: float, b: float) -> float:
    """Length of the hypotenuse of a right triangle with legs a and b."""
    return math.hypot(a, b)
'''
ARITH = '''
def double(x: int) -> int:
    """Twice x."""
    return 2 * x
'''
PROMPT = "confidential question about triangles"


@dataclass
class Run:
    """What the turn left: the chat completion's JSON, the coordinator's stored events and ``/metrics``."""

    answer: dict
    events: list[dict]
    coordinator_metrics: dict[str, list[tuple[dict[str, str], float]]]
    model_headers: list[dict[str, str]]


def telemetry_env(receiver: OtlpReceiver, kind: str, name: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": name,
        "OTEL_RESOURCE_ATTRIBUTES": resource_attributes_value("team", kind, name),
        **FAST_EXPORT,
    }


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as otlp:
        yield otlp


@pytest.fixture(scope="module")
def run(receiver: OtlpReceiver) -> Run:
    model = ScriptedModel()
    model.enqueue(
        ToolCallReply([ToolCall("hypotenuse", {"a": 3, "b": 4})]),  # coordinator, step 1
        ToolCallReply([ToolCall("delegate_to_helper", {"task": "double 5"})]),  # coordinator, step 2
        ToolCallReply([ToolCall("double", {"x": 5})]),  # helper, step 1
        TextReply("10"),  # helper, step 2
        TextReply("The hypotenuse is 5 and double 5 is 10."),  # coordinator, step 3
    )
    recorder = HeaderRecorder(create_app(model))
    ports = {name: free_port() for name in ("geometry", "arith", "helper", "coordinator")}
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    with ThreadedServer(recorder, name="scripted-model", lifespan="off") as model_server:

        def agent_env(name: str, tools: str, **extra: str) -> dict[str, str]:
            return clean_env(
                AGENT_NAME=name,
                AGENT_HOST="127.0.0.1",
                AGENT_PORT=str(ports[name]),
                MODEL_API_URL=model_server.root_url + "/v1",
                MODEL_NAME="scripted",
                MCP_SERVERS=tools,
                **{f"MCP_SERVER_{tools.upper()}_URL": url[tools]},
                **telemetry_env(receiver, "Agent", name),
                **extra,
            )

        def mcp(name: str, tools: str):
            env = clean_env(MCP_TOOLS_STRING=tools, **telemetry_env(receiver, "MCPServer", name))
            return kora_process(["mcp", "--host", "127.0.0.1", "--port", str(ports[name])], env, url[name] + "/health")

        helper_env = agent_env("helper", "arith")
        coordinator_env = agent_env("coordinator", "geometry", AGENT_SUB_AGENTS=f"helper:{url['helper']}")
        with (
            mcp("geometry", GEOMETRY),
            mcp("arith", ARITH),
            kora_process(["agent"], helper_env, url["helper"] + "/ready"),
            kora_process(["agent"], coordinator_env, url["coordinator"] + "/ready"),
        ):
            response = httpx.post(
                url["coordinator"] + "/v1/chat/completions",
                json={"model": "coordinator", "messages": [{"role": "user", "content": PROMPT}]},
                headers={"X-Session-ID": "trace-session"},
                timeout=60,
            )
            assert response.status_code == 200, response.text
            events = httpx.get(url["coordinator"] + "/memory/events", params={"session_id": "trace-session"}).json()
            metrics = prometheus(url["coordinator"] + "/metrics")
    # The processes stopped with SIGTERM: their telemetry is flushed.
    return Run(response.json(), events["events"], metrics, recorder.headers)


def one(spans: list[ReceivedSpan], what: str, predicate) -> ReceivedSpan:
    found = [span for span in spans if predicate(span)]
    assert len(found) == 1, f"{what}: {[(s.service, s.name) for s in found]}"
    return found[0]


@pytest.fixture(scope="module")
def trace(receiver: OtlpReceiver, run: Run) -> list[ReceivedSpan]:
    """Every span of the turn's trace, once the tool server of the helper has reported its part."""
    route = "/v1/chat/completions"
    server = receiver.wait_for_span(
        lambda s: s.service == "coordinator" and s.kind == "SERVER" and s.attributes.get("http.route") == route
    )
    receiver.wait_for_spans(
        lambda spans: any(s.service == "arith" and s.trace_id == server.trace_id for s in spans), timeout=30
    )
    receiver.wait_for_span(lambda s: s.service == "coordinator" and s.name == "invoke_agent coordinator")
    return receiver.spans_of_trace(server.trace_id)


def test_one_trace_spans_all_four_processes(trace: list[ReceivedSpan]) -> None:
    assert {span.service for span in trace} == {"coordinator", "geometry", "helper", "arith"}


def test_the_span_tree_runs_from_the_request_to_the_peers_tool(trace: list[ReceivedSpan]) -> None:
    by_id = {span.span_id: span for span in trace}

    def parent(span: ReceivedSpan) -> ReceivedSpan:
        return by_id[span.parent_id]

    def ancestors(span: ReceivedSpan) -> list[str]:
        chain = []
        while span.parent_id:
            span = parent(span)
            chain.append(f"{span.service}:{span.name}")
        return chain

    coordinator = [s for s in trace if s.service == "coordinator"]
    server = one(coordinator, "chat server span", lambda s: s.kind == "SERVER" and "chat/completions" in s.name)
    assert server.parent_id == ""
    turn = one(coordinator, "turn", lambda s: s.name == "invoke_agent coordinator")
    assert parent(turn).span_id == server.span_id
    steps = sorted((s for s in coordinator if s.name.startswith("step ")), key=lambda s: s.name)
    assert [s.name for s in steps] == ["step 1", "step 2", "step 3"]
    assert all(parent(step).span_id == turn.span_id for step in steps)
    chats = [s for s in coordinator if s.name == "chat scripted"]
    assert sorted(parent(chat).name for chat in chats) == ["step 1", "step 2", "step 3"]
    # The model request's client span is the chat span itself: its trace context reached the model (see
    # test_model_requests_carry_the_turns_trace_context), with no HTTP span repeating it below. LocalMemory's in-process
    # calls have no spans either.
    assert not [s for s in coordinator if s.parent_id in {chat.span_id for chat in chats}]
    assert not [s for s in coordinator if s.name.startswith("memory ")]

    tool = one(coordinator, "tool span", lambda s: s.name == "execute_tool hypotenuse")
    assert parent(tool).name == "step 1"
    delegate_tool = one(coordinator, "delegation tool", lambda s: s.name == "execute_tool delegate_to_helper")
    assert parent(delegate_tool).name == "step 2"
    delegation = one(coordinator, "delegation", lambda s: s.name == "invoke_agent helper")
    assert delegation.kind == "CLIENT"
    assert parent(delegation).span_id == delegate_tool.span_id
    assert delegation.attributes["gen_ai.agent.name"] == "helper"
    task_id = delegation.attributes["kora.a2a.task_id"]

    helper_turn = one(trace, "helper turn", lambda s: s.service == "helper" and s.name == "invoke_agent helper")
    helper_task = parent(helper_turn)
    assert (helper_task.name, helper_task.attributes["kora.a2a.task_id"]) == ("a2a task", task_id)
    states = [attributes["kora.a2a.task.state"] for name, attributes in helper_task.events if name == "a2a.task.state"]
    assert states[-2:] == ["working", "completed"]
    # The helper's whole turn hangs under the coordinator's delegation span, across the process boundary.
    assert "coordinator:invoke_agent helper" in ancestors(helper_turn)
    peer_tool = one(trace, "peer tool", lambda s: s.service == "helper" and s.name == "execute_tool double")
    assert ancestors(peer_tool)[:2] == ["helper:step 1", "helper:invoke_agent helper"]
    arith = [s for s in trace if s.service == "arith" and s.kind == "SERVER" and s.name == "POST /mcp"]
    # The peer's tool server served the call inside the peer's tool span, in the coordinator's trace.
    assert any("helper:execute_tool double" in ancestors(s) for s in arith)


def test_genai_attributes_and_token_usage_match_what_the_model_reported(trace: list[ReceivedSpan], run: Run) -> None:
    turn = one(trace, "turn", lambda s: s.name == "invoke_agent coordinator")
    usage = run.answer["usage"]
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == "trace-session"
    assert turn.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert turn.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert turn.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert turn.attributes["kora.turn.model_requests"] == 3
    chats = [s for s in trace if s.service == "coordinator" and s.name == "chat scripted"]
    assert sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in chats) == usage["prompt_tokens"]
    assert sum(int(s.attributes["gen_ai.usage.output_tokens"]) for s in chats) == usage["completion_tokens"]
    for chat in chats:
        assert chat.kind == "CLIENT"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
    tool = one(trace, "tool", lambda s: s.name == "execute_tool hypotenuse")
    assert tool.attributes["gen_ai.tool.name"] == "hypotenuse"
    stored_call = next(e for e in run.events if e["event_type"] == "tool_call")
    assert tool.attributes["gen_ai.tool.call.id"] == stored_call["content"]["tool_call_id"]


def test_no_span_carries_message_content_without_capture(trace: list[ReceivedSpan]) -> None:
    for span in trace:
        text = f"{span.attributes} {span.events}"
        assert "confidential" not in text
        assert "double 5" not in text


def test_model_requests_carry_the_turns_trace_context(trace: list[ReceivedSpan], run: Run) -> None:
    trace_id = trace[0].trace_id
    model_calls = [h for h in run.model_headers if h.get("content-type", "").startswith("application/json")]
    assert len(model_calls) == 5
    assert all(h["traceparent"].split("-")[1] == trace_id for h in model_calls)
    # Each request's parent is its chat span: the GenAI client span, with no HTTP span between.
    chat_spans = {span.span_id for span in trace if span.name.startswith("chat ")}
    assert len(chat_spans) == 5
    assert {h["traceparent"].split("-")[2] for h in model_calls} == chat_spans


def test_stored_events_link_to_the_trace(trace: list[ReceivedSpan], run: Run) -> None:
    turn = one(trace, "turn", lambda s: s.name == "invoke_agent coordinator")
    assert run.events
    assert {event["metadata"]["trace_id"] for event in run.events} == {turn.trace_id}
    assert {event["metadata"]["span_id"] for event in run.events} == {turn.span_id}


def test_genai_metrics_reach_the_receiver_and_metrics_endpoint(receiver: OtlpReceiver, run: Run) -> None:
    usage = run.answer["usage"]
    samples = run.coordinator_metrics
    tokens = {
        labels["gen_ai_token_type"]: value
        for labels, value in samples["gen_ai_client_token_usage_sum"]
        if labels.get("gen_ai_request_model") == "scripted"
    }
    assert tokens == {"input": usage["prompt_tokens"], "output": usage["completion_tokens"]}
    durations = samples["gen_ai_client_operation_duration_seconds_count"]
    assert sum(value for _, value in durations) == 3
    tools = {labels["gen_ai_tool_name"]: value for labels, value in samples["kora_agent_tool_duration_seconds_count"]}
    assert tools == {"hypotenuse": 1, "delegate_to_helper": 1}
    ((labels, delegations),) = samples["kora_agent_delegation_duration_seconds_count"]
    assert (labels["gen_ai_agent_name"], labels["kora_outcome"], delegations) == ("helper", "ok", 1)
    ((labels, degraded),) = samples["kora_memory_degraded"]
    assert (labels["gen_ai_agent_name"], degraded) == ("coordinator", 0)
    receiver.wait_for_metric("gen_ai.client.token.usage", lambda p: p.resource.get("service.name") == "coordinator")
