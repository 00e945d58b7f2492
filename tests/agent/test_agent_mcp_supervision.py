"""Supervision of the agent's tool-server sessions against a real `kora mcp` (stateless, no ping method)."""

import asyncio

import pytest

from kora.agent.mcp_servers import McpServers
from kora.mcp.app import create_app
from kora.mcp.settings import load_mcp_settings
from tests.support.eventually import eventually_async
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

TOOLS = "def echo(text: str) -> str:\n    '''Echo the text.'''\n    return text\n"


async def test_a_stateless_tool_server_stays_connected_across_pings():
    settings = load_mcp_settings({"MCP_TOOLS_STRING": TOOLS})
    async with ThreadedServer(create_app(settings), name="kora-mcp", lifespan="on") as tools:
        servers = McpServers({"tools": f"{tools.root_url}/mcp"}, ping_interval=0.1)
        await servers.start()
        try:
            first = servers.toolsets()
            for _ in range(10):  # ten ping rounds
                await asyncio.sleep(0.1)
                assert servers.problems() == []
                assert servers.toolsets() == first, "the session must not be dropped and rebuilt"
            assert [t["name"] for t in servers.tool_definitions()] == ["echo"]
        finally:
            await servers.close()


async def test_a_tool_server_that_goes_away_is_reported_down():
    settings = load_mcp_settings({"MCP_TOOLS_STRING": TOOLS})
    tools = ThreadedServer(create_app(settings), name="kora-mcp", lifespan="on")
    await asyncio.to_thread(tools.start)
    servers = McpServers({"tools": f"{tools.root_url}/mcp"}, ping_interval=0.1, max_backoff=0.2, timeout=2)
    await servers.start()
    try:
        assert servers.problems() == []
        await asyncio.to_thread(tools.stop)
        await eventually_async(servers.problems, "a problem reported for the stopped tool server")
        assert servers.toolsets() == []
    finally:
        await servers.close()
