"""Delegation to peer agents, named by ``PEER_AGENTS`` or ``AGENT_SUB_AGENTS`` (docs/a2a.md "Delegation").

Each sub-agent becomes a tool ``delegate_to_<name>`` with one argument, ``task``. The tool sends the task
over A2A with the official a2a-sdk client (resolved from the peer's card; a blocking send) whose
message carries the parent's name in metadata ``kora.delegated_by`` (and the header ``X-Kora-Delegated-By``)
so the peer records the turn as ``task_delegation_received``, and a ``contextId`` derived from the parent's
session so follow-up delegations in one conversation continue the peer's session. A peer without an A2A
card (the card URL answers an HTTP error) is asked on its chat endpoint
(``POST {peer}/v1/chat/completions``) instead, with the same header and session. A peer that is down, slow
or failing gives the model ``Error: ...`` text, never an exception.

The user travels with the task as the credential the parent verified (:mod:`kora.agent.identity`): the
user's bearer token, or the trusted gateway's header under the same name. The peer verifies it by its own
settings; an anonymous turn sends none. The credential comes from the turn's run context, never from the
tool's arguments, so the model cannot choose whom a task is for.

Each tool's description says who the peer is, so a model can choose whom to ask: the peer's card ``description``
and its skills (name and description, at most :data:`MAX_PEER_SKILLS`, each cut at :data:`MAX_SKILL_CHARS`), once
its card was read (:meth:`Delegation.learn_cards`, started with the agent and retried while a peer is not up yet,
or the first delegation); until then, and for a peer without a card, the peer's name only.

Each delegated task is an ``invoke_agent {peer}`` CLIENT span (``gen_ai.agent.name`` the peer, ``kora.a2a.task_id``
the peer's task, an error status when the answer is ``Error: ...``) whose trace context travels to the peer on the
HTTP request, and a ``kora.agent.delegation.duration`` measurement (:mod:`kora.agent.telemetry`).

The a2a-sdk's client is used through :mod:`kora.agent.delegation_a2a`, imported (off the event loop, without the
SDK's unused extras: :data:`~kora.agent.unused.UNUSED_PACKAGES`) by the first card read or delegation: an agent
without sub-agents never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic_ai import FunctionToolset, RunContext, Tool
from pydantic_ai.usage import RunUsage

from kora.agent.budget import TurnBudget
from kora.agent.telemetry import SCOPE, record_delegation
from kora.agent.turn import TurnDeps
from kora.agent.unused import UNUSED_PACKAGES
from kora.core.imports import DeferredImport
from kora.core.openai_wire import parse_error_body
from kora.core.protocol import (
    DELEGATED_BY_HEADER,
    DELEGATION_TASK_ARG,
    DELEGATION_TOOL_PREFIX,
    SESSION_HEADER,
    child_session_id,
)

if TYPE_CHECKING:
    from a2a.client.client import Client
    from a2a.types.a2a_pb2 import AgentCard

_tracer = trace.get_tracer(SCOPE)

#: The SDK's client, imported without the agent's unused extras: gRPC among them (its gRPC transport, which it
#: imports whenever installed; delegation speaks JSON-RPC and HTTP+JSON).
_SDK = DeferredImport("kora.agent.delegation_a2a", absent=UNUSED_PACKAGES)

#: Skills of a peer its delegation tool's description lists at most, and characters of each skill's description.
MAX_PEER_SKILLS = 8
MAX_SKILL_CHARS = 160
#: Seconds before reading the cards of peers not up yet again, doubling up to the cap.
CARD_RETRY_FIRST_SECONDS = 1.0
CARD_RETRY_MAX_SECONDS = 30.0


def peer_tool_description(name: str, card: AgentCard | None = None) -> str:
    """The description of the tool delegating to peer ``name``: what it does, then who the peer is by its
    ``card`` (None: not read yet, or the peer has none): ``Delegate a task to the peer agent 'math' and return
    its answer. The agent: Does arithmetic. Its skills: add (Add two integers.); multiply (...).``"""
    text = f"Delegate a task to the peer agent '{name}' and return its answer."
    if card is None:
        return text
    if card.description.strip():
        text += f" The agent: {_cut(card.description, MAX_SKILL_CHARS * 2)}"
    skills = [
        f"{skill.name or skill.id} ({_cut(skill.description, MAX_SKILL_CHARS)})"
        if skill.description.strip() and skill.description != card.description
        else (skill.name or skill.id)
        for skill in card.skills[:MAX_PEER_SKILLS]
    ]
    if skills:
        more = f"; and {len(card.skills) - MAX_PEER_SKILLS} more" if len(card.skills) > MAX_PEER_SKILLS else ""
        text += f" Its skills: {'; '.join(skills)}{more}."
    return text


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def delegation_tool_name(agent: str) -> str:
    """The tool name for delegating to ``agent``: ``delegate_to_<agent>``."""
    return f"{DELEGATION_TOOL_PREFIX}{agent}"


class DelegationSettings(Protocol):
    """The settings :class:`Delegation` reads, by their agent setting names: the agent's settings object satisfies
    it and is passed whole."""

    @property
    def agent_name(self) -> str:
        """The delegating agent's name (``AGENT_NAME``)."""

    @property
    def sub_agent_urls(self) -> dict[str, str]:
        """``{name: base_url}`` of the agents it may delegate to (``AGENT_SUB_AGENTS`` and the peer agents)."""

    @property
    def delegation_timeout_seconds(self) -> float:
        """Seconds per delegated task (``DELEGATION_TIMEOUT_SECONDS``)."""


class Delegation:
    """Delegation tools for the sub-agents ``settings`` name, their requests made with ``http`` (``None`` when
    ``settings`` name no sub-agent: nothing is then sent, and the process need not build a client)."""

    def __init__(self, settings: DelegationSettings, http: httpx.AsyncClient | None) -> None:
        self._agent_name = settings.agent_name
        self._sub_agents = dict(settings.sub_agent_urls)
        self._timeout = settings.delegation_timeout_seconds
        self._http = http
        # name -> the peer's A2A client, or None when it has no card (then its chat endpoint is used); learnt from
        # its card, read at start (learn_cards) or on the first delegation to it.
        self._clients: dict[str, Client | None] = {}
        # name -> its delegation tool, whose description the peer's card completes once read.
        self._tools: dict[str, Tool[TurnDeps]] = {}

    @property
    def tool_agents(self) -> dict[str, str]:
        """``{tool name: agent name}``, for turning delegation tool calls into delegation events."""
        return {delegation_tool_name(name): name for name in self._sub_agents}

    def toolset(self) -> FunctionToolset[TurnDeps]:
        """A toolset with one ``delegate_to_<name>`` tool per sub-agent."""
        self._tools = {name: self._tool(name) for name in self._sub_agents}
        return FunctionToolset(list(self._tools.values()))

    async def learn_cards(self) -> None:
        """Read every peer's card (its client is kept for delegations, its description goes into its tool), trying
        again those that cannot be reached yet after :data:`CARD_RETRY_FIRST_SECONDS`, doubling up to
        :data:`CARD_RETRY_MAX_SECONDS`; returns once every peer answered (with a card or without). Run it as a
        background task and cancel it on shutdown."""
        sdk = await self._sdk()
        delay = CARD_RETRY_FIRST_SECONDS
        while missing := [name for name in self._sub_agents if name not in self._clients]:
            for name in missing:
                with contextlib.suppress(sdk.AgentCardResolutionError, sdk.A2AClientError, httpx.HTTPError):
                    await self._a2a_client(sdk, name)
            if any(name not in self._clients for name in missing):
                await asyncio.sleep(delay)
                delay = min(delay * 2, CARD_RETRY_MAX_SECONDS)

    def _tool(self, name: str) -> Tool[TurnDeps]:
        schema = {
            "type": "object",
            "properties": {DELEGATION_TASK_ARG: {"type": "string", "description": "The complete task for the agent."}},
            "required": [DELEGATION_TASK_ARG],
            "additionalProperties": False,
        }

        async def delegate(ctx: RunContext[TurnDeps], task: str) -> str:
            # The credential comes from the turn's verified identity; the model only writes the task.
            return await self.delegate(
                name, task, ctx.deps.session_id, ctx.deps.credential, budget=ctx.deps.budget, usage=ctx.usage
            )

        function: Callable[..., Awaitable[str]] = delegate
        return Tool.from_schema(
            function,
            name=delegation_tool_name(name),
            description=peer_tool_description(name),
            json_schema=schema,
            takes_ctx=True,
        )

    async def delegate(
        self,
        name: str,
        task: str,
        parent_session_id: str,
        credential: Mapping[str, str] | None = None,
        *,
        budget: TurnBudget | None = None,
        usage: RunUsage | None = None,
    ) -> str:
        """Send ``task`` to sub-agent ``name`` with the user's ``credential`` (headers, see
        :attr:`~kora.agent.turn.TurnRequest.credential`; none for an anonymous turn); returns its answer, or
        ``Error: ...`` text on any failure.

        With the delegating turn's ``budget`` (and its model ``usage`` so far), an A2A task carries what the turn
        has left in message metadata ``kora.budget``, and what the peer reports spent (``kora.spent`` on its final
        status message) is charged to ``budget`` (:mod:`kora.agent.budget`)."""
        session = child_session_id(parent_session_id, self._agent_name)
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": session,
            "server.address": self._sub_agents[name],
        }
        started = time.perf_counter()
        with _tracer.start_as_current_span(f"invoke_agent {name}", kind=SpanKind.CLIENT, attributes=attributes) as span:
            answer = await self._send(name, task, session, dict(credential or {}), span, budget, usage)
            if answer.startswith("Error:"):
                span.set_status(Status(StatusCode.ERROR, answer))
        record_delegation(name, time.perf_counter() - started, ok=not answer.startswith("Error:"))
        return answer

    async def _send(
        self,
        name: str,
        task: str,
        session: str,
        headers: dict[str, str],
        span: Span,
        budget: TurnBudget | None,
        usage: RunUsage | None,
    ) -> str:
        """The peer's answer, or ``Error: ...`` text (see :meth:`delegate`)."""
        sdk = await self._sdk()
        try:
            client = await self._a2a_client(sdk, name)
            if client is not None:
                answer: str = await sdk.send_task(
                    client, self._agent_name, name, task, session, headers, span, budget, usage
                )
                return answer
            return await self._delegate_chat(name, task, session, headers)
        except httpx.HTTPError as error:
            if isinstance(error, httpx.TimeoutException):
                return self._timed_out(name)
            return f"Error: could not reach agent '{name}': {error or type(error).__name__}"
        except sdk.A2AClientError as error:
            # The SDK wraps httpx's errors: a timeout while fetching the card or awaiting the task is a peer that
            # accepted and did not answer in time, not one that could not be reached.
            if isinstance(error, sdk.A2AClientTimeoutError) or isinstance(error.__cause__, httpx.TimeoutException):
                return self._timed_out(name)
            return f"Error: could not reach agent '{name}': {error}"

    @property
    def _client(self) -> httpx.AsyncClient:
        """The HTTP client; only a sub-agent's tool or card reaches here, and a client comes with sub-agents."""
        if self._http is None:
            raise RuntimeError("delegation to a sub-agent without an HTTP client")
        return self._http

    def _timed_out(self, name: str) -> str:
        return f"Error: agent '{name}' did not answer within {self._timeout:g} s."

    @staticmethod
    async def _sdk() -> ModuleType:
        """:mod:`kora.agent.delegation_a2a`, imported on the first call (in a thread)."""
        return await _SDK.load()

    async def _a2a_client(self, sdk: ModuleType, name: str) -> Client | None:
        """The peer's A2A client, resolved from its card once (``sdk``: :mod:`kora.agent.delegation_a2a`); None
        when the peer serves no card.

        Raises ``AgentCardResolutionError`` when the peer cannot be reached at all (not cached: try again).
        """
        if name not in self._clients:
            try:
                card, client = await sdk.peer_client(self._client, self._sub_agents[name])
            except sdk.AgentCardResolutionError as error:
                if error.status_code is None:
                    raise  # a network failure says nothing about whether the peer speaks A2A
                self._clients[name] = None
            else:
                self._clients[name] = client
                if name in self._tools:
                    self._tools[name].description = peer_tool_description(name, card)
        return self._clients[name]

    async def _delegate_chat(self, name: str, task: str, session: str, credential: dict[str, str]) -> str:
        url = self._sub_agents[name].rstrip("/") + "/v1/chat/completions"
        headers = credential | {DELEGATED_BY_HEADER: self._agent_name, SESSION_HEADER: session}
        body = {"model": name, "messages": [{"role": "user", "content": task}]}
        response = await self._client.post(url, json=body, headers=headers, timeout=self._timeout)
        if response.status_code != 200:
            return f"Error: agent '{name}' failed with HTTP {response.status_code}: {_error_message(response)}"
        try:
            data: dict[str, Any] = response.json()
            return str(data["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            return f"Error: agent '{name}' sent a response that is not a chat completion."


def _error_message(response: httpx.Response) -> str:
    error = parse_error_body(response.content)
    return error.message if error is not None else response.text[:200]
