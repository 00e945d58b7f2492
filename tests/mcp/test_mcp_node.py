"""The official MCP TypeScript SDK (``@modelcontextprotocol/sdk`` 1.32.2, under Node) as a client of ``kora mcp``:
the protocol revision it negotiates (2025-11-25, the newest that SDK speaks; the Python SDK's tests cover
2026-07-28), Kora's server version and capabilities, tools listed with their schemas, a call answered structured and
as text, a tool's own error as an ``isError`` result and an unknown tool as a protocol error. The package is
installed once into a cache by ``scripts/mcp-node/install-mcp-node.sh``; a machine without Node or the package
fails with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kora
from tests.support.mcp import running_mcp, wait_until_ready
from tests.support.node_client import run_node_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "tests" / "data" / "mcp_node_client.mjs"
INSTALL = REPO / "scripts" / "mcp-node" / "install-mcp-node.sh"

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fail() -> str:
    """Always fails."""
    raise ValueError("this tool always fails")
'''


def test_the_typescript_sdk_lists_and_calls_kora_mcps_tools():
    with running_mcp({"MCP_TOOLS_STRING": TOOLS}) as server:
        wait_until_ready(server.root_url)
        out = run_node_client(INSTALL, CLIENT, f"{server.root_url}/mcp")
    seen = json.loads(out)
    assert seen["protocolVersion"] == "2025-11-25"
    assert seen["server"]["version"] == kora.__version__
    assert seen["capabilities"] == ["tools"]  # no prompts or resources: none are served
    assert set(seen["tools"]) == {"add", "fail"}
    assert seen["tools"]["add"]["description"] == "Add two integers."
    assert seen["tools"]["add"]["input"]["required"] == ["a", "b"]
    assert seen["add"] == {"structured": {"result": 5}, "text": "5", "isError": False}
    assert seen["fail"]["isError"] is True
    assert "this tool always fails" in seen["fail"]["text"]
    assert seen["unknown"]["thrown"] is True
    assert seen["unknown"]["code"] == -32602  # the current revision: an unknown tool is a protocol error
    assert "nope" in seen["unknown"]["message"]
