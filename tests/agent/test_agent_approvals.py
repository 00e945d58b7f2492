"""Human approval of tool calls (``TOOL_APPROVAL_REQUIRED``): a real agent with an inline-tool MCP server and the
scripted model. A call the patterns name pauses the turn before it runs; ``GET /approvals`` lists it and
``POST /approvals/{id}`` decides it: an approval runs the tool once (with edited arguments when given), a rejection
reaches the model as the tool's error text, an approval left waiting expires into a rejection and the turn goes on
by itself; a second decision, an unknown id and another user's call are refused with nothing run or changed."""

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, Task, TaskState
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from kora.agent.turn import TurnRequest
from kora.core.errors import ApprovalConflict
from kora.core.net import free_port
from kora.memory import LocalMemory, Memory
from kora.scripted import TextReply, ToolCall, ToolCallReply
from kora.scripted.model import ScriptedModel
from kora.scripted.model import create_app as create_model_app
from tests.support.a2a import decision_message, sdk_client, send, user_message
from tests.support.agent import OPERATOR, RunningAgent, agent_runtime, mcp_app, running_agent
from tests.support.calc import RAN, add
from tests.support.eventually import eventually, eventually_async
from tests.support.processes import clean_env, kora_process, prometheus
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]

USER = "X-User"


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    RAN.clear()


@asynccontextmanager
async def calc_agent(
    model: ScriptedModelServer, memory: Memory | None = None, **env: str
) -> AsyncIterator[RunningAgent]:
    """An agent on ``model`` with the ``calc`` tool server (``add`` needs approval, ``lookup`` does not), serving
    ``memory`` when given."""
    env = {"TOOL_APPROVAL_REQUIRED": "calc/add", **env}
    async with (
        ThreadedServer(mcp_app("calc", [add, lookup]), name="calc", lifespan="on") as calc,
        running_agent(
            model,
            memory=memory,
            MCP_SERVERS="calc",
            MCP_SERVER_CALC_URL=calc.root_url,
            AUTH_TRUSTED_USER_HEADER=USER,
            **env,
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
        eventually(lambda: "agent_response" in agent.event_types("s"), "the expired turn's answer", within=60)
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


async def test_a2a_a_paused_task_is_input_required_and_the_next_message_decides(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with calc_agent(model) as agent:
        client = await sdk_client(agent.url)
        task = await send(client, user_message("add them", context_id="t"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        text, data = task.status.message.parts
        assert "add" in text.text
        assert '{"a":1,"b":2}' in text.text
        [waiting] = MessageToDict(data.data)["approvals"]
        assert waiting["target"] == "calc/add"
        assert RAN == []

        done = await send(client, decision_message(task, {"decision": "approve"}))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == "The sum is 3."
        assert RAN == [{"a": 1, "b": 2}]
        assert agent.event_types("t") == ["user_message", "tool_call", "tool_result", "agent_response"]

        # A second decision on the finished task is a JSON-RPC error; nothing runs again.
        with pytest.raises(A2AError):
            await send(client, decision_message(task, {"decision": "reject"}))
        assert RAN == [{"a": 1, "b": 2}]
        assert len(model.requests) == 2
        await client.close()


async def test_a2a_reject_with_a_reason_and_approve_with_edited_arguments(model):
    model.enqueue(
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        "Not allowed.",
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        "Edited.",
    )
    async with calc_agent(model) as agent:
        client = await sdk_client(agent.url)
        task = await send(client, user_message("add", context_id="r"))
        rejected = await send(client, decision_message(task, {"decision": "reject", "reason": "no"}))
        assert rejected.status.state == TaskState.TASK_STATE_COMPLETED
        assert tool_messages(model.requests[1]) == ["Error: the call was rejected by a person: no"]
        task = await send(client, user_message("add", context_id="e"))
        edited = await send(client, decision_message(task, {"decision": "approve", "arguments": {"a": 2, "b": 2}}))
        assert edited.status.state == TaskState.TASK_STATE_COMPLETED
        assert RAN == [{"a": 2, "b": 2}]
        assert tool_messages(model.requests[3]) == ["4"]
        await client.close()


async def test_a2a_an_expired_approval_completes_the_task_by_itself(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Nobody answered.")
    async with calc_agent(model, TOOL_APPROVAL_TIMEOUT_SECONDS="0.5") as agent:
        client = await sdk_client(agent.url)
        task = await send(client, user_message("add", context_id="x"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        async def finished() -> Task | None:
            fetched = await client.get_task(GetTaskRequest(id=task.id))
            return fetched if fetched.status.state == TaskState.TASK_STATE_COMPLETED else None

        fetched = await eventually_async(finished, "the expired task completed")
        assert fetched.artifacts[0].parts[0].text == "Nobody answered."
        assert RAN == []
        with pytest.raises(A2AError):
            await send(client, decision_message(task, {"decision": "approve"}))
        assert RAN == []
        await client.close()


async def test_a2a_a_decision_by_rest_completes_the_waiting_task(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Approved elsewhere.")
    async with calc_agent(model) as agent:
        client = await sdk_client(agent.url)
        task = await send(client, user_message("add", context_id="w"))
        [approval] = pending(agent, session_id="w")
        assert decide(agent, approval["id"], {"decision": "approve"}).status_code == 200
        fetched = await client.get_task(GetTaskRequest(id=task.id))
        assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
        assert fetched.artifacts[0].parts[0].text == "Approved elsewhere."
        assert RAN == [{"a": 1, "b": 2}]
        await client.close()


async def test_a2a_hostile_decisions_are_refused_and_change_nothing(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with (
        calc_agent(model) as agent,
        httpx.AsyncClient(headers={USER: "alice"}, timeout=30) as alice_http,
        httpx.AsyncClient(headers={USER: "bob"}, timeout=30) as bob_http,
    ):
        alice = await sdk_client(agent.url, http=alice_http)
        bob = await sdk_client(agent.url, http=bob_http)
        task = await send(alice, user_message("add", context_id="h"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        # Another user's task: not found for them.
        with pytest.raises(A2AError):
            await send(bob, decision_message(task, {"decision": "approve"}))
        # A message without a decision, or with a bad one.
        for bad in ({"decision": "maybe"}, {"verdict": "approve"}):
            with pytest.raises(InvalidParamsError):
                await send(alice, decision_message(task, bad))
        text_only = user_message("yes please", context_id="h")
        text_only.message.task_id = task.id
        with pytest.raises(InvalidParamsError):
            await send(alice, text_only)
        # An unknown task.
        ghost = Task(id=str(uuid.uuid4()), context_id="h")
        with pytest.raises(TaskNotFoundError):
            await send(alice, decision_message(ghost, {"decision": "approve"}))
        assert RAN == []
        assert len(model.requests) == 1
        fetched = await alice.get_task(GetTaskRequest(id=task.id))
        assert fetched.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        done = await send(alice, decision_message(task, {"decision": "approve"}))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert RAN == [{"a": 1, "b": 2}]
        await alice.close()
        await bob.close()


def follow_up(answer: Any, *decisions: object) -> list[Any]:
    """The conversation after a paused answer: its message sent back as it came, then one ``tool`` message per
    waiting call whose content is the decision (JSON text)."""
    message = answer.choices[0].message
    calls = message.tool_calls
    tools = [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(decision)}
        for call, decision in zip(calls, decisions, strict=True)
    ]
    return [{"role": "user", "content": "add them"}, message.model_dump(exclude_none=True), *tools]


def continue_chat(agent: RunningAgent, session: str, messages: list[Any], user: str | None = None, **kw: Any) -> Any:
    headers = {"X-Session-ID": session} | ({USER: user} if user else {})
    return agent.openai().chat.completions.create(model="a", messages=messages, extra_headers=headers, **kw)


async def test_chat_a_paused_answer_names_the_call_and_the_next_request_decides_it(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with calc_agent(model) as agent:
        answer = ask(agent, "c")
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        assert call.function.name == "add"
        assert json.loads(call.function.arguments) == {"a": 1, "b": 2}
        marker = call.model_dump()["kora_approval"]
        [listed] = pending(agent, session_id="c")
        assert marker == {"id": listed["id"], "target": "calc/add", "expires_at": listed["expires_at"]}
        assert RAN == []

        done = continue_chat(agent, "c", follow_up(answer, {"decision": "approve"}))
        assert done.choices[0].finish_reason == "stop"
        assert done.choices[0].message.content == "The sum is 3."
        assert done.usage.prompt_tokens > 0
        assert RAN == [{"a": 1, "b": 2}]
        assert tool_messages(model.requests[1]) == ["3"]
        assert agent.event_types("c") == ["user_message", "tool_call", "tool_result", "agent_response"]

        # The same decision again: 409 in OpenAI's error body, nothing run or stored.
        with pytest.raises(openai.ConflictError) as again:
            continue_chat(agent, "c", follow_up(answer, {"decision": "approve"}))
        assert again.value.code == "approval_decided"
        assert RAN == [{"a": 1, "b": 2}]
        assert len(model.requests) == 2
        assert agent.event_types("c") == ["user_message", "tool_call", "tool_result", "agent_response"]


async def test_chat_reject_edit_and_stream(model):
    model.enqueue(
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        "Rejected.",
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        TextReply("Edited to 7.", chunk_delay_seconds=0.01),
    )
    async with calc_agent(model) as agent:
        answer = ask(agent, "r")
        done = continue_chat(agent, "r", follow_up(answer, {"decision": "reject", "reason": "no"}))
        assert done.choices[0].message.content == "Rejected."
        assert tool_messages(model.requests[1]) == ["Error: the call was rejected by a person: no"]
        assert RAN == []

        answer = ask(agent, "e")
        edited = follow_up(answer, {"decision": "approve", "arguments": {"a": 3, "b": 4}})
        chunks = list(continue_chat(agent, "e", edited, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Edited to 7."
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert RAN == [{"a": 3, "b": 4}]


async def test_chat_a_streamed_pause_ends_with_the_marked_call(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]))
    async with calc_agent(model) as agent:
        chunks = list(
            agent.openai().chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "add"}],
                extra_headers={"X-Session-ID": "s"},
                stream=True,
            )
        )
        calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
        [call] = calls
        assert call.function.name == "add"
        assert call.model_dump()["kora_approval"]["target"] == "calc/add"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_chat_hostile_decisions_are_refused_and_change_nothing(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        answer = ask(agent, "h", user="alice")
        with pytest.raises(openai.PermissionDeniedError) as other:
            continue_chat(agent, "h", follow_up(answer, {"decision": "approve"}), user="bob")
        assert other.value.code in ("approval_forbidden", "session_forbidden")
        for bad in ({"decision": "maybe"}, "approve", {"decision": "reject", "arguments": {"a": 1}}):
            with pytest.raises(openai.BadRequestError) as refused:
                continue_chat(agent, "h", follow_up(answer, bad), user="alice")
            assert refused.value.code == "invalid_decision"
        assert RAN == []
        assert len(model.requests) == 1
        assert [a["status"] for a in pending(agent, user="alice")] == ["pending"]
        done = continue_chat(agent, "h", follow_up(answer, {"decision": "approve"}), user="alice")
        assert done.choices[0].message.content == "Done."


async def test_chat_a_decision_after_the_expiry_is_refused(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Nobody answered.")
    async with calc_agent(model, TOOL_APPROVAL_TIMEOUT_SECONDS="0.5") as agent:
        answer = ask(agent, "x")
        eventually(lambda: "agent_response" in agent.event_types("x"), "the expired turn's answer", within=60)
        with pytest.raises(openai.ConflictError) as late:
            continue_chat(agent, "x", follow_up(answer, {"decision": "approve"}))
        assert "expired" in late.value.message
        assert RAN == []


async def test_responses_a_paused_response_names_the_call_and_a_function_call_output_decides_it(model):
    model.enqueue(
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        "The sum is 3.",
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        TextReply("Streamed after the rejection.", chunk_delay_seconds=0.01),
    )
    async with calc_agent(model) as agent:
        client = agent.openai()
        first = client.responses.create(model="a", input="add them")
        [item] = first.output
        assert item.type == "function_call"
        assert item.name == "add"
        marker = item.model_dump()["kora_approval"]
        assert marker["target"] == "calc/add"
        assert RAN == []
        # Read back, the paused response is the one answered, its call marked the same.
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()

        decision = {"type": "function_call_output", "call_id": item.call_id, "output": '{"decision": "approve"}'}
        done = client.responses.create(model="a", previous_response_id=first.id, input=[decision])
        assert done.output_text == "The sum is 3."
        assert RAN == [{"a": 1, "b": 2}]
        assert tool_messages(model.requests[1]) == ["3"]
        # Read back, the resumed response is the one answered.
        assert client.responses.retrieve(done.id).output_text == "The sum is 3."
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()

        # The same decision again, continuing either response: 409, nothing run.
        for previous in (first.id, done.id):
            with pytest.raises(openai.ConflictError) as again:
                client.responses.create(model="a", previous_response_id=previous, input=[decision])
            assert again.value.code == "approval_decided"
        assert RAN == [{"a": 1, "b": 2}]
        assert len(model.requests) == 2

        second = client.responses.create(model="a", input="add again", previous_response_id=done.id)
        [item] = second.output
        rejection = {
            "type": "function_call_output",
            "call_id": item.call_id,
            "output": json.dumps({"decision": "reject", "reason": "enough"}),
        }
        events = list(
            client.responses.create(model="a", previous_response_id=second.id, input=[rejection], stream=True)
        )
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "Streamed after the rejection."
        assert tool_messages(model.requests[3])[-1] == "Error: the call was rejected by a person: enough"
        assert RAN == [{"a": 1, "b": 2}]


async def test_responses_a_bad_decision_is_refused(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]))
    async with calc_agent(model) as agent:
        client = agent.openai()
        first = client.responses.create(model="a", input="add them")
        [item] = first.output
        bad = {"type": "function_call_output", "call_id": item.call_id, "output": '{"decision": "perhaps"}'}
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="a", previous_response_id=first.id, input=[bad])
        assert refused.value.code == "invalid_decision"
        assert RAN == []
        assert len(model.requests) == 1


def test_metrics_count_approvals_by_status_and_their_wait(turn_path):
    """Real ``kora agent`` processes (``/metrics`` is served by the process's telemetry set-up): one approves a call
    and rejects another; one, whose calls expire at once, lets a call expire."""
    scripted = ScriptedModel()
    with (
        ThreadedServer(create_model_app(scripted), name="scripted-model", lifespan="off") as model_server,
        ThreadedServer(mcp_app("calc", [add, lookup]), name="calc", lifespan="on") as calc,
    ):

        def run_agent(timeout: str, decisions: list[str]) -> dict[str, list[tuple[dict[str, str], float]]]:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            env = clean_env(
                AGENT_NAME="careful",
                AGENT_HOST="127.0.0.1",
                AGENT_PORT=str(port),
                MODEL_API_URL=model_server.root_url + "/v1",
                MODEL_NAME="scripted",
                MCP_SERVERS="calc",
                MCP_SERVER_CALC_URL=calc.root_url,
                AGENT_DIRECT_FIRST_REQUEST=str(turn_path == "direct"),
                TOOL_APPROVAL_REQUIRED="calc/*",
                TOOL_APPROVAL_TIMEOUT_SECONDS=timeout,
            )
            with kora_process(["agent"], env, url + "/ready"):
                for index, decision in enumerate(decisions or ["none"]):
                    session = f"m{index}"
                    scripted.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": index})]), "Done.")
                    body = {"model": "a", "messages": [{"role": "user", "content": "add"}]}
                    headers = {"X-Session-ID": session}
                    httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60).raise_for_status()
                    if decisions:
                        [approval] = httpx.get(f"{url}/approvals", params={"session_id": session}).json()["approvals"]
                        decided = httpx.post(
                            f"{url}/approvals/{approval['id']}", json={"decision": decision}, timeout=60
                        )
                        decided.raise_for_status()
                    else:

                        def answered(session: str = session) -> bool:
                            events = httpx.get(
                                f"{url}/memory/events", params={"session_id": session}, timeout=10
                            ).json()["events"]
                            return any(e["event_type"] == "agent_response" for e in events)

                        eventually(answered, "the expired turn's answer", within=60)
                return prometheus(url + "/metrics")

        def counts(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
            return {labels["kora_approval_status"]: value for labels, value in samples["kora_agent_approvals_total"]}

        decided = run_agent("600", ["approve", "reject"])
        assert counts(decided) == {"requested": 2, "approved": 1, "rejected": 1}
        waits = {
            labels["kora_approval_status"]: value for labels, value in decided["kora_agent_approval_wait_seconds_count"]
        }
        assert waits == {"approved": 1, "rejected": 1}
        expired = run_agent("0.2", [])
        assert counts(expired) == {"requested": 1, "expired": 1}


async def test_a_session_waiting_for_a_decision_takes_no_other_turn(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        ask(agent, "w")
        for stream in (False, True):
            with pytest.raises(openai.ConflictError) as refused:
                continue_chat(agent, "w", [{"role": "user", "content": "something else"}], stream=stream)
            assert refused.value.code == "approval_pending"
        assert agent.event_types("w") == ["user_message", "tool_call"]
        assert len(model.requests) == 1
        [approval] = pending(agent, session_id="w")
        assert decide(agent, approval["id"], {"decision": "approve"}).json()["turn"]["text"] == "Done."


async def test_a_delegation_named_agents_peer_waits_and_runs_once_approved(model):
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "count to three"})]),
        TextReply("one two three"),
        TextReply("The child counted."),
    )
    async with (
        running_agent(model, name="child") as child,
        running_agent(
            model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}", TOOL_APPROVAL_REQUIRED="agents/child"
        ) as parent,
    ):
        answer = ask(parent, "p")
        [call] = answer.choices[0].message.tool_calls
        assert call.model_dump()["kora_approval"]["target"] == "agents/child"
        assert len(child.a2a_server().store) == 0  # nothing delegated yet
        done = continue_chat(parent, "p", follow_up(answer, {"decision": "approve"}))
        assert done.choices[0].message.content == "The child counted."
        assert len(child.server.app.state.a2a.store) == 1


async def test_ag_ui_a_paused_run_finishes_naming_the_waiting_calls(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        run = {"threadId": "agui", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "add"}]}
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(f"{agent.url}/ag-ui", json=run)
        assert answer.status_code == 200, answer.text
        lines = re.split(r"\r\n|\r|\n", answer.text)
        events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
        finished = events[-1]
        assert finished["type"] == "RUN_FINISHED"
        [waiting] = finished["result"]["approvals"]
        assert finished["result"]["finishReason"] == "tool_calls"
        assert waiting["target"] == "calc/add"
        assert RAN == []
        assert decide(agent, waiting["id"], {"decision": "approve"}).json()["turn"]["text"] == "Done."
        assert RAN == [{"a": 1, "b": 2}]


async def test_chat_a_decision_the_agent_no_longer_knows_is_refused_not_shown_to_the_model(model):
    """An agent that restarted forgot its waiting calls (the local store): a decision sent back for one is a 409,
    rather than the decision given to the model as the call's result."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]))
    async with calc_agent(model) as agent:
        answer = ask(agent, "k")
    async with calc_agent(model) as restarted:
        with pytest.raises(openai.ConflictError) as unknown:
            continue_chat(restarted, "k", follow_up(answer, {"decision": "approve"}))
        assert unknown.value.code == "approval_unknown"
        assert "restarted" in unknown.value.message
    assert RAN == []
    assert len(model.requests) == 1


async def test_chat_a_decision_without_the_session_header_names_the_header_and_the_call_still_waits(model):
    """A decision sent without the session's X-Session-ID goes to a new session, which holds no waiting call: the
    409 says so and names the header (the agent did not restart), and the call still waits in its session."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with calc_agent(model) as agent:
        answer = ask(agent, "kept")
        decision = follow_up(answer, {"decision": "approve"})
        with pytest.raises(openai.ConflictError) as unknown:
            agent.openai().chat.completions.create(model="a", messages=decision)
        assert unknown.value.code == "approval_unknown"
        assert "no turn of the session holds it" in unknown.value.message
        assert "X-Session-ID" in unknown.value.message
        assert RAN == []
        [waiting] = pending(agent, session_id="kept")
        assert waiting["target"] == "calc/add"
        done = continue_chat(agent, "kept", decision)
        assert done.choices[0].message.content == "The sum is 3."
    assert RAN == [{"a": 1, "b": 2}]


def waiting_for_operator(agent: RunningAgent) -> list[dict[str, Any]]:
    answer = httpx.get(f"{agent.url}/approvals", headers=OPERATOR, timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["approvals"])


async def test_erasing_a_session_or_a_user_forgets_their_waiting_calls(model):
    """An erased session's or user's waiting calls are no longer listed, and their expiry resumes nothing: the
    erased session stays empty. A later session's expiry is what the test waits on (its timer fires after the
    erased ones would have)."""
    model.enqueue(
        *[ToolCallReply([ToolCall("add", {"a": i, "b": 2})]) for i in range(4)], "Nobody answered the kept one."
    )
    async with calc_agent(model, TOOL_APPROVAL_TIMEOUT_SECONDS="10") as agent:
        ask(agent, "gone-session", user="alice")
        ask(agent, "gone-user", user="bob")
        conversation = httpx.post(f"{agent.url}/v1/conversations", json={}, headers={USER: "carol"}, timeout=30)
        ask(agent, conversation.json()["id"], user="carol")
        ask(agent, "kept", user="dave")
        assert len(waiting_for_operator(agent)) == 4

        erased = [
            httpx.delete(f"{agent.url}/memory/sessions/gone-session", headers=OPERATOR, timeout=30),
            httpx.delete(f"{agent.url}/memory/users/bob", headers=OPERATOR, timeout=30),
            httpx.delete(f"{agent.url}/v1/conversations/{conversation.json()['id']}", headers={USER: "carol"}),
        ]
        assert [r.status_code for r in erased] == [200, 200, 200], [r.text for r in erased]
        assert [a["session_id"] for a in waiting_for_operator(agent)] == ["kept"]

        eventually(lambda: "agent_response" in agent.event_types("kept"), "the kept session's expired turn", within=60)
        assert len(model.requests) == 5  # four pauses, one resumed turn: the kept one
        for session in ("gone-session", "gone-user", conversation.json()["id"]):
            assert agent.events(session) == []
        assert waiting_for_operator(agent) == []
        assert RAN == []


async def test_responses_a_decision_the_agent_no_longer_knows_is_refused_not_shown_to_the_model(model):
    """As over Chat Completions: after a restart (the same memory, the waiting calls forgotten), a
    ``function_call_output`` deciding a call that waited is a 409, and nothing reaches the model."""
    memory = LocalMemory()
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]))
    async with calc_agent(model, memory) as agent:
        first = agent.openai().responses.create(model="a", input="add them")
    [item] = first.output
    decision = {"type": "function_call_output", "call_id": item.call_id, "output": '{"decision": "approve"}'}
    async with calc_agent(model, memory) as restarted:
        client = restarted.openai()
        for background in (False, True):
            with pytest.raises(openai.ConflictError) as unknown:
                client.responses.create(
                    model="a", previous_response_id=first.id, input=[decision], background=background
                )
            assert unknown.value.code == "approval_unknown"
            assert "restarted" in unknown.value.message
    assert RAN == []
    assert len(model.requests) == 1


async def test_a_turn_queued_behind_one_that_pauses_is_refused_once_it_gets_the_session(model):
    """A second turn of the session passes the first check while the first turn runs, waits for the session's
    lock, and is refused (409 ``approval_pending``) once it gets it, because the first paused meanwhile."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})], delay_seconds=10))
    async with ThreadedServer(mcp_app("calc", [add, lookup]), name="calc", lifespan="on") as calc:
        runtime = agent_runtime(
            model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url, TOOL_APPROVAL_REQUIRED="calc/add"
        )
        await runtime.start()
        try:
            first = asyncio.create_task(runtime.run(TurnRequest("q", "add them")))
            # The first turn holds the session's lock while the model answers.
            await asyncio.to_thread(
                eventually, lambda: bool(model.requests), "the first turn asking the model", within=60
            )
            second = asyncio.create_task(runtime.run(TurnRequest("q", "something else")))
            await asyncio.sleep(0)  # its first check ran (nothing waits yet); it now waits for the lock
            assert not second.done()
            paused = await first
            assert paused.finish_reason == "tool_calls"
            with pytest.raises(ApprovalConflict) as refused:
                await second
            assert refused.value.code == "approval_pending"
            assert len(model.requests) == 1
            assert [a.tool_name for a in runtime.approvals.pending("q")] == ["add"]
        finally:
            await runtime.close()


async def test_a_conversation_waiting_for_a_decision_takes_no_new_items(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        conversation = agent.openai().conversations.create()
        ask(agent, conversation.id)
        item = {"type": "message", "role": "user", "content": "meanwhile"}
        added = httpx.post(f"{agent.url}/v1/conversations/{conversation.id}/items", json={"items": [item]})
        assert added.status_code == 409, added.text
        assert added.json()["error"]["code"] == "approval_pending"
        assert agent.event_types(conversation.id) == ["user_message", "tool_call"]
        [approval] = pending(agent, session_id=conversation.id)
        assert decide(agent, approval["id"], {"decision": "approve"}).json()["turn"]["text"] == "Done."


async def test_a_resumed_turn_goes_on_within_the_budget_it_paused_with(model):
    # Two model requests in all: the first calls lookup, the second add (which waits); once add is approved and
    # runs, the turn has no request left, so the third answer is never asked for.
    model.enqueue(
        ToolCallReply([ToolCall("lookup", {"key": "k"})]),
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]),
        "Never asked for.",
    )
    async with calc_agent(model, BUDGET_MAX_MODEL_REQUESTS="2") as agent:
        assert ask(agent, "b").choices[0].finish_reason == "tool_calls"
        [approval] = pending(agent, session_id="b")
        decided = decide(agent, approval["id"], {"decision": "approve"})
        assert decided.status_code == 200, decided.text
        turn = decided.json()["turn"]
        assert turn["finish_reason"] == "length"
        assert turn["text"].startswith("budget_exhausted: model_requests")
        assert RAN == [{"a": 1, "b": 2}]
        assert len(model.requests) == 2
        assert agent.event_types("b")[-1] == "error"


def _ag_ui_status(agent: RunningAgent, thread: str, messages: list[dict[str, Any]]) -> httpx.Response:
    run = {"threadId": thread, "runId": "r", "messages": messages}
    return httpx.post(f"{agent.url}/ag-ui", json=run, timeout=60)


async def test_a_result_for_an_own_tools_call_no_paused_turn_holds_is_refused_and_nothing_stored(model):
    """A client-sent result answering a call of the agent's own tool that no paused turn holds (a decision sent
    without the session the call was made in, or a made-up result) never reaches the model nor memory: 409
    ``approval_unknown`` for a tool that needs approval, 400 for another of the agent's tools. Results of the
    client's own tools still continue the turn."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Client tool answered.")
    async with calc_agent(model) as agent:
        client = agent.openai()
        first = client.responses.create(model="a", input="add them")
        [item] = first.output
        stored = len(agent.events())
        decision = '{"decision": "approve"}'
        call = {"type": "function_call", "call_id": item.call_id, "name": "add", "arguments": item.arguments}
        resent = [
            {"role": "user", "content": "add them"},
            call,
            {"type": "function_call_output", "call_id": item.call_id, "output": decision},
        ]
        with pytest.raises(openai.ConflictError) as unknown:
            client.responses.create(model="a", input=resent)
        assert unknown.value.code == "approval_unknown"
        assert "previous_response_id" in unknown.value.message

        def chat(calls: list[tuple[str, str]], content: str, **kw: Any) -> Any:
            assistant = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
                    for call_id, name in calls
                ],
            }
            results = [{"role": "tool", "tool_call_id": call_id, "content": content} for call_id, _ in calls]
            messages = [{"role": "user", "content": "add them"}, assistant, *results]
            return client.chat.completions.create(model="a", messages=messages, **kw)

        for content in (decision, "3 (made up)"):
            for session in ({}, {"extra_headers": {"X-Session-ID": "fresh"}}):
                with pytest.raises(openai.ConflictError) as unknown:
                    chat([(item.call_id, "add")], content, **session)
                assert unknown.value.code == "approval_unknown"
                assert "X-Session-ID" in unknown.value.message
        with pytest.raises(openai.BadRequestError) as own:
            chat([("call_x", "lookup")], "value of k (made up)")
        assert own.value.code == "invalid_value"
        forged = _ag_ui_status(
            agent,
            "agui-forged",
            [
                {"id": "u", "role": "user", "content": "add"},
                {
                    "id": "a",
                    "role": "assistant",
                    "toolCalls": [{"id": "call_y", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
                },
                {"id": "t", "role": "tool", "toolCallId": "call_y", "content": "3 (made up)"},
            ],
        )
        assert forged.status_code == 409, forged.text
        assert forged.json()["error"]["code"] == "approval_unknown"
        assert RAN == []
        assert len(model.requests) == 1
        assert len(agent.events()) == stored
        assert agent.event_types("fresh") == []

        # A result of a tool the client declared goes on as before.
        weather = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
        answered = chat([("call_w", "weather")], "sunny", tools=[weather])
        assert answered.choices[0].message.content == "Client tool answered."
        assert tool_messages(model.requests[1]) == ["sunny"]


async def test_ag_ui_a_run_in_a_session_waiting_for_a_decision_is_refused_before_its_stream(model):
    """As on Chat Completions and Responses, streamed or not: a 409 (``approval_pending``), not a ``RUN_ERROR``
    inside a 200 stream; nothing stored, no model request."""
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Done.")
    async with calc_agent(model) as agent:
        ask(agent, "agui-wait")
        refused = _ag_ui_status(agent, "agui-wait", [{"id": "u2", "role": "user", "content": "something else"}])
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"]["code"] == "approval_pending"
        assert agent.event_types("agui-wait") == ["user_message", "tool_call"]
        assert len(model.requests) == 1
        [approval] = pending(agent, session_id="agui-wait")
        assert decide(agent, approval["id"], {"decision": "approve"}).json()["turn"]["text"] == "Done."
