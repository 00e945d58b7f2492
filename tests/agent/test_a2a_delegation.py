"""Delegation between agents goes over A2A (message/send), with the chat endpoint as fallback for peers
without an A2A card."""

import asyncio
import contextlib

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kora.core.net import free_port
from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.agent import RunningAgent, running_agent
from tests.support.eventually import eventually
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


async def test_delegation_between_two_agents_is_an_a2a_task(model):
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "count to three"})]),
        TextReply("one two three"),
        TextReply("The child counted."),
    )
    async with running_agent(model, name="child") as child:
        async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}") as parent:
            card = child.get("/.well-known/agent.json").json()
            assert [s["id"] for s in parent.get("/.well-known/agent.json").json()["skills"]] == [
                "chat",
                "delegate_to_child",
            ]
            assert card["protocolVersion"] == "0.3.0"
            answer = parent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "ask"}], extra_headers={"X-Session-ID": "p"}
            )
            assert answer.choices[0].message.content == "The child counted."
            response = parent.events("p")[2]
            assert response["content"]["response"] == "one two three"
            store = child.server.app.state.a2a.store
            assert len(store) == 1  # the child ran it as an A2A task
            child_events = child.events("p.parent")
            assert [e["event_type"] for e in child_events] == ["task_delegation_received", "agent_response"]
            assert child_events[0]["metadata"]["from_agent"] == "parent"


async def test_a_peer_without_an_a2a_card_is_asked_on_its_chat_endpoint(model):
    seen: list[dict] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append({"headers": dict(request.headers), "body": await request.json()})
        message = {"role": "assistant", "content": "chat-only answer"}
        return JSONResponse({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]})

    legacy_peer = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    model.enqueue(ToolCallReply([ToolCall("delegate_to_old", {"task": "hi old"})]), TextReply("done"))
    async with ThreadedServer(legacy_peer, name="old-peer") as old:
        async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"old:{old.root_url}") as parent:
            parent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "go"}])
            (call,) = seen
            assert call["headers"]["x-kora-delegated-by"] == "parent"
            assert call["body"]["messages"] == [{"role": "user", "content": "hi old"}]
            assert parent.events()[2]["content"]["response"] == "chat-only answer"


async def test_a_peer_task_that_fails_gives_the_model_the_reason_as_error_text(model):
    from kora.scripted import ErrorReply

    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "do it"})]),
        ErrorReply(500, "child backend down"),
        TextReply("The child could not help."),
    )
    async with running_agent(model, name="child") as child:
        async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}") as parent:
            answer = parent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])
            assert answer.choices[0].message.content == "The child could not help."
            (result,) = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
            assert result["content"].startswith("Error: agent 'child' ended the task failed:")
            assert "child backend down" in result["content"]


async def hung_server(port: int) -> asyncio.Server:
    """A peer that accepts connections and reads what it is sent, but never answers."""

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    return await asyncio.start_server(never_answer, "127.0.0.1", port)


def delegate_and_conclude(model, agent: RunningAgent, peer: str, session: str) -> dict:
    """One turn whose model delegates to ``peer`` and then concludes; checks the turn answered and its events
    were stored, then that the agent serves the next turn; returns the tool result the model was given."""
    answer = agent.openai(timeout=60).chat.completions.create(
        model="a", messages=[{"role": "user", "content": "ask"}], extra_headers={"X-Session-ID": session}
    )
    assert answer.choices[0].message.content == f"{peer} could not help"
    (result,) = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    events = agent.events(session)
    assert [e["event_type"] for e in events] == [
        "user_message",
        "delegation_request",
        "delegation_response",
        "agent_response",
    ]
    assert events[1]["content"]["agent"] == peer
    assert events[2]["content"]["response"] == result["content"]
    model.enqueue(TextReply("still here"))
    again = agent.openai().chat.completions.create(
        model="a", messages=[{"role": "user", "content": "ping"}], extra_headers={"X-Session-ID": f"{session}-2"}
    )
    assert again.choices[0].message.content == "still here"
    return result


def delegation_turn(model, peer: str, *child_replies) -> None:
    model.enqueue(
        ToolCallReply([ToolCall(f"delegate_to_{peer}", {"task": "help"})]),
        *child_replies,
        TextReply(f"{peer} could not help"),
    )


async def test_a_peer_that_is_down_gives_error_text_the_turn_answers_and_is_stored(model):
    delegation_turn(model, "ghost")
    async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"ghost:http://127.0.0.1:{free_port()}") as agent:
        result = await asyncio.to_thread(delegate_and_conclude, model, agent, "ghost", "down")
        assert result["content"].startswith("Error: could not reach agent 'ghost'")


async def test_a_peer_that_accepts_but_never_answers_times_out_with_error_text(model):
    port = free_port()
    server = await hung_server(port)
    delegation_turn(model, "hung")
    try:
        async with running_agent(
            model, name="parent", AGENT_SUB_AGENTS=f"hung:http://127.0.0.1:{port}", DELEGATION_TIMEOUT_SECONDS="1"
        ) as agent:
            result = await asyncio.to_thread(delegate_and_conclude, model, agent, "hung", "hung")
            assert result["content"] == "Error: agent 'hung' did not answer within 1 s."
    finally:
        server.close()


async def test_a_peer_whose_task_outlasts_the_delegation_timeout_gives_error_text(model):
    """A real peer agent whose model answers after 3 s, against a 1 s delegation timeout: the parent's turn goes
    on with the timeout as error text (the peer's own turn finishes and is stored on its side)."""
    delegation_turn(model, "slow", TextReply("too late", delay_seconds=3))
    async with running_agent(model, name="slow") as slow:
        async with running_agent(
            model, name="parent", AGENT_SUB_AGENTS=f"slow:{slow.url}", DELEGATION_TIMEOUT_SECONDS="1"
        ) as agent:
            result = await asyncio.to_thread(delegate_and_conclude, model, agent, "slow", "slow")
            assert result["content"] == "Error: agent 'slow' did not answer within 1 s."
            eventually(
                lambda: slow.event_types("slow.parent") == ["task_delegation_received", "agent_response"],
                "the slow agent's answer stored",
            )


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_delegation_tool_describes_the_peer_by_its_card(model):
    # A real model routes by the tool's description: the peer's card description and skills are in it.
    from tests.support.agent import mcp_app

    expected = (
        "Delegate a task to the peer agent 'child' and return its answer. The agent: Does arithmetic. "
        "Its skills: child; add (Add two integers.)."
    )
    model.enqueue(TextReply("ok"))
    async with ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc:
        env = {"AGENT_DESCRIPTION": "Does arithmetic.", "MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": calc.root_url}
        async with running_agent(model, name="child", **env) as child:
            async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}") as parent:

                def described() -> str:
                    (tool,) = [t for t in parent.get("/tools").json()["tools"] if t["name"] == "delegate_to_child"]
                    return str(tool["description"])

                eventually(lambda: described() == expected, f"the description, now {described()!r}", within=30)
                parent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
                (offered,) = [t for t in model.requests[-1]["tools"] if t["function"]["name"] == "delegate_to_child"]
                assert offered["function"]["description"] == expected
                card_skill = next(
                    s for s in parent.get("/.well-known/agent.json").json()["skills"] if s["id"] == "delegate_to_child"
                )
                assert card_skill["description"] == expected


async def test_a_peer_that_is_not_up_yet_is_described_once_it_is(model):
    from kora.agent.app import create_app
    from tests.support.agent import agent_settings

    late = ThreadedServer(create_app(agent_settings(model, "late", AGENT_DESCRIPTION="Comes late.")), lifespan="on")
    late.start()  # to learn its port; stopped, it listens there again when started
    url = late.root_url
    late.stop()
    async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"late:{url}") as parent:

        def described() -> str:
            (tool,) = [t for t in parent.get("/tools").json()["tools"] if t["name"] == "delegate_to_late"]
            return str(tool["description"])

        assert described() == "Delegate a task to the peer agent 'late' and return its answer."
        with late:
            eventually(lambda: "The agent: Comes late." in described(), "the late peer described", within=60)
