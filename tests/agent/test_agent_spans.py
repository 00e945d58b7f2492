"""The agent's GenAI spans, in process: the span tree of a turn on both turn paths, run and streamed, with the
SDK's in-memory exporter (the multi-process trace over OTLP is tested in test_telemetry_trace.py).

A turn is ``invoke_agent {agent}`` > ``step N`` > (``chat {model}``, ``execute_tool {tool}``), with ``memory recall``
and ``memory write`` around the calls of a memory that leaves the process (RemoteMemory, against the real memory
service), none for LocalMemory; message contents appear only with content capture on; stored events carry the
turn's trace id.
"""

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kora.agent.approval_calls import Decision
from kora.agent.runtime import AgentRuntime
from kora.agent.telemetry import AgentTracing, ToolMetrics
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.memory import LocalMemory, Memory
from kora.memory.remote import RemoteMemory
from kora.scripted import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.support.agent import agent_settings, mcp_app
from tests.support.memory import AGENT_TOKEN, memory_service, service_env
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.shutdown()


def traced_runtime(
    model, exporter: InMemorySpanExporter, *, capture: bool = False, memory: Memory | None = None, **env: str
) -> AgentRuntime:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = agent_settings(model, "a", **env)
    tracing = AgentTracing.on(settings.agent_name, settings.model_name, provider, capture_content=capture)
    return AgentRuntime(settings, memory or LocalMemory(), tracing)


async def run_turn(runtime: AgentRuntime, turn: TurnRequest, mode: str) -> TurnOutcome:
    if mode == "run":
        return await runtime.run(turn)
    outcome = None
    async for item in runtime.stream(turn):
        if isinstance(item, TurnOutcome):
            outcome = item
    assert outcome is not None
    return outcome


def tree(spans: tuple[ReadableSpan, ...]) -> list[tuple[int, str]]:
    """The spans as (depth, name), depth-first in start order."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, str]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            out.append((depth, span.name))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return out


def named(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_text_turn_is_one_agent_span_with_one_step(model, exporter, mode):
    runtime = traced_runtime(model, exporter)
    try:
        outcome = await run_turn(runtime, TurnRequest("s1", "hello"), mode)
    finally:
        await runtime.close()
    spans = exporter.get_finished_spans()
    model_name = model.model_name
    # LocalMemory's in-process calls get no spans of their own.
    assert tree(spans) == [(0, "invoke_agent a"), (1, "step 1"), (2, f"chat {model_name}")]
    (turn,) = named(spans, "invoke_agent")
    assert turn.attributes is not None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == "a"
    assert turn.attributes["gen_ai.conversation.id"] == "s1"
    assert turn.attributes["gen_ai.usage.input_tokens"] == outcome.input_tokens > 0
    assert turn.attributes["gen_ai.usage.output_tokens"] == outcome.output_tokens > 0
    assert tuple(turn.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    (chat,) = named(spans, "chat ")
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == model_name
    assert chat.attributes["gen_ai.usage.input_tokens"] == outcome.input_tokens
    # Without content capture the messages' shapes are recorded, not their text.
    assert "hello" not in str(chat.attributes)
    assert "You said" not in str(chat.attributes)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_remote_memorys_recall_and_write_are_spans_of_the_turn(model, exporter, memory_db, mode):
    async with memory_service(service_env(memory_db)) as store:
        memory = RemoteMemory(store, "a", token=AGENT_TOKEN)
        await memory.start()
        runtime = traced_runtime(model, exporter, memory=memory)
        try:
            await run_turn(runtime, TurnRequest("s1", "hello"), mode)
        finally:
            await runtime.close()
            await memory.close()
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        (0, "invoke_agent a"),
        (1, "memory recall"),
        (1, "step 1"),
        (2, f"chat {model.model_name}"),
        (1, "memory write"),
    ]
    for span in named(spans, "memory "):
        assert span.attributes is not None
        assert span.attributes["gen_ai.conversation.id"] == "s1"
        assert span.attributes["kora.memory.operation"] == span.name.removeprefix("memory ")


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_tool_turn_has_a_step_per_model_request_holding_its_tool_calls(model, exporter, mode):
    model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "likes tea"})]), TextReply("Noted: you like tea."))
    runtime = traced_runtime(model, exporter, MEMORY_TOOLS="all")
    await runtime.start()
    try:
        outcome = await run_turn(runtime, TurnRequest("s1", "I like tea"), mode)
        events = await runtime.memory.get_session_events("s1")
    finally:
        await runtime.close()
    assert outcome.model_requests == 2
    spans = exporter.get_finished_spans()
    chat = f"chat {model.model_name}"
    assert tree(spans) == [
        (0, "invoke_agent a"),
        (1, "step 1"),
        (2, chat),
        (2, "execute_tool save_memory"),
        (1, "step 2"),
        (2, chat),
    ]
    (tool,) = named(spans, "execute_tool")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "save_memory"
    (call,) = [event for event in events if event.event_type == "tool_call"]
    assert isinstance(call.content, dict)
    assert tool.attributes["gen_ai.tool.call.id"] == call.content["tool_call_id"]
    assert "gen_ai.tool.call.arguments" not in tool.attributes
    (turn,) = named(spans, "invoke_agent")
    assert turn.attributes is not None
    assert turn.attributes["kora.turn.model_requests"] == 2
    assert turn.attributes["gen_ai.usage.input_tokens"] == outcome.input_tokens
    trace_id = f"{turn.context.trace_id:032x}"
    assert {event.metadata.get("trace_id") for event in events} == {trace_id}
    assert all(len(str(event.metadata["span_id"])) == 16 for event in events)


async def test_content_capture_puts_messages_and_arguments_on_spans(model, exporter):
    model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "secret tea"})]), TextReply("Noted."))
    runtime = traced_runtime(model, exporter, capture=True, MEMORY_TOOLS="all")
    try:
        await runtime.run(TurnRequest("s1", "I like secret tea"))
    finally:
        await runtime.close()
    spans = exporter.get_finished_spans()
    chats = named(spans, "chat ")
    assert any("I like secret tea" in str(span.attributes) for span in chats)
    (tool,) = named(spans, "execute_tool")
    assert "secret tea" in str(tool.attributes)


async def test_without_capture_no_span_carries_the_conversation(model, exporter):
    model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "secret tea"})]), TextReply("Noted, secret."))
    runtime = traced_runtime(model, exporter, MEMORY_TOOLS="all")
    try:
        await runtime.run(TurnRequest("s1", "I like secret tea"))
    finally:
        await runtime.close()
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        assert "secret" not in str(span.attributes)
        assert all("secret" not in str(event.attributes) for event in span.events)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_failed_turn_marks_its_span_failed_with_the_error(model, exporter, mode):
    model.enqueue(ErrorReply(500, "model is down"))
    runtime = traced_runtime(model, exporter)
    try:
        with pytest.raises(Exception, match="model"):
            await run_turn(runtime, TurnRequest("s1", "hello"), mode)
    finally:
        await runtime.close()
    spans = exporter.get_finished_spans()
    (turn,) = named(spans, "invoke_agent")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes is not None
    assert turn.attributes["error.type"] == "model_error"
    assert any(event.name == "exception" for event in turn.events)
    (chat,) = named(spans, "chat ")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "model_error"


async def test_with_tracing_off_a_turn_makes_no_spans_and_stores_no_trace_ids(model):
    settings = agent_settings(model, "a")
    tracing = AgentTracing.from_env(settings.agent_name, settings.model_name, environ={"OTEL_SERVICE_NAME": "a"})
    runtime = AgentRuntime(settings, LocalMemory(), tracing)
    try:
        await runtime.run(TurnRequest("s1", "hello"))
        events = await runtime.memory.get_session_events("s1")
    finally:
        await runtime.close()
    assert tracing.enabled is False
    assert runtime.model.observer.tracer is None
    assert [type(capability) for capability in tracing.capabilities()] == [ToolMetrics]
    assert events
    assert all("trace_id" not in event.metadata for event in events)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_paused_turn_and_its_resumption_carry_the_approvals_on_their_spans(model, exporter):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc:
        runtime = traced_runtime(
            model, exporter, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url, TOOL_APPROVAL_REQUIRED="calc/add"
        )
        await runtime.start()
        try:
            paused = await runtime.run(TurnRequest(session_id="s", prompt="add them"))
            [approval] = paused.approvals
            turn = runtime.decide(approval.id, Decision(True), None)
            assert (await runtime.resume(turn)) is not None
        finally:
            await runtime.close()
    first, second = named(exporter.get_finished_spans(), "invoke_agent")
    assert first.attributes["kora.approval.requested"] == 1
    assert list(first.attributes["kora.approval.ids"]) == [approval.id]
    assert list(first.attributes["kora.approval.targets"]) == ["calc/add"]
    assert list(second.attributes["kora.approval.ids"]) == [approval.id]
    assert list(second.attributes["kora.approval.statuses"]) == ["approved"]
    [waited] = second.attributes["kora.approval.waited_seconds"]
    assert waited >= 0
    assert "kora.approval.requested" not in second.attributes


async def test_a_turn_ended_by_its_budget_names_it_on_its_span_with_its_spend(model, exporter):
    model.enqueue(ToolCallReply([ToolCall("nothing", {})]), "Never asked for.")
    runtime = traced_runtime(model, exporter, BUDGET_MAX_MODEL_REQUESTS="1")
    try:
        outcome = await runtime.run(TurnRequest(session_id="s", prompt="go"))
    finally:
        await runtime.close()
    assert outcome.text.startswith("budget_exhausted: model_requests")
    [span] = named(exporter.get_finished_spans(), "invoke_agent")
    assert span.attributes["kora.budget.exhausted"] == "model_requests"
    assert span.attributes["kora.turn.spent_model_requests"] == 1
    assert span.attributes["kora.turn.spent_input_tokens"] == outcome.input_tokens > 0
    assert span.attributes["kora.turn.spent_output_tokens"] == outcome.output_tokens


async def test_a_streamed_turn_closed_by_its_consumer_ends_its_spans_as_cancelled(model, exporter):
    # The client went away after the first text: the turn, its step and its model request end, marked cancelled.
    model.enqueue(TextReply("one two three four", chunks=["one ", "two ", "three ", "four"]))
    runtime = traced_runtime(model, exporter)
    try:
        stream = runtime.stream(TurnRequest("s1", "hello"))
        assert isinstance(await anext(stream), str)
        await stream.aclose()
    finally:
        await runtime.close()
    spans = exporter.get_finished_spans()
    assert tree(spans) == [(0, "invoke_agent a"), (1, "step 1"), (2, f"chat {model.model_name}")]
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert span.attributes is not None
        assert span.attributes["error.type"] == "cancelled", span.name
