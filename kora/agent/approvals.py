"""Human approval of tool calls (``TOOL_APPROVAL_REQUIRED``, ``TOOL_APPROVAL_TIMEOUT_SECONDS``; docs/approvals.md).

A call of a tool that matches one of the agent's patterns does not run when the model makes it: the turn ends
there, *paused* (pydantic-ai's deferred tools: the tool's toolset is wrapped in an ``ApprovalRequiredToolset`` and
the run ends with ``DeferredToolRequests.approvals``). Each such call is a :class:`PendingApproval`; the turn's
messages so far wait with them in the agent's :class:`ApprovalStore` (:class:`PausedTurn`). A person decides each
call (:class:`Decision`: approve, optionally with edited arguments, or reject with a reason); once every call of
the paused turn is decided, the turn resumes from its messages with pydantic-ai's ``DeferredToolResults``: an
approved call runs once, a rejected one gives the model the rejection as the tool's error text. A call left
undecided for ``TOOL_APPROVAL_TIMEOUT_SECONDS`` is rejected by the agent itself, and the turn resumes.

Patterns (:class:`ApprovalPolicy`): ``<server>/<tool>`` for an MCP server's tool (the tool's own name, before any
renaming), ``agents/<peer>`` for the delegation to a peer; ``*`` matches any characters (``files/*``,
``*/delete_*``, ``*``).

The calls and decisions themselves are :mod:`kora.agent.approval_calls` (records that the turn's outcome carries).

Durability (:class:`ApprovalJournal`): with the shared task store (``TASK_STORE_TYPE=postgres``) every paused turn is
also written to the store's database (:mod:`kora.agent.a2a.paused_rows`) as one JSON record
(:mod:`kora.agent.approval_records`): the turn as it ran, its messages, its calls and their
decisions, the A2A task it waits in and the budget it spent. An agent that starts loads the turns still waiting
there, so a restart (or another replica) lists, decides and expires them as the process that paused them would. A
turn resumes only after its record is taken from the journal (:meth:`ApprovalJournal.take`), so two processes never
both resume it. Without a journal (the ``local`` and ``null`` stores) paused turns live in the process only.

This module imports no pydantic-ai at run time (the A2A endpoint and the routes read decisions before it loads).
"""

from __future__ import annotations

import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from kora.agent.approval_calls import Decision, PendingApproval
from kora.agent.budget import Limits, Spend
from kora.core.env import not_an_approval_pattern
from kora.core.errors import ApprovalConflict, Forbidden, NotFound

if TYPE_CHECKING:
    import asyncio

    from pydantic_ai.messages import ModelMessage

    from kora.agent.turn import TurnOutcome, TurnRequest

#: The pattern source of delegation tools: ``agents/<peer>``.
AGENTS_SOURCE = "agents"


def parse_approval_patterns(value: str) -> tuple[str, ...]:
    """The patterns of a ``TOOL_APPROVAL_REQUIRED`` value (comma-separated, blanks ignored). Raises ``ValueError``
    naming a pattern that is not ``*`` nor ``<server>/<tool>`` with both sides non-empty."""
    patterns = tuple(item.strip() for item in value.split(",") if item.strip())
    for pattern in patterns:
        if pattern == "*":
            continue
        server, slash, tool = pattern.partition("/")
        if not slash or not server or not tool or "/" in tool:
            raise ValueError(not_an_approval_pattern(pattern))
    return patterns


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which tool calls need approval: ``patterns`` as :func:`parse_approval_patterns` reads them."""

    patterns: tuple[str, ...] = ()

    @classmethod
    def from_setting(cls, value: str) -> ApprovalPolicy:
        """The policy of a ``TOOL_APPROVAL_REQUIRED`` value."""
        return cls(parse_approval_patterns(value))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        alternatives = [".*" if p == "*" else ".*".join(re.escape(s) for s in p.split("*")) for p in self.patterns]
        return re.compile("|".join(f"(?:{a})" for a in alternatives) or "(?!)")

    def requires(self, source: str, tool: str) -> bool:
        """True when a call of ``tool`` of ``source`` (an MCP server's name, or ``agents``) needs approval."""
        return self._regex.fullmatch(f"{source}/{tool}") is not None


@dataclass(frozen=True)
class TaskRef:
    """The A2A task a paused turn waits in: its ``task_id``, ``context_id`` and ``owner`` (as the task store files
    it)."""

    task_id: str
    context_id: str
    owner: str


@dataclass(frozen=True)
class CarriedBudget:
    """What a paused turn spent of its budget, so the resumed turn goes on within the same one: its ``limits``
    (without the deadline), everything it ``spent`` (its delegations included) and the ``seconds_left`` of its time
    budget when it paused (None: no time budget; the time a call waits for a person does not count)."""

    limits: Limits
    spent: Spend
    seconds_left: float | None = None


@dataclass
class PausedTurn:
    """A turn that stopped at calls needing approval: the ``turn`` as it ran (its instructions, tools and
    settings), every message the model was shown and gave until the pause (``messages``, pydantic-ai's), and its
    ``approvals``, in the order the model made the calls.

    ``resumer``: set by the surface that ran the turn when the turn must go on its own way after a decision the
    surface did not receive itself (an expiry, ``POST /approvals/{id}``): it resumes the decided turn and returns its
    outcome (None: it failed). ``timer`` rejects the waiting calls when they expire. ``task``: the A2A task the
    turn waits in (None: asked over another surface); ``budget``: what the turn spent of its budget."""

    turn: TurnRequest
    messages: list[ModelMessage]
    approvals: list[PendingApproval]
    resumer: Callable[[PausedTurn], Awaitable[TurnOutcome | None]] | None = None
    timer: asyncio.TimerHandle | None = None
    task: TaskRef | None = None
    budget: CarriedBudget | None = None
    #: Taken from the journal by this process (:meth:`~kora.agent.runtime.AgentRuntime.take`): it resumes here.
    taken: bool = False
    #: The last background write of its decisions so far to the journal (each waits for the one before).
    written: asyncio.Task[None] | None = None

    @classmethod
    def of(
        cls, turn: TurnRequest, messages: list[ModelMessage], calls: list[tuple[str, str, str, str]], timeout: float
    ) -> PausedTurn:
        """A paused turn; ``calls`` are ``(tool_call_id, tool_name, target, arguments)`` of the calls that wait,
        each expiring ``timeout`` seconds from now."""
        now = time.time()
        approvals = [
            PendingApproval(
                id=f"appr_{uuid.uuid4().hex}",
                session_id=turn.session_id,
                user_id=turn.user_id,
                tool_call_id=call_id,
                tool_name=name,
                target=target,
                arguments=arguments,
                requested_at=now,
                expires_at=now + timeout,
            )
            for call_id, name, target, arguments in calls
        ]
        return cls(turn, messages, approvals)

    @property
    def decided(self) -> bool:
        """True once every call has its decision."""
        return all(a.decision is not None for a in self.approvals)

    @property
    def key(self) -> str:
        """The paused turn's id in a journal: its first call's approval id."""
        return self.approvals[0].id


class ApprovalJournal(Protocol):
    """Where paused turns are kept beyond the process (the shared task store's database), as JSON records
    (:mod:`kora.agent.approval_records`) keyed by :attr:`PausedTurn.key`. Each method raises
    :class:`JournalUnavailable` when the journal cannot be reached."""

    async def put(self, key: str, session_id: str, record: bytes) -> None:
        """Write a paused turn's ``record`` (again: its decisions so far)."""

    async def take(self, key: str) -> bool:
        """Remove a paused turn; True when this call removed it (False: another process took it first)."""

    async def load(self, skip: Collection[str] = ()) -> list[bytes]:
        """The records of the paused turns kept, oldest first, but those whose key is in ``skip``."""

    async def keys(self) -> set[str]:
        """The keys of the paused turns kept."""

    async def waiting_in(self, session_id: str) -> bytes | None:
        """The record of a paused turn kept of ``session_id`` (None: none is), whichever process paused it."""

    async def update(self, key: str, record: bytes) -> bool:
        """Replace a kept paused turn's ``record`` (its decisions so far); never adds one: a turn taken meanwhile
        stays taken. True when it was there."""

    async def erase(self, *, session_id: str | None = None, user_id: str | None = None) -> int:
        """Remove every paused turn kept of ``session_id`` or of ``user_id`` (whichever process paused it); how
        many were removed."""


def check_decider(approval: PendingApproval, user_id: str | None) -> None:
    """Raise :class:`~kora.core.errors.Forbidden` unless ``user_id`` may decide ``approval``: its turn's user, or
    anyone holding the id of an anonymous turn's call."""
    if approval.user_id is not None and approval.user_id != user_id:
        raise Forbidden("The approval belongs to another user's turn.", code="approval_forbidden")


#: How many decided approvals the store remembers, so a late second decision is told it came too late (409).
DECIDED_KEPT = 10_000


@dataclass
class ApprovalStore:
    """The agent's paused turns, in its process (the local store): by approval id and by session; and the latest
    :data:`DECIDED_KEPT` decided approvals of turns that resumed."""

    #: Where paused turns are kept beyond the process (None: in the process only).
    journal: ApprovalJournal | None = None
    _turns: dict[str, PausedTurn] = field(default_factory=dict)
    _decided: OrderedDict[str, PendingApproval] = field(default_factory=OrderedDict)
    # (session id, tool call id) -> approval id, of the decided approvals kept.
    _decided_calls: dict[tuple[str, str], str] = field(default_factory=dict)
    # session id -> its paused turn.
    _sessions: dict[str, PausedTurn] = field(default_factory=dict)

    def add(self, paused: PausedTurn) -> None:
        """Keep a paused turn until its calls are decided."""
        for approval in paused.approvals:
            self._turns[approval.id] = paused
        self._sessions[paused.turn.session_id] = paused

    def of_task(self, task_id: str) -> PausedTurn | None:
        """The paused turn waiting in A2A task ``task_id``, if any."""
        return next((p for p in self.paused_turns() if p.task is not None and p.task.task_id == task_id), None)

    def knows(self, paused: PausedTurn) -> bool:
        """True when one of ``paused``'s calls is kept already (waiting, or decided and kept)."""
        return any(a.id in self._turns or a.id in self._decided for a in paused.approvals)

    def paused_turns(self) -> list[PausedTurn]:
        """Every paused turn kept."""
        return list({id(p): p for p in self._turns.values()}.values())

    def pending(self, session_id: str | None = None) -> list[PendingApproval]:
        """Calls still waiting, oldest first, in ``session_id`` when given."""
        found = []
        for paused in self.paused_turns():
            found += [
                a for a in paused.approvals if a.decision is None and (session_id is None or a.session_id == session_id)
            ]
        return sorted(found, key=lambda a: a.requested_at)

    def paused_turn(self, approval_id: str) -> PausedTurn | None:
        """The paused turn an approval belongs to (None: unknown, or its turn resumed)."""
        return self._turns.get(approval_id)

    def in_session(self, session_id: str) -> PausedTurn | None:
        """The session's paused turn, if one waits (a session runs one turn at a time, so at most one)."""
        return self._sessions.get(session_id)

    def decide(self, approval_id: str, decision: Decision, user_id: str | None, *, by: str = "") -> PausedTurn:
        """Record ``decision`` on a pending call for ``user_id`` (the decider's verified id; None: anonymous, or
        ``by`` ``operator`` / ``expired`` for the operator and the agent itself, who may decide any call).

        Returns the call's paused turn (:attr:`PausedTurn.decided` says whether it can resume). Raises
        :class:`~kora.core.errors.NotFound` for an unknown id, :class:`~kora.core.errors.Forbidden` for another
        user's call (anonymous calls may be decided by whoever holds their id, as their session),
        :class:`ApprovalConflict` for a call already decided; nothing changes then."""
        paused = self._turns.get(approval_id)
        approval = next((a for a in paused.approvals if a.id == approval_id), None) if paused else None
        approval = approval or self._decided.get(approval_id)
        if approval is None:
            raise NotFound(f"No pending approval has the id '{approval_id}'.", code="approval_not_found")
        if not by:
            check_decider(approval, user_id)
        if approval.decision is not None or paused is None:
            raise ApprovalConflict(f"The approval '{approval_id}' is already {approval.status}.")
        approval.decision = decision
        approval.decided_by = by or (user_id or "anonymous")
        approval.decided_at = time.time()
        return paused

    def release(self, paused: PausedTurn) -> None:
        """Forget a paused turn that resumes (its approvals are then unknown ids)."""
        if self._sessions.get(paused.turn.session_id) is paused:
            del self._sessions[paused.turn.session_id]
        for approval in paused.approvals:
            self._turns.pop(approval.id, None)
            self._decided[approval.id] = approval
            self._decided_calls[(approval.session_id, approval.tool_call_id)] = approval.id
        while len(self._decided) > DECIDED_KEPT:
            _, old = self._decided.popitem(last=False)
            self._decided_calls.pop((old.session_id, old.tool_call_id), None)

    def decided_call(self, session_id: str, tool_call_id: str) -> PendingApproval | None:
        """A decided approval (of a turn that resumed) of call ``tool_call_id`` in ``session_id``, if kept."""
        approval_id = self._decided_calls.get((session_id, tool_call_id))
        return self._decided.get(approval_id) if approval_id is not None else None

    def forget_session(self, session_id: str) -> list[PausedTurn]:
        """Drop every approval of ``session_id``, waiting or decided, without resuming its turn (the session is
        being erased: nothing of it may be listed, nor written into it afterwards). Cancels the turn's expiry.
        Returns the paused turns dropped (for the journal to drop too)."""
        return self._forget(lambda approval: approval.session_id == session_id)

    def drop(self, paused: PausedTurn) -> None:
        """Forget ``paused`` without resuming it here (another process resumed it), its expiry cancelled."""
        self._forget(lambda approval: approval.id == paused.key)

    def forget_user(self, user_id: str) -> list[PausedTurn]:
        """Drop every approval of ``user_id``'s turns, as :meth:`forget_session` (the user is being erased)."""
        return self._forget(lambda approval: approval.user_id == user_id)

    def _forget(self, chosen: Callable[[PendingApproval], bool]) -> list[PausedTurn]:
        dropped = []
        for paused in self.paused_turns():
            if any(chosen(a) for a in paused.approvals):
                dropped.append(paused)
                if paused.timer is not None:
                    paused.timer.cancel()
                    paused.timer = None
                if self._sessions.get(paused.turn.session_id) is paused:
                    del self._sessions[paused.turn.session_id]
                for approval in paused.approvals:
                    self._turns.pop(approval.id, None)
        for approval_id, approval in list(self._decided.items()):
            if chosen(approval):
                del self._decided[approval_id]
                self._decided_calls.pop((approval.session_id, approval.tool_call_id), None)
        return dropped
