"""The agent's MCP tool servers (``MCP_SERVERS``, each at ``MCP_SERVER_<NAME>_URL``): connect, discover, supervise.

One pydantic-ai ``MCPToolset`` per entry of ``MCP_SERVERS`` over Streamable HTTP. A background supervisor
connects each server at start-up, keeps the session open for the life of the agent (so a turn does not pay for
a handshake), pings it, and reconnects with back-off when it goes away; the tool list is re-read on every
reconnect, so a server that comes back with new tools is picked up. Tool names stay unique across servers
and Kora's own tools: a name offered by two sources is renamed ``<server>_<tool>`` on the MCP side.

Readiness: :meth:`McpServers.problems` names each server that cannot be listed now; ``/ready`` reports them.

A call lost to its server (the server died or the connection dropped mid-call) does not end the turn: it
becomes a failed tool result whose text starts with ``Error:`` (as every tool failure does), stored as the call's
``tool_result`` (metadata ``outcome: "failed"``), and the model decides what to do next. The supervisor notices
the server is gone at its next ping and reconnects when it is back. Two more ways a call ends as such a failed
result rather than holding the turn: every call is bounded (``call_timeout``, the agent's
``MCP_CALL_TIMEOUT_SECONDS``), and the calls in flight on a server the supervisor finds down (its ping failed: a
hung or unreachable server) fail at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

import anyio
import mcp.types as mcp_types
from mcp.shared.exceptions import MCPError
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from kora.agent.approvals import ApprovalPolicy

log = logging.getLogger("kora.agent.mcp")


#: Seconds between two tries of a tool server that cannot be reached, during the agent's first
#: :data:`STARTUP_RETRY_WINDOW` seconds; after that the delay doubles from there up to ``max_backoff``.
FIRST_RETRY_SECONDS = 0.25
STARTUP_RETRY_WINDOW = 30.0

#: What a tool call raises to steer pydantic-ai (a failed result, deferral): passed on as it is.
_TOOL_CONTROL = (ToolFailed, CallDeferred, ApprovalRequired)


class CallsInFlight:
    """The calls in flight on one session of a tool server, so that they end when the session is found down:
    each call runs in a cancel scope registered here; :meth:`fail` cancels them all and remembers why (``reason``),
    and a call that starts afterwards fails at once."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._scopes: set[anyio.CancelScope] = set()

    def add(self, scope: anyio.CancelScope) -> None:
        """Register a call's scope (cancelled at once when the session is already down)."""
        self._scopes.add(scope)
        if self.reason is not None:
            scope.cancel()

    def discard(self, scope: anyio.CancelScope) -> None:
        """Forget a call's scope: the call ended."""
        self._scopes.discard(scope)

    def fail(self, reason: str) -> None:
        """The session is down (``reason``, e.g. ``"lost connection: TimeoutError"``): end every call on it."""
        self.reason = reason
        for scope in self._scopes:
            scope.cancel()


@dataclass
class LostCallGuard(WrapperToolset[Any]):
    """A tool server's toolset whose calls cannot end the turn by failing in transport: any exception other
    than pydantic-ai's own tool control flow becomes :class:`~pydantic_ai.exceptions.ToolFailed` with
    ``Error: ...`` text naming the server and the tool (what the model then sees as the call's result).

    That includes ``ModelRetry``: with ``tool_error_behavior="failed"`` the MCP toolset raises it only for a
    protocol-level error (a connection closed mid-call among them), and a retried call is stored nowhere (call
    and return are both dropped), so the lost call would vanish from the session's events.

    Each call is bounded by ``timeout`` seconds (None: not bounded) and ends when its session is found down
    (``calls``): both end it as a failed tool result too.
    """

    server: str = ""
    on_lost: Callable[[str, str], None] | None = None
    timeout: float | None = None
    calls: CallsInFlight = field(default_factory=CallsInFlight)

    async def __aenter__(self) -> Self:
        """Enter the server's session for a run (the supervisor holds it open); a server that cannot be reached
        now offers no tools to this run rather than failing it."""
        try:
            await self.wrapped.__aenter__()
        except Exception as error:
            self._lost(f"cannot connect: {_describe(error)}")
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        """Leave the session at the end of a run; a session that died with its server fails to close with the
        transport's error, which is no failure of the turn."""
        try:
            return await self.wrapped.__aexit__(*args)
        except Exception as error:
            log.debug("mcp server %r: closing a run's session: %s", self.server, _describe(error))
            return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The server's tools; none for this step when it cannot list them (it went away during the turn)."""
        try:
            return await self.wrapped.get_tools(ctx)
        except Exception as error:
            self._lost(f"cannot list tools: {_describe(error)}")
            return {}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Call ``name`` on the wrapped toolset; a transport failure, a call past ``timeout`` and a call on a
        session found down are failed tool results."""
        deadline = math.inf if self.timeout is None else anyio.current_time() + self.timeout
        try:
            with anyio.CancelScope(deadline=deadline) as scope:
                self.calls.add(scope)
                try:
                    return await self.wrapped.call_tool(name, tool_args, ctx, tool)
                finally:
                    self.calls.discard(scope)
        except _TOOL_CONTROL:
            raise
        except Exception as error:
            reason = error.message if isinstance(error, ModelRetry) else _describe(error)
            if isinstance(error, RuntimeError):
                # The MCP client's verdict on the result (structured content that breaks the tool's output
                # schema): the session is sound, only this call failed.
                log.warning("mcp server %r: tool call %r failed: %s", self.server, name, reason)
            else:
                self._lost(f"tool call {name!r} failed: {reason}")
            message = f"Error: the tool server {self.server!r} failed during the call to {name!r}: {reason}"
            raise ToolFailed(message) from error
        # Only a cancellation of this call's own scope gets here (anything else propagates out of it).
        if self.calls.reason is not None:
            reason = f"the server is down ({self.calls.reason})"
            log.warning("mcp server %r: tool call %r failed: %s", self.server, name, reason)
        else:
            reason = f"no answer within {self.timeout:g} s"
            log.warning("mcp server %r: tool call %r given up: %s", self.server, name, reason)
        raise ToolFailed(f"Error: the tool server {self.server!r} failed during the call to {name!r}: {reason}")

    def _lost(self, reason: str) -> None:
        log.warning("mcp server %r: %s", self.server, reason)
        if self.on_lost is not None:
            self.on_lost(self.server, reason)


@dataclass
class _Server:
    name: str
    url: str
    toolset: MCPToolset[Any] | None = None
    tools: list[mcp_types.Tool] = field(default_factory=list)
    calls: CallsInFlight = field(default_factory=CallsInFlight)
    error: str | None = "not connected yet"


class McpServers:
    """Supervised connections to the agent's tool servers.

    ``urls`` maps server name to its Streamable HTTP endpoint (``.../mcp``). ``reserved`` are tool names
    Kora defines itself (delegation, memory): an MCP tool with such a name is prefixed with its server name.
    ``ping_interval``, ``max_backoff``, ``timeout`` (to connect, list and ping) and ``call_timeout`` (one tool call;
    None: not bounded) are seconds. Calls of the tools ``approval`` names (``<server>/<tool>``,
    the tool's own name) wait for a person's approval (:mod:`kora.agent.approvals`).
    """

    def __init__(
        self,
        urls: dict[str, str],
        reserved: Iterable[str] = (),
        ping_interval: float = 5.0,
        max_backoff: float = 10.0,
        timeout: float = 30.0,
        approval: ApprovalPolicy | None = None,
        call_timeout: float | None = 30.0,
    ) -> None:
        self._approval = approval or ApprovalPolicy()
        self._servers = {name: _Server(name, url) for name, url in urls.items()}
        self._reserved = set(reserved)
        self._ping_interval = ping_interval
        self._max_backoff = max_backoff
        self._timeout = timeout
        self._call_timeout = call_timeout
        self._toolsets: list[AbstractToolset[Any]] = []
        self._renames: dict[str, dict[str, str]] = {}
        # The name the model sees -> (server, the tool's own name).
        self._sources: dict[str, tuple[str, str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._first_pass = asyncio.Event()
        # Servers that lost a call since the supervisor's last pass: it reconnects them at once.
        self._lost: dict[str, str] = {}
        self._wake = asyncio.Event()

    async def start(self) -> None:
        """Start supervising; returns once every server has been tried once (connected or not)."""
        if not self._servers:
            self._first_pass.set()
            return
        self._task = asyncio.create_task(self._supervise(), name="kora-mcp-supervisor")
        await self._first_pass.wait()

    async def close(self) -> None:
        """Stop supervising and close every session."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for server in self._servers.values():
            await self._disconnect(server, None)

    def toolsets(self) -> list[AbstractToolset[Any]]:
        """The toolsets of the servers that are connected now, renamed where names collide."""
        return list(self._toolsets)

    def source_of(self, name: str) -> tuple[str, str] | None:
        """The server and own name of the tool the model knows as ``name`` (None: no connected server's)."""
        return self._sources.get(name)

    def problems(self) -> list[str]:
        """One line per server that cannot be used now: ``"mcp server 'x' (url): reason"``."""
        return [f"mcp server {s.name!r} ({s.url}): {s.error}" for s in self._servers.values() if s.error]

    def tool_definitions(self) -> list[dict[str, Any]]:
        """What the model sees of the connected servers' tools: name (after renaming), description, schema."""
        result = []
        for server in self._servers.values():
            if server.toolset is None:
                continue
            back = {old: new for new, old in self._renames.get(server.name, {}).items()}
            for tool in server.tools:
                result.append(
                    {
                        "name": back.get(tool.name, tool.name),
                        "description": tool.description or "",
                        "parameters": tool.input_schema,
                        "source": f"mcp:{server.name}",
                    }
                )
        return result

    def report_lost(self, name: str, reason: str) -> None:
        """A call to server ``name`` failed in transport (``reason``): the supervisor drops its session and
        reconnects now, rather than at its next ping. Called from turns; the supervisor task does the work, as an
        MCP session must be closed by the task that opened it."""
        self._lost[name] = reason
        self._wake.set()

    async def _supervise(self) -> None:
        # Tool servers and agents start together (kora up starts every process at once; in a cluster the agent
        # may be scheduled first), and a refused connection costs next to nothing. So while the agent is young
        # (STARTUP_RETRY_WINDOW) a server is tried every FIRST_RETRY_SECONDS: the agent is ready a moment after
        # its servers are, not up to a back-off step later. After that, back-off doubles up to max_backoff.
        started = asyncio.get_running_loop().time()
        backoff = FIRST_RETRY_SECONDS / 2
        while True:
            for server in self._servers.values():
                if server.name in self._lost and server.toolset is not None:
                    await self._disconnect(server, self._lost[server.name])
                self._lost.pop(server.name, None)
                if server.toolset is None:
                    await self._connect(server)
                else:
                    await self._ping(server)
            self._first_pass.set()
            down = any(s.toolset is None for s in self._servers.values())
            young = asyncio.get_running_loop().time() - started < STARTUP_RETRY_WINDOW
            if not down:
                backoff = FIRST_RETRY_SECONDS / 2
            elif young:
                backoff = FIRST_RETRY_SECONDS
            else:
                backoff = min(backoff * 2, self._max_backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff if down else self._ping_interval):
                    await self._wake.wait()
            self._wake.clear()

    async def _connect(self, server: _Server) -> None:
        toolset: MCPToolset[Any] = MCPToolset(
            server.url, id=server.name, tool_error_behavior="failed", init_timeout=self._timeout
        )
        try:
            async with asyncio.timeout(self._timeout):
                await toolset.__aenter__()
                tools = await toolset.list_tools()
        except Exception as error:  # any failure to reach or list a server makes it "not usable"
            server.error = f"cannot list tools: {_describe(error)}"
            with contextlib.suppress(Exception):
                await toolset.__aexit__(None, None, None)
            return
        server.toolset, server.tools, server.error = toolset, tools, None
        server.calls = CallsInFlight()
        log.info("mcp server %r connected with %d tool(s)", server.name, len(tools))
        self._rebuild()

    async def _ping(self, server: _Server) -> None:
        assert server.toolset is not None
        try:
            async with asyncio.timeout(self._timeout):
                await server.toolset.client.ping()
        except MCPError as error:
            if error.error.code == mcp_types.METHOD_NOT_FOUND:
                return  # it answered: alive (stateless servers, e.g. `kora mcp`, do not implement ping)
            await self._disconnect(server, f"lost session: {_describe(error)}")
            log.warning("mcp server %r is down: %s", server.name, server.error)
        except Exception as error:  # a failed ping means the session is gone: reconnect on the next pass
            await self._disconnect(server, f"lost connection: {_describe(error)}")
            log.warning("mcp server %r is down: %s", server.name, server.error)

    async def _disconnect(self, server: _Server, reason: str | None) -> None:
        toolset, server.toolset, server.tools = server.toolset, None, []
        server.error = reason
        if toolset is not None:
            # The calls in flight on the session end now (a hung server would hold them until their timeout).
            server.calls.fail(reason or "the agent is stopping")
            # Offered no more before the close is awaited: while a dead session takes its time to close, turns
            # and /ready must already agree that the server is down.
            self._rebuild()
            with contextlib.suppress(Exception):
                await toolset.__aexit__(None, None, None)

    def _rebuild(self) -> None:
        connected = [s for s in self._servers.values() if s.toolset is not None]
        counts = Counter(tool.name for s in connected for tool in s.tools)
        self._renames = {}
        self._sources = {}
        toolsets: list[AbstractToolset[Any]] = []
        for server in connected:
            assert server.toolset is not None
            renames = {
                f"{server.name}_{tool.name}": tool.name
                for tool in server.tools
                if counts[tool.name] > 1 or tool.name in self._reserved
            }
            self._renames[server.name] = renames
            back = {old: new for new, old in renames.items()}
            self._sources.update({back.get(t.name, t.name): (server.name, t.name) for t in server.tools})
            toolset: AbstractToolset[Any] = server.toolset
            if any(self._approval.requires(server.name, tool.name) for tool in server.tools):
                toolset = ApprovalRequiredToolset(toolset, approval_required_func=self._needs_approval(server.name))
            toolset = toolset.renamed(renames) if renames else toolset
            toolsets.append(
                LostCallGuard(
                    toolset,
                    server=server.name,
                    on_lost=self.report_lost,
                    timeout=self._call_timeout,
                    calls=server.calls,
                )
            )
        self._toolsets = toolsets

    def _needs_approval(self, server: str) -> Callable[[RunContext[Any], ToolDefinition, dict[str, Any]], bool]:
        policy = self._approval

        def needs(_: RunContext[Any], tool: ToolDefinition, __: dict[str, Any]) -> bool:
            return policy.requires(server, tool.name)

        return needs


def _describe(error: BaseException) -> str:
    """The first line of ``error``'s message (a schema validator's report spans many), at most 300 characters."""
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe(error.exceptions[0])
    text = (str(error).strip().splitlines() or [""])[0] or type(error).__name__
    return text if len(text) < 300 else text[:300] + "..."
