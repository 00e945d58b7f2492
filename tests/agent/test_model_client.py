"""ModelClient against the scripted model over real HTTP: answers, streams, retries, every failure kind."""

import asyncio
import json
import time

import aiohttp
import httpx2
import pytest
from httpx_aiohttp.httpx2.transport import map_aiohttp_exceptions
from pydantic_ai.messages import ModelRequest
from pydantic_ai.models import ModelRequestParameters
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from kora.agent.chat_model import KoraChatModel
from kora.agent.model_client import ModelClient, _retry_after
from kora.core.errors import ModelError
from kora.core.net import free_port
from kora.core.openai_wire import request_body
from kora.scripted import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


def body(prompt: str = "hi", *, stream: bool = False) -> dict:
    return request_body("scripted", [{"role": "user", "content": prompt}], [], stream=stream)


async def stream_answer(url: str, prompt: str = "hi", *, retries: int = 0):
    """A streamed request through the model adapter; its final pydantic-ai response."""
    model = KoraChatModel(url, "test-key", "scripted", timeout=10.0, max_retries=retries)
    try:
        messages = [ModelRequest.user_text_prompt(prompt)]
        async with model.request_stream(messages, None, ModelRequestParameters()) as streamed:
            async for _ in streamed:
                pass
            return streamed.get()
    finally:
        await model.aclose()


def client_for(url: str, *, retries: int = 0, timeout: float = 10.0) -> ModelClient:
    return ModelClient(url, "test-key", timeout=timeout, max_retries=retries)


async def test_a_whole_answer_with_usage(model):
    client = client_for(model.url)
    try:
        answer = await client.complete(body("hello there"))
        assert (answer.text, answer.finish_reason, answer.calls) == ("You said: hello there", "stop", [])
        assert answer.input_tokens == 2
        assert answer.output_tokens == 4
        assert answer.model_name == "scripted"
        assert model.requests[-1] == body("hello there")
    finally:
        await client.aclose()


async def test_a_pooled_connection_is_not_reused_as_the_server_closes_it(model):
    """The scripted model is uvicorn, which closes a connection idle for 5 s. A loaded agent's event loop reads an
    answer late (here: blocked 1.5 s while the answer arrives), so its pool counts idle time from later than the
    server does; and it notices the server's close late too. The next request must not go out on that
    connection: a pool that keeps idle connections 5 s, as long as the server does, fails here with
    "Can not write request body" or a disconnect although the model is well."""
    loop = asyncio.get_running_loop()
    client = client_for(model.url)
    try:
        model.enqueue(TextReply("first", delay_seconds=0.2))
        loop.call_later(0.05, time.sleep, 1.5)  # the loop is busy while the answer arrives
        started = time.monotonic()
        assert (await client.complete(body())).text == "first"
        # Until just before the server's close (5 s after it answered, ~0.2 s in), then busy across it.
        await asyncio.sleep(max(0.0, started + 4.9 - time.monotonic()))
        time.sleep(0.6)
        assert (await client.complete(body("again"))).text == "You said: again"
    finally:
        await client.aclose()


async def test_a_streamed_answer_with_tool_calls(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})]))
    answer = await stream_answer(model.url)
    assert [(c.tool_name, c.args) for c in answer.tool_calls] == [
        ("add", '{"a": 1, "b": 2}'),
        ("add", '{"a": 3, "b": 4}'),
    ]
    assert answer.finish_reason == "tool_call"
    assert answer.usage.input_tokens > 0


async def test_leaving_a_stream_early_closes_the_connection(model):
    model.enqueue(TextReply("one two three four five six", chunk_delay_seconds=0.2))
    client = client_for(model.url)
    try:
        async with client.stream(body(stream=True)) as chunks:
            async for _ in chunks:
                break
        assert await model.wait_for_aborts(1, within=5)
    finally:
        await client.aclose()


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_retryable_statuses_are_retried(model, status):
    model.enqueue(ErrorReply(status, "busy"), TextReply("finally"))
    client = client_for(model.url, retries=1)
    try:
        assert (await client.complete(body())).text == "finally"
        assert len(model.requests) == 2
    finally:
        await client.aclose()


async def test_a_client_error_is_not_retried_and_says_what_the_api_said(model):
    model.enqueue(ErrorReply(400, "bad tool schema", type="invalid_request_error"), TextReply("unused"))
    client = client_for(model.url, retries=2)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(body())
        assert (caught.value.code, caught.value.upstream_status) == ("model_error", 400)
        assert caught.value.message == "The model API answered HTTP 400: bad tool schema"
        assert len(model.requests) == 1
    finally:
        await client.aclose()


async def test_retries_give_up_after_max_retries(model):
    model.enqueue(*[ErrorReply(503, "down") for _ in range(3)])
    client = client_for(model.url, retries=2)
    try:
        with pytest.raises(ModelError, match="HTTP 503: down"):
            await client.complete(body())
        assert len(model.requests) == 3
    finally:
        await client.aclose()


async def test_a_streamed_request_is_retried_before_its_first_event(model):
    model.enqueue(ErrorReply(502, "gateway"), TextReply("streamed after all"))
    answer = await stream_answer(model.url, retries=1)
    assert answer.text == "streamed after all"


async def test_a_slow_model_is_a_timeout(model):
    model.enqueue(TextReply("late", delay_seconds=2))
    client = client_for(model.url, timeout=0.3)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(body())
        assert caught.value.code == "model_timeout"
    finally:
        await client.aclose()


async def test_a_stream_that_stalls_is_a_timeout(model):
    model.enqueue(TextReply("one two three", chunk_delay_seconds=1.5))
    client = client_for(model.url, timeout=0.3)
    try:
        async with client.stream(body(stream=True)) as chunks:
            with pytest.raises(ModelError) as caught:
                async for _ in chunks:
                    pass
        assert caught.value.code == "model_timeout"
        assert "stalled" in caught.value.message
    finally:
        await client.aclose()


async def test_a_model_api_that_is_down_is_a_model_error():
    client = client_for(f"http://127.0.0.1:{free_port()}/v1", retries=1)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(body())
        assert caught.value.code == "model_error"
        assert caught.value.message.startswith("The model API could not be reached")
    finally:
        await client.aclose()


def broken_model_api() -> ThreadedServer:
    """An endpoint that answers chat requests with something other than a chat completion."""

    async def chat(request: Request) -> Response:
        payload = await request.json()
        if payload.get("stream"):
            return PlainTextResponse('data: {"choices": "nope"}\n\n', media_type="text/event-stream")
        if payload["messages"][-1]["content"] == "html":
            return PlainTextResponse("<html>maintenance</html>", status_code=200)
        return Response('{"object": "list", "data": []}', media_type="application/json")

    return ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]), name="broken")


@pytest.mark.parametrize("prompt", ["json", "html"])
async def test_an_answer_that_is_not_a_completion_is_a_model_error(prompt):
    async with broken_model_api() as broken:
        client = client_for(f"{broken.root_url}/v1")
        try:
            with pytest.raises(ModelError) as caught:
                await client.complete(body(prompt))
            assert caught.value.code == "model_error"
            assert caught.value.message.startswith("The model API sent an invalid answer")
        finally:
            await client.aclose()


async def test_a_stream_chunk_that_is_not_a_chunk_is_a_model_error():
    async with broken_model_api() as broken:
        client = client_for(f"{broken.root_url}/v1")
        try:
            async with client.stream(body(stream=True)) as chunks:
                with pytest.raises(ModelError, match="invalid chunk"):
                    await anext(chunks)
        finally:
            await client.aclose()


@pytest.mark.parametrize(("header", "seconds"), [("2", 2.0), ("0.5", 0.5), ("600", None), ("soon", None), (None, None)])
def test_retry_after_is_honoured_up_to_a_minute(header, seconds):
    headers = {"retry-after": header} if header is not None else {}
    assert _retry_after(httpx2.Response(429, headers=headers)) == seconds


async def test_a_whole_answer_goes_through_the_proxy_the_environment_names(model, monkeypatch):
    """HTTP_PROXY is honoured (looked up once per client), and NO_PROXY exempts a host: the scripted model is the
    proxy here (it reads the absolute-form request line), the named model API a host that does not resolve."""
    monkeypatch.setenv("HTTP_PROXY", model.url.removesuffix("/v1"))
    client = client_for("http://model-api.invalid/v1")
    try:
        assert (await client.complete(body("via the proxy"))).text == "You said: via the proxy"
    finally:
        await client.aclose()
    monkeypatch.setenv("NO_PROXY", "model-api.invalid")
    client = client_for("http://model-api.invalid/v1")
    try:
        with pytest.raises(ModelError, match="could not be reached"):
            await client.complete(body("direct"))
    finally:
        await client.aclose()


async def test_concurrent_requests_each_get_their_own_answer(model):
    client = client_for(model.url)
    try:
        answers = await asyncio.gather(*(client.complete(body(f"n{i}")) for i in range(32)))
        assert sorted(a.text for a in answers) == sorted(f"You said: n{i}" for i in range(32))
    finally:
        await client.aclose()


async def test_a_connection_dropped_mid_stream_is_a_stream_failure_not_a_timeout():
    """A model server that resets its connection after the first chunk (chunked framing left unfinished): the
    stream fails as a model error saying so, never as a stall or a clean end."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "par"}, "finish_reason": None}],
    }
    first_sent = asyncio.Event()

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()
        await first_sent.wait()
        writer.transport.abort()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = client_for(f"http://127.0.0.1:{port}/v1")
    received = []

    async def read(chunks) -> None:
        async for one in chunks:
            received.append(one)
            first_sent.set()

    try:
        async with client.stream(body(stream=True)) as chunks:
            with pytest.raises(ModelError) as caught:
                await read(chunks)
        assert [c.choices[0].delta.content for c in received] == ["par"]
        assert caught.value.code == "model_error"
        assert caught.value.message.startswith("The model API stream failed")
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


class _FailingBody(httpx2.AsyncByteStream):
    """An SSE body that sends one event, then fails as an aiohttp response body does: ``error`` raised inside
    ``httpx_aiohttp``'s own exception mapping, which the streamed response's body runs under."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    async def __aiter__(self):
        with map_aiohttp_exceptions():
            yield b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\n'
            raise self._error


@pytest.mark.parametrize(
    ("error", "code", "said"),
    [
        (aiohttp.ServerDisconnectedError(), "model_error", "The model API stream failed: ServerDisconnectedError"),
        (aiohttp.ClientConnectionResetError("reset"), "model_error", "The model API stream failed"),
        (aiohttp.SocketTimeoutError("read"), "model_timeout", "The model API's stream stalled"),
    ],
)
async def test_a_lost_connection_is_a_failure_and_only_a_read_timeout_a_stall(error, code, said):
    """``httpx_aiohttp`` maps every aiohttp connection error to a timeout; the stream tells the lost connection
    (the server went away) from a read that timed out."""
    client = client_for("http://127.0.0.1:9/v1")
    response = httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=_FailingBody(error),
        request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )
    try:
        with pytest.raises(ModelError) as caught:
            async for _ in client._chunks(response):
                pass
        assert caught.value.code == code
        assert caught.value.message.startswith(said)
    finally:
        await client.aclose()
