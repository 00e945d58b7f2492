"""The `mcp` option's contract: which object of a package is served, and the errors when there is none."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer

from kora.core.errors import PackageError
from kora.mcp.package import load_package_server

pytestmark = pytest.mark.unit


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch):
    """Write a uniquely named module into a directory on sys.path; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(body: str) -> str:
        name = f"kora_test_pkg_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        created.append(name)
        return name

    yield make
    for name in created:
        sys.modules.pop(name, None)


def test_conventional_attributes_are_found(make_module):
    for attribute in ("mcp", "server", "app"):
        name = make_module(f"from mcp.server.mcpserver import MCPServer\n{attribute} = MCPServer('weather')\n")
        assert load_package_server(name).name == "weather"


def test_an_explicit_attribute_or_factory(make_module):
    name = make_module(
        """
        from mcp.server.mcpserver import MCPServer
        tools = MCPServer("explicit")
        def build():
            return MCPServer("built")
        def create_server():
            return MCPServer("factory")
        """
    )
    assert load_package_server(f"{name}:tools").name == "explicit"
    assert load_package_server(f"{name}:build").name == "built"
    assert load_package_server(name).name == "factory"


def test_a_package_that_is_not_installed():
    with pytest.raises(PackageError, match="package 'no_such_kora_package' is not installed"):
        load_package_server("no_such_kora_package")


def test_a_package_whose_dependency_is_missing(make_module):
    name = make_module("import no_such_dependency_xyz\n")
    with pytest.raises(PackageError, match="its dependency 'no_such_dependency_xyz' is missing"):
        load_package_server(name)


def test_a_package_without_a_server(make_module):
    name = make_module("mcp = 'not a server'\n")
    with pytest.raises(PackageError, match="exposes no MCP server"):
        load_package_server(name)
    with pytest.raises(PackageError, match=r"is a str, not an mcp\.server\.mcpserver\.MCPServer"):
        load_package_server(f"{name}:mcp")
    with pytest.raises(PackageError, match="has no attribute 'missing'"):
        load_package_server(f"{name}:missing")


def test_the_server_type_is_the_official_sdk_one(make_module):
    name = make_module("from mcp.server.mcpserver import MCPServer\nmcp = MCPServer('x')\n")
    assert isinstance(load_package_server(name), MCPServer)
