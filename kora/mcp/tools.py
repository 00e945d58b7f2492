"""Register inline tools on the SDK's ``MCPServer``; a failing tool returns ``Error: ...`` text, never raises.

Each tool keeps the SDK's schema derivation and argument validation, but its body never runs in the
server: :class:`InlineTool` sends the validated arguments to a :class:`~kora.mcp.pool.WorkerPool` and
turns every failure into a ``CallToolResult`` with ``is_error=True`` and a text beginning ``Error:`` -
invalid arguments, an exception inside the tool, a timeout, a crashed worker, a result that does not
match the return type. Nothing a tool does raises through the protocol or drops the connection. Calling a
tool the server does not have is not a tool failure but a protocol error (:class:`InlineToolServer`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools.base import Tool
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, InputRequiredResult, TextContent
from pydantic import PrivateAttr, ValidationError

import kora
from kora.mcp.pool import WorkerPool
from kora.mcp.redact import Redactor
from kora.mcp.schema import add_parameter_descriptions, parameter_descriptions, schema_signature
from kora.mcp.source import ToolFunction

if TYPE_CHECKING:
    from mcp.server.mcpserver.context import Context

logger = logging.getLogger(__name__)

#: MCP methods inline tool servers do not serve (no prompts, no resources): answered "Method not found".
UNSERVED_METHODS = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
)


def error_result(text: str) -> CallToolResult:
    """The MCP result of a failed call: one text block ``text`` (starting ``Error:``) and ``is_error``."""
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def describe_validation_error(error: ValidationError) -> str:
    """``"a: Input should be a valid integer; b: Field required"`` - field and reason, never the values."""
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


class InlineTool(Tool):
    """A tool whose calls run in the worker pool; :meth:`run` returns error results instead of raising."""

    _pool: WorkerPool | None = PrivateAttr(default=None)
    _timeout: float = PrivateAttr(default=30.0)
    _redactor: Redactor | None = PrivateAttr(default=None)

    @classmethod
    def create(cls, tool: ToolFunction, pool: WorkerPool, timeout: float, redactor: Redactor) -> InlineTool:
        """Build the tool from ``tool``'s signature and docstring; calls go to ``pool``, stopped after ``timeout`` s."""

        def stub(**kwargs: Any) -> Any:  # pragma: no cover - never called: run() sends calls to the pool
            raise AssertionError("inline tools run in worker processes")

        # The SDK reads the signature and names from the function it is given; it never calls it here.
        signature = schema_signature(tool.function)
        stub.__signature__ = signature  # type: ignore[attr-defined]
        stub.__name__ = stub.__qualname__ = tool.name
        stub.__doc__ = tool.doc
        description = redactor.redact(tool.doc)
        instance = cls.from_function(stub, name=tool.name, description=description)
        if not isinstance(instance, InlineTool):  # pragma: no cover - from_function builds ``cls``
            raise TypeError("Tool.from_function did not build an InlineTool")
        add_parameter_descriptions(
            instance.parameters,
            {
                name: redactor.redact(text)
                for name, text in parameter_descriptions(tool.doc, signature.parameters).items()
            },
        )
        # A default computed from a secret (``key: str = os.environ["API_KEY"]``) would show in the listing.
        instance.parameters = redactor.redact_json(instance.parameters)  # type: ignore[assignment]
        instance._pool = pool
        instance._timeout = timeout
        instance._redactor = redactor
        return instance

    async def run(
        self,
        arguments: dict[str, Any],
        context: Context[Any, Any],
        convert_result: bool = False,
    ) -> Any:
        """Validate ``arguments``, run the call in a worker and return its ``CallToolResult``.

        Never raises for a failure of the call: it comes back as :func:`error_result`.
        """
        if self._pool is None or self._redactor is None:  # pragma: no cover - create() sets both
            raise RuntimeError("InlineTool used without create()")
        try:
            validated = self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            text = f"Error: invalid arguments for tool {self.name!r}: {describe_validation_error(exc)}"
            logger.info("%s", text)
            return error_result(text)
        outcome = await self._pool.call(self.name, validated, self._timeout)
        if not outcome.ok:
            # Worker texts are redacted there (with the variables the tool read); redact again for name-based secrets.
            text = self._redactor.redact(outcome.error)
            logger.warning("tool %r failed: %s", self.name, text)
            if outcome.traceback:
                logger.debug("tool %r traceback:\n%s", self.name, self._redactor.redact(outcome.traceback))
            return error_result(text)
        if not convert_result:
            return outcome.value
        try:
            return self.fn_metadata.convert_result(outcome.value)
        except ValidationError as exc:
            text = (
                f"Error: tool {self.name!r} returned a value that does not match its return type: "
                f"{describe_validation_error(exc)}"
            )
            logger.warning("%s", text)
            return error_result(text)


class InlineToolServer(MCPServer[Any]):
    """The SDK's ``MCPServer`` whose ``tools/call`` of a tool it does not have is a protocol error (JSON-RPC
    -32602, "Unknown tool"), as the MCP revisions Kora negotiates (2025-11-25, 2026-07-28) list it, instead of
    the SDK's ``isError`` result. Every other failure stays an ``isError`` result."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call tool ``name``; raises ``MCPError`` (-32602) when there is no such tool."""
        if self._tool_manager.get_tool(name) is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name[:200]}")
        return await super().call_tool(name, arguments, context)


def build_inline_server(
    tools: dict[str, ToolFunction],
    pool: WorkerPool,
    *,
    name: str,
    timeout_for: dict[str, float],
    default_timeout: float,
    redactor: Redactor,
) -> MCPServer[Any]:
    """An ``MCPServer`` named ``name`` serving ``tools`` through ``pool``.

    ``timeout_for`` maps tool names to their own timeout in seconds; others get ``default_timeout``.
    """
    registered = [
        InlineTool.create(tool, pool, timeout_for.get(tool.name, default_timeout), redactor) for tool in tools.values()
    ]
    server: MCPServer[Any] = InlineToolServer(name, version=kora.__version__, tools=list(registered))
    # Inline tools are tools only: without these handlers the SDK advertises no empty prompts or resources
    # capability (it derives capabilities from the handlers it has; MCPServer installs them all).
    handlers = server._lowlevel_server._request_handlers  # no public way to drop them
    for method in UNSERVED_METHODS:
        handlers.pop(method, None)
    return server
