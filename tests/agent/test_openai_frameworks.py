"""Agent frameworks nobody here wrote, using a real Kora agent as their OpenAI model (the scripted model behind
it): langchain-openai (``bind_tools``, ``with_structured_output`` both ways), litellm (tools, streaming),
pydantic-ai's own OpenAI model (a tool it runs itself, ``NativeOutput``) and the OpenAI Agents SDK (a function
tool and an ``output_type``, over the Responses API and over Chat Completions)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pydantic
import pytest

from kora.scripted import Match, Rule, TextReply, ToolCall, ToolCallReply
from tests.support.agent import RunningAgent, served_agent
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration


class Weather(pydantic.BaseModel):
    """The weather in a city."""

    city: str
    degrees: int


RULES = [
    Rule(
        Match(user_matches=r"weather in (?P<city>\w+)", tool_available="get_weather", after_tool=False),
        ToolCallReply([ToolCall("get_weather", {"city": "{city}"})]),
    ),
    Rule(Match(response_format="Weather"), TextReply('{"city": "Paris", "degrees": 21}')),
    # The OpenAI Agents SDK names its structured output's schema "final_output".
    Rule(Match(response_format="final_output"), TextReply('{"city": "Paris", "degrees": 21}')),
    # langchain's function-calling structured output: the model calls the schema as a tool.
    Rule(Match(tool_available="Weather"), ToolCallReply([ToolCall("Weather", {"city": "Paris", "degrees": 21})])),
]


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@dataclass
class Served:
    model: ScriptedModelServer
    agent: RunningAgent

    @property
    def base_url(self) -> str:
        return f"{self.agent.url}/v1"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with ScriptedModelServer() as model:
        model.load_script(RULES)
        with served_agent(model, "helper", MEMORY_TOOLS="all") as agent:
            yield Served(model, agent)


@pytest.fixture
def kora(served: Served) -> Served:
    served.model.reset(keep_rules=True)
    return served


def non_system_roles(request: dict[str, object]) -> list[object]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [m["role"] for m in messages if m["role"] != "system"]


# -- langchain-openai -----------------------------------------------------------------------------------------------


def langchain(kora: Served):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="helper", base_url=kora.base_url, api_key="unused", max_retries=0)


def test_langchain_bind_tools_round_trip(kora):
    from langchain_core.messages import HumanMessage, ToolMessage

    llm = langchain(kora).bind_tools([get_weather])
    question = HumanMessage("weather in Paris?")
    asked = llm.invoke([question])
    (call,) = asked.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    answer = llm.invoke([question, asked, ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])])
    assert answer.content == "Tool result: sunny in Paris"
    assert non_system_roles(kora.model.requests[-1]) == ["user", "assistant", "tool"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(kora, method):
    structured = langchain(kora).with_structured_output(Weather, method=method)
    assert structured.invoke("weather?") == Weather(city="Paris", degrees=21)


def test_langchain_streams(kora):
    pieces = [chunk.content for chunk in langchain(kora).stream("hello there")]
    assert "".join(pieces) == "You said: hello there"


# -- litellm --------------------------------------------------------------------------------------------------------


@pytest.fixture
def litellm(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def test_litellm_tools_and_follow_up(kora, litellm):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    route = {"model": "openai/helper", "api_base": kora.base_url, "api_key": "unused"}
    messages: list[dict[str, object]] = [{"role": "user", "content": "weather in Oslo?"}]
    asked = litellm.completion(messages=messages, tools=[tool], **route)
    assert asked.choices[0].finish_reason == "tool_calls"
    (call,) = asked.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    messages += [asked.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "snow"}]
    answer = litellm.completion(messages=messages, tools=[tool], **route)
    assert answer.choices[0].message.content == "Tool result: snow"


def test_litellm_streams_with_sampling_fields(kora, litellm):
    route = {"model": "openai/helper", "api_base": kora.base_url, "api_key": "unused"}
    stream = litellm.completion(
        messages=[{"role": "user", "content": "hello"}], stream=True, temperature=0.3, max_tokens=20, **route
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == "You said: hello"
    sent = kora.model.requests[-1]
    assert (sent["temperature"], sent["max_tokens"]) == (0.3, 20)


# -- pydantic-ai with Kora as its model -----------------------------------------------------------------------------


def pydantic_ai_model(kora: Served):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel("helper", provider=OpenAIProvider(base_url=kora.base_url, api_key="unused"))


async def test_pydantic_ai_agent_runs_its_own_tool_through_kora(kora):
    from pydantic_ai import Agent

    agent = Agent(pydantic_ai_model(kora), tools=[get_weather])
    result = await agent.run("weather in Lima?")
    assert result.output == "Tool result: sunny in Lima"
    assert len(kora.model.requests) == 2
    assert non_system_roles(kora.model.requests[-1]) == ["user", "assistant", "tool"]


async def test_pydantic_ai_native_output_through_kora(kora):
    from pydantic_ai import Agent, NativeOutput

    agent = Agent(pydantic_ai_model(kora), output_type=NativeOutput(Weather))
    result = await agent.run("weather?")
    assert result.output == Weather(city="Paris", degrees=21)
    assert kora.model.requests[-1]["response_format"]["json_schema"]["name"] == "Weather"


# -- the OpenAI Agents SDK ------------------------------------------------------------------------------------------

SDK_APIS = ["responses", "chat_completions"]


def agents_model(kora: Served, api: str):
    """An Agents SDK model with Kora as its OpenAI endpoint, over ``api``; the SDK's tracing (an upload to
    OpenAI) is off."""
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=kora.base_url, api_key="unused", max_retries=0)
    if api == "responses":
        return OpenAIResponsesModel(model="helper", openai_client=client)
    return OpenAIChatCompletionsModel(model="helper", openai_client=client)


@pytest.mark.parametrize("api", SDK_APIS)
async def test_openai_agents_sdk_runs_its_function_tool_through_kora(kora, api):
    from agents import Agent, Runner, function_tool

    agent = Agent(
        name="weather",
        instructions="Answer briefly.",
        tools=[function_tool(get_weather)],
        model=agents_model(kora, api),
    )
    result = await Runner.run(agent, "weather in Oslo?")
    assert result.final_output == "Tool result: sunny in Oslo"
    # The SDK ran the call Kora handed it and sent the result back: the model saw call and result in order.
    assert len(kora.model.requests) == 2
    first, second = kora.model.requests
    assert "get_weather" in {t["function"]["name"] for t in first["tools"]}
    assert non_system_roles(second) == ["user", "assistant", "tool"]
    assert second["messages"][-1]["content"] == "sunny in Oslo"
    assert any(m["role"] == "system" and "Answer briefly." in m["content"] for m in second["messages"])


@pytest.mark.parametrize("api", SDK_APIS)
async def test_openai_agents_sdk_structured_output_through_kora(kora, api):
    from agents import Agent, Runner

    agent = Agent(name="weather", output_type=Weather, model=agents_model(kora, api))
    result = await Runner.run(agent, "weather?")
    assert result.final_output == Weather(city="Paris", degrees=21)
    assert kora.model.requests[-1]["response_format"]["json_schema"]["name"] == "final_output"


async def test_openai_agents_sdk_keeps_its_conversation_in_a_kora_session(kora):
    """``Runner.run(..., conversation_id=...)`` sends only the new items with ``conversation``: Kora's session of
    that id holds the rest (the call it handed to the SDK, and the earlier runs)."""
    import uuid

    from agents import Agent, Runner, function_tool

    conversation = f"conv_{uuid.uuid4().hex}"
    agent = Agent(name="weather", tools=[function_tool(get_weather)], model=agents_model(kora, "responses"))
    result = await Runner.run(agent, "weather in Oslo?", conversation_id=conversation)
    assert result.final_output == "Tool result: sunny in Oslo"
    _, second = kora.model.requests
    assert non_system_roles(second) == ["user", "assistant", "tool"]
    later = await Runner.run(agent, "thanks", conversation_id=conversation)
    assert later.final_output == "You said: thanks"
    contents = [m.get("content") for m in kora.model.requests[-1]["messages"] if m["role"] != "system"]
    assert contents[0] == "weather in Oslo?"
    assert contents[-2:] == ["Tool result: sunny in Oslo", "thanks"]
    assert {e["metadata"].get("response_id") for e in kora.agent.events(conversation)} >= {result.last_response_id}


async def test_openai_agents_sdk_keeps_its_session_in_kora_conversations(kora):
    """The SDK's ``OpenAIConversationsSession`` keeps a run's items with the Conversations API: Kora creates the
    conversation, stores the input, the call it handed out, the SDK's result and the answer as the session's events,
    and gives them back as the next run's history. Removing one item (``pop_item``) is refused: a session's events
    are erased together."""
    import openai
    from agents import Agent, OpenAIConversationsSession, Runner, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=kora.base_url, api_key="unused", max_retries=0)
    session = OpenAIConversationsSession(openai_client=client)
    agent = Agent(name="weather", tools=[function_tool(get_weather)], model=agents_model(kora, "responses"))
    result = await Runner.run(agent, "weather in Oslo?", session=session)
    assert result.final_output == "Tool result: sunny in Oslo"
    assert kora.agent.event_types(session.session_id) == ["user_message", "tool_call", "tool_result", "agent_response"]
    later = await Runner.run(agent, "thanks", session=session)
    assert later.final_output == "You said: thanks"
    contents = [m.get("content") for m in kora.model.requests[-1]["messages"] if m["role"] != "system"]
    assert (contents[0], contents[-2:]) == ("weather in Oslo?", ["Tool result: sunny in Oslo", "thanks"])
    items = await session.get_items()
    assert [item["type"] for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    assert (await session.get_items(limit=1))[0]["content"][0]["text"] == "You said: thanks"
    with pytest.raises(openai.BadRequestError):
        await session.pop_item()
    conversation = session.session_id
    await session.clear_session()  # deletes the conversation: its session is erased
    assert conversation not in {s["session_id"] for s in kora.agent.get("/memory/sessions").json()["sessions"]}
