"""A2A JSON-RPC 2.0 on ``POST /`` with raw httpx: the legacy ``tasks/*`` names, every error code, batches
and notifications."""

import asyncio

import httpx
import pytest

from kora.scripted import TextReply
from tests.support.a2a import legacy_params, message_params, rpc_body
from tests.support.agent import running_agent
from tests.support.eventually import eventually_async

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


async def _poll_until_finished(http: httpx.AsyncClient, task_id: str) -> dict:
    async def finished() -> dict | None:
        task = (await http.post("/", json=rpc_body("tasks/get", {"id": task_id}))).json()["result"]
        return task if task["status"]["state"] in {"completed", "failed", "canceled"} else None

    return await eventually_async(finished, f"task {task_id} finished", every=0.02)


@pytest.fixture
async def agent(model):
    async with running_agent(model) as running:
        yield running


@pytest.fixture
async def http(agent):
    async with httpx.AsyncClient(base_url=agent.url, timeout=10) as client:
        yield client


async def test_legacy_tasks_send_returns_at_once_and_tasks_get_polls_it(model, agent, http):
    model.enqueue(TextReply("legacy answer", delay_seconds=0.3))
    response = await http.post("/", json=rpc_body("tasks/send", legacy_params("hello", session_id="s1")))
    body = response.json()
    assert body["id"] == 1
    task = body["result"]
    assert task["status"]["state"] in {"submitted", "working"}
    assert task["sessionId"] == task["contextId"] == "s1"
    assert task["history"][0]["parts"][0]["type"] == "text"
    done = await _poll_until_finished(http, task["id"])
    assert done["status"]["state"] == "completed"
    assert done["artifacts"][0]["parts"][0]["text"] == "legacy answer"
    assert agent.event_types("s1") == ["user_message", "agent_response"]


async def test_legacy_tasks_send_keeps_a_client_chosen_task_id(model, http):
    model.enqueue(TextReply("ok"))
    task = (await http.post("/", json=rpc_body("tasks/send", legacy_params("x", task_id="my-task")))).json()["result"]
    assert task["id"] == "my-task"
    assert (await _poll_until_finished(http, "my-task"))["status"]["state"] == "completed"
    again = (await http.post("/", json=rpc_body("tasks/send", legacy_params("x", task_id="my-task")))).json()
    assert again["error"]["code"] == -32602


async def test_legacy_tasks_cancel_cancels_a_running_task(model, http):
    model.enqueue(TextReply("slow", delay_seconds=10))
    task = (await http.post("/", json=rpc_body("tasks/send", legacy_params("wait")))).json()["result"]
    assert await asyncio.to_thread(model.model.wait_for_requests, 1, 5.0)
    canceled = (await http.post("/", json=rpc_body("tasks/cancel", {"id": task["id"]}))).json()["result"]
    assert canceled["status"]["state"] == "canceled"
    assert await model.wait_for_aborts(1, within=2.0)


async def test_message_send_non_blocking_returns_before_the_answer(model, http):
    model.enqueue(TextReply("later", delay_seconds=0.5))
    task = (await http.post("/", json=rpc_body("message/send", message_params("q", blocking=False)))).json()["result"]
    assert task["status"]["state"] in {"submitted", "working"}
    assert (await _poll_until_finished(http, task["id"]))["artifacts"][0]["parts"][0]["text"] == "later"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (b'"just a string"', -32600),
        (b"[]", -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "params": {}}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/explode", "params": {}}', -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": [1]}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"role": "user"}}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {"message": 3}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "nope"}}', -32001),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": "nope"}}', -32001),
    ],
)
async def test_errors_are_json_rpc_error_objects_with_standard_codes(http, body, code):
    response = await http.post("/", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    answer = response.json()
    assert answer["jsonrpc"] == "2.0"
    assert answer["error"]["code"] == code, answer
    assert answer["error"]["message"]


@pytest.mark.parametrize("method", ["message/send", "message/stream", "tasks/send", "tasks/sendSubscribe"])
@pytest.mark.parametrize("blocking", ["yes", 1, 0, "true", {}])
async def test_a_wrongly_typed_blocking_is_invalid_params_naming_it_and_runs_no_turn(model, http, method, blocking):
    # As A2A 1.0 refuses returnImmediately: "yes"; the SDK's 0.3 model read "yes" and 1 as true.
    params = legacy_params("q") if method.startswith("tasks/") else message_params("q")
    params["configuration"] = {"blocking": blocking}
    response = await http.post("/", json=rpc_body(method, params))
    answer = response.json() if response.headers["content-type"].startswith("application/json") else response.text
    assert answer["error"]["code"] == -32602, answer
    assert "configuration.blocking" in answer["error"]["message"]
    assert model.requests == []


async def test_cancelling_a_finished_task_is_task_not_cancelable(model, http):
    model.enqueue(TextReply("done"))
    task = (await http.post("/", json=rpc_body("message/send", message_params("q")))).json()["result"]
    assert task["status"]["state"] == "completed"
    answer = (await http.post("/", json=rpc_body("tasks/cancel", {"id": task["id"]}))).json()
    assert answer["error"]["code"] == -32002


async def test_an_internal_failure_is_an_internal_error_not_a_traceback(agent, http, monkeypatch):
    async def explode(*args, **kwargs):
        raise RuntimeError("boom")

    # The handler is the SDK's; make it fail the way an unexpected bug would.
    monkeypatch.setattr(agent.a2a_server().handler, "on_get_task", explode)
    answer = (await http.post("/", json=rpc_body("tasks/get", {"id": "x"}))).json()
    assert answer["error"]["code"] == -32603


async def test_a_batch_gets_one_answer_per_request_and_none_for_notifications(model, http):
    model.enqueue(TextReply("batched"))
    batch = [
        rpc_body("message/send", message_params("in a batch"), id_="a"),
        rpc_body("tasks/get", {"id": "missing"}, id_="b"),
        {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "missing"}},  # notification
        rpc_body("message/stream", message_params("no streams here"), id_="c"),
        42,
    ]
    answers = (await http.post("/", json=batch)).json()
    by_id = {answer["id"]: answer for answer in answers}
    assert len(answers) == 4
    assert by_id["a"]["result"]["status"]["state"] == "completed"
    assert by_id["b"]["error"]["code"] == -32001
    assert by_id["c"]["error"]["code"] == -32600
    assert by_id[None]["error"]["code"] == -32600


async def test_notifications_get_no_response_body(http):
    note = {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "missing"}}
    response = await http.post("/", json=note)
    assert response.status_code == 204
    assert response.content == b""
    response = await http.post("/", json=[note, note])
    assert response.status_code == 204
