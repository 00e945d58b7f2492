"""A2A 1.0's HTTP+JSON (REST) binding with the official a2a-sdk client (REST transport) against a running agent
(scripted model): every method, the binding's error bodies, and the identity, ownership and parameter rules
JSON-RPC has."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from a2a.helpers.proto_helpers import new_data_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from kora.scripted import TextReply
from tests.support.a2a import message_params, sdk_client, user_message
from tests.support.agent import running_agent
from tests.support.identity import identity_provider

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]

REST = "HTTP+JSON"
V1 = {"A2A-Version": "1.0"}
HEADER = "X-Forwarded-User"


def v1_message(text: str, context_id: str | None = None) -> dict[str, object]:
    """A 1.0 ``SendMessageRequest`` body with one text part."""
    message: dict[str, object] = {"role": "ROLE_USER", "messageId": f"m-{text[:8]}", "parts": [{"text": text}]}
    if context_id:
        message["contextId"] = context_id
    return {"message": message}


def reason(response: httpx.Response) -> str:
    """The ``google.rpc.ErrorInfo`` reason of a REST error response."""
    details = response.json()["error"]["details"]
    return str(details[0]["reason"])


async def test_the_card_offers_the_rest_binding_at_1_0_and_the_sdk_client_picks_it(model):
    model.enqueue(TextReply("over REST"))
    async with running_agent(model) as agent:
        card = agent.get("/.well-known/agent-card.json").json()
        assert {"url": agent.url, "protocolBinding": REST, "protocolVersion": "1.0"} in card["supportedInterfaces"]
        assert card["preferredTransport"] == "JSONRPC"  # 0.3 clients keep JSON-RPC: 0.3's REST is not served
        http = httpx.AsyncClient(timeout=30)
        sent: list[httpx.Request] = []
        http.event_hooks["request"].append(lambda request: _record(sent, request))
        client = await sdk_client(agent.url, http=http, binding=REST)
        (response,) = [r async for r in client.send_message(user_message("hi", context_id="rc"))]
        task = response.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[0].parts[0].text == "over REST"
        assert [r.url.path for r in sent if r.method == "POST"] == ["/message:send"]
        assert agent.event_types("rc") == ["user_message", "agent_response"]
        await client.close()


async def _record(sent: list[httpx.Request], request: httpx.Request) -> None:
    sent.append(request)


async def test_get_list_and_history_length_over_rest(model):
    model.enqueue(TextReply("one"), TextReply("two"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, binding=REST)
        ids = []
        for text in ("first", "second"):
            (response,) = [r async for r in client.send_message(user_message(text, context_id="lr"))]
            ids.append(response.task.id)
        whole = await client.get_task(GetTaskRequest(id=ids[0]))
        assert [m.parts[0].text for m in whole.history] == ["first"]
        assert list((await client.get_task(GetTaskRequest(id=ids[0], history_length=0))).history) == []
        assert len((await client.get_task(GetTaskRequest(id=ids[0], history_length=1))).history) == 1
        listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=1))
        assert len(listed.tasks) == 1
        rest = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=1, page_token=listed.next_page_token)
        )
        assert {listed.tasks[0].id, rest.tasks[0].id} == set(ids)
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        await client.close()


async def test_stream_subscribe_and_cancel_over_rest(model):
    model.enqueue(TextReply("streamed", chunk_delay_seconds=0.01), TextReply("too late", delay_seconds=120))
    async with running_agent(model) as agent:
        streaming = await sdk_client(agent.url, streaming=True, binding=REST)
        events = [r async for r in streaming.send_message(user_message("stream it"))]
        states = [r.status_update.status.state for r in events if r.WhichOneof("payload") == "status_update"]
        assert states[0] == TaskState.TASK_STATE_WORKING
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        artifact = next(r.artifact_update.artifact for r in events if r.WhichOneof("payload") == "artifact_update")
        assert artifact.parts[0].text == "streamed"
        # A slow task: started without waiting, followed by a subscriber, cancelled by another client.
        body = v1_message("slow") | {"configuration": {"returnImmediately": True}}
        started = httpx.post(f"{agent.url}/message:send", json=body, headers=V1, timeout=10)
        assert started.status_code == 200
        task_id = started.json()["task"]["id"]
        assert await asyncio.to_thread(model.model.wait_for_requests, 2, 30.0)

        subscription = aiter(streaming.subscribe(SubscribeToTaskRequest(id=task_id)))
        first = await anext(subscription)  # the task as it stands: the subscriber is connected
        assert first.task.status.state == TaskState.TASK_STATE_WORKING
        client = await sdk_client(agent.url, binding=REST)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        assert await model.wait_for_aborts(1, within=30)
        rest = [r async for r in subscription]
        states = [r.status_update.status.state for r in rest if r.WhichOneof("payload") == "status_update"]
        assert states[-1] == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        await client.close()
        await streaming.close()


async def test_a_data_part_reaches_the_model_as_json_text_over_rest(model):
    model.enqueue(TextReply("counted"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, binding=REST)
        request = user_message("Count:")
        request.message.parts.append(new_data_part({"ids": [1, 4503599627370497]}))
        (response,) = [r async for r in client.send_message(request)]
        assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
        text, data = model.requests[-1]["messages"][-1]["content"].split("\n")
        assert text == "Count:"
        assert json.loads(data) == {"ids": [1, 4503599627370497]}
        await client.close()


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        (b"{not json", 400, "INVALID_REQUEST"),
        ({"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "  "}]}}, 400, "INVALID_PARAMS"),
        (
            {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"raw": "aGk=", "mediaType": "image/png"}]}},
            415,  # A2A 1.0's mapping for ContentTypeNotSupportedError
            "CONTENT_TYPE_NOT_SUPPORTED",
        ),
        ({"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"raw": "@@@"}]}}, 400, "INVALID_PARAMS"),
        ({"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "a\u0000b"}]}}, 400, "INVALID_PARAMS"),
        ({"message": "hello"}, 400, "INVALID_PARAMS"),
        (["not", "an", "object"], 400, "INVALID_PARAMS"),
    ],
)
async def test_a_bad_send_is_the_bindings_error_and_runs_no_turn(model, body, status, why):
    async with running_agent(model) as agent:
        for path in ("/message:send", "/message:stream"):
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            response = httpx.post(f"{agent.url}{path}", content=content, headers=V1, timeout=10)
            assert response.status_code == status
            assert response.json()["error"]["code"] == status
            assert reason(response) == why
        assert model.requests == []


async def test_versions_and_list_filters_are_checked_as_in_json_rpc(model):
    async with running_agent(model) as agent:
        body = v1_message("hi")
        for headers in ({}, {"A2A-Version": "0.3"}, {"A2A-Version": "2.0"}):
            response = httpx.post(f"{agent.url}/message:send", json=body, headers=headers, timeout=10)
            assert response.status_code == 400
            assert reason(response) == "VERSION_NOT_SUPPORTED"
        # The query parameter form names the version too.
        listed = httpx.get(f"{agent.url}/tasks", params={"A2A-Version": "1.0"}, timeout=10)
        assert listed.status_code == 200
        assert listed.json()["tasks"] == []
        for status in ("TASK_STATE_NOPE", "99", "completed"):
            bad = httpx.get(f"{agent.url}/tasks", params={"status": status}, headers=V1, timeout=10)
            assert bad.status_code == 400
            assert reason(bad) == "INVALID_PARAMS"
        good = httpx.get(f"{agent.url}/tasks", params={"status": "TASK_STATE_COMPLETED"}, headers=V1, timeout=10)
        assert good.status_code == 200
        # The agent's other routes are untouched by the binding's.
        assert httpx.get(f"{agent.url}/v1/chat/completions", timeout=10).status_code == 405
        assert httpx.get(f"{agent.url}/default/message:send", timeout=10).status_code == 404
        assert model.requests == []


async def test_a_body_over_the_limit_is_the_bindings_413(model):
    async with running_agent(model, AGENT_MAX_REQUEST_BYTES="2048") as agent:
        response = httpx.post(f"{agent.url}/message:send", json=v1_message("x" * 4096), headers=V1, timeout=10)
        assert response.status_code == 413
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_users_own_their_tasks_and_contexts_over_rest(model):
    model.enqueue(TextReply("for alice"))
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        alice = httpx.AsyncClient(timeout=30, headers={HEADER: "alice"})
        client = await sdk_client(agent.url, http=alice, binding=REST)
        (response,) = [r async for r in client.send_message(user_message("mine", context_id="alice-ctx"))]
        task_id = response.task.id
        assert (await client.get_task(GetTaskRequest(id=task_id))).id == task_id
        for who in ({HEADER: "bob"}, {}):
            for method, path in (("GET", f"/tasks/{task_id}"), ("POST", f"/tasks/{task_id}:cancel")):
                other = httpx.request(method, f"{agent.url}{path}", headers=V1 | who, timeout=10)
                assert other.status_code == 404
                assert reason(other) == "TASK_NOT_FOUND"
            assert httpx.get(f"{agent.url}/tasks", headers=V1 | who, timeout=10).json()["tasks"] == []
        # Another user's context is refused before a task exists.
        taken = httpx.post(
            f"{agent.url}/message:send", json=v1_message("hi", "alice-ctx"), headers=V1 | {HEADER: "bob"}, timeout=10
        )
        assert taken.status_code == 403
        assert taken.json()["error"]["status"] == "PERMISSION_DENIED"
        assert taken.json()["error"]["details"][0]["metadata"] == {"type": "session_forbidden"}
        # The extended card: a verified user's, refused to anonymous callers.
        extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert {i.protocol_binding for i in extended.supported_interfaces} == {"JSONRPC", REST}
        anonymous = httpx.get(f"{agent.url}/extendedAgentCard", headers=V1, timeout=10)
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["status"] == "UNAUTHENTICATED"
        bad = httpx.get(f"{agent.url}/extendedAgentCard", headers=V1 | {HEADER: "u" * 300}, timeout=10)
        assert bad.status_code == 400
        await client.close()
        await alice.aclose()


async def test_a_token_that_fails_is_refused_with_401_and_a_bearer_challenge_over_rest(model):
    async with identity_provider() as idp, running_agent(model, **idp.agent_env()) as agent:
        for path in ("/message:send", "/tasks"):
            method = "POST" if path.startswith("/message") else "GET"
            response = httpx.request(
                method,
                f"{agent.url}{path}",
                json=message_params("hi") if method == "POST" else None,
                headers=V1 | {"Authorization": "Bearer not-a-token"},
                timeout=10,
            )
            assert response.status_code == 401
            assert response.json()["error"]["status"] == "UNAUTHENTICATED"
            assert response.headers["www-authenticate"].startswith("Bearer")
        token = idp.keys.token("carol")
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
            client = await sdk_client(agent.url, http=http, binding=REST)
            assert (await client.get_extended_agent_card(GetExtendedAgentCardRequest())).name == "agent"
            await client.close()
        assert model.requests == []
