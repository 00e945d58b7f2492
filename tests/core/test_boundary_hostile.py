"""Hostile clients against the agent's HTTP surface (``/v1/chat/completions``, ``POST /`` JSON-RPC, ``/memory/*``)
and ``kora mcp``'s ``/mcp``, on 127.0.0.1 with real clients.

Whatever a client sends (lone surrogates, NUL and control characters, JSON nested 10 000 deep, 5 000-digit
numbers, wrong types at every field, bodies over the size limit, bad session ids), the answer is below 500 with
no traceback or internal type name, nothing of a refused request is stored, and what the server held before is
still readable and unchanged. Each of these cases is spelled out first as its own test; hypothesis then mutates
valid requests field by field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kora.core.text import UNSTORABLE
from kora.scripted import TextReply
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import agent_client
from tests.support.eventually import eventually
from tests.support.hostile import RAW_TOKENS, Raw, any_text, assert_handled, field, hostile_values, render
from tests.support.mcp import running_mcp, wait_until_ready
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

LIMIT = 65_536
SEED = "seed-session"
JSON = {"content-type": "application/json"}


@dataclass
class Agent:
    client: httpx.Client
    model: ScriptedModelServer
    snapshot: list[dict[str, Any]]

    def post(self, path: str, body: object, headers: dict[str, Any] | None = None) -> httpx.Response:
        content = render(body).encode("utf-8", "surrogatepass")
        return self.client.post(path, content=content, headers=JSON | (headers or {}))

    def events(self, session_id: str | None = None) -> list[dict[str, Any]]:
        params = {"session_id": session_id} if session_id else {}
        response = self.client.get("/memory/events", params=params)
        assert response.status_code == 200, response.text[:300]
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    def assert_intact(self) -> None:
        """Stored state is readable (every session, and the list of sessions) and the seed is unchanged."""
        assert self.events(SEED) == self.snapshot
        self.events()
        assert self.client.get("/memory/sessions").status_code == 200


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    with ScriptedModelServer() as model, agent_client(model, "fuzz", AGENT_MAX_REQUEST_BYTES=str(LIMIT)) as client:
        model.enqueue(TextReply("seeded"))
        seeded = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"X-Session-ID": SEED},
        )
        assert seeded.status_code == 200, seeded.text
        target = Agent(client, model, [])
        target.snapshot = target.events(SEED)
        assert len(target.snapshot) == 2
        yield target


def chat(content: object, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": content}], **extra}


# -- the named cases: text no store keeps ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        chat("hi \udc80"),
        chat("nul \x00 inside"),
        {"messages": [{"role": "system", "content": "be \ud800 kind"}, {"role": "user", "content": "hi"}]},
        chat("hi", tools=[{"type": "function", "function": {"name": "t\udfff", "parameters": {}}}]),
        chat("hi", metadata={"k\x00": "v"}),
        chat([{"type": "text", "text": "part \udc80"}]),
    ],
    ids=["content", "nul", "system", "tool-name", "metadata-key", "content-part"],
)
def test_unstorable_text_in_a_chat_request_is_a_400_and_nothing_is_stored(agent, body):
    response = agent.post("/v1/chat/completions", body, {"X-Session-ID": "unstorable"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "NUL characters or unpaired surrogates" in error["message"]
    assert agent.events("unstorable") == []
    agent.assert_intact()
    # The session still works afterwards.
    agent.model.enqueue(TextReply("fine"))
    again = agent.post("/v1/chat/completions", chat("hi"), {"X-Session-ID": "unstorable-after"})
    assert again.status_code == 200, again.text


def test_unstorable_text_over_a2a_is_invalid_params_and_nothing_is_stored(agent):
    params = message_params("a\udc80", context_id="unstorable-a2a")
    answer = agent.post("/", rpc_body("message/send", params)).json()
    assert answer["error"]["code"] == -32602
    assert "unpaired surrogates" in answer["error"]["message"]
    assert agent.events("unstorable-a2a") == []
    agent.assert_intact()


# -- session ids ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"X-Session-ID": "é".encode("latin-1")}, chat("hi")),
        ({"X-Session-ID": b"a b"}, chat("hi")),
        ({"X-Session-ID": b"x" * 129}, chat("hi")),
        ({}, chat("hi", session_id="漢")),
        ({}, chat("hi", session_id="a\r\nSet-Cookie: x=1")),
        ({}, chat("hi", session_id="nul\x00")),
        ({}, chat("hi", session_id="")),
        ({}, chat("hi", session_id=5)),
    ],
    ids=["latin-1", "space", "too-long", "non-latin-1", "crlf", "nul", "empty", "number"],
)
def test_a_bad_session_id_is_a_400_before_any_work(agent, headers, body):
    requests_before = len(agent.model.requests)
    sessions_before = agent.client.get("/memory/sessions").json()["total"]
    response = agent.post("/v1/chat/completions", body, headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "session" not in {name.lower() for name in response.headers if name.lower() == "x-session-id"}
    assert len(agent.model.requests) == requests_before
    assert agent.client.get("/memory/sessions").json()["total"] == sessions_before
    agent.assert_intact()


def test_a_bad_context_id_and_memory_query_are_refused(agent):
    answer = agent.post("/", rpc_body("message/send", message_params("hi", context_id="a b/c"))).json()
    assert answer["error"]["code"] == -32602
    legacy = {"message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}, "sessionId": "x" * 200}
    assert agent.post("/", rpc_body("tasks/send", legacy)).json()["error"]["code"] == -32602
    response = agent.client.get("/memory/events", params={"session_id": "漢"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_session_id"


def test_a_valid_session_id_of_every_allowed_character_is_echoed(agent):
    session = "Az09._:-" * 16  # 128 characters
    agent.model.enqueue(TextReply("ok"))
    response = agent.post("/v1/chat/completions", chat("hi"), {"X-Session-ID": session})
    assert response.status_code == 200, response.text
    assert response.headers["X-Session-ID"] == session


# -- limits ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/"])
def test_a_body_over_the_limit_is_a_413_declared_or_not(agent, path):
    body = render(chat("x" * LIMIT)).encode()
    declared = agent.client.post(path, content=body, headers=JSON)
    assert declared.status_code == 413
    chunks = (body[i : i + 4096] for i in range(0, len(body), 4096))  # chunked: no Content-Length
    streamed = agent.client.post(path, content=chunks, headers=JSON)
    assert streamed.status_code == 413
    for response in (declared, streamed):
        payload = response.json()
        error = payload["error"]
        assert (error["code"] == "payload_too_large") if path != "/" else (error["code"] == -32600)
    agent.assert_intact()


@pytest.mark.parametrize("token", RAW_TOKENS, ids=lambda raw: raw.text[:12])
def test_json_beyond_the_depth_and_number_limits_is_refused_and_the_connection_kept(agent, token):
    chat_answer = agent.post("/v1/chat/completions", chat("hi", max_tokens=token))
    assert chat_answer.status_code == 400, chat_answer.text
    assert chat_answer.json()["error"]["code"] == "invalid_json"
    rpc_answer = agent.post("/", rpc_body("tasks/get", {"id": token}))
    assert rpc_answer.status_code == 200
    assert rpc_answer.json()["error"]["code"] == -32700
    # Same keep-alive connection: still serving.
    assert agent.client.get("/health").status_code == 200
    agent.assert_intact()


# -- JSON-RPC 2.0 ---------------------------------------------------------------------------------------------


def test_a_notification_is_executed_without_an_answer(agent):
    agent.model.enqueue(TextReply("noted"))
    note = {"jsonrpc": "2.0", "method": "message/send", "params": message_params("remember", context_id="note")}
    response = agent.post("/", note)
    assert response.status_code == 204
    assert response.content == b""
    eventually(lambda: len(agent.events("note")) == 2, "the notification's turn stored")
    assert [event["event_type"] for event in agent.events("note")] == ["user_message", "agent_response"]


def test_a_streaming_notification_runs_as_a_send(agent):
    agent.model.enqueue(TextReply("streamed note"))
    note = {"jsonrpc": "2.0", "method": "message/stream", "params": message_params("go", context_id="note-stream")}
    assert agent.post("/", note).status_code == 204
    eventually(lambda: len(agent.events("note-stream")) == 2, "the streamed notification's turn stored")


def test_a_null_id_is_a_request_answered_with_a_null_id(agent):
    agent.model.enqueue(TextReply("for null"))
    answer = agent.post("/", rpc_body("message/send", message_params("hi", context_id="null-id"), id_=None)).json()
    assert answer["id"] is None
    assert answer["result"]["status"]["state"] == "completed"
    missing = agent.post("/", rpc_body("tasks/get", {"id": "nope"}, id_=None)).json()
    assert (missing["id"], missing["error"]["code"]) == (None, -32001)


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({**message_params("hi"), "configuration": 5}, "configuration"),
        ({"message": {**message_params("hi")["message"], "role": []}}, "message.role"),
        ({"message": {**message_params("hi")["message"], "parts": [{"kind": "text", "text": 5}]}}, "text"),
        ({"message": {**message_params("hi")["message"], "parts": [{"kind": "data", "data": 5}]}}, "data"),
        ({**message_params("hi"), "configuration": {"historyLength": "many"}}, "historyLength"),
    ],
    ids=["configuration", "role", "text", "data", "history-length"],
)
def test_wrongly_typed_params_are_invalid_params_with_a_short_message(agent, params, where):
    answer = agent.post("/", rpc_body("message/send", params)).json()
    error = answer["error"]
    assert error["code"] == -32602
    assert where in error["message"]
    assert error["data"] in (None, {"type": "invalid_request"})
    assert len(error["message"]) < 200


def test_a_batch_with_bad_entries_answers_each_on_its_own(agent):
    agent.model.enqueue(TextReply("batched"))
    good = message_params("in a batch", context_id="batch")
    batch = [
        rpc_body("message/send", good, id_="good"),
        rpc_body("message/send", {**message_params("x"), "configuration": 5}, id_="conf"),
        rpc_body("message/send", {"message": {**message_params("x")["message"], "role": []}}, id_="role"),
        rpc_body("tasks/get", {"id": "\udc80"}, id_="surrogate"),
        rpc_body("SendMessage", {"message": 5}, id_="v1"),
    ]
    response = agent.post("/", batch)
    assert response.status_code == 200
    by_id = {answer["id"]: answer for answer in response.json()}
    assert by_id["good"]["result"]["status"]["state"] == "completed"
    for bad in ("conf", "role", "surrogate", "v1"):
        assert by_id[bad]["error"]["code"] == -32602, by_id[bad]


async def test_cancelling_a_running_task_with_the_null_store_answers_canceled(model):
    from tests.support.agent import running_agent

    async with running_agent(model, TASK_STORE_TYPE="null") as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as http:
            model.enqueue(TextReply("slow", delay_seconds=5))
            params = message_params("wait", context_id="cancel-null", blocking=False)
            task = (await http.post("/", json=rpc_body("message/send", params))).json()["result"]
            answer = (await http.post("/", json=rpc_body("tasks/cancel", {"id": task["id"]}))).json()
            assert answer["result"]["status"]["state"] == "canceled", answer
            # Finished, it is forgotten as the null store promises.
            gone = (await http.post("/", json=rpc_body("tasks/get", {"id": task["id"]}))).json()
            assert gone["error"]["code"] == -32001


# -- hypothesis -----------------------------------------------------------------------------------------------

roles = st.sampled_from(["user", "system", "assistant", "developer", "tool"])
messages = st.builds(
    lambda earlier, last: [*earlier, last],
    st.lists(st.fixed_dictionaries({"role": field(roles), "content": field(st.text(max_size=20))}), max_size=2),
    st.fixed_dictionaries({"role": field(st.just("user")), "content": field(st.text(min_size=1, max_size=20))}),
)
session_ids = st.one_of(st.from_regex(r"[A-Za-z0-9._:-]{1,20}", fullmatch=True), any_text)
chat_requests = st.fixed_dictionaries(
    {"messages": field(messages)},
    optional={
        "model": field(st.text(max_size=10)),
        "stream": field(st.booleans()),
        "session_id": field(session_ids),
        "max_tokens": field(st.integers(1, 100)),
        "metadata": hostile_values,
        "tools": hostile_values,
        "stream_options": hostile_values,
    },
)
chat_bodies = st.one_of(
    chat_requests,
    chat_requests,
    hostile_values,
    st.just(chat("x" * LIMIT)),
).filter(lambda body: body != {})
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=140)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(body=chat_bodies, session_header=st.none() | header_values)
def test_fuzz_chat_completions(agent, body, session_header):
    sent = (session_header or "").strip(" \t")  # a header value cannot start or end with blanks
    headers = {"X-Session-ID": sent.encode("latin-1")} if sent else {}
    response = agent.post("/v1/chat/completions", body, headers)
    assert_handled(response)
    event(f"chat {response.status_code}")
    if response.status_code >= 400:
        assert response.json()["error"]["message"]
    agent.assert_intact()


def a2a_params() -> st.SearchStrategy[object]:
    message = st.fixed_dictionaries(
        {
            "role": field(st.sampled_from(["user", "agent"])),
            "parts": field(st.lists(st.fixed_dictionaries({"kind": field(st.just("text")), "text": field(any_text)}))),
            "messageId": field(st.uuids().map(str)),
        },
        optional={"contextId": field(session_ids), "metadata": hostile_values},
    )
    return field(
        st.fixed_dictionaries(
            {"message": field(message)},
            optional={
                "configuration": field(st.fixed_dictionaries({"blocking": field(st.booleans())})),
                "id": field(any_text),
                "sessionId": field(session_ids),
            },
        )
    )


methods = st.sampled_from(
    ["message/send", "tasks/get", "tasks/cancel", "tasks/send", "SendMessage", "GetTask", "CancelTask", "nope"]
)
requests = st.builds(
    lambda jsonrpc, id_, method, params, drop_id: {
        key: value
        for key, value in {"jsonrpc": jsonrpc, "id": id_, "method": method, "params": params}.items()
        if not (key == "id" and drop_id)
    },
    field(st.just("2.0")),
    field(st.one_of(st.integers(0, 1000), st.text(max_size=8), st.none())),
    field(methods),
    a2a_params(),
    st.booleans(),
)


def holds_raw(value: object) -> bool:
    """True when ``value`` renders to JSON beyond the request limits (refused before it is read)."""
    if isinstance(value, Raw) or (isinstance(value, float) and not math.isfinite(value)):
        return True
    if isinstance(value, dict):
        return any(holds_raw(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_raw(item) for item in value)
    return False


def answered(entry: object) -> bool:
    """False only for a valid notification (JSON-RPC 2.0: a valid Request without ``id``); an invalid Request is
    answered -32600 even without ``id``."""
    if not isinstance(entry, dict) or "id" in entry or entry.get("jsonrpc") != "2.0":
        return True
    method = entry.get("method")
    return not (isinstance(method, str) and method and UNSTORABLE.search(method) is None)


def check_rpc_answer(answer: object) -> None:
    assert isinstance(answer, dict), answer
    assert answer["jsonrpc"] == "2.0", answer
    assert "id" in answer, answer
    if "error" in answer:
        error = answer["error"]
        assert isinstance(error["code"], int)
        assert isinstance(error["message"], str)
        assert error["message"]
        assert error.get("data") is None or set(error["data"]) == {"type"}, error
    else:
        assert "result" in answer


@FUZZ
@given(body=st.one_of(requests, requests, st.lists(requests | hostile_values, min_size=1, max_size=4), hostile_values))
def test_fuzz_json_rpc(agent, body):
    response = agent.post("/", body)
    assert_handled(response)
    event(f"rpc {response.status_code} {response.text[:60] if response.status_code == 200 else ''}")
    if holds_raw(body):  # beyond the JSON limits: the whole body is refused as a parse error
        answer = response.json()
        check_rpc_answer(answer)
        # Several raw tokens can also take the body over the size limit, refused first (413, payload_too_large).
        assert answer["error"]["code"] == (-32600 if response.status_code == 413 else -32700), answer
    elif isinstance(body, list) and body:
        expected = sum(answered(entry) for entry in body)
        if expected == 0:
            assert response.status_code == 204
        else:
            answers = response.json()
            assert len(answers) == expected, answers
            for answer in answers:
                check_rpc_answer(answer)
    elif isinstance(body, dict) and not answered(body):
        assert response.status_code == 204
    elif response.headers.get("content-type", "").startswith("application/json"):
        check_rpc_answer(response.json())
    agent.assert_intact()


def rest_send_bodies() -> st.SearchStrategy[object]:
    """A2A 1.0 ``SendMessageRequest`` bodies (the HTTP+JSON binding's ``/message:send``), often wrong in one field."""
    text = st.fixed_dictionaries({"text": field(st.one_of(st.text(min_size=1, max_size=20), any_text))})
    part = st.one_of(
        text,
        text,
        text,
        st.fixed_dictionaries({"data": hostile_values}),
        st.fixed_dictionaries({"raw": field(any_text)}, optional={"mediaType": field(any_text)}),
        st.fixed_dictionaries({"url": field(any_text)}),
    )
    message = st.fixed_dictionaries(
        {
            "role": field(st.sampled_from(["ROLE_USER", "ROLE_AGENT"])),
            "parts": field(st.lists(part, min_size=1, max_size=3)),
            "messageId": field(st.uuids().map(str)),
        },
        optional={"contextId": field(session_ids), "metadata": hostile_values},
    )
    configuration = st.fixed_dictionaries(
        {}, optional={"returnImmediately": field(st.booleans()), "historyLength": field(st.integers(-2, 2**40))}
    )
    return st.one_of(
        st.fixed_dictionaries({"message": field(message)}, optional={"configuration": field(configuration)}),
        hostile_values,
    )


def check_rest_error(response: httpx.Response) -> None:
    """A refusal in the HTTP+JSON binding's error body, its ``code`` the HTTP status."""
    error = response.json()["error"]
    assert error["code"] == response.status_code, error
    assert isinstance(error["status"], str)
    assert error["message"]


@FUZZ
@given(body=rest_send_bodies(), version=st.sampled_from(["1.0", "1.0", "1.0", "0.3", "9"]))
def test_fuzz_rest_send(agent, body, version):
    response = agent.post("/message:send", body, {"A2A-Version": version})
    assert_handled(response)
    event(f"rest send {response.status_code}")
    if response.status_code >= 400:
        check_rest_error(response)
    else:
        assert response.json()["task"]["id"]
    agent.assert_intact()


@FUZZ
@given(
    query=st.dictionaries(
        st.sampled_from(["status", "pageSize", "pageToken", "contextId", "historyLength", "includeArtifacts"]),
        any_text.map(lambda text: text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")),
        max_size=3,
    ),
    task_id=st.one_of(st.just("no-such-task"), st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)),
)
def test_fuzz_rest_reads(agent, query, task_id):
    for path in ("/tasks", f"/tasks/{task_id}"):
        response = agent.client.get(path, params=query, headers={"A2A-Version": "1.0"})
        assert_handled(response)
        event(f"rest read {response.status_code}")
        if response.status_code >= 400:
            check_rest_error(response)
    agent.assert_intact()


@FUZZ
@given(session_id=any_text, limit=hostile_values)
def test_fuzz_memory_reads(agent, session_id, limit):
    # Cut to what a URL can carry (the client refuses longer queries before sending anything).
    params = {"session_id": session_id, "limit": render(limit)[:4000]}
    response = agent.client.get(
        "/memory/events", params={k: v.encode("utf-8", "surrogatepass") for k, v in params.items()}
    )
    assert_handled(response)
    assert_handled(agent.client.get("/memory/sessions"))
    agent.assert_intact()


# -- kora mcp -------------------------------------------------------------------------------------------------

TOOLS = '''
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


def count(text: str) -> int:
    """Count the characters of a text."""
    return len(text)
'''
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def mcp() -> Iterator[httpx.Client]:
    with running_mcp(
        {"MCP_TOOLS_STRING": TOOLS, "MCP_TOOL_WORKERS": "1", "MCP_MAX_REQUEST_BYTES": str(LIMIT)}
    ) as server:
        wait_until_ready(server.root_url)
        with httpx.Client(base_url=server.root_url, timeout=30) as client:
            yield client


def mcp_post(client: httpx.Client, body: object) -> httpx.Response:
    return client.post("/mcp", content=render(body).encode("utf-8", "surrogatepass"), headers=MCP_HEADERS)


def assert_mcp_serves(client: httpx.Client) -> None:
    listed = mcp_post(client, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert listed.status_code == 200, listed.text
    assert "count" in listed.text


@pytest.mark.parametrize("token", [*RAW_TOKENS, Raw('"' + "x" * LIMIT + '"')], ids=lambda raw: raw.text[:12])
def test_mcp_refuses_json_beyond_the_limits_as_json_rpc(mcp, token):
    response = mcp_post(
        mcp, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": token}}}
    )
    assert response.status_code in (400, 413), response.text
    assert response.json()["error"]["code"] in (-32700, -32600)
    assert_mcp_serves(mcp)


mcp_requests = st.fixed_dictionaries(
    {
        "jsonrpc": field(st.just("2.0")),
        "id": field(st.integers(0, 100)),
        "method": field(st.sampled_from(["tools/call", "tools/list", "initialize", "ping"])),
        "params": field(
            st.fixed_dictionaries(
                {
                    "name": field(st.sampled_from(["add", "count", "nope"])),
                    "arguments": field(
                        st.fixed_dictionaries({"a": field(st.integers(-5, 5)), "text": field(st.text(max_size=8))})
                    ),
                }
            )
        ),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(mcp_requests, hostile_values))
def test_fuzz_mcp(mcp, body):
    response = mcp_post(mcp, body)
    assert response.status_code < 500, response.text[:500]
    assert "Traceback" not in response.text
    assert_mcp_serves(mcp)


def test_render_writes_surrogates_as_escapes():
    assert json.loads(render({"a": "\udc80"})) == {"a": "\udc80"}
