"""The python-runtime MCP tool server, ``kora mcp`` (docs/mcp.md).

Modules, one job each:

- :mod:`kora.mcp.settings` - settings from the environment (``MCP_*``).
- :mod:`kora.mcp.source` - load ``toolsString`` as a module, enforce the tool definition rules (stdlib only).
- :mod:`kora.mcp.schema` - JSON input schemas with per-parameter docstring descriptions.
- :mod:`kora.mcp.redact` - keep secret values out of error texts and logs.
- :mod:`kora.mcp.worker` / :mod:`kora.mcp.pool` - run tool calls in worker processes with a timeout.
- :mod:`kora.mcp.tools` - register the inline tools on the SDK's ``MCPServer``.
- :mod:`kora.mcp.package` - the ``mcp`` option: serve a package's own MCP server.
- :mod:`kora.mcp.app` - the FastAPI app (``/mcp``, ``/mcp/tools``, ``/health``, ``/ready``).
- :mod:`kora.mcp.cli` - the ``kora mcp`` command.

How to write tools: ``docs/mcp.md``. Nothing heavy is imported here, so ``kora mcp --help`` stays fast.
"""
