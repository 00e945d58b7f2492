"""Tool server settings: defaults, exactly one source of tools, and errors naming every bad variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from kora.core.settings_errors import SettingsError
from kora.mcp.settings import load_mcp_settings, parse_tool_timeouts

pytestmark = pytest.mark.unit

SOURCE = {"MCP_TOOLS_STRING": "def f() -> str:\n    return ''\n"}


def test_defaults():
    s = load_mcp_settings(SOURCE)
    assert (s.mcp_host, s.mcp_port, s.mcp_log_level, s.mcp_access_log) == ("0.0.0.0", 8000, "INFO", False)
    assert (s.mcp_tool_timeout_seconds, s.mcp_tool_workers, s.mcp_stateless_http) == (30.0, 4, True)
    assert s.tools_source() == (SOURCE["MCP_TOOLS_STRING"], "<toolsString>")
    assert s.timeout_for("f") == 30.0


def test_options_override_the_environment(tmp_path: Path):
    tools = tmp_path / "tools.py"
    tools.write_text("def g() -> int:\n    return 1\n")
    s = load_mcp_settings({"MCP_PORT": "9000"}, mcp_port=9100, mcp_tools_file=tools, mcp_host=None)
    assert s.mcp_port == 9100
    assert s.mcp_host == "0.0.0.0"
    assert s.tools_source() == (tools.read_text(), str(tools))


def test_per_tool_timeouts():
    s = load_mcp_settings(SOURCE | {"MCP_TOOL_TIMEOUTS": "slow=120, quick=0.5", "MCP_TOOL_TIMEOUT_SECONDS": "10"})
    assert (s.timeout_for("slow"), s.timeout_for("quick"), s.timeout_for("other")) == (120.0, 0.5, 10.0)
    assert parse_tool_timeouts("") == {}


def test_every_bad_variable_is_named():
    with pytest.raises(SettingsError) as caught:
        load_mcp_settings(
            SOURCE
            | {"MCP_PORT": "0", "MCP_TOOL_TIMEOUT_SECONDS": "-1", "MCP_TOOL_TIMEOUTS": "slow", "MCP_TOOL_WORKERS": "0"}
        )
    text = str(caught.value)
    for variable in ("MCP_PORT", "MCP_TOOL_TIMEOUT_SECONDS", "MCP_TOOL_TIMEOUTS", "MCP_TOOL_WORKERS"):
        assert variable in text
    assert caught.value.component == "kora mcp"


def test_exactly_one_source_of_tools():
    with pytest.raises(SettingsError, match="MCP_TOOLS_STRING: required"):
        load_mcp_settings({})
    with pytest.raises(SettingsError, match="MCP_TOOLS_STRING and MCP_PACKAGE: set only one"):
        load_mcp_settings(SOURCE | {"MCP_PACKAGE": "weather_tools"})


def test_package_names_are_module_paths():
    assert load_mcp_settings({"MCP_PACKAGE": "acme.tools:server"}).mcp_package == "acme.tools:server"
    with pytest.raises(SettingsError, match=r"MCP_PACKAGE: .*importable module name"):
        load_mcp_settings({"MCP_PACKAGE": "not a module"})


def test_an_unreadable_tools_file_is_a_settings_error(tmp_path: Path):
    s = load_mcp_settings({}, mcp_tools_file=tmp_path / "missing.py")
    with pytest.raises(SettingsError, match="MCP_TOOLS_FILE: cannot read"):
        s.tools_source()


@pytest.mark.parametrize("value", ["localhost", "ftp://x", "http://x/path", "http://"])
def test_allowed_origins_must_be_origins(value: str):
    with pytest.raises(SettingsError, match=r"MCP_ALLOWED_ORIGINS: .*scheme|MCP_ALLOWED_ORIGINS: .*http"):
        load_mcp_settings({**SOURCE, "MCP_ALLOWED_ORIGINS": value})


def test_allowed_origins_default_to_the_local_host_on_any_port():
    from kora.mcp.origin import origin_allowed, parse_allowed_origins

    allowed = parse_allowed_origins(load_mcp_settings(SOURCE).mcp_allowed_origins)
    assert origin_allowed("http://localhost:5173", allowed)
    assert origin_allowed("https://[::1]", allowed)
    assert not origin_allowed("http://localhost:5173.evil.example", allowed)
    assert not origin_allowed("http://127.0.0.2:80", allowed)
    assert origin_allowed("https://anything.example", parse_allowed_origins("*"))
