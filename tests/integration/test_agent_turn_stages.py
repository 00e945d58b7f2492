"""A turn's two stages: the direct first request, and the pydantic-ai loop when the answer calls tools.

What must not depend on the stage that ended a turn: the answer, the stored events, the summed usage, the
step budget and the streamed text. What must: an agent without tools never loads the loop.
"""

import subprocess
import sys

import pytest

from kora.agent.runtime import AgentRuntime
from kora.agent.settings import load_agent_settings
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.memory import LocalMemory
from kora.testing import ScriptedModelServer, TextReply, ToolCall, ToolCallReply, count_usage


def runtime_for(server: ScriptedModelServer, **env: str) -> AgentRuntime:
    settings = load_agent_settings(
        {"AGENT_NAME": "a", "MODEL_API_URL": server.url, "MODEL_NAME": server.model_name, "MODEL_MAX_RETRIES": "0"}
        | env
    )
    return AgentRuntime(settings, LocalMemory())


async def streamed(runtime: AgentRuntime, turn: TurnRequest) -> tuple[list[str], TurnOutcome]:
    pieces, outcome = [], None
    async for item in runtime.stream(turn):
        if isinstance(item, TurnOutcome):
            outcome = item
        else:
            pieces.append(item)
    assert outcome is not None
    return pieces, outcome


def test_the_agent_server_starts_without_the_loop_libraries():
    code = (
        "import sys, kora.agent.app, kora.agent.runtime;"
        "print(sorted(m for m in ('pydantic_ai', 'openai', 'mcp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


async def test_an_agent_without_tools_answers_without_loading_the_loop(model):
    runtime = runtime_for(model)
    await runtime.start()
    try:
        outcome = await runtime.run(TurnRequest("s1", "hello"))
        assert outcome.text == "You said: hello"
        assert runtime.tool_definitions() == []
        assert runtime._loop is None
        assert "tools" not in model.requests[-1]
    finally:
        await runtime.close()


async def test_a_tool_call_nobody_offered_still_goes_through_the_loop(model):
    model.enqueue(ToolCallReply([ToolCall("ghost", {})]), TextReply("No such tool, sorry."))
    runtime = runtime_for(model)
    try:
        outcome = await runtime.run(TurnRequest("s1", "call ghost"))
        assert (outcome.text, outcome.model_requests) == ("No such tool, sorry.", 2)
        assert runtime._loop is not None
        retry = model.requests[-1]["messages"][-1]
        assert retry["role"] == "tool"
        assert "ghost" in retry["content"]
    finally:
        await runtime.close()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_turn_that_crosses_over_sums_usage_and_stores_every_event(model, mode):
    first = ToolCallReply([ToolCall("save_memory", {"content": "likes tea"})], text="Let me note that.")
    second = TextReply("Noted: you like tea.")
    model.enqueue(first, second)
    runtime = runtime_for(model, MEMORY_TOOLS="all")
    await runtime.start()
    try:
        turn = TurnRequest("s1", "I like tea")
        if mode == "run":
            outcome = await runtime.run(turn)
        else:
            pieces, outcome = await streamed(runtime, turn)
            # The first answer's text streams at once; the later answer starts a new paragraph.
            assert "".join(pieces) == "Let me note that.\n\nNoted: you like tea."
        assert (outcome.text, outcome.model_requests, outcome.finish_reason) == ("Noted: you like tea.", 2, "stop")
        expected = [count_usage(model.requests[0], first), count_usage(model.requests[1], second)]
        assert outcome.input_tokens == sum(u.prompt_tokens for u in expected)
        assert outcome.output_tokens == sum(u.completion_tokens for u in expected)
        events = await runtime.memory.get_session_events("s1")
        assert [str(e.event_type) for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
        assert events[1].content["args"] == {"content": "likes tea"}
        assert events[0].timestamp == turn.started
    finally:
        await runtime.close()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_delegated_turn_is_stored_as_received_on_both_stages(model, mode):
    model.enqueue("Direct answer.", ToolCallReply([ToolCall("search_memory", {"query": "x"})]), "Looped answer.")
    runtime = runtime_for(model, MEMORY_TOOLS="all")
    await runtime.start()
    try:
        for prompt in ("first", "second"):
            turn = TurnRequest("s1", prompt, delegated_by="planner")
            if mode == "run":
                await runtime.run(turn)
            else:
                await streamed(runtime, turn)
        events = await runtime.memory.get_session_events("s1")
        received = [e for e in events if str(e.event_type) == "task_delegation_received"]
        assert [(e.content, e.metadata) for e in received] == [
            ("first", {"from_agent": "planner"}),
            ("second", {"from_agent": "planner"}),
        ]
    finally:
        await runtime.close()
