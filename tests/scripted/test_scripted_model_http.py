"""The scripted model over real HTTP on 127.0.0.1: openai and pydantic-ai clients, errors, aborts,
control endpoints and the ``kora model`` command."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest
from pydantic_ai import Agent

from kora.scripted import (
    ErrorReply,
    Match,
    Rule,
    TextReply,
    ToolCall,
    ToolCallReply,
    load_script,
    reply_to_json,
)
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}

ADD_SCRIPT = [
    # Listed first: after the tool ran, the last user message still matches the rule below.
    Rule(Match(after_tool=True, user_matches=r"add (?P<a>\d+) and (?P<b>\d+)"), TextReply("The sum is {tool_result}")),
    Rule(
        Match(user_matches=r"add (?P<a>\d+) and (?P<b>\d+)", tool_available="add"),
        ToolCallReply([ToolCall("add", {"a": "{a}", "b": "{b}"})]),
    ),
]


@pytest.fixture
def server():
    with ScriptedModelServer() as running:
        yield running


def ask(text):
    return [{"role": "user", "content": text}]


# -- openai client -------------------------------------------------------------------------------


def test_sync_client_gets_the_echo_with_usage(server):
    client = server.openai_client(max_retries=0)
    completion = client.chat.completions.create(model="scripted", messages=ask("hello there"))
    assert completion.object == "chat.completion"
    assert completion.model == "scripted"
    assert completion.choices[0].message.content == "You said: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        2,
        4,
        6,
    )
    assert server.requests == [{"model": "scripted", "messages": ask("hello there")}]


async def test_async_stream_flushes_each_chunk_and_ends_with_usage(server):
    server.enqueue(TextReply("one two three four", chunk_delay_seconds=0.15))
    client = server.async_openai_client(max_retries=0)
    stream = await client.chat.completions.create(
        model="scripted", messages=ask("count"), stream=True, stream_options={"include_usage": True}
    )
    arrivals, pieces, finish, usage = [], [], None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
                arrivals.append(time.monotonic())
            finish = choice.finish_reason or finish
    assert pieces == ["one", " two", " three", " four"]
    assert finish == "stop"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (1, 4)
    # Tokens leave as they are produced: spread over the chunk delays, not bunched at the end.
    assert arrivals[-1] - arrivals[0] >= 0.4


async def test_stream_without_include_usage_has_no_usage_chunk(server):
    async with httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post("/chat/completions", json={"model": "m", "messages": ask("hi"), "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(chunk["object"] == "chat.completion.chunk" and "usage" not in chunk for chunk in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "You said: hi"


def test_tool_call_round_trip_with_the_openai_client(server):
    server.load_script(ADD_SCRIPT)
    client = server.openai_client(max_retries=0)
    messages = ask("please add 2 and 3")
    first = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD_TOOL])
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
    assert first.usage.completion_tokens == 4  # '{"a": 2, "b": 3}'

    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    second = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD_TOOL])
    assert second.choices[0].message.content == "The sum is 5"
    assert server.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "5"}


async def test_streamed_tool_calls_assemble_in_the_openai_client(server):
    server.enqueue(
        ToolCallReply([ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})], text="Adding twice.")
    )
    client = server.async_openai_client(max_retries=0)
    stream = await client.chat.completions.create(model="scripted", messages=ask("x"), tools=[ADD_TOOL], stream=True)
    text, calls, finish = "", {}, None
    async for chunk in stream:
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": delta.id, "name": delta.function.name, "arguments": ""})
            entry["arguments"] += delta.function.arguments or ""
        finish = choice.finish_reason or finish
    assert text == "Adding twice."
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 3, "b": 4}),
    ]
    assert len({c["id"] for c in calls.values()}) == 2


def test_models_and_health(server):
    client = server.openai_client(max_retries=0)
    client.chat.completions.create(model="gpt-other", messages=ask("x"))
    assert [m.id for m in client.models.list()] == ["scripted", "gpt-other"]
    assert httpx.get(f"{server.root_url}/health").json() == {"status": "ok", "scripted": True}


# -- pydantic-ai ---------------------------------------------------------------------------------


def make_agent(server):
    agent = Agent(server.pydantic_ai_model(), instructions="You add numbers.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return agent


async def test_pydantic_ai_agent_runs_a_tool_end_to_end(server):
    server.load_script(ADD_SCRIPT)
    result = await make_agent(server).run("Could you add 2 and 3?")
    assert result.output == "The sum is 5"
    first, second = server.requests
    offered = first["tools"][0]["function"]
    assert offered["name"] == "add"
    assert offered.get("strict") is not True  # the strict-tools profile flag is honoured
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"] == "5"
    usage = result.usage
    assert usage.requests == 2
    assert usage.output_tokens == 4 + 4  # tool-call arguments, then "The sum is 5"


async def test_pydantic_ai_agent_streams_after_a_tool(server):
    server.load_script(ADD_SCRIPT)
    async with make_agent(server).run_stream("add 20 and 22") as run:
        output = await run.get_output()
    assert output == "The sum is 42"
    assert all(request.get("stream") is True for request in server.requests)
    assert server.requests[-1]["stream_options"] == {"include_usage": True}


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_error_replies_raise_the_matching_openai_exception(server, status, error_class):
    server.enqueue(ErrorReply(status, "scripted failure", type="test_error", code="scripted"))
    client = server.openai_client(max_retries=0)
    with pytest.raises(error_class) as caught:
        client.chat.completions.create(model="scripted", messages=ask("x"))
    assert caught.value.status_code == status
    assert caught.value.body == {"message": "scripted failure", "type": "test_error", "param": None, "code": "scripted"}


async def test_error_reply_to_a_streaming_request_is_an_http_error(server):
    server.enqueue(ErrorReply(429, "slow down", type="rate_limit_error"))
    client = server.async_openai_client(max_retries=0)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="scripted", messages=ask("x"), stream=True)


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"{not json", "invalid_json"), (b'{"model": "m"}', None), (b'{"messages": "hi"}', None), (b"[]", None)],
)
def test_malformed_requests_get_400_in_openai_format(server, content, code):
    response = httpx.post(f"{server.url}/chat/completions", content=content)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["message"]


# -- aborts and dropped connections --------------------------------------------------------------


def test_client_timeout_during_delay_is_recorded_as_aborted(server):
    server.enqueue(TextReply("too late", delay_seconds=120))
    client = server.openai_client(max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="scripted", messages=ask("slow please"))
    # Noticed at the disconnect: the 120 s delay is far from over when the wait gives up.
    assert server.model.wait_for_aborts(1, timeout=30)
    assert server.aborted_requests == [server.requests[0]]


async def test_client_leaving_mid_stream_is_recorded_as_aborted(server):
    server.enqueue(TextReply("a b c d e f g h", chunk_delay_seconds=0.3))
    server.enqueue(TextReply("finished normally"))
    client = server.async_openai_client(max_retries=0)
    stream = await client.chat.completions.create(model="scripted", messages=ask("x"), stream=True)
    async for chunk in stream:
        if chunk.choices[0].delta.content:
            break
    await stream.close()
    assert await server.wait_for_aborts(1, within=3)
    # A completed stream is not an abort.
    done = await client.chat.completions.create(model="scripted", messages=ask("y"), stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in done if c.choices]) == "finished normally"
    assert len(server.aborted_requests) == 1


async def test_disconnect_after_chunks_drops_the_connection(server, caplog):
    server.enqueue(TextReply("one two three four", disconnect_after_chunks=2))
    client = server.async_openai_client(max_retries=0)
    stream = await client.chat.completions.create(model="scripted", messages=ask("x"), stream=True)
    received = []

    async def read_all():
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    with pytest.raises(openai.APIConnectionError):
        await read_all()
    assert "".join(received) == "one two"
    assert server.aborted_requests == []  # the server dropped it, the client did not abort
    # A drop on purpose is not logged as a crash by the server (records from other tests' garbage, such as an
    # unclosed client collected here, are not the server's).
    server_errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name.startswith(("kora", "uvicorn"))]
    assert not server_errors


async def test_async_context_manager_and_concurrent_requests():
    async with ScriptedModelServer(model_name="demo") as server:
        client = server.async_openai_client(max_retries=0)
        replies = await asyncio.gather(
            *(client.chat.completions.create(model="demo", messages=ask(f"n{i}")) for i in range(20))
        )
        assert sorted(r.choices[0].message.content for r in replies) == sorted(f"You said: n{i}" for i in range(20))
        assert len({r.id for r in replies}) == 20
    with pytest.raises(RuntimeError):
        _ = server.url  # stopped


# -- control endpoints ---------------------------------------------------------------------------


def test_control_endpoints_script_the_model_from_another_process(server):
    root = server.root_url
    rules = [{"when": {"user_matches": "ping"}, "reply": {"kind": "text", "text": "pong"}, "times": 1}]
    assert httpx.put(f"{root}/_script/rules", json={"rules": rules}).json() == {"rules": 1}
    replies = [reply_to_json(ErrorReply(503, "down")), {"kind": "text", "text": "queued"}]
    assert httpx.post(f"{root}/_script/replies", json=replies).json() == {"queued": 2}
    assert httpx.post(f"{root}/_script/replies", json={"kind": "text", "text": "third"}).json() == {"queued": 3}

    client = server.openai_client(max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="scripted", messages=ask("ping"))
    contents = [
        client.chat.completions.create(model="scripted", messages=ask("ping")).choices[0].message.content
        for _ in range(4)
    ]
    assert contents == ["queued", "third", "pong", "You said: ping"]

    recorded = httpx.get(f"{root}/_script/requests").json()
    assert len(recorded["requests"]) == 5
    assert recorded["requests"][0]["messages"] == ask("ping")
    assert recorded["aborted_requests"] == []

    assert httpx.delete(f"{root}/_script", params={"keep_rules": "true"}).status_code == 204
    assert httpx.get(f"{root}/_script/requests").json()["requests"] == []
    assert server.model.rules == load_script(rules)
    assert httpx.delete(f"{root}/_script").status_code == 204
    assert server.model.rules == []


def test_control_endpoints_reject_malformed_scripts(server):
    root = server.root_url
    bad_reply = httpx.post(f"{root}/_script/replies", json={"kind": "nope"})
    assert bad_reply.status_code == 400
    assert "unknown reply kind" in bad_reply.json()["error"]["message"]
    assert httpx.put(f"{root}/_script/rules", content=b"{").status_code == 400
    assert httpx.put(f"{root}/_script/rules", json=[{"when": {"user_matches": "("}, "reply": "x"}]).status_code == 400
    assert server.model.queued == 0


# -- kora model ----------------------------------------------------------------------------------


def test_kora_model_command_serves_a_script(tmp_path):
    script = tmp_path / "demo.yaml"
    script.write_text("rules:\n  - when: {user_matches: 'weather'}\n    reply: 'Sunny, 21 degrees.'\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "model", "--port", "0", "--script", str(script), "--model-name", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = process.stdout.readline()
        assert "scripted offline model" in line
        assert "not a real LLM" in line
        url = line.rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="demo", messages=ask("what is the weather?"))
        assert answer.choices[0].message.content == "Sunny, 21 degrees."
        assert [m.id for m in client.models.list()] == ["demo"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        process.stdout.close()
        process.stderr.close()


def test_kora_model_command_rejects_a_bad_script(tmp_path):
    script = tmp_path / "bad.yaml"
    script.write_text("- when: {user_matches: '('}\n  reply: x\n")
    done = subprocess.run(
        [sys.executable, "-m", "kora.cli", "model", "--port", "0", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot load script" in done.stderr
