"""The local gateway and `kora model-proxy` over real HTTP: prefix stripping, streaming, 404/502/504, auth."""

import asyncio
import http.server
import json
import threading

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from kora.core.net import free_port
from kora.local.gateway import GatewayRoute, create_gateway_app
from kora.proxy.model_proxy import ProxySettings, create_proxy_app
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


async def echo(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "raw_path": request.scope["raw_path"].decode(),
            "query": request.url.query,
            "body": body.decode(),
            "authorization": request.headers.get("authorization"),
            "forwarded_host": request.headers.get("x-forwarded-host"),
        }
    )


#: Opened by the client once it has the first chunk: a gateway that buffered would never deliver it in time.
SECOND_CHUNK_GATE = threading.Event()


async def stream(request: Request) -> StreamingResponse:
    async def chunks():
        yield b"data: first\n\n"
        opened = await asyncio.to_thread(SECOND_CHUNK_GATE.wait, 30)
        yield b"data: second\n\n" if opened else b"data: the first chunk never reached the client\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


async def slow(request: Request) -> JSONResponse:
    await asyncio.sleep(2)
    return JSONResponse({})


BACKEND = Starlette(
    routes=[
        Route("/stream", stream),
        Route("/slow", slow),
        Route("/{path:path}", echo, methods=["GET", "POST", "DELETE"]),
    ]
)


def closed_port() -> int:
    return free_port()  # free a moment ago, so nothing listens there


@pytest.fixture(scope="module")
def backend():
    with ThreadedServer(BACKEND, name="backend") as server:
        yield server


@pytest.fixture(scope="module")
def gateway(backend):
    routes = {
        "/default/agent/a": GatewayRoute("/default/agent/a", backend.root_url, 120),
        "/default/mcp/slow": GatewayRoute("/default/mcp/slow", backend.root_url, 0.3),
        "/default/agent/down": GatewayRoute("/default/agent/down", f"http://127.0.0.1:{closed_port()}", 5),
    }
    with ThreadedServer(create_gateway_app(routes), name="gateway", lifespan="on") as server:
        yield server


def test_prefix_is_stripped_and_method_body_query_kept(gateway):
    response = httpx.post(f"{gateway.root_url}/default/agent/a/v1/chat?x=1&y=2", content=b"hello")
    assert response.status_code == 200
    assert response.json() == {
        "method": "POST",
        "path": "/v1/chat",
        "raw_path": "/v1/chat",
        "query": "x=1&y=2",
        "body": "hello",
        "authorization": None,
        "forwarded_host": gateway.root_url.removeprefix("http://"),
    }


def test_streaming_passes_chunks_as_they_come(gateway):
    SECOND_CHUNK_GATE.clear()
    received = b""
    with httpx.stream("GET", f"{gateway.root_url}/default/agent/a/stream", timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            received += chunk
            if received == b"data: first\n\n":
                SECOND_CHUNK_GATE.set()  # the backend sends the second chunk only now
    assert received == b"data: first\n\ndata: second\n\n"


def test_unknown_route_is_404_json(gateway):
    response = httpx.get(f"{gateway.root_url}/default/agent/nobody/v1/models")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "/default/agent/a" in response.json()["error"]["routes"]


def test_backend_down_is_502_and_slow_is_504(gateway):
    down = httpx.get(f"{gateway.root_url}/default/agent/down/health")
    assert down.status_code == 502
    assert down.json()["error"]["type"] == "bad_gateway"
    slow = httpx.get(f"{gateway.root_url}/default/mcp/slow/slow")
    assert slow.status_code == 504
    assert slow.json()["error"]["type"] == "gateway_timeout"


def test_model_proxy_replaces_credentials_and_lists_configured_models(backend):
    settings = ProxySettings(api_base=backend.root_url + "/v1", api_key="sk-backend", models="gpt-x")
    with ThreadedServer(create_proxy_app(settings), name="proxy", lifespan="on") as proxy:
        seen = httpx.get(f"{proxy.root_url}/v1/anything", headers={"Authorization": "Bearer client"}).json()
        assert seen["path"] == "/v1/anything"
        assert seen["authorization"] == "Bearer sk-backend"
        models = httpx.get(f"{proxy.root_url}/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["gpt-x"]
        assert httpx.get(f"{proxy.root_url}/ready").status_code == 200


def test_model_proxy_streams_a_real_openai_exchange():
    with ScriptedModelServer() as model:
        settings = ProxySettings(api_base=model.url)
        with ThreadedServer(create_proxy_app(settings), name="proxy", lifespan="on") as proxy:
            client = openai.OpenAI(base_url=proxy.root_url + "/v1", api_key="unused", max_retries=0)
            chunks = client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "hello there"}], stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert "hello there" in text


class PlainBackend(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible backend on Python's ``http.server``: it reads a body by ``Content-Length`` only (no
    chunked request bodies) and sends its own ``Server`` and ``Date`` headers."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            self.send_error(411, "chunked request bodies are not supported")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = json.loads(body)
        answer = {
            "id": "chatcmpl-plain",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"path={self.path} length={len(body)}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def plain_backend():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PlainBackend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def plain_proxies(plain_backend):
    """The model proxy and the gateway in front of the plain backend: ``{name: base URL ending in /v1}``."""
    routes = {"/default/modelapi/plain": GatewayRoute("/default/modelapi/plain", plain_backend, 30)}
    settings = ProxySettings(api_base=plain_backend + "/v1", api_key="sk-backend")
    with (
        ThreadedServer(create_gateway_app(routes), name="gateway", lifespan="on") as gateway,
        ThreadedServer(create_proxy_app(settings), name="proxy", lifespan="on") as proxy,
    ):
        yield {"gateway": f"{gateway.root_url}/default/modelapi/plain/v1", "model-proxy": f"{proxy.root_url}/v1"}


@pytest.mark.parametrize("through", ["gateway", "model-proxy"])
def test_a_request_is_forwarded_as_it_came_to_an_http_server_backend(plain_proxies, through):
    base = plain_proxies[through]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    response = httpx.post(f"{base}/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    # The same path (no trailing "?" for an empty query) and the body with its Content-Length, not chunked.
    assert response.json()["choices"][0]["message"]["content"] == f"path=/v1/chat/completions length={len(body)}"
    raw_headers = [name.lower() for name, _ in response.headers.raw]
    assert raw_headers.count(b"date") == 1
    assert raw_headers.count(b"server") == 1
    with_query = httpx.post(f"{base}/chat/completions?api-version=1", content=body)
    assert with_query.json()["choices"][0]["message"]["content"].startswith("path=/v1/chat/completions?api-version=1 ")
    client = openai.OpenAI(base_url=base, api_key="client-key", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
    assert answer.choices[0].message.content.startswith("path=/v1/chat/completions length=")


def test_percent_escapes_in_the_path_reach_the_upstream_unchanged(gateway):
    response = httpx.get(f"{gateway.root_url}/default/agent/a/files/a%2Fb")
    assert response.json()["path"] == "/files/a/b"  # the backend (Starlette) decodes; it got the escaped form
    assert response.json()["raw_path"] == "/files/a%2Fb"


def test_a_workload_that_is_not_ready_gets_nothing_and_the_client_a_503_in_its_shape(backend):
    # As a Service without a ready endpoint: nothing reaches the workload; the answer says why.
    seen: list[str] = []

    def not_ready(prefix: str) -> str | None:
        seen.append(prefix)
        return "Agent/a is not Ready (Waiting: waiting for MCPServer/tools (Failed))" if prefix.endswith("/a") else None

    routes = {
        "/default/agent/a": GatewayRoute("/default/agent/a", backend.root_url, 120),
        "/default/agent/b": GatewayRoute("/default/agent/b", backend.root_url, 120),
    }
    with ThreadedServer(create_gateway_app(routes, not_ready=not_ready), name="gateway", lifespan="on") as gateway:
        chat = httpx.post(f"{gateway.root_url}/default/agent/a/v1/chat/completions", json={"messages": []})
        assert chat.status_code == 503
        assert chat.headers["retry-after"] == "1"
        assert chat.json() == {
            "error": {
                "message": "Agent/a is not Ready (Waiting: waiting for MCPServer/tools (Failed))",
                "type": "service_unavailable",
                "param": None,
                "code": "not_ready",
            }
        }
        with pytest.raises(openai.APIStatusError) as raised:
            openai.OpenAI(base_url=f"{gateway.root_url}/default/agent/a/v1", api_key="x", max_retries=0).models.list()
        assert raised.value.status_code == 503
        rpc = httpx.post(f"{gateway.root_url}/default/agent/a/", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert rpc.status_code == 503
        assert rpc.json()["error"]["data"] == {"type": "not_ready"}
        assert rpc.json()["error"]["message"].startswith("Agent/a is not Ready")
        # The ready one is forwarded as before.
        assert httpx.get(f"{gateway.root_url}/default/agent/b/v1/models").json()["path"] == "/v1/models"
    assert seen.count("/default/agent/b") == 1


def test_with_a_fallback_every_unrouted_path_goes_to_it_whole_and_routes_still_win(backend):
    routes = {"/default/agent/a": GatewayRoute("/default/agent/a", backend.root_url, 120)}
    app = create_gateway_app(routes, fallback=backend.root_url)
    with ThreadedServer(app, name="gateway-fallback", lifespan="on") as gateway:
        console = httpx.post(f"{gateway.root_url}/memory/erase?store=default%2Fm", content=b"user=ana", timeout=30)
        assert console.status_code == 200
        assert (console.json()["path"], console.json()["query"]) == ("/memory/erase", "store=default%2Fm")
        assert console.json()["body"] == "user=ana"
        routed = httpx.get(f"{gateway.root_url}/default/agent/a/v1/models", timeout=30)
        assert routed.json()["path"] == "/v1/models"
        # A mistyped workload name is the gateway's JSON 404 (what an OpenAI client reads), not the console's page.
        with pytest.raises(openai.NotFoundError) as raised:
            openai.OpenAI(
                base_url=f"{gateway.root_url}/default/agent/nobody/v1", api_key="x", max_retries=0
            ).models.list()
        assert raised.value.body == {
            "message": "no route for /default/agent/nobody/v1/models",
            "type": "not_found",
            "param": None,
            "code": "not_found",
            "routes": ["/default/agent/a"],
        }
        # Paths of another shape, or of a namespace nothing is routed in, are still the console's.
        for path in ("/sessions/default/a/s1", "/other/agent/a/v1/models", "/default/agent"):
            assert httpx.get(f"{gateway.root_url}{path}", timeout=30).json()["path"] == path
