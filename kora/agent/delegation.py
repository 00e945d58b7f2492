"""Delegation to peer agents (spec: "What the service does" item 3, "Agent server settings" rules 1-2).

Each sub-agent becomes a tool ``delegate_to_<name>`` with one argument, ``task``. The tool sends the task
to the peer's chat endpoint (``POST {peer}/v1/chat/completions``) with the header ``X-Kora-Delegated-By``
so the peer records the turn as ``task_delegation_received``, and a session id derived from the parent's
session so follow-up delegations in one conversation continue the peer's session. A peer that is down,
slow or failing gives the model ``Error: ...`` text, never an exception.

A2A transport for delegation comes with Kora's A2A server; until then the chat endpoint is the wire.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic_ai import FunctionToolset, RunContext, Tool

from kora.agent.openai_api import DELEGATED_BY_HEADER, SESSION_HEADER
from kora.agent.turn import TurnDeps
from kora.memory.history import DELEGATION_TOOL_PREFIX


def delegation_tool_name(agent: str) -> str:
    """The tool name for delegating to ``agent``: ``delegate_to_<agent>``."""
    return f"{DELEGATION_TOOL_PREFIX}{agent}"


class Delegation:
    """Delegation tools for ``sub_agents`` (``{name: base_url}``); ``timeout`` in seconds per delegated task."""

    def __init__(self, agent_name: str, sub_agents: dict[str, str], timeout: float, http: httpx.AsyncClient) -> None:
        self._agent_name = agent_name
        self._sub_agents = dict(sub_agents)
        self._timeout = timeout
        self._http = http

    @property
    def tool_agents(self) -> dict[str, str]:
        """``{tool name: agent name}``, for turning delegation tool calls into delegation events."""
        return {delegation_tool_name(name): name for name in self._sub_agents}

    def toolset(self) -> FunctionToolset[TurnDeps]:
        """A toolset with one ``delegate_to_<name>`` tool per sub-agent."""
        return FunctionToolset([self._tool(name) for name in self._sub_agents])

    def _tool(self, name: str) -> Tool[TurnDeps]:
        schema = {
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The complete task for the agent."}},
            "required": ["task"],
            "additionalProperties": False,
        }

        async def delegate(ctx: RunContext[TurnDeps], task: str) -> str:
            return await self.delegate(name, task, ctx.deps.session_id)

        function: Callable[..., Awaitable[str]] = delegate
        return Tool.from_schema(
            function,
            name=delegation_tool_name(name),
            description=f"Delegate a task to the peer agent '{name}' and return its answer.",
            json_schema=schema,
            takes_ctx=True,
        )

    async def delegate(self, name: str, task: str, parent_session_id: str) -> str:
        """Send ``task`` to sub-agent ``name``; returns its answer, or ``Error: ...`` text on any failure."""
        url = self._sub_agents[name].rstrip("/") + "/v1/chat/completions"
        headers = {
            DELEGATED_BY_HEADER: self._agent_name,
            SESSION_HEADER: f"{parent_session_id}.{self._agent_name}",
        }
        body = {"model": name, "messages": [{"role": "user", "content": task}]}
        try:
            response = await self._http.post(url, json=body, headers=headers, timeout=self._timeout)
        except httpx.TimeoutException:
            return f"Error: agent '{name}' did not answer within {self._timeout:g} s."
        except httpx.HTTPError as error:
            return f"Error: could not reach agent '{name}': {error or type(error).__name__}"
        if response.status_code != 200:
            return f"Error: agent '{name}' failed with HTTP {response.status_code}: {_error_message(response)}"
        try:
            data: dict[str, Any] = response.json()
            return str(data["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            return f"Error: agent '{name}' sent a response that is not a chat completion."


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
