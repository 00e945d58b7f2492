"""Hostile clients against ``kora up``'s gateway and ``kora model-proxy``, on 127.0.0.1 with real servers.

Requests go over raw sockets (so a path, method or header can be anything, not only what an HTTP client library
agrees to write) or httpx, to the gateway, to the model proxy, and through the gateway to the proxy. Behind them
a tiny echo upstream answers JSON saying what reached it. Whatever the client sends (``..`` and percent-escaped
dot segments, NUL and control characters, lone surrogates, 3 000-character segments, unknown methods, duplicated,
huge and non-ASCII headers, invalid or deeply nested JSON, bodies over the limit), the answer is below 500 with a
JSON body (or uvicorn's own 400 for bytes that are not HTTP at all), what reaches the upstream stays under the
prefix it was routed by, carries the proxy's key and the body byte for byte, and a normal request still works.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from starlette.types import Receive, Scope, Send

from kora.core.errors import PayloadTooLarge
from kora.local.gateway import GatewayRoute, create_gateway_app
from kora.proxy.forward import has_dot_segment
from kora.proxy.model_proxy import ProxySettings, create_proxy_app
from kora.scripted import TextReply
from tests.support.hostile import RAW_TOKENS, any_text, assert_handled, hostile_values, render
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

LIMIT = 1024 * 1024
KEY = "sk-backend"
#: What uvicorn itself answers to bytes its HTTP parser refuses, before any app runs.
UVICORN_BAD_REQUEST = b"Invalid HTTP request received."
TIMEOUT = 30.0


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """A raw ASGI upstream taking any method and path: JSON with what reached it."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    payload = {"method": scope["method"], "raw_path": scope["raw_path"].decode("latin-1"), "bytes": len(body)}
    data = json.dumps(payload | {"headers": headers}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})


@dataclass(frozen=True)
class Target:
    """One way in: ``port`` to connect to, ``prefix`` to put before ``/v1``, ``upstream_prefix`` what every
    forwarded path must start with, ``keyed`` whether the upstream must see the proxy's key."""

    name: str
    port: int
    prefix: str
    upstream_prefix: str
    keyed: bool

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"


@dataclass(frozen=True)
class Servers:
    gateway: ThreadedServer
    proxy: ThreadedServer
    targets: tuple[Target, ...]

    def target(self, name: str) -> Target:
        return next(target for target in self.targets if target.name == name)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with ThreadedServer(echo, name="echo", lifespan="off") as upstream:
        settings = ProxySettings(api_base=upstream.root_url + "/v1", api_key=KEY, max_request_bytes=LIMIT)
        with ThreadedServer(create_proxy_app(settings), name="proxy", lifespan="on") as proxy:
            routes = {
                "/default/modelapi/echo": GatewayRoute("/default/modelapi/echo", upstream.root_url, TIMEOUT),
                "/default/modelapi/proxy": GatewayRoute("/default/modelapi/proxy", proxy.root_url, TIMEOUT),
                "/default/mcp/echo": GatewayRoute("/default/mcp/echo", upstream.root_url, TIMEOUT),
                "/default/agent/echo": GatewayRoute("/default/agent/echo", upstream.root_url, TIMEOUT),
            }
            app = create_gateway_app(routes, max_body_bytes=LIMIT)
            with ThreadedServer(app, name="gateway", lifespan="on") as gateway:
                targets = (
                    Target("gateway", gateway.port, "/default/modelapi/echo", "/", keyed=False),
                    Target("proxy", proxy.port, "", "/v1/", keyed=True),
                    Target("gateway-proxy", gateway.port, "/default/modelapi/proxy", "/v1/", keyed=True),
                )
                yield Servers(gateway, proxy, targets)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def exchange(port: int, request: bytes) -> Answer:
    """Send ``request`` (a whole HTTP/1.1 request, ``Connection: close``) as is; the answer, read to the end
    (uvicorn's 400 when it reset the connection before its answer could be read)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        try:
            sock.sendall(request)
            while chunk := sock.recv(65536):  # a hang raises socket.timeout: nothing may hang
                received += chunk
        except ConnectionResetError:
            # uvicorn answered bytes it refuses (a bad request line under 60 kB of headers) and closed while
            # they were still arriving; what it answered may be lost with the reset.
            if not received:
                return Answer(400, {}, UVICORN_BAD_REQUEST)
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return Answer(int(status_line.split()[1]), headers, body)


def dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def request_bytes(method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def check(target: Target, method: bytes, answer: Answer) -> str:
    """Below 500, JSON (unless uvicorn's parser refused the bytes, or HEAD), and an answer of the upstream's
    shows the request stayed under its prefix with the proxy's key. Returns what happened, for statistics."""
    assert answer.status < 500, (target.name, answer.status, answer.body[:300])
    if answer.status == 400 and answer.body == UVICORN_BAD_REQUEST:
        return "uvicorn refused the bytes"
    if method == b"HEAD" or answer.status == 204:
        return f"{target.name} {answer.status} without a body"
    assert answer.headers.get("content-type", "").startswith("application/json"), (answer.status, answer.body[:300])
    payload = json.loads(answer.body)
    if answer.status >= 400:
        assert isinstance(payload["error"]["message"], str), payload
        return f"{target.name} {answer.status}"
    forwarded = payload["raw_path"]
    assert forwarded.startswith(target.upstream_prefix), (target.name, forwarded)
    assert not has_dot_segment(forwarded), (target.name, forwarded)
    if target.keyed:
        assert payload["headers"]["authorization"] == f"Bearer {KEY}"
    return f"{target.name} {answer.status}"


def assert_healthy(target: Target) -> None:
    response = httpx.post(f"{target.url}/v1/chat/completions", json={"model": "m"}, timeout=TIMEOUT)
    assert response.status_code == 200, (target.name, response.text[:300])
    assert response.json()["bytes"] == len(b'{"model":"m"}')


# -- the named cases -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/../../etc/passwd", "/v1/%2e%2e/%2E%2e/x", "/v1/a/..%2f..%2fx", "/v1/./x"])
def test_dot_segments_are_refused_before_the_upstream(servers, path):
    for target in servers.targets:
        answer = exchange(target.port, request_bytes(b"GET", (target.prefix + path).encode(), []))
        assert answer.status == 400, (target.name, answer.body)
        assert json.loads(answer.body)["error"]["code"] == "invalid_path"


def test_non_ascii_header_values_go_through_unchanged(servers):
    for target in servers.targets:
        headers = [(b"X-Latin", b"caf\xe9 \xff"), (b"X-Dup", b"1"), (b"X-Dup", b"2")]
        answer = exchange(target.port, request_bytes(b"GET", f"{target.prefix}/v1/x".encode(), headers))
        assert answer.status == 200, (target.name, answer.body)
        seen = json.loads(answer.body)["headers"]
        assert seen["x-latin"] == "caf\xe9 \xff"
        check(target, b"GET", answer)


def test_own_404_and_405_are_openai_json(servers):
    proxy = servers.targets[1]
    cases = [(proxy.port, b"GET", b"/nowhere", 404), (proxy.port, b"TRACE", b"/v1/models", 405)]
    cases.append((servers.gateway.port, b"TRACE", b"/default/modelapi/echo/v1/x", 405))
    for port, method, path, status in cases:
        answer = exchange(port, request_bytes(method, path, []))
        assert answer.status == status, answer.body
        assert json.loads(answer.body)["error"]["message"]
    assert "allow" in answer.headers


def test_gateway_refuses_a_body_over_its_limit_in_the_workloads_shape(servers):
    gateway = servers.gateway.root_url
    too_large = b"x" * (LIMIT + 1)
    answer = httpx.post(f"{gateway}/default/modelapi/echo/v1/chat/completions", content=too_large, timeout=TIMEOUT)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == PayloadTooLarge.default_code
    # Without a Content-Length (chunked), refused as the bytes pass the limit.
    chunks = iter([b"y" * LIMIT, b"y" * 1024])
    answer = httpx.post(f"{gateway}/default/modelapi/echo/v1/embeddings", content=chunks, timeout=TIMEOUT)
    assert answer.status_code == 413
    for path in ("/default/mcp/echo/mcp", "/default/agent/echo/"):
        answer = httpx.post(gateway + path, content=too_large, timeout=TIMEOUT)
        assert answer.status_code == 413
        assert answer.json()["jsonrpc"] == "2.0", answer.text
        assert answer.json()["error"]["message"]
    # At the limit it goes through, byte for byte; a JSON body the gateway does not parse is the workload's business.
    answer = httpx.post(f"{gateway}/default/agent/echo/v1/x", content=b"[" * LIMIT, timeout=TIMEOUT)
    assert answer.status_code == 200
    assert answer.json()["bytes"] == LIMIT


def test_a_multi_megabyte_body_is_refused_everywhere(servers):
    body = b'{"messages": [{"role": "user", "content": "' + b"z" * (3 * LIMIT) + b'"}]}'
    for target in servers.targets:
        answer = httpx.post(f"{target.url}/v1/chat/completions", content=body, timeout=TIMEOUT)
        assert answer.status_code == 413, (target.name, answer.text[:200])
        assert answer.json()["error"]["message"]
        assert_healthy(target)


# -- hypothesis ------------------------------------------------------------------------------------------------


def escaped(text: str) -> bytes:
    return quote(text.encode("utf-8", "surrogatepass"), safe="").encode()


def raw(text: str) -> bytes:
    # Straight into the request line: control characters and bytes above 0x7F as they are.
    return text.encode("latin-1", "ignore").replace(b" ", b"").replace(b"?", b"").replace(b"#", b"")


dot_and_escapes = st.sampled_from(
    [b"..", b".", b"%2e%2e", b"%2E.", b"..%2f..", b"%2F", b"%00", b"%ff%fe", b"%", b"%zz", b"a" * 3000, b""]
)
# Raw bytes mostly stop at uvicorn's parser, so they are one draw in five: the rest reach the apps.
segments = st.one_of(dot_and_escapes, dot_and_escapes, any_text.map(escaped), any_text.map(escaped), any_text.map(raw))
paths = st.lists(segments, max_size=5).map(lambda parts: b"/v1/" + b"/".join(parts))
queries = st.one_of(st.just(b""), any_text.map(lambda text: b"?" + escaped(text) + b"=" + raw(text)))
methods = st.sampled_from(
    [b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS", b"TRACE", b"BREW", b"get", b"M" * 200]
)
header_names = st.sampled_from([b"X-A", b"Authorization", b"Host", b"Content-Type", b"X-Forwarded-For", b"Accept"])
header_values = st.one_of(
    st.text(st.characters(min_codepoint=0, max_codepoint=0xFF), max_size=40).map(lambda t: t.encode("latin-1")),
    st.just(b"v" * 60_000),
)
headers = st.lists(st.tuples(header_names, header_values), max_size=4)
TARGETS = ["gateway", "proxy", "gateway-proxy"]
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", TARGETS)
@FUZZ
@given(method=methods, path=paths, query=queries, sent_headers=headers)
@example(method=b"GET", path=b"/v1/", query=b"", sent_headers=[(b"X-A", b"0\t")])  # a value ending in a tab
def test_fuzz_paths_methods_and_headers(servers, name, method, path, query, sent_headers):
    target = servers.target(name)
    answer = exchange(target.port, request_bytes(method, target.prefix.encode() + path + query, sent_headers))
    event(check(target, method, answer))
    assert_healthy(target)


content_types = st.sampled_from(["application/json", "text/plain", "application/octet-stream", "", "\x00"])
bodies = st.one_of(
    hostile_values.map(lambda value: render(value).encode("utf-8", "surrogatepass")),
    st.sampled_from(RAW_TOKENS).map(lambda token: token.text.encode()),
    st.binary(max_size=200),
    st.just(b'{"messages": [' * 200),
    st.just(b'"' + b"\\ud800" * 1000 + b'"'),
)


@pytest.mark.parametrize("name", TARGETS)
@FUZZ
@given(body=bodies, content_type=content_types)
def test_fuzz_bodies(servers, name, body, content_type):
    target = servers.target(name)
    headers = {"content-type": content_type} if content_type.isprintable() and content_type else {}
    response = httpx.post(f"{target.url}/v1/chat/completions", content=body, headers=headers, timeout=TIMEOUT)
    assert_handled(response)
    event(f"{target.name} {response.status_code}")
    if response.status_code >= 400:
        assert response.json()["error"]["message"]
    else:
        assert response.json()["bytes"] == len(body)  # through byte for byte
    assert_healthy(target)


def test_a_real_exchange_through_gateway_and_proxy_after_the_fuzzing(servers):
    with ScriptedModelServer() as model:
        settings = ProxySettings(api_base=model.url, max_request_bytes=LIMIT)
        with ThreadedServer(create_proxy_app(settings), name="proxy-to-model", lifespan="on") as proxy:
            route = GatewayRoute("/default/modelapi/m", proxy.root_url, TIMEOUT)
            with ThreadedServer(create_gateway_app({route.prefix: route}), name="gw", lifespan="on") as gateway:
                model.enqueue(TextReply("still here"))
                client = openai.OpenAI(base_url=f"{gateway.root_url}{route.prefix}/v1", api_key="k", max_retries=0)
                reply = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
                assert reply.choices[0].message.content == "still here"
