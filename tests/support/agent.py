"""Running real agent servers (and real MCP servers) on 127.0.0.1 for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import openai
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from kora.agent.app import create_app
from kora.agent.runtime import AgentRuntime
from kora.agent.settings import AgentSettings, load_agent_settings
from kora.memory import LocalMemory, Memory
from tests.support.eventually import eventually
from tests.support.memory import AGENT_TOKEN
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

if TYPE_CHECKING:
    from kora.agent.a2a.routes import A2AServer

#: The operator token (``AGENT_ADMIN_TOKEN``) of every test agent, and the headers that send it.
OPERATOR_TOKEN = "test-agent-operator-token"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@dataclass
class RunningAgent:
    server: ThreadedServer
    name: str

    @property
    def url(self) -> str:
        return self.server.root_url

    def openai(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="k", max_retries=0, **kwargs)

    def async_openai(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="k", max_retries=0, **kwargs)

    def get(self, path: str, **params: Any) -> httpx.Response:
        """GET ``path``; the memory endpoints as the operator (:data:`OPERATOR`), who sees every session."""
        headers = OPERATOR if path.startswith("/memory/") else {}
        return httpx.get(f"{self.url}{path}", params=params, headers=headers, timeout=10)

    def a2a_server(self) -> A2AServer:
        """The agent's A2A server, loaded by a first A2A request (the card's) if no A2A request came before."""
        assert self.get("/.well-known/agent.json").status_code == 200
        server: A2AServer = self.server.app.state.a2a
        return server

    def events(self, session_id: str | None = None) -> list[dict[str, Any]]:
        params = {"session_id": session_id} if session_id else {}
        return self.get("/memory/events", **params).json()["events"]

    def event_types(self, session_id: str | None = None) -> list[str]:
        return [e["event_type"] for e in self.events(session_id)]


#: Settings every test agent gets unless a test overrides them; the ``turn_path`` fixture (tests/conftest.py)
#: sets ``AGENT_DIRECT_FIRST_REQUEST`` here so a module's turn tests run on both turn paths.
DEFAULT_ENV: dict[str, str] = {"MODEL_MAX_RETRIES": "0", "AGENT_ADMIN_TOKEN": OPERATOR_TOKEN}


def agent_settings(model: ScriptedModelServer, name: str = "agent", **env: str) -> AgentSettings:
    """Agent settings against ``model``; ``env`` adds settings (upper-case names). An agent bound to a memory
    store (``MEMORY_STORE_ENDPOINT``) sends the test stores' agent credential unless ``env`` names another."""
    base = {"AGENT_NAME": name, "MODEL_API_URL": model.url, "MODEL_NAME": model.model_name}
    if env.get("MEMORY_STORE_ENDPOINT"):
        base["MEMORY_STORE_TOKEN"] = AGENT_TOKEN
    return load_agent_settings({**base, **DEFAULT_ENV, **env})


def agent_runtime(model: ScriptedModelServer, **env: str) -> AgentRuntime:
    """An :class:`AgentRuntime` (not started) named ``a`` against ``model``, with local memory."""
    return AgentRuntime(agent_settings(model, "a", **env), LocalMemory())


@asynccontextmanager
async def running_agent(
    model: ScriptedModelServer,
    name: str = "agent",
    wait_ready: bool = True,
    memory: Memory | None = None,
    **env: str,
) -> AsyncIterator[RunningAgent]:
    """An agent server on a free loopback port, against ``model``; ``env`` adds settings (upper-case names);
    ``memory``: an in-process memory to serve (one that outlives the agent: its restart), else the settings'."""
    settings = agent_settings(model, name, **env)
    async with ThreadedServer(create_app(settings, memory), name=f"agent-{name}", lifespan="on") as server:
        agent = RunningAgent(server, name)
        if wait_ready:
            eventually(lambda: agent.get("/ready").status_code == 200, f"agent {name} ready")
        yield agent


@contextmanager
def agent_client(model: ScriptedModelServer, name: str = "agent", **env: str) -> Iterator[httpx.Client]:
    """A synchronous client of an agent server on a free loopback port, against ``model``, once it is ready (for
    module-scoped fixtures and hypothesis tests); ``env`` adds settings."""
    with served_agent(model, name, **env) as agent, httpx.Client(base_url=agent.url, timeout=30) as client:
        yield client


@contextmanager
def served_agent(model: ScriptedModelServer, name: str = "agent", **env: str) -> Iterator[RunningAgent]:
    """:func:`running_agent` for synchronous code (module-scoped fixtures): an agent server on a free loopback
    port, against ``model``, once it is ready; ``env`` adds settings."""
    settings = agent_settings(model, name, **env)
    with ThreadedServer(create_app(settings), name=f"agent-{name}", lifespan="on") as server:
        agent = RunningAgent(server, name)
        eventually(lambda: agent.get("/ready").status_code == 200, f"agent {name} ready")
        yield agent


def mcp_app(name: str, tools: list[Callable[..., Any]]) -> Any:
    """A Streamable HTTP app (official MCP SDK) serving ``tools`` at ``/mcp``."""
    server = MCPServer(name)
    for tool in tools:
        server.tool()(tool)
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
