"""What one agent turn takes and gives, independent of the protocol that asked for it.

The chat endpoint and A2A turn a request into a :class:`TurnRequest`, run it through the runtime, and render
the :class:`TurnOutcome`, or the :class:`~kora.core.errors.TurnError` it raised, in their own wire format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import JsonValue

from kora.agent.budget import Limits, Spend, TurnBudget
from kora.core.events import utc_now
from kora.memory import Request, Response, ToolReturn

if TYPE_CHECKING:
    from kora.agent.approval_calls import PendingApproval


@dataclass(frozen=True)
class TurnDeps:
    """Run context of a turn, visible to tools: the memory session and who the turn is attributed to.

    ``user_id`` is the turn's verified user id (None: anonymous); ``credential`` the headers that prove it to a
    peer agent (see :attr:`TurnRequest.credential`); ``budget`` what the turn may still spend and has spent
    (:mod:`kora.agent.budget`), which delegation passes on and charges.
    """

    session_id: str
    agent_name: str
    delegated_by: str | None = None
    user_id: str | None = None
    credential: Mapping[str, str] = field(default_factory=dict, repr=False)
    budget: TurnBudget | None = None


@dataclass(frozen=True)
class ClientTool:
    """A function tool the client offers and runs itself: ``name``, ``description``, ``parameters`` (a JSON schema
    object) and ``strict`` (None: the model's default)."""

    name: str
    description: str
    parameters: dict[str, JsonValue]
    strict: bool | None = None


@dataclass(frozen=True)
class OutputFormat:
    """The structured answer a client asks for: ``json_object`` (one JSON object) or ``json_schema`` (``schema``
    named ``name``; ``strict`` as OpenAI's)."""

    kind: Literal["json_object", "json_schema"]
    name: str = ""
    description: str | None = None
    schema: dict[str, JsonValue] | None = None
    strict: bool | None = None


@dataclass(frozen=True)
class ImageRef:
    """An image in a prompt, by URL (``https:`` or ``data:``), with OpenAI's ``detail``."""

    url: str
    detail: str | None = None


@dataclass(frozen=True)
class ClientCall:
    """A call of a client tool the turn ended with: ``arguments`` is the JSON text the model sent."""

    tool_call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ResponseRecord:
    """How a turn asked over the Responses API is stored: every event it stores carries the metadata
    ``response_id`` (``id``); its first event also ``response`` (``request``: the response's own fields, as
    :mod:`kora.agent.responses_api` echoes them), its last ``usage`` (``{"input_tokens", "output_tokens"}``)
    and ``finish_reason``, and the events of its input (the prompt, or the client's tool results) ``input:
    true``, so the response and its input items can be read back from the session. ``store`` False: the turn stores
    nothing at all. ``acknowledged``: the client holds the response's id already (a background response, answered
    ``queued``), so even a request refused before its turn ran is stored, and reads back as failed."""

    id: str
    request: Mapping[str, JsonValue]
    store: bool = True
    acknowledged: bool = False


#: ``tool_choice`` as a turn takes it: ``auto``, ``none``, ``required``, or the name of the one tool to call.
ToolChoice = str


@dataclass(frozen=True)
class TurnRequest:
    """One turn: ``prompt`` (user text) in ``session_id``.

    ``client_history`` is the conversation the client sent itself, as replay steps (replayed only when the session
    has no stored history); ``system`` is extra instructions for this turn; ``delegated_by`` names the parent
    agent when the turn is a delegated task; ``started`` (UTC) is the prompt's timestamp. ``prompt_parts``, when
    given, is the prompt as separate parts (texts and images), ``prompt`` then being their text.

    A turn that continues one that ended with client tool calls has ``tool_results`` (the client's results, in
    the order it sent them) and ``answered`` (the assistant message with those calls); ``prompt`` is then the
    last user text (for memory recall) and the turn opens with the results instead.

    OpenAI request fields: ``client_tools`` (run by the client), ``tool_choice`` (``auto`` when None; see
    :data:`ToolChoice`), ``parallel_tool_calls``, ``output`` (``response_format``) and ``model_settings``
    (pydantic-ai ``ModelSettings`` keys, sent with each model request of the turn).

    ``user_id`` is the verified user id of the turn (None when no identity is configured or none was verified:
    see :mod:`kora.agent.identity`); ``credential`` holds the headers it was verified from (the bearer token or
    the trusted gateway's header), forwarded to peer agents on delegation so they verify it themselves. Both
    come from the request's headers only, never from its body.

    ``response``: set for a turn of the Responses API (how it is stored, :class:`ResponseRecord`).
    ``budget`` is the budget a delegating agent passed (A2A metadata ``kora.budget``); the turn keeps within the
    smaller of it and the agent's own ``BUDGET_MAX_*``.
    """

    session_id: str
    prompt: str
    client_history: list[Request | Response] = field(default_factory=list)
    system: str = ""
    delegated_by: str | None = None
    started: datetime = field(default_factory=utc_now)
    user_id: str | None = None
    credential: Mapping[str, str] = field(default_factory=dict, repr=False)
    prompt_parts: tuple[str | ImageRef, ...] = ()
    tool_results: tuple[ToolReturn, ...] = ()
    answered: Response | None = None
    client_tools: tuple[ClientTool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    output: OutputFormat | None = None
    model_settings: Mapping[str, JsonValue] = field(default_factory=dict)
    response: ResponseRecord | None = None
    budget: Limits | None = None

    @property
    def direct_first(self) -> bool:
        """True when the runtime may send the turn's first model request itself: no ``response_format`` (an
        answer is checked, and retried, by the Agent's output spec) and no ``tool_choice`` that forces a call
        (it binds the Agent's first step only)."""
        return self.output is None and self.tool_choice in (None, "auto", "none")


@dataclass(frozen=True)
class ToolCalled:
    """A tool call the model made during a turn, as it is about to run (the agent's own tools: MCP, delegation,
    memory): ``arguments`` is the JSON text the model sent. Streamed by
    :meth:`~kora.agent.runtime.AgentRuntime.stream_steps` only."""

    tool_call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolReturned:
    """What one of the agent's own tools gave back (``content``: the text the model is shown; ``failed``: the
    call failed or was refused and the model was asked to retry). Streamed by
    :meth:`~kora.agent.runtime.AgentRuntime.stream_steps` only."""

    tool_call_id: str
    name: str
    content: str
    failed: bool = False


@dataclass(frozen=True)
class Recalled:
    """What memory recalled for a turn before its first model request, when it recalled anything: the long-term
    ``facts`` added to the turn's instructions (their text, best first) and whether a rolling ``summary`` of the
    session's earlier turns was added. Streamed by :meth:`~kora.agent.runtime.AgentRuntime.stream_steps` only."""

    facts: tuple[str, ...]
    summary: bool


#: A step of a turn made visible while it streams.
ToolStep = ToolCalled | ToolReturned | Recalled


@dataclass(frozen=True)
class TurnOutcome:
    """The end of a turn: the answer ``text``, ``finish_reason`` (``stop``; ``length`` when the step budget ran out
    or the model's answer was cut by a token limit; ``tool_calls`` when it ended with ``tool_calls`` for the
    client to run) and the token usage summed over the turn's model requests, as the model reported it.
    ``spent`` is everything the turn spent, its delegations included (:class:`~kora.agent.budget.Spend`), which an
    A2A task reports to the agent that delegated it. ``approvals``: the turn paused at calls of the agent's own
    tools that wait for a person's decision (``finish_reason`` ``tool_calls``; :mod:`kora.agent.approvals`).
    ``exhausted``: the name of the budget that ended the turn (``finish_reason`` ``length``), if one did."""

    text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int
    model_requests: int
    tool_calls: tuple[ClientCall, ...] = ()
    spent: Spend | None = None
    approvals: tuple[PendingApproval, ...] = ()
    exhausted: str | None = None
