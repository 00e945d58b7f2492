"""The ``mcp`` option: serve an installed package's own MCP server.

Contract (also in ``docs/mcp.md``): ``MCP_PACKAGE`` / ``--package`` names a module, optionally with an
attribute: ``NAME`` or ``NAME:ATTRIBUTE``. The module must be importable in the tool server's image and
expose an instance of the official SDK's ``mcp.server.mcpserver.MCPServer``:

1. ``NAME:ATTRIBUTE`` - that attribute (an ``MCPServer``, or a function taking no arguments returning one);
2. otherwise the first of the module attributes ``mcp``, ``server``, ``app`` that is an ``MCPServer``;
3. otherwise a function ``create_server()`` in the module, called with no arguments.

Kora serves it exactly like inline tools: Streamable HTTP at ``/mcp`` plus ``/mcp/tools``, ``/health`` and
``/ready``. The package's tools run in the server process with whatever dependencies it has; Kora does not
add timeouts or redaction to them (that is the package's business).
"""

from __future__ import annotations

import importlib
from typing import Any

from mcp.server.mcpserver import MCPServer

from kora.core.errors import PackageError

#: Module attributes searched, in order, when the package names no attribute.
CONVENTIONAL_ATTRIBUTES = ("mcp", "server", "app")
#: Factory function called when no conventional attribute holds a server.
FACTORY_NAME = "create_server"


def _as_server(value: object, where: str) -> MCPServer[Any]:
    if isinstance(value, MCPServer):
        return value
    if callable(value):
        try:
            made = value()
        except Exception as exc:
            raise PackageError(f"{where}() raised {type(exc).__name__}: {exc}") from None
        if isinstance(made, MCPServer):
            return made
        raise PackageError(f"{where}() returned {type(made).__name__}, not an mcp.server.mcpserver.MCPServer")
    raise PackageError(f"{where} is a {type(value).__name__}, not an mcp.server.mcpserver.MCPServer")


def load_package_server(spec: str) -> MCPServer[Any]:
    """Import ``spec`` (``NAME`` or ``NAME:ATTRIBUTE``) and return its ``MCPServer`` (contract above).

    Raises ``PackageError`` with a message fit to show the user as is.
    """
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise PackageError(
                f"package {module_name!r} is not installed: the `mcp` option serves a package installed in the "
                "tool server's image (pip install it there); stdlib-only tools can be inline tools (toolsString)"
            ) from None
        raise PackageError(
            f"package {module_name!r} failed to import: its dependency {exc.name!r} is missing"
        ) from None
    except Exception as exc:
        raise PackageError(f"package {module_name!r} failed to import: {type(exc).__name__}: {exc}") from None
    if attribute:
        if not hasattr(module, attribute):
            raise PackageError(f"package {module_name!r} has no attribute {attribute!r}")
        return _as_server(getattr(module, attribute), f"{module_name}:{attribute}")
    for name in CONVENTIONAL_ATTRIBUTES:
        value = getattr(module, name, None)
        if isinstance(value, MCPServer):
            return value
    factory = getattr(module, FACTORY_NAME, None)
    if callable(factory):
        return _as_server(factory, f"{module_name}.{FACTORY_NAME}")
    raise PackageError(
        f"package {module_name!r} exposes no MCP server: define an mcp.server.mcpserver.MCPServer as one of the "
        f"module attributes {', '.join(CONVENTIONAL_ATTRIBUTES)}, or a function {FACTORY_NAME}() returning one, "
        f"or name it explicitly as {module_name}:ATTRIBUTE"
    )
