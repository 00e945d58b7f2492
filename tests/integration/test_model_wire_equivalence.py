"""A turn's direct first request is the request pydantic-ai would send for the same turn.

The runtime sends a turn's first model request itself (``kora.agent.model_wire``) and hands tool-calling
answers to pydantic-ai, so the model must see the same thing on both paths: the same messages for any stored
history (property test, against what pydantic-ai's ``OpenAIChatModel`` sends to the scripted model over HTTP),
and the same tools (memory, delegation and MCP tools, compared within one real turn that crosses over).
"""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent

from kora.agent.model_wire import chat_messages
from kora.agent.runtime import AgentRuntime
from kora.agent.settings import load_agent_settings
from kora.agent.turn import TurnRequest
from kora.core.events import EventType, MemoryEvent
from kora.memory import LocalMemory
from kora.memory.history import events_to_messages
from kora.memory.replay import replay_messages
from kora.testing import ScriptedModelServer, ToolCall, ToolCallReply
from kora.testing.threaded import ThreadedServer
from tests.agent_harness import mcp_app
from tests.unit.conversation_strategies import ANY_EVENT, TEXT, conversations

AGENT_INSTRUCTIONS = ("You are a helpful assistant.", "")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="module")
def pydantic_ai_side():
    """The scripted model and pydantic-ai agents on it (with and without instructions), driven from one event
    loop for every example."""
    with ScriptedModelServer() as server, asyncio.Runner() as runner:
        model = server.pydantic_ai_model()
        agents = {text: Agent(model, instructions=text) for text in AGENT_INSTRUCTIONS}

        def sent(instructions: str, events: list[MemoryEvent], prompt: str, system: str) -> list:
            history = events_to_messages(events)
            runner.run(agents[instructions].run(prompt, message_history=history, instructions=system or None))
            return server.requests[-1]["messages"]

        yield sent


def with_outcomes(events: list[MemoryEvent], outcomes: list[str]) -> list[MemoryEvent]:
    """Marks tool results with the drawn outcomes (``failed`` results are wrapped as errors on the wire)."""
    marked, draws = [], iter(outcomes)
    for event in events:
        if event.event_type in (EventType.TOOL_RESULT, EventType.DELEGATION_RESPONSE):
            outcome = next(draws, "success")
            event = event.model_copy(update={"metadata": {"outcome": outcome}} if outcome != "success" else {})
        marked.append(event)
    return marked


WINDOWS = st.one_of(
    st.builds(
        with_outcomes,
        conversations(EventType.USER_MESSAGE),
        st.lists(st.sampled_from(["success", "failed", "denied", "interrupted"]), max_size=8),
    ),
    st.lists(ANY_EVENT, max_size=12),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    instructions=st.sampled_from(AGENT_INSTRUCTIONS),
    events=WINDOWS,
    prompt=TEXT,
    system=st.sampled_from(["", "Answer in French."]),
)
def test_direct_messages_are_what_pydantic_ai_sends(pydantic_ai_side, instructions, events, prompt, system):
    expected = pydantic_ai_side(instructions, events, prompt, system)
    assert chat_messages([instructions, system], replay_messages(events), prompt) == expected


async def test_tools_are_offered_the_same_way_on_both_paths(model):
    async with ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc:
        settings = load_agent_settings(
            {
                "AGENT_NAME": "a",
                "MODEL_API_URL": model.url,
                "MODEL_NAME": model.model_name,
                "MODEL_MAX_RETRIES": "0",
                "MEMORY_TOOLS": "all",
                "MCP_SERVERS": "calc",
                "MCP_SERVER_CALC_URL": calc.root_url,
                "AGENT_SUB_AGENTS": "helper:http://127.0.0.1:9",
            }
        )
        runtime = AgentRuntime(settings, LocalMemory())
        await runtime.start()
        try:
            model.enqueue(ToolCallReply([ToolCall("save_memory", {"content": "tea"})]), "Saved.")
            outcome = await runtime.run(TurnRequest("s1", "remember tea"))
            assert outcome.text == "Saved."
            direct, by_pydantic_ai = model.requests[-2:]
            names = {tool["function"]["name"] for tool in direct["tools"]}
            assert {"save_memory", "search_memory", "delegate_to_helper"} <= names
            assert "add" in names  # the MCP server's tool
            assert direct["tools"] == by_pydantic_ai["tools"]
            assert direct["tool_choice"] == by_pydantic_ai["tool_choice"] == "auto"
            # pydantic-ai continued the same conversation: the direct request's messages come first.
            assert by_pydantic_ai["messages"][: len(direct["messages"])] == direct["messages"]
        finally:
            await runtime.close()
