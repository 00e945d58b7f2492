"""Delegation between agents goes over A2A (message/send), with the chat endpoint as fallback for peers
without an A2A card."""

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.agent import running_agent
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.usefixtures("turn_path")


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
