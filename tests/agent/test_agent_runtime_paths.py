"""AgentRuntime.run (whole model responses) and AgentRuntime.stream (streamed) give the same turn: outcome,
stored events, step limit and failure mapping."""

import pytest

from kora.agent.runtime import AgentRuntime
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import ModelError
from kora.scripted import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.support.agent import agent_runtime
from tests.support.scripted_server import ScriptedModelServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


async def run_turn(runtime: AgentRuntime, mode: str, turn: TurnRequest) -> tuple[str, TurnOutcome]:
    if mode == "run":
        outcome = await runtime.run(turn)
        return outcome.text, outcome
    text, last = "", None
    async for item in runtime.stream(turn):
        if isinstance(item, TurnOutcome):
            last = item
        else:
            text += item
    assert last is not None
    return text, last


def event_shapes(events):
    return [(e.event_type, e.content) for e in events]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_turns_store_the_same_events_and_replay_history(mode):
    with ScriptedModelServer() as server:
        runtime = agent_runtime(server)
        try:
            text, outcome = await run_turn(runtime, mode, TurnRequest("s1", "first"))
            assert text == outcome.text == "You said: first"
            assert (outcome.finish_reason, outcome.model_requests) == ("stop", 1)
            assert outcome.input_tokens > 0
            assert outcome.output_tokens > 0
            await run_turn(runtime, mode, TurnRequest("s1", "second"))
            replayed = [m["content"] for m in server.requests[-1]["messages"] if m["role"] != "system"]
            assert replayed == ["first", "You said: first", "second"]
            events = await runtime.memory.get_session_events("s1")
            assert [(str(t), c) for t, c in event_shapes(events)] == [
                ("user_message", "first"),
                ("agent_response", "You said: first"),
                ("user_message", "second"),
                ("agent_response", "You said: second"),
            ]
        finally:
            await runtime.close()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_step_limit_ends_the_turn_with_length(mode):
    with ScriptedModelServer() as server:
        server.enqueue(*[ToolCallReply([ToolCall("save_memory", {"content": "x"})]) for _ in range(3)])
        runtime = agent_runtime(server, AGENTIC_LOOP_MAX_STEPS="1", MEMORY_TOOLS="all")
        try:
            text, outcome = await run_turn(runtime, mode, TurnRequest("s1", "loop"))
            assert outcome.finish_reason == "length"
            assert "limit of 1 model requests" in text
            events = await runtime.memory.get_session_events("s1")
            assert str(events[-1].event_type) == "error"
            assert events[-1].content["error_type"] == "step_limit"
        finally:
            await runtime.close()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_model_errors_become_turn_failures(mode):
    with ScriptedModelServer() as server:
        server.enqueue(ErrorReply(503, "overloaded"), TextReply("never"))
        runtime = agent_runtime(server)
        try:
            with pytest.raises(ModelError) as failure:
                await run_turn(runtime, mode, TurnRequest("s1", "hi"))
            assert failure.value.code == "model_error"
            assert "HTTP 503: overloaded" in failure.value.message
            events = await runtime.memory.get_session_events("s1")
            assert [str(e.event_type) for e in events] == ["user_message", "error"]
        finally:
            await runtime.close()
