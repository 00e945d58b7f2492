"""A real ``kora mcp`` app on 127.0.0.1, driven by the official MCP client and pydantic-ai's MCPToolset.

Covers the tool protocol and every way a call can fail (raise, timeout, crash, bad arguments, missing
secret, third-party import), that failures come back as ``Error: ...`` results with the error flag, and
that the server keeps serving afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

import httpx
import pytest

from tests.support.mcp import mcp_session, running_mcp, wait_until_ready

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-weather-key-42"

TOOLS = '''
import asyncio
import os
import time
from math import sqrt

UNIT = "cm"


def _double(x):
    return 2 * x


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def describe(data: dict, tags: list[str] | None = None) -> dict:
    """Describe a mapping: its keys, tags and a few derived numbers."""
    return {"keys": sorted(data), "tags": tags or [], "unit": UNIT, "double": _double(len(data)), "root": sqrt(16)}


def words(text: str) -> list[str]:
    """Split text into words.

    Parameters
    ----------
    text : str
        The text to split.
    """
    return text.split()


async def async_add(a: int, b: int) -> int:
    """Add asynchronously.

    :param a: first
    :param b: second
    """
    await asyncio.sleep(0)
    return a + b


def fail(message: str) -> str:
    """Always raises ValueError(message)."""
    raise ValueError(message)


def leak() -> str:
    """Raises with the secret key inside the message."""
    key = os.environ["WEATHER_API_KEY"]
    raise RuntimeError(f"upstream refused key {key} for https://api.example/?k={key}")


def needs_secret() -> str:
    """Reads a secret that is not configured."""
    return os.environ["MISSING_TOKEN"]


def secret_length() -> int:
    """Uses the secret without revealing it."""
    return len(os.getenv("WEATHER_API_KEY", ""))


def with_default(key: str = os.environ.get("WEATHER_API_KEY", "")) -> str:
    """A default computed from a secret must not show in the listing."""
    return "ok"


def sleepy(seconds: float) -> str:
    """Sleeps (a sync function: it must not block the server)."""
    time.sleep(seconds)
    return "awake"


def die() -> str:
    """Kills its own process."""
    os._exit(3)


def not_json() -> list:
    """Returns a set, which JSON cannot carry."""
    return {1, 2}


def wrong_type() -> int:
    """Returns text although it promises an integer."""
    return "seven"


def not_a_number() -> float:
    """Promises a float and returns NaN, which JSON (and so its output schema) cannot carry."""
    return float("nan")


def odd_names() -> list[str]:
    """File names as os.listdir gives them for bytes that are not UTF-8: lone surrogates."""
    return ["caf\\udce9.txt", "ok.txt"]


def odd_failure() -> str:
    """Fails with a message carrying a lone surrogate."""
    raise FileNotFoundError("no such file: caf\\udce9.txt")


def third_party() -> str:
    """Imports a package that is installed in Kora's image but is not stdlib."""
    import httpx
    return "never"
'''

TOOL_NAMES = {
    "add", "describe", "words", "async_add", "fail", "leak", "needs_secret", "secret_length",
    "with_default", "sleepy", "die", "not_json", "wrong_type", "third_party", "not_a_number", "odd_names",
    "odd_failure",
}  # fmt: skip


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEATHER_API_KEY", SECRET)
        environ = {
            "MCP_TOOLS_STRING": TOOLS,
            "MCP_TOOL_WORKERS": "2",
            "MCP_TOOL_TIMEOUTS": "sleepy=1",
            "MCP_TOOL_TIMEOUT_SECONDS": "10",
        }
        with running_mcp(environ) as running:
            wait_until_ready(running.root_url)
            yield running


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def test_lists_every_public_function_as_a_tool_with_schema_and_descriptions(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    add = tools["add"]
    assert add.description.startswith("Add two integers.")
    schema = add.input_schema
    assert schema["properties"]["a"] == {"title": "A", "type": "integer", "description": "The first addend."}
    assert schema["properties"]["b"]["default"] == 2
    assert schema["required"] == ["a"]
    assert tools["words"].input_schema["properties"]["text"]["description"] == "The text to split."
    assert tools["async_add"].input_schema["properties"]["b"]["description"] == "second"
    describe = tools["describe"].input_schema["properties"]
    assert describe["data"]["type"] == "object"
    assert {"type": "null"} in describe["tags"]["anyOf"]
    assert tools["describe"].output_schema["type"] == "object"


async def test_calls_return_text_and_structured_output(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        added = await session.call_tool("add", {"a": 3})
        described = await session.call_tool("describe", {"data": {"b": 1, "a": 2}, "tags": ["x"]})
        split = await session.call_tool("words", {"text": "to be or"})
        async_added = await session.call_tool("async_add", {"a": 1, "b": 41})
    assert not added.is_error
    assert added.structured_content == {"result": 5}
    assert text_of(added) == "5"
    assert described.structured_content == {"keys": ["a", "b"], "tags": ["x"], "unit": "cm", "double": 4, "root": 4.0}
    assert split.structured_content == {"result": ["to", "be", "or"]}
    assert async_added.structured_content == {"result": 42}


async def test_an_exception_comes_back_as_error_text(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("fail", {"message": "no such city"})
        after = await session.call_tool("add", {"a": 1, "b": 1})
    assert result.is_error
    assert text_of(result) == "Error: ValueError: no such city"
    assert after.structured_content == {"result": 2}


async def test_secrets_never_reach_errors_logs_or_the_listing(server, caplog):
    caplog.set_level(logging.DEBUG)
    async with mcp_session(server.root_url + "/mcp") as session:
        leaked = await session.call_tool("leak", {})
        length = await session.call_tool("secret_length", {})
        listing = await session.list_tools()
    assert leaked.is_error
    assert text_of(leaked).startswith("Error: RuntimeError: upstream refused key ***")
    assert SECRET not in text_of(leaked)
    assert length.structured_content == {"result": len(SECRET)}
    assert SECRET not in json.dumps([tool.model_dump(mode="json") for tool in listing.tools])
    async with httpx.AsyncClient() as http:
        assert SECRET not in (await http.get(server.root_url + "/mcp/tools")).text
    assert "tool 'leak' failed" in caplog.text
    assert SECRET not in caplog.text


async def test_a_missing_secret_is_reported_with_a_hint(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("needs_secret", {})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("Error: MissingEnvironmentVariable: environment variable 'MISSING_TOKEN' is not set")
    assert "spec.config.env" in text


async def test_a_tool_over_its_timeout_is_stopped_and_reported(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("sleepy", {"seconds": 30})
        after = await session.call_tool("sleepy", {"seconds": 0})
    assert result.is_error
    assert text_of(result) == "Error: tool 'sleepy' did not finish within 1 s and was stopped"
    assert text_of(after) == "awake"


async def test_a_tool_that_kills_its_process_does_not_take_the_server_down(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("die", {})
        # Both workers must come back: call more often than there are workers.
        results = [await session.call_tool("add", {"a": n}) for n in range(4)]
    assert result.is_error
    assert text_of(result).startswith("Error: tool 'die' crashed: its worker process exited (exit code 3)")
    assert [r.structured_content for r in results] == [{"result": n + 2} for n in range(4)]


async def test_bad_arguments_are_reported_without_calling_the_tool(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        wrong_type = await session.call_tool("add", {"a": "three"})
        missing = await session.call_tool("add", {})
    assert wrong_type.is_error
    assert text_of(wrong_type) == (
        "Error: invalid arguments for tool 'add': "
        "a: Input should be a valid integer, unable to parse string as an integer"
    )
    assert missing.is_error
    assert text_of(missing) == "Error: invalid arguments for tool 'add': a: Field required"


async def test_results_that_json_or_the_return_type_cannot_carry_are_errors(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        not_json = await session.call_tool("not_json", {})
        wrong_type = await session.call_tool("wrong_type", {})
    assert not_json.is_error
    assert text_of(not_json).startswith("Error: TypeError: the tool returned a value that cannot be sent as JSON")
    assert wrong_type.is_error
    assert text_of(wrong_type).startswith(
        "Error: tool 'wrong_type' returned a value that does not match its return type"
    )


async def test_a_result_that_breaks_its_own_output_schema_is_an_error_not_structured_content(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("not_a_number", {})
        assert result.is_error
        assert result.structured_content is None
        assert text_of(result).startswith("Error: TypeError: the tool returned a value that cannot be sent as JSON")
        assert "not JSON compliant" in text_of(result)
        assert (await session.call_tool("add", {"a": 1})).structured_content == {"result": 3}


async def test_lone_surrogates_in_results_and_errors_come_back_as_escape_text(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        names = await session.call_tool("odd_names", {})
        failure = await session.call_tool("odd_failure", {})
    assert not names.is_error
    assert names.structured_content == {"result": ["caf\\udce9.txt", "ok.txt"]}
    assert failure.is_error
    assert "caf\\udce9.txt" in text_of(failure)


async def test_a_third_party_import_inside_a_tool_is_refused_with_guidance(server):
    async with mcp_session(server.root_url + "/mcp") as session:
        result = await session.call_tool("third_party", {})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("Error: ThirdPartyImportError: module 'httpx' is not available")
    assert "standard library" in text
    assert "--package" in text


async def test_sync_tools_do_not_block_the_server(server):
    async with httpx.AsyncClient() as http, mcp_session(server.root_url + "/mcp") as session:
        call = asyncio.create_task(session.call_tool("sleepy", {"seconds": 0.8}))
        await asyncio.sleep(0.1)
        health = await http.get(server.root_url + "/health")
        answered_during_the_call = not call.done()
        result = await call
    assert health.status_code == 200
    assert answered_during_the_call
    assert text_of(result) == "awake"


async def test_any_host_header_is_accepted(server):
    """Behind a Service or the gateway the Host header is not 127.0.0.1; the SDK would answer 421."""
    async with mcp_session(server.root_url + "/mcp", headers={"Host": "mcpserver-x.ns.svc"}) as session:
        result = await session.call_tool("add", {"a": 40})
    assert result.structured_content == {"result": 42}


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "origin",
    ["http://localhost:6274", "http://127.0.0.1", "https://127.0.0.1:8443", "http://[::1]:3000", "http://localhost"],
)
async def test_a_local_origin_is_served(server, origin):
    async with mcp_session(server.root_url + "/mcp", headers={"Origin": origin}) as session:
        result = await session.call_tool("add", {"a": 1, "b": 1})
    assert result.structured_content == {"result": 2}


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io:80", "null"]
)
def test_a_foreign_origin_is_refused_before_the_mcp_sdk_sees_it(server, origin):
    response = httpx.post(server.root_url + "/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": origin})
    assert response.status_code == 403
    body = response.json()
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["data"] == {"type": "forbidden_origin"}
    assert "MCP_ALLOWED_ORIGINS" in body["error"]["message"]


async def test_the_allowed_origins_are_configurable():
    environ = {
        "MCP_TOOLS_STRING": "def one() -> int:\n    return 1\n",
        "MCP_ALLOWED_ORIGINS": "https://app.example.com",
    }
    with running_mcp(environ) as running:
        wait_until_ready(running.root_url)
        url = running.root_url + "/mcp"
        async with mcp_session(url, headers={"Origin": "https://app.example.com"}) as session:
            assert (await session.call_tool("one", {})).structured_content == {"result": 1}
        local = httpx.post(url, json=INIT, headers={**MCP_HEADERS, "Origin": "http://localhost:3000"})
        assert local.status_code == 403
        async with mcp_session(url) as session:  # no Origin: not a browser, not affected
            assert (await session.call_tool("one", {})).structured_content == {"result": 1}


def rpc_answer(response: httpx.Response) -> dict:
    """The JSON-RPC answer of a Streamable HTTP POST, sent as JSON or as one SSE ``data:`` event."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    (data,) = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(data)


def test_initialize_at_2025_11_25_advertises_only_tools_and_koras_version(server):
    import kora

    result = rpc_answer(httpx.post(server.root_url + "/mcp", json=INIT, headers=MCP_HEADERS))["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["version"] == kora.__version__
    assert set(result["capabilities"]) == {"tools"}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}
    assert rpc_answer(httpx.post(server.root_url + "/mcp", json=listed, headers=MCP_HEADERS))["error"]["code"] == -32601


async def test_the_official_client_sees_tools_only_and_koras_version(server):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    import kora

    async with (
        create_mcp_http_client() as http,
        streamable_http_client(server.root_url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        result = await session.initialize()
        assert result.server_info.version == kora.__version__
        assert result.capabilities.tools is not None
        assert result.capabilities.prompts is None
        assert result.capabilities.resources is None


def test_probes_and_the_tool_listing(server):
    assert httpx.get(server.root_url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.root_url + "/ready").json() == {"status": "ready"}
    listing = httpx.get(server.root_url + "/mcp/tools", headers={"Host": "mcpserver-x.ns.svc"})
    assert listing.status_code == 200
    tools = {tool["name"]: tool for tool in listing.json()["tools"]}
    assert set(tools) == TOOL_NAMES
    assert tools["add"]["description"].startswith("Add two integers.")
    assert tools["add"]["input_schema"]["properties"]["a"]["type"] == "integer"
    assert tools["describe"]["output_schema"]["type"] == "object"


async def test_pydantic_ai_mcp_toolset_lists_and_calls_tools(server):
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.mcp import MCPToolset

    toolset = MCPToolset(server.root_url + "/mcp")
    async with toolset:
        names = {tool.name for tool in await toolset.list_tools()}
        added = await toolset.direct_call_tool("add", {"a": 2, "b": 3})
        with pytest.raises(ModelRetry, match="Error: ValueError: nope"):
            await toolset.direct_call_tool("fail", {"message": "nope"})
    assert names == TOOL_NAMES
    assert added in (5, {"result": 5})


GATED_TOOLS = """
import os
import time

# Tool workers (not the server, which loads the source first to check it) wait while the gate file exists.
if os.getpid() != int(os.environ["GATE_SERVER_PID"]):
    while os.path.exists(os.environ["GATE_FILE"]):
        time.sleep(0.02)


def ping() -> str:
    \"\"\"Answer pong.\"\"\"
    return "pong"
"""


async def test_health_answers_while_the_workers_start_and_early_calls_wait_for_them(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    gate.write_text("closed")
    monkeypatch.setenv("GATE_FILE", str(gate))
    monkeypatch.setenv("GATE_SERVER_PID", str(os.getpid()))
    async with (
        running_mcp({"MCP_TOOLS_STRING": GATED_TOOLS, "MCP_TOOL_WORKERS": "1"}) as running,
        httpx.AsyncClient(base_url=running.root_url) as http,
        mcp_session(running.root_url + "/mcp") as session,
    ):
        health, ready = await http.get("/health"), await http.get("/ready")
        listing = await http.get("/mcp/tools")
        early_call = asyncio.create_task(session.call_tool("ping", {}))
        await asyncio.sleep(0.2)
        waited = not early_call.done()
        gate.unlink()
        result = await early_call
        ready_after = await http.get("/ready")
    assert health.status_code == 200
    assert (ready.status_code, ready.json()) == (
        503,
        {"status": "starting", "reasons": ["the tool workers are starting"]},
    )
    assert [tool["name"] for tool in listing.json()["tools"]] == ["ping"]
    assert waited, "a call made before any worker runs waits for one"
    assert text_of(result) == "pong"
    assert ready_after.status_code == 200


async def test_a_call_while_no_worker_has_started_gives_up_with_an_error(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    gate.write_text("closed")
    monkeypatch.setenv("GATE_FILE", str(gate))
    monkeypatch.setenv("GATE_SERVER_PID", str(os.getpid()))
    monkeypatch.setattr("kora.mcp.pool.FIRST_WORKER_WAIT_SECONDS", 0.3)
    async with (
        running_mcp({"MCP_TOOLS_STRING": GATED_TOOLS, "MCP_TOOL_WORKERS": "1"}) as running,
        mcp_session(running.root_url + "/mcp") as session,
    ):
        result = await session.call_tool("ping", {})
        gate.unlink()
    assert result.is_error
    assert text_of(result) == "Error: the tool server is not ready (its workers are not running)"


async def test_an_unknown_tool_is_a_protocol_error_not_a_tool_result(server):
    from mcp.shared.exceptions import MCPError

    async with mcp_session(server.root_url + "/mcp") as session:
        with pytest.raises(MCPError) as caught:
            await session.call_tool("no_such_tool", {})
        assert caught.value.error.code == -32602
        assert "Unknown tool" in caught.value.error.message
        assert (await session.call_tool("add", {"a": 1})).structured_content == {"result": 3}  # still serving
    unknown = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
    answer = rpc_answer(httpx.post(server.root_url + "/mcp", json={**unknown}, headers=MCP_HEADERS))
    assert answer["error"]["code"] == -32602
