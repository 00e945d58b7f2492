"""Delegation to peer agents (spec: "What the service does" item 3, "Agent server settings" rules 1-2).

Each sub-agent becomes a tool ``delegate_to_<name>`` with one argument, ``task``. The tool sends the task
over A2A: a blocking ``message/send`` JSON-RPC request to the peer's endpoint (``POST {peer}/``) whose
message carries the parent's name in metadata ``kora.delegated_by`` (and the header ``X-Kora-Delegated-By``)
so the peer records the turn as ``task_delegation_received``, and a ``contextId`` derived from the parent's
session so follow-up delegations in one conversation continue the peer's session. A peer without an A2A
card (``GET {peer}/.well-known/agent.json`` is not a card) is asked on its chat endpoint
(``POST {peer}/v1/chat/completions``) instead, with the same header and session. A peer that is down, slow
or failing gives the model ``Error: ...`` text, never an exception.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic_ai import FunctionToolset, RunContext, Tool

from kora.agent.a2a.executor import DELEGATED_BY_METADATA
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
        # Peer name -> whether it serves an A2A card; learnt on the first delegation to it.
        self._speaks_a2a: dict[str, bool] = {}

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
        session = f"{parent_session_id}.{self._agent_name}"
        try:
            if await self._peer_speaks_a2a(name):
                return await self._delegate_a2a(name, task, session)
            return await self._delegate_chat(name, task, session)
        except httpx.TimeoutException:
            return f"Error: agent '{name}' did not answer within {self._timeout:g} s."
        except httpx.HTTPError as error:
            return f"Error: could not reach agent '{name}': {error or type(error).__name__}"

    async def _peer_speaks_a2a(self, name: str) -> bool:
        if name not in self._speaks_a2a:
            url = self._sub_agents[name].rstrip("/") + "/.well-known/agent.json"
            response = await self._http.get(url, timeout=self._timeout)
            try:
                card = response.json() if response.status_code == 200 else None
            except ValueError:
                card = None
            self._speaks_a2a[name] = isinstance(card, dict) and "protocolVersion" in card
        return self._speaks_a2a[name]

    async def _delegate_a2a(self, name: str, task: str, session: str) -> str:
        body = {
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": str(uuid.uuid4()),
                    "contextId": session,
                    "parts": [{"kind": "text", "text": task}],
                    "metadata": {DELEGATED_BY_METADATA: self._agent_name},
                },
                "configuration": {"blocking": True},
            },
        }
        url = self._sub_agents[name].rstrip("/") + "/"
        headers = {DELEGATED_BY_HEADER: self._agent_name}
        response = await self._http.post(url, json=body, headers=headers, timeout=self._timeout)
        try:
            answer: dict[str, Any] = response.json()
        except ValueError:
            return f"Error: agent '{name}' failed with HTTP {response.status_code}: {response.text[:200]}"
        if "error" in answer:
            return f"Error: agent '{name}' refused the task: {answer['error'].get('message', answer['error'])}"
        return _a2a_answer(name, answer.get("result"))

    async def _delegate_chat(self, name: str, task: str, session: str) -> str:
        url = self._sub_agents[name].rstrip("/") + "/v1/chat/completions"
        headers = {DELEGATED_BY_HEADER: self._agent_name, SESSION_HEADER: session}
        body = {"model": name, "messages": [{"role": "user", "content": task}]}
        response = await self._http.post(url, json=body, headers=headers, timeout=self._timeout)
        if response.status_code != 200:
            return f"Error: agent '{name}' failed with HTTP {response.status_code}: {_error_message(response)}"
        try:
            data: dict[str, Any] = response.json()
            return str(data["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            return f"Error: agent '{name}' sent a response that is not a chat completion."


def _texts(parts: object) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("kind") == "text")


def _a2a_answer(name: str, result: object) -> str:
    """The answer text of a ``message/send`` result (a task or a message), or ``Error: ...`` text."""
    if not isinstance(result, dict):
        return f"Error: agent '{name}' sent a response that is not an A2A task."
    if result.get("kind") == "message":
        return _texts(result.get("parts"))
    status = result.get("status") if isinstance(result.get("status"), dict) else {}
    assert isinstance(status, dict)
    state = status.get("state")
    message = status.get("message")
    status_text = _texts(message.get("parts")) if isinstance(message, dict) else ""
    if state != "completed":
        return f"Error: agent '{name}' ended the task {state}: {status_text or 'no reason given'}"
    artifacts = result.get("artifacts")
    if isinstance(artifacts, list) and artifacts:
        return "".join(_texts(a.get("parts")) for a in artifacts if isinstance(a, dict))
    return status_text


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
