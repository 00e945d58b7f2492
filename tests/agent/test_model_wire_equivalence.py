"""Kora's model adapter sends what pydantic-ai's own OpenAI model sends, on every path of a turn.

For any stored history (property test), three requests for the same turn must carry the same messages:
pydantic-ai's ``OpenAIChatModel`` in an ``Agent`` (the reference), the runtime's direct first request through
:class:`~kora.agent.chat_model.KoraChatModel`, and the runtime with every request in the ``Agent``
(``AGENT_DIRECT_FIRST_REQUEST=false``). All three go over HTTP to the scripted model. The tools (memory,
delegation and MCP tools) are compared within one real turn that crosses from the direct request to the Agent.
"""

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent

from kora.agent.history import events_to_messages
from kora.agent.runtime import AgentRuntime
from kora.agent.settings import load_agent_settings
from kora.agent.turn import TurnRequest
from kora.core.events import EventType, MemoryEvent
from kora.memory import LocalMemory
from kora.scripted import ToolCall, ToolCallReply
from tests.support.agent import mcp_app
from tests.support.conversations import ANY_EVENT, TEXT, conversations
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

# Two different system prompts (an empty AGENT_INSTRUCTIONS counts as unset, so it means the default).
AGENT_INSTRUCTIONS = ("You are a helpful assistant.", "Answer briefly.")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="module")
def sent_by_each_path():
    """For (instructions, events, prompt, system): the messages each path sent to the scripted model, all driven
    from one event loop for every example."""
    with ScriptedModelServer() as server, asyncio.Runner() as runner:
        reference = server.pydantic_ai_model()
        agents = {text: Agent(reference, instructions=text) for text in AGENT_INSTRUCTIONS}
        sessions = (f"s{i}" for i in itertools.count())

        def runtime(instructions: str, direct: bool) -> AgentRuntime:
            env = {
                "AGENT_NAME": "a",
                "MODEL_API_URL": server.url,
                "MODEL_NAME": server.model_name,
                "AGENT_INSTRUCTIONS": instructions,
                "MEMORY_CONTEXT_LIMIT": "1000",
                "AGENT_DIRECT_FIRST_REQUEST": str(direct).lower(),
            }
            return AgentRuntime(load_agent_settings(env), LocalMemory())

        runtimes = {(text, direct): runtime(text, direct) for text in AGENT_INSTRUCTIONS for direct in (True, False)}

        async def by_runtime(key: tuple[str, bool], events: list[MemoryEvent], prompt: str, system: str) -> list:
            session = next(sessions)
            await runtimes[key].memory.add_events(session, events)
            await runtimes[key].run(TurnRequest(session, prompt, system=system))
            return server.requests[-1]["messages"]

        def sent(instructions: str, events: list[MemoryEvent], prompt: str, system: str) -> list[list]:
            history = events_to_messages(events)
            runner.run(agents[instructions].run(prompt, message_history=history, instructions=system or None))
            expected = server.requests[-1]["messages"]
            direct = runner.run(by_runtime((instructions, True), events, prompt, system))
            in_agent = runner.run(by_runtime((instructions, False), events, prompt, system))
            return [expected, direct, in_agent]

        yield sent
        for each in runtimes.values():
            runner.run(each.close())


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
def test_every_path_sends_what_pydantic_ai_sends(sent_by_each_path, instructions, events, prompt, system):
    expected, direct, in_agent = sent_by_each_path(instructions, events, prompt, system)
    assert direct == expected
    assert in_agent == expected


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
