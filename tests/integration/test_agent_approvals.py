"""Human approval of tool calls (``TOOL_APPROVAL_REQUIRED``): a real agent with an inline-tool MCP server and the
scripted model. A call the patterns name pauses the turn before it runs; ``GET /approvals`` lists it and
``POST /approvals/{id}`` decides it: an approval runs the tool once (with edited arguments when given), a rejection
reaches the model as the tool's error text, an approval left waiting expires into a rejection and the turn goes on
by itself; a second decision, an unknown id and another user's call are refused with nothing run or changed."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from kora.scripted import ToolCall, ToolCallReply
from tests.support.agent import RunningAgent, mcp_app, running_agent, wait_until
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.usefixtures("turn_path")

#: The arguments of every call the ``add`` tool ran, in order.
RAN: list[dict[str, int]] = []
USER = "X-User"


def add(a: int, b: int) -> int:
    """Add two integers."""
    RAN.append({"a": a, "b": b})
    return a + b


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    RAN.clear()


@asynccontextmanager
async def calc_agent(model: ScriptedModelServer, **env: str) -> AsyncIterator[RunningAgent]:
    """An agent on ``model`` with the ``calc`` tool server (``add`` needs approval, ``lookup`` does not)."""
    env = {"TOOL_APPROVAL_REQUIRED": "calc/add", **env}
    async with (
        ThreadedServer(mcp_app("calc", [add, lookup]), name="calc", lifespan="on") as calc,
        running_agent(
            model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url, AUTH_TRUSTED_USER_HEADER=USER, **env
        ) as agent,
    ):
        yield agent


def ask(agent: RunningAgent, session: str, user: str | None = None) -> Any:
    headers = {"X-Session-ID": session} | ({USER: user} if user else {})
    return agent.openai().chat.completions.create(
        model="a", messages=[{"role": "user", "content": "add them"}], extra_headers=headers
    )


def pending(agent: RunningAgent, user: str | None = None, **params: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{agent.url}/approvals", params=params, headers={USER: user} if user else {}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["total"] == len(body["approvals"])
    return list(body["approvals"])


def decide(agent: RunningAgent, approval_id: str, decision: object, user: str | None = None) -> httpx.Response:
    headers = {USER: user} if user else {}
    return httpx.post(f"{agent.url}/approvals/{approval_id}", json=decision, headers=headers, timeout=60)


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_an_approved_call_runs_once_and_the_turn_goes_on(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with calc_agent(model) as agent:
        answer = ask(agent, "s")
        assert answer.choices[0].finish_reason == "tool_calls"
        assert RAN == []
        assert len(model.requests) == 1
        [approval] = pending(agent, session_id="s")
        assert approval["tool"] == "add"
        assert approval["target"] == "calc/add"
        assert approval["arguments"] == {"a": 1, "b": 2}
        assert approval["status"] == "pending"
        assert agent.event_types("s") == ["user_message", "tool_call"]

        decided = decide(agent, approval["id"], {"decision": "approve"})
        assert decided.status_code == 200, decided.text
        body = decided.json()
        assert body["approval"]["status"] == "approved"
        assert body["turn"] == {"finish_reason": "stop", "text": "The sum is 3.", "approvals": []}
        assert RAN == [{"a": 1, "b": 2}]
        assert tool_messages(model.requests[1]) == ["3"]
        assert agent.event_types("s") == ["user_message", "tool_call", "tool_result", "agent_response"]
        assert pending(agent, session_id="s") == []

        # A second decision is refused and changes nothing: the tool does not run again.
        again = decide(agent, approval["id"], {"decision": "reject"})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "approval_decided"
        assert RAN == [{"a": 1, "b": 2}]
        assert len(model.requests) == 2
        assert agent.event_types("s") == ["user_message", "tool_call", "tool_result", "agent_response"]


async def test_a_rejection_reaches_the_model_as_the_tools_error_text(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "I was not allowed to add.")
    async with calc_agent(model) as agent:
        ask(agent, "s")
        [approval] = pending(agent, session_id="s")
        body = decide(agent, approval["id"], {"decision": "reject", "reason": "not today"}).json()
        assert body["approval"]["status"] == "rejected"
        assert body["turn"]["text"] == "I was not allowed to add."
        assert RAN == []
        assert tool_messages(model.requests[1]) == ["Error: the call was rejected by a person: not today"]
        stored = agent.events("s")
        assert stored[2]["event_type"] == "tool_result"
        assert stored[2]["metadata"]["outcome"] == "denied"


async def test_an_approval_with_arguments_runs_the_call_with_them(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        ask(agent, "s")
        [approval] = pending(agent, session_id="s")
        decided = decide(agent, approval["id"], {"decision": "approve", "arguments": {"a": 10, "b": 5}})
        assert decided.status_code == 200, decided.text
        assert RAN == [{"a": 10, "b": 5}]
        assert tool_messages(model.requests[1]) == ["15"]


async def test_a_call_no_pattern_names_runs_without_approval(model):
    model.enqueue(ToolCallReply([ToolCall("lookup", {"key": "k"})]), "Found it.")
    async with calc_agent(model) as agent:
        answer = ask(agent, "s")
        assert answer.choices[0].finish_reason == "stop"
        assert answer.choices[0].message.content == "Found it."
        assert pending(agent, session_id="s") == []


async def test_an_approval_left_waiting_expires_into_a_rejection_and_the_turn_goes_on(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Nobody answered, so I did not add.")
    async with calc_agent(model, TOOL_APPROVAL_TIMEOUT_SECONDS="0.5") as agent:
        ask(agent, "s")
        [approval] = pending(agent, session_id="s")
        wait_until(lambda: "agent_response" in agent.event_types("s"), 60, "the expired turn's answer")
        assert RAN == []
        assert tool_messages(model.requests[1]) == [
            "Error: the call was rejected: nobody approved the call within 0.5 seconds"
        ]
        assert pending(agent, session_id="s") == []
        late = decide(agent, approval["id"], {"decision": "approve"})
        assert late.status_code == 409
        assert "expired" in late.json()["error"]["message"]
        assert RAN == []
        assert len(model.requests) == 2


async def test_hostile_decisions_are_refused_and_change_nothing(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        ask(agent, "s", user="alice")
        # Only alice (and the operator) see alice's call; an anonymous caller sees nothing, even naming the session.
        assert pending(agent, user="bob") == []
        assert pending(agent, session_id="s") == []
        [approval] = pending(agent, user="alice")

        unknown = decide(agent, "appr_unknown", {"decision": "approve"}, user="alice")
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "approval_not_found"
        for user in ("bob", None):
            other = decide(agent, approval["id"], {"decision": "approve"}, user=user)
            assert other.status_code == 403
            assert other.json()["error"]["code"] == "approval_forbidden"
        for bad in ({"decision": "maybe"}, {"decision": "reject", "arguments": {}}, {"x": 1}, {"decision": 1}):
            refused = decide(agent, approval["id"], bad, user="alice")
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "invalid_decision"
        assert decide(agent, approval["id"], ["approve"], user="alice").status_code == 400
        not_json = httpx.post(f"{agent.url}/approvals/{approval['id']}", content=b"{", headers={USER: "alice"})
        assert not_json.status_code == 400
        assert RAN == []
        assert len(model.requests) == 1
        [still] = pending(agent, user="alice")
        assert still["status"] == "pending"

        assert decide(agent, approval["id"], {"decision": "approve"}, user="alice").status_code == 200
        assert RAN == [{"a": 1, "b": 2}]
