"""A2A with the official a2a-sdk client against a running agent (scripted model): card, send, stream, get,
cancel, contexts as memory sessions, task stores."""

import asyncio
import json
from email.utils import parsedate_to_datetime

import httpx
import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from kora.scripted import ErrorReply, TextReply
from tests.support.a2a import message_params, rpc_body, sdk_client, user_message
from tests.support.agent import running_agent

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


@pytest.fixture(params=["1.0", "0.3"])
def protocol(request: pytest.FixtureRequest) -> str:
    """The A2A version the SDK client speaks (the card offers both)."""
    return str(request.param)


async def test_the_card_describes_the_agent_and_a_url_clients_reach(model):
    async with running_agent(model, name="writer", AGENT_DESCRIPTION="Writes things") as agent:
        for path in ("/.well-known/agent.json", "/.well-known/agent-card.json", "/.well-known/agent"):
            card = agent.get(path).json()
            assert card["name"] == "writer"
            assert card["description"] == "Writes things"
            assert card["protocolVersion"] == "0.3.0"
            assert card["version"]
            assert card["url"] == f"{agent.url}/"
            assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
            assert card["supportedInterfaces"] == [
                {"url": f"{agent.url}/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": agent.url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": f"{agent.url}/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
            ]
            assert card["preferredTransport"] == "JSONRPC"
            assert card["defaultInputModes"] == ["text/plain", "application/json"]
            assert card["defaultOutputModes"] == ["text/plain"]
            assert [s["id"] for s in card["skills"]] == ["chat"]
        # Cached: the card is built once, not per request (nor by opening tool servers).
        assert agent.server.app.state.a2a.cards.builds == 1


async def test_the_card_is_cacheable_and_revalidated_with_its_etag(model):
    async with running_agent(model) as agent, httpx.AsyncClient(base_url=agent.url, timeout=10) as http:
        first = await http.get("/.well-known/agent-card.json")
        assert first.status_code == 200
        assert first.headers["cache-control"] == "public, max-age=300"
        assert parsedate_to_datetime(first.headers["last-modified"]).tzinfo is not None
        etag = first.headers["etag"]
        assert etag.startswith('"')
        assert etag.endswith('"')
        again = await http.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
        weak = await http.get("/.well-known/agent.json", headers={"If-None-Match": f'"other", W/{etag}'})
        assert weak.status_code == 304
        stale = await http.get("/.well-known/agent-card.json", headers={"If-None-Match": '"not-it"'})
        assert stale.status_code == 200
        assert stale.json() == first.json()
        # Another URL (behind a gateway) is another card, with another tag.
        other = await http.get("/.well-known/agent-card.json", headers={"X-Forwarded-Host": "gw.example.com"})
        assert other.headers["etag"] != etag
        # The URL comes from the request's headers: a shared cache must keep a card per value of each, or a request
        # naming another host would have its card served to every client.
        for answer in (first, again, other):
            assert answer.headers["vary"] == "Host, X-Forwarded-Proto, X-Forwarded-Host, X-Forwarded-Prefix"


async def test_a_card_with_the_configured_public_url_varies_with_no_header(model):
    async with (
        running_agent(model, AGENT_PUBLIC_URL="https://agents.example.com/writer") as agent,
        httpx.AsyncClient(base_url=agent.url, timeout=10) as http,
    ):
        plain = await http.get("/.well-known/agent-card.json")
        forged = await http.get("/.well-known/agent-card.json", headers={"X-Forwarded-Host": "evil.example"})
        assert plain.json()["url"] == forged.json()["url"] == "https://agents.example.com/writer/"
        assert plain.headers["etag"] == forged.headers["etag"]
        assert "vary" not in plain.headers


async def test_the_card_url_follows_the_gateway_prefix_or_the_configured_public_url(model):
    async with running_agent(model) as agent:
        headers = {
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "gw.example.com",
            "X-Forwarded-Prefix": "/team/agent/writer",
        }
        card = httpx.get(f"{agent.url}/.well-known/agent.json", headers=headers).json()
        assert card["url"] == "https://gw.example.com/team/agent/writer/"
    async with running_agent(model, AGENT_PUBLIC_URL="https://agents.example.com/writer") as agent:
        assert agent.get("/.well-known/agent.json").json()["url"] == "https://agents.example.com/writer/"


async def test_message_send_blocks_until_completed_with_artifact_and_history(model, protocol):
    model.enqueue(TextReply("Hello from Kora"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version=protocol)
        (response,) = [r async for r in client.send_message(user_message("hi", context_id="c1"))]
        task = response.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.context_id == "c1"
        assert task.artifacts[0].parts[0].text == "Hello from Kora"
        assert task.history[0].parts[0].text == "hi"
        fetched = await client.get_task(GetTaskRequest(id=task.id))
        assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
        assert fetched.artifacts[0].parts[0].text == "Hello from Kora"
        assert agent.event_types("c1") == ["user_message", "agent_response"]
        await client.close()


async def test_message_stream_sends_task_status_and_artifact_updates(model, protocol):
    model.enqueue(TextReply("streamed answer", chunk_delay_seconds=0.01))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, streaming=True, version=protocol)
        events = [r async for r in client.send_message(user_message("stream please"))]
        kinds = [r.WhichOneof("payload") for r in events]
        assert kinds[0] == "task"
        assert "artifact_update" in kinds
        states = [r.status_update.status.state for r in events if r.WhichOneof("payload") == "status_update"]
        assert states[0] == TaskState.TASK_STATE_WORKING
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        artifact = next(r.artifact_update.artifact for r in events if r.WhichOneof("payload") == "artifact_update")
        assert artifact.parts[0].text == "streamed answer"
        await client.close()


async def test_a_follow_up_task_in_the_same_context_sees_the_earlier_turn(model, protocol):
    model.enqueue(TextReply("Nice to meet you, Ada."), TextReply("You are Ada."))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version=protocol)
        _ = [r async for r in client.send_message(user_message("I am Ada", context_id="ctx"))]
        _ = [r async for r in client.send_message(user_message("Who am I?", context_id="ctx"))]
        contents = [m["content"] for m in model.requests[-1]["messages"] if m["role"] in {"user", "assistant"}]
        assert contents == ["I am Ada", "Nice to meet you, Ada.", "Who am I?"]
        assert agent.event_types("ctx") == ["user_message", "agent_response"] * 2
        await client.close()


async def test_a_failed_model_call_ends_the_task_failed_with_the_reason_and_an_error_event(model, protocol):
    async with running_agent(model, MODEL_TIMEOUT_SECONDS="5") as agent:
        model.enqueue(ErrorReply(500, "scripted outage"))
        client = await sdk_client(agent.url, version=protocol)
        (response,) = [r async for r in client.send_message(user_message("fail", context_id="f"))]
        task = response.task
        assert task.status.state == TaskState.TASK_STATE_FAILED
        assert "model API" in task.status.message.parts[0].text
        assert agent.event_types("f")[-1] == "error"
        await client.close()


async def test_cancel_stops_a_task_blocked_in_a_slow_model_call(model, protocol):
    model.enqueue(TextReply("too late", delay_seconds=120))
    async with running_agent(model) as agent:
        async with httpx.AsyncClient(base_url=agent.url, timeout=10) as http:
            sent = await http.post("/", json=rpc_body("message/send", message_params("slow", blocking=False)))
            task_id = sent.json()["result"]["id"]
            assert await asyncio.to_thread(model.model.wait_for_requests, 1, 5.0)
            client = await sdk_client(agent.url, version=protocol)
            task = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert task.status.state == TaskState.TASK_STATE_CANCELED
            # The model call was aborted, not waited out: its 120 s delay is far from over.
            assert await model.wait_for_aborts(1, within=30)
            fetched = await client.get_task(GetTaskRequest(id=task_id))
            assert fetched.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):  # a finished task is not cancelable
                await client.cancel_task(CancelTaskRequest(id=task_id))
            await client.close()


async def test_the_null_task_store_keeps_no_finished_tasks(model, protocol):
    model.enqueue(TextReply("done"))
    async with running_agent(model, TASK_STORE_TYPE="null") as agent:
        client = await sdk_client(agent.url, version=protocol)
        (response,) = [r async for r in client.send_message(user_message("hi"))]
        assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=response.task.id))
        await client.close()


async def test_resubscribe_follows_a_running_task_to_its_end(model, protocol):
    from a2a.types.a2a_pb2 import SubscribeToTaskRequest

    model.enqueue(TextReply("finally done", delay_seconds=1.0))
    async with running_agent(model) as agent:
        # Start the task without waiting for it (raw JSON-RPC, non-blocking), then follow it with the SDK.
        started = httpx.post(
            f"{agent.url}/", json=rpc_body("message/send", message_params("slow one", blocking=False)), timeout=10
        ).json()["result"]
        assert started["status"]["state"] in {"submitted", "working"}
        client = await sdk_client(agent.url, streaming=True, version=protocol)
        events = [r async for r in client.subscribe(SubscribeToTaskRequest(id=started["id"]))]
        states = [r.status_update.status.state for r in events if r.WhichOneof("payload") == "status_update"]
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        artifact = next(r.artifact_update.artifact for r in events if r.WhichOneof("payload") == "artifact_update")
        assert artifact.parts[0].text == "finally done"
        await client.close()


async def test_a_data_part_sent_by_the_sdk_reaches_the_model_as_json_text(model, protocol):
    from a2a.helpers.proto_helpers import new_data_part

    model.enqueue(TextReply("counted"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version=protocol)
        request = user_message("Count these:")
        request.message.parts.append(new_data_part({"ids": [1, 2, 4503599627370497], "label": "x"}))
        (response,) = [r async for r in client.send_message(request)]
        assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
        text, data = model.requests[-1]["messages"][-1]["content"].split("\n")
        assert text == "Count these:"
        assert data.startswith("{")
        assert json.loads(data) == {"ids": [1, 2, 4503599627370497], "label": "x"}  # integers stay integers
        await client.close()


async def test_list_tasks_filters_by_state_and_pages_in_1_0(model):
    from a2a.types.a2a_pb2 import ListTasksRequest

    model.enqueue(TextReply("one"), TextReply("two"), TextReply("three"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version="1.0")
        sent = []
        for text in "abc":
            (response,) = [r async for r in client.send_message(user_message(text, context_id="lc"))]
            sent.append(response)
        assert all(r.task.status.state == TaskState.TASK_STATE_COMPLETED for r in sent)
        listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=2))
        assert len(listed.tasks) == 2
        assert listed.next_page_token
        rest = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=2, page_token=listed.next_page_token)
        )
        assert {t.id for t in listed.tasks} | {t.id for t in rest.tasks} == {r.task.id for r in sent}
        none = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED))
        assert list(none.tasks) == []
        await client.close()


async def test_get_task_honours_history_length(model, protocol):
    """``historyLength`` absent: the whole history; 0: none in 1.0 (no limit in 0.3, as 0.3 reads 0); n: the n most
    recent messages (all of them when there are fewer). A Kora task's history is the message that started it (the
    answer is the status message)."""
    model.enqueue(TextReply("answered"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version=protocol)
        (response,) = [r async for r in client.send_message(user_message("remember me", context_id="hl"))]
        task_id = response.task.id
        whole = await client.get_task(GetTaskRequest(id=task_id))
        assert [m.parts[0].text for m in whole.history] == ["remember me"]
        assert whole.status.message.parts[0].text == "answered"
        none = await client.get_task(GetTaskRequest(id=task_id, history_length=0))
        assert list(none.history) == ([] if protocol == "1.0" else list(whole.history))
        for length in (1, 5):
            limited = await client.get_task(GetTaskRequest(id=task_id, history_length=length))
            assert [m.parts[0].text for m in limited.history] == ["remember me"]
            assert limited.artifacts == whole.artifacts
        await client.close()


@pytest.mark.parametrize("length", [-1, 2**31, 2**40, "many", 1.5])
async def test_a_history_length_that_is_not_a_count_is_invalid_params(model, protocol, length):
    model.enqueue(TextReply("answered"))
    async with running_agent(model) as agent:
        client = await sdk_client(agent.url, version=protocol)
        (response,) = [r async for r in client.send_message(user_message("hi"))]
        method, headers = ("GetTask", {"A2A-Version": "1.0"}) if protocol == "1.0" else ("tasks/get", {})
        params = {"id": response.task.id, "historyLength": length}
        answer = httpx.post(f"{agent.url}/", json=rpc_body(method, params), headers=headers, timeout=10).json()
        assert answer["error"]["code"] == -32602
        if protocol == "0.3":  # a send's configuration carries one too
            send = message_params("again")
            send["configuration"] = {"historyLength": length}
            answer = httpx.post(f"{agent.url}/", json=rpc_body("message/send", send), timeout=10).json()
            assert answer["error"]["code"] == -32602
        await client.close()
