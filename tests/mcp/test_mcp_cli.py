"""``kora mcp`` as a subprocess: start-up errors (message, line, exit code, no traceback), a full inline
run, and the `mcp` package option with a small real package created here."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import httpx
import pytest

from kora.core.net import free_port
from tests.support.mcp import mcp_session, run_cli, start_cli, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def assert_clean_failure(result, code: int, *needles: str) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_source_that_does_not_compile():
    result = run_cli([], {"MCP_TOOLS_STRING": "def ok() -> str:\n    return ''\n\ndef broken(:\n"})
    assert_clean_failure(result, 1, "kora mcp: tools source line 4: does not compile")


def test_a_third_party_import_at_start_up():
    result = run_cli([], {"MCP_TOOLS_STRING": "import os\nimport requests\n\ndef f() -> str:\n    return ''\n"})
    assert_clean_failure(
        result, 1, "line 2", "module 'requests' is not available", "standard library", "kora mcp --package NAME"
    )


def test_source_without_tools():
    result = run_cli([], {"MCP_TOOLS_STRING": "X = 1\n"})
    assert_clean_failure(result, 1, "defines no tool")


def test_an_unsupported_parameter_type(tmp_path: Path):
    tools = tmp_path / "tools.py"
    tools.write_text("def ok(a: int) -> int:\n    return a\n\n\ndef bad(items: set) -> int:\n    return 0\n")
    result = run_cli(["--tools-file", str(tools)], {})
    assert_clean_failure(result, 1, "line 5", "tool 'bad' parameter 'items': type set is not supported")


def test_a_top_level_error_does_not_leak_a_secret():
    source = "import os\nraise RuntimeError('bad key ' + os.environ['SERVICE_TOKEN'])\n"
    result = run_cli([], {"MCP_TOOLS_STRING": source, "SERVICE_TOKEN": "tok-9876543210"})
    assert_clean_failure(result, 1, "line 2", "bad key ***")
    assert "tok-9876543210" not in result.stderr


def test_bad_settings_exit_2():
    result = run_cli([], {"MCP_TOOLS_STRING": "def f() -> str:\n    return ''\n", "MCP_TOOL_TIMEOUT_SECONDS": "-1"})
    assert_clean_failure(result, 2, "MCP_TOOL_TIMEOUT_SECONDS")
    assert_clean_failure(run_cli([], {}), 2, "MCP_TOOLS_STRING: required")


def test_a_package_that_is_not_installed():
    result = run_cli(["--package", "no_such_kora_tools"], {})
    assert_clean_failure(result, 1, "package 'no_such_kora_tools' is not installed")


async def test_inline_tools_end_to_end_and_clean_shutdown():
    port = free_port()
    source = 'def shout(text: str) -> str:\n    """Upper-cases text."""\n    return text.upper()\n'
    process = start_cli(["--host", "127.0.0.1", "--port", str(port)], {"MCP_TOOLS_STRING": source})
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
        async with mcp_session(f"http://127.0.0.1:{port}/mcp", headers={"Host": "mcpserver-x.ns.svc"}) as session:
            result = await session.call_tool("shout", {"text": "hi"})
        assert result.structured_content == {"result": "HI"}
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    # uvicorn re-raises SIGTERM once shutdown is complete, so the exit status is "killed by SIGTERM".
    assert process.returncode in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in stderr


async def test_blank_variables_count_as_unset_and_the_defaults_apply():
    # docs/configuration.md: a variable set but empty or blank counts as not set; a blank MCP_TOOL_WORKERS was
    # refused (exit 2) and a blank MCP_SERVER_NAME was served as the name.
    port = free_port()
    blanks = {"MCP_PORT": "", "MCP_LOG_LEVEL": " ", "MCP_TOOL_WORKERS": "", "MCP_SERVER_NAME": " \t "}
    source = 'def shout(text: str) -> str:\n    """Upper-cases text."""\n    return text.upper()\n'
    process = start_cli(["--host", "127.0.0.1", "--port", str(port)], {"MCP_TOOLS_STRING": source, **blanks})
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
        async with mcp_session(f"http://127.0.0.1:{port}/mcp", headers={"Host": "mcpserver-x.ns.svc"}) as session:
            assert session.server_info is not None
            assert session.server_info.name == "kora-tools"
            result = await session.call_tool("shout", {"text": "hi"})
        assert result.structured_content == {"result": "HI"}
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


PACKAGE = '''
"""A package implementing MCP itself (the MCPServer `mcp` option), with a non-stdlib dependency."""
import pydantic
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("weather-tools")


class Forecast(pydantic.BaseModel):
    city: str
    celsius: float


@mcp.tool()
def forecast(city: str) -> Forecast:
    """Forecast for a city."""
    return Forecast(city=city, celsius=21.5)
'''


async def test_the_package_option_serves_the_package_server(tmp_path: Path):
    package = tmp_path / "weather_tools"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_cli(
        ["--host", "127.0.0.1", "--port", str(port)], {"MCP_PACKAGE": "weather_tools", "PYTHONPATH": str(tmp_path)}
    )
    try:
        wait_ready(base, process)
        async with httpx.AsyncClient() as http:
            assert (await http.get(base + "/health")).json() == {"status": "ok"}
            listing = (await http.get(base + "/mcp/tools")).json()["tools"]
        assert [tool["name"] for tool in listing] == ["forecast"]
        assert listing[0]["description"] == "Forecast for a city."
        async with mcp_session(base + "/mcp", headers={"Host": "mcpserver-weather.ns.svc"}) as session:
            result = await session.call_tool("forecast", {"city": "Oslo"})
        assert result.structured_content == {"city": "Oslo", "celsius": 21.5}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
