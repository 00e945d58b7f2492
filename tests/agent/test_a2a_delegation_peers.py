"""Delegation keeps speaking the peer's A2A version: a Kora agent delegates to a strict 1.0 peer (an ``a2a-sdk``
1.3 server with 0.3 compatibility off) in 1.0, and to a 0.3-only peer (a 0.3 card, ``message/send`` and nothing
else) in 0.3."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from a2a.helpers.proto_helpers import get_message_text, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.agent import running_agent
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


class EchoExecutor(AgentExecutor):
    """Completes each task with ``peer heard: <text>``; records the A2A version each request came in."""

    def __init__(self) -> None:
        self.versions: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        headers = context.call_context.state.get("headers", {})
        self.versions.append(headers.get("a2a-version", ""))
        assert context.task_id is not None
        assert context.context_id is not None
        assert context.message is not None
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=[context.message])
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = f"peer heard: {get_message_text(context.message)}"
        await updater.add_artifact([new_text_part(text)], name="answer", last_chunk=True)
        await updater.complete(updater.new_agent_message([new_text_part(text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def strict_v1_peer(executor: EchoExecutor) -> tuple[Starlette, AgentCard]:
    """The app and its card (whose interface URL is set once the server has its port)."""
    url = "http://127.0.0.1/"
    card = AgentCard(
        name="strict",
        description="A 1.0-only peer",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=False)]
    return Starlette(routes=routes), card


def old_v03_peer(seen: list[dict[str, Any]]) -> Starlette:
    """A 0.3-only agent: a 0.3 card and ``message/send``; every other method is -32601."""

    async def card(request: Request) -> JSONResponse:
        url = str(request.base_url)
        return JSONResponse(
            {
                "name": "old",
                "description": "A 0.3-only peer",
                "url": url,
                "version": "0.1.0",
                "protocolVersion": "0.3.0",
                "preferredTransport": "JSONRPC",
                "capabilities": {"streaming": False},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "echo", "name": "echo", "description": "Echoes", "tags": ["echo"]}],
            }
        )

    async def rpc(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append({"body": body, "version": request.headers.get("a2a-version")})
        if body.get("method") != "message/send":
            error = {"code": -32601, "message": "Method not found"}
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "error": error})
        message = body["params"]["message"]
        text = "".join(part.get("text", "") for part in message["parts"])
        context_id = message.get("contextId") or str(uuid.uuid4())
        answer = [{"kind": "text", "text": f"old peer heard: {text}"}]
        task = {
            "kind": "task",
            "id": str(uuid.uuid4()),
            "contextId": context_id,
            "status": {"state": "completed", "message": {"kind": "message", "role": "agent", "messageId": "a",
                                                          "parts": answer}},
            "artifacts": [{"artifactId": "answer", "name": "answer", "parts": answer}],
            "history": [message],
        }  # fmt: skip
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": task})

    routes = [
        Route(path, card, methods=["GET"]) for path in ("/.well-known/agent-card.json", "/.well-known/agent.json")
    ]
    return Starlette(routes=[*routes, Route("/", rpc, methods=["POST"])])


async def delegate(model, name: str, url: str) -> str:
    model.enqueue(ToolCallReply([ToolCall(f"delegate_to_{name}", {"task": "say hi"})]), TextReply("relayed"))
    async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"{name}:{url}") as parent:
        answer = parent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "go"}])
        assert answer.choices[0].message.content == "relayed"
        tool_results = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
        return str(tool_results[-1]["content"])


@pytest.mark.usefixtures("turn_path")
async def test_a_strict_1_0_peer_is_spoken_to_in_1_0(model):
    executor = EchoExecutor()
    app, card = strict_v1_peer(executor)
    async with ThreadedServer(app, name="strict-peer") as peer:
        card.supported_interfaces[0].url = f"{peer.root_url}/"
        result = await delegate(model, "strict", peer.root_url)
    assert "peer heard: say hi" in result
    assert executor.versions == ["1.0"]


@pytest.mark.usefixtures("turn_path")
async def test_a_0_3_only_peer_is_spoken_to_in_0_3(model):
    seen: list[dict[str, Any]] = []
    async with ThreadedServer(old_v03_peer(seen), name="old-peer") as peer:
        result = await delegate(model, "old", peer.root_url)
    assert "old peer heard: say hi" in result
    assert [entry["body"]["method"] for entry in seen] == ["message/send"]
    assert seen[0]["version"] in {None, "0.3"}
