"""A2A on ``POST /`` against a running agent: JSON-RPC 2.0 framing exactly (invalid Requests answered, only valid
notifications silent; hypothesis over ids, ``jsonrpc`` values and batches), version negotiation (header and query
parameter, -32601 for the other version's method, -32009 for an unsupported version), 1.0's ``ErrorInfo`` in
``data``, parts (data parts as JSON text, file parts refused with -32005, bad base64 with -32602) and client
mistakes that are never -32603."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kora.scripted import TextReply
from tests.support.a2a import legacy_params, rpc_body
from tests.support.agent import agent_client, running_agent
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

V1 = {"A2A-Version": "1.0"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with ScriptedModelServer() as model, agent_client(model, "protocol") as http:
        yield http


def v1_message(*parts: dict[str, Any], context_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": list(parts)}
    if context_id:
        message["contextId"] = context_id
    return {"message": message}


def v03_message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"role": "user", "messageId": str(uuid.uuid4()), "parts": list(parts)}}


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body, body
    error: dict[str, Any] = body["error"]
    return error


def reasons(error: dict[str, Any]) -> list[str]:
    """The ``reason`` of each ``google.rpc.ErrorInfo`` in a 1.0 error's ``data``."""
    assert isinstance(error["data"], list), error
    return [entry["reason"] for entry in error["data"] if entry["@type"] == ERROR_INFO]


# -- framing ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        {"method": "tasks/get", "params": {"id": "x"}},
        {"jsonrpc": "1.0", "method": "tasks/get", "params": {"id": "x"}},
        {"jsonrpc": 2.0, "method": "tasks/get", "params": {"id": "x"}},
        {"jsonrpc": "2.0", "params": {"id": "x"}},
        {"jsonrpc": "2.0", "method": 7},
    ],
)
def test_an_invalid_request_without_id_is_answered_not_taken_for_a_notification(client, request_):
    answer = client.post("/", json=request_).json()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32600
    (entry,) = client.post("/", json=[request_]).json()
    assert entry["id"] is None
    assert entry["error"]["code"] == -32600


ids = st.one_of(
    st.just("absent"),
    st.none(),
    st.integers(-(2**40), 2**40),
    st.text(alphabet="abcxyz-_0123", min_size=0, max_size=8),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just([1]),
)
jsonrpc_values = st.sampled_from(["absent", "2.0", "1.0", "2", 2.0, None, ""])
requests = st.fixed_dictionaries({"id": ids, "jsonrpc": jsonrpc_values, "v1": st.booleans()})


def build(spec: dict[str, Any]) -> dict[str, Any]:
    method = "GetTask" if spec["v1"] else "tasks/get"
    body: dict[str, Any] = {"method": method, "params": {"id": f"missing-{uuid.uuid4().hex}"}}
    for key in ("id", "jsonrpc"):
        if spec[key] != "absent":
            body[key] = spec[key]
    return body


def expected(spec: dict[str, Any]) -> tuple[str, object] | None:
    """What JSON-RPC 2.0 answers ``spec``: ``("invalid", id)`` (-32600), ``("not_found", id)`` (the task does not
    exist: -32001) or ``None`` (a valid notification: no answer)."""
    id_ = spec["id"]
    valid_id = id_ is None or isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool))
    if spec["jsonrpc"] != "2.0" or (id_ != "absent" and not valid_id):
        return ("invalid", id_ if valid_id and id_ != "absent" else None)
    if id_ == "absent":
        return None
    return ("not_found", id_)


def check(answer: dict[str, Any], want: tuple[str, object]) -> None:
    kind, id_ = want
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == id_
    assert answer["error"]["code"] == (-32600 if kind == "invalid" else -32001), answer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(requests, min_size=1, max_size=5), single=st.booleans())
def test_framing_follows_json_rpc_2(client, batch, single):
    headers = V1 if single and batch[0]["v1"] else {}
    specs = [dict(spec, v1=bool(headers)) for spec in batch] if single else [dict(s, v1=False) for s in batch]
    if single:
        spec = specs[0]
        response = client.post("/", json=build(spec), headers=headers)
        want = expected(spec)
        if want is None:
            assert response.status_code == 204
            assert response.content == b""
        else:
            check(response.json(), want)
        return
    response = client.post("/", json=[build(spec) for spec in specs])
    wanted = [want for want in map(expected, specs) if want is not None]
    if not wanted:
        assert response.status_code == 204
        assert response.content == b""
        return
    answers = response.json()
    assert len(answers) == len(wanted)
    for answer, want in zip(answers, wanted, strict=True):  # one answer per request, in the batch's order
        check(answer, want)


# -- versions and error shapes -----------------------------------------------------------------------------------


def test_a_0_3_method_asked_for_in_1_0_is_method_not_found_with_error_info(client):
    error = error_of(client.post("/", json=rpc_body("tasks/get", {"id": "x"}), headers=V1))
    assert error["code"] == -32601
    assert reasons(error) == ["METHOD_NOT_FOUND"]
    error = error_of(client.post("/", json=rpc_body("tasks/send", legacy_params("hi")), headers=V1))
    assert error["code"] == -32601


@pytest.mark.parametrize("version", ["2.0", "0.2", "banana"])
def test_an_unsupported_version_is_version_not_supported(client, version):
    error = error_of(client.post("/", json=rpc_body("GetTask", {"id": "x"}), headers={"A2A-Version": version}))
    assert error["code"] == -32009
    assert reasons(error) == ["VERSION_NOT_SUPPORTED"]
    error = error_of(client.post("/", params={"A2A-Version": version}, json=rpc_body("GetTask", {"id": "x"})))
    assert error["code"] == -32009
    # A 0.3 method (or one of no version) under an unsupported version: the version is what is refused, not the
    # method, which is no 1.0 method.
    for body in (
        rpc_body("tasks/get", {"id": "x"}),
        rpc_body("tasks/send", legacy_params("hi")),
        rpc_body("tasks/explode", {}),
    ):
        error = error_of(client.post("/", json=body, headers={"A2A-Version": version}))
        assert error["code"] == -32009, error
        assert reasons(error) == ["VERSION_NOT_SUPPORTED"]


def test_the_version_query_parameter_is_honoured_like_the_header(client):
    # Without a version the request is 0.3, where GetTask is not served.
    assert error_of(client.post("/", json=rpc_body("GetTask", {"id": "nope"})))["code"] == -32009
    for kwargs in ({"params": {"A2A-Version": "1.0"}}, {"headers": V1}):
        error = error_of(client.post("/", json=rpc_body("GetTask", {"id": "nope"}), **kwargs))
        assert error["code"] == -32001
        assert reasons(error) == ["TASK_NOT_FOUND"]
    assert (
        error_of(client.post("/", params={"A2A-Version": "1.0"}, json=rpc_body("tasks/get", {"id": "x"})))["code"]
        == -32601
    )


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_a_body_that_is_not_json_is_a_parse_error_in_1_0_too(client, content_type):
    response = client.post("/", content=b"{'jsonrpc': '2.0'}", headers={**V1, "Content-Type": content_type})
    error = error_of(response)
    assert error["code"] == -32700
    assert error["data"][0]["@type"] == ERROR_INFO
    assert error["data"][0]["metadata"] == {"type": "invalid_json"}


def test_errors_in_0_3_keep_their_0_3_shape(client):
    error = error_of(client.post("/", json=rpc_body("tasks/get", {"id": "nope"})))
    assert error["code"] == -32001
    assert error["data"] is None
    error = error_of(client.post("/", json=rpc_body("tasks/get", {})))
    assert error == {"code": -32602, "message": error["message"], "data": {"type": "invalid_request"}}


def test_a_kora_refusal_in_1_0_carries_error_info_with_its_type(client):
    error = error_of(client.post("/", json=rpc_body("ListTasks", {"status": "TASK_STATE_NOPE"}), headers=V1))
    assert error["code"] == -32602
    (info,) = error["data"]
    assert info["@type"] == ERROR_INFO
    assert info["reason"] == "INVALID_PARAMS"
    assert info["metadata"] == {"type": "invalid_request"}


@pytest.mark.parametrize("configuration", [3, "fast", [1], True, 2.5])
def test_a_legacy_send_with_a_configuration_that_is_not_an_object_is_invalid_params(client, configuration):
    params = {**legacy_params("hi"), "configuration": configuration}
    error = error_of(client.post("/", json=rpc_body("tasks/send", params)))
    assert error["code"] == -32602
    assert "configuration" in error["message"]


@pytest.mark.parametrize("status", ["TASK_STATE_NOPE", "completed", 99, 0, True, ["TASK_STATE_COMPLETED"]])
def test_list_tasks_with_an_invalid_status_is_refused_not_dropped(client, status):
    error = error_of(client.post("/", json=rpc_body("ListTasks", {"status": status}), headers=V1))
    assert error["code"] == -32602
    assert "status" in error["message"]


# -- parts --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "params"),
    [
        ("1.0", v1_message({"raw": "!!!not base64", "mediaType": "image/png"})),
        ("1.0", v1_message({"text": "look"}, {"raw": "abc$", "mediaType": "image/png"})),
        ("0.3", v03_message({"kind": "file", "file": {"bytes": "%%%", "mimeType": "image/png"}})),
    ],
)
def test_a_file_part_whose_bytes_are_not_base64_is_invalid_params(client, version, params):
    method = "SendMessage" if version == "1.0" else "message/send"
    error = error_of(client.post("/", json=rpc_body(method, params), headers={"A2A-Version": version}))
    assert error["code"] == -32602
    assert "base64" in error["message"]


@pytest.mark.parametrize(
    ("version", "parts"),
    [
        ("1.0", [{"raw": "iVBORw0KGgo=", "mediaType": "image/png"}]),
        ("1.0", [{"text": "see"}, {"url": "https://example.com/a.pdf", "mediaType": "application/pdf"}]),
        ("0.3", [{"kind": "file", "file": {"bytes": "aGVsbG8=", "mimeType": "text/csv"}}]),
        ("0.3", [{"kind": "file", "file": {"uri": "https://example.com/a.pdf", "mimeType": "application/pdf"}}]),
    ],
)
def test_a_file_part_is_refused_with_content_type_not_supported(client, version, parts):
    if version == "1.0":
        body = rpc_body("SendMessage", v1_message(*parts))
    else:
        body = rpc_body("message/send", v03_message(*parts))
    error = error_of(client.post("/", json=body, headers={"A2A-Version": version}))
    assert error["code"] == -32005


@pytest.mark.parametrize(
    "part",
    [
        {"type": "unsupported_type", "text": "This should be rejected"},
        {"kind": "text", "type": "data", "text": "x"},
        {"kind": "data", "type": "text", "data": {"a": 1}},
    ],
)
def test_a_part_whose_legacy_type_disagrees_with_its_kind_is_refused(client, part):
    error = error_of(client.post("/", json=rpc_body("message/send", v03_message(part))))
    assert error["code"] == -32602
    assert "type" in error["message"]


@pytest.mark.parametrize(
    ("version", "parts"),
    [
        ("1.0", [{"text": ""}]),
        ("1.0", [{"text": "   "}, {"text": ""}]),
        ("0.3", [{"kind": "text", "text": ""}]),
    ],
)
def test_a_message_with_nothing_to_answer_is_refused_not_an_empty_prompt_turn(client, version, parts):
    if version == "1.0":
        body = rpc_body("SendMessage", v1_message(*parts))
    else:
        body = rpc_body("message/send", v03_message(*parts))
    assert error_of(client.post("/", json=body, headers={"A2A-Version": version}))["code"] == -32602


async def test_a_data_part_reaches_the_model_as_json_text_with_exact_integers(model):
    data = {"order": 9007199254740991, "items": [1, 2, 3], "price": 12.5, "name": "Ada", "nested": {"n": -7}}
    model.enqueue(TextReply("got it"), TextReply("got it too"))
    async with running_agent(model) as agent, httpx.AsyncClient(base_url=agent.url, timeout=30) as http:
        body = rpc_body("SendMessage", v1_message({"text": "Order:"}, {"data": data, "mediaType": "application/json"}))
        task = (await http.post("/", json=body, headers=V1)).json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        prompt = model.requests[-1]["messages"][-1]["content"]
        first, second = prompt.split("\n")
        assert first == "Order:"
        assert json.loads(second) == data
        assert "9007199254740991" in second
        assert "12.5" in second
        # 0.3: a message with only a data part.
        params = {"message": {"role": "user", "messageId": "m2", "parts": [{"kind": "data", "data": {"n": 42}}]}}
        task = (await http.post("/", json=rpc_body("message/send", params))).json()["result"]
        assert task["status"]["state"] == "completed"
        assert model.requests[-1]["messages"][-1]["content"] == '{"n":42}'
