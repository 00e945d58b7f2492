"""Turns of one agent: memory replayed, the model and its tools run, the turn's events stored.

:class:`AgentRuntime` runs a turn on one model object, :class:`~kora.agent.chat_model.KoraChatModel`:

1. **The first model request, sent directly.** The session's last ``memory_context_limit`` events are
   replayed (:func:`kora.agent.history.events_to_messages`) and, with the prompt, the agent's instructions and
   tools, sent through the model object, whole or streamed. When the model answers with text and calls no
   tool, which is most turns, that answer ends the turn.
2. **The agentic loop**, when the answer calls tools (or is empty): pydantic-ai's ``Agent``
   (:class:`~kora.agent.loop.AgenticLoop`) continues from that answer with the same model object; it runs the
   calls and the following model requests, within ``agentic_loop_max_steps`` requests in all.

Why two stages: a pydantic-ai run costs ~2 ms of CPU before any I/O (``bench/README.md``); a direct request
costs a fraction of that. The first request is prepared as the ``Agent`` prepares every request
(``Model.prepare_messages``), so the model sees the same messages on both stages (a property test compares them
with pydantic-ai's own OpenAI model). ``AGENT_DIRECT_FIRST_REQUEST=false`` runs every turn wholly in the
``Agent``; the answer, the stored events (one :class:`~kora.agent.recorder.TurnRecorder`) and the errors are the
same either way, and the turn tests run both. One difference: an empty first answer is asked again plainly,
where the ``Agent`` adds a note asking for text.

Client tools are offered on both stages. A first answer that calls only client tools ends the turn with those
calls (``finish_reason`` ``tool_calls``); one that also calls the agent's own tools goes to the loop, which runs
those and ends with the client's calls (pydantic-ai's deferred tools). A turn with a ``response_format`` or a
``tool_choice`` that forces a call runs wholly in the ``Agent`` (:attr:`~kora.agent.turn.TurnRequest.direct_first`):
its output spec checks and retries the answer, and the forced choice binds its first step only. The client's
sampling settings go with every request on both stages. Client calls are stored as ``tool_call`` events; the
client's results open the next turn (:meth:`AgentRuntime._prepare`).

Turns in one session run one at a time (a later turn sees the earlier one); turns in different sessions run
concurrently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError
from pydantic_ai import DeferredToolResults, ModelMessage, ModelResponse, ToolApproved, ToolDenied
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage

from kora.agent.approval_calls import EXPIRED, Decision, PendingApproval
from kora.agent.approval_records import paused_from_record, paused_record
from kora.agent.approvals import (
    ApprovalStore,
    CarriedBudget,
    PausedTurn,
    TaskRef,
    check_decider,
)
from kora.agent.budget import Prices, TurnBudget, own_limits
from kora.agent.chat_model import KoraChatModel
from kora.agent.history import events_to_messages, memory_instructions, replay_to_messages
from kora.agent.loop import AgenticLoop, LoopResult, steps_usage, text_delta, turn_error, turn_settings
from kora.agent.recorder import TurnRecorder, prompt_request
from kora.agent.settings import AgentSettings
from kora.agent.telemetry import (
    AgentTracing,
    TurnSpan,
    observe_memory,
    observe_sessions,
    record_approval_decided,
    record_approvals_requested,
    record_budget_exhausted,
    record_turn_spend,
)
from kora.agent.turn import ClientCall, Recalled, ToolStep, TurnOutcome, TurnRequest
from kora.agent.turn_log import log_turn
from kora.core.errors import (
    ApprovalConflict,
    BudgetExhausted,
    Forbidden,
    JournalUnavailable,
    KoraError,
    RequestError,
    StepLimitReached,
    TurnCancelled,
    Unavailable,
)
from kora.core.events import EventType, MemoryEvent, tool_call_id
from kora.memory import MEMORY_UNAVAILABLE, SESSION_FORBIDDEN, Memory, Prompt, Request

log = logging.getLogger("kora.agent")


class SessionLocks:
    """One asyncio lock per session id, dropped when no turn holds or waits for it. The number of locks is the
    ``kora.agent.active_sessions`` metric."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        observe_sessions(self)

    def __len__(self) -> int:
        """Sessions with a turn holding or waiting for their lock."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lock for the duration of the ``async with`` block."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


def client_calls(turn: TurnRequest, response: ModelResponse) -> tuple[ClientCall, ...]:
    """The calls of a first answer when every call is of a client tool (the turn then ends with them; a call of
    one of the agent's own tools hands the answer to the loop, which runs those and defers the client's)."""
    if not response.tool_calls or not turn.client_tools:
        return ()
    names = {tool.name for tool in turn.client_tools}
    if any(call.tool_name not in names for call in response.tool_calls):
        return ()
    return tuple(ClientCall(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in response.tool_calls)


def ends_turn(response: ModelResponse) -> bool:
    """True when a first answer ends the turn by itself: non-blank text and no tool calls."""
    return not response.tool_calls and bool((response.text or "").strip())


class AgentRuntime:
    """Runs turns for one agent. Create, ``await start()``, use, ``await close()``.

    Errors: :meth:`run` and :meth:`stream` raise :class:`~kora.core.errors.TurnError` (``ModelError``,
    ``ModelTimeout``, or an internal error) after storing the turn's ``error`` event, and
    :class:`~kora.core.errors.Forbidden` with nothing stored when the memory store refuses the session as another
    user's (``session_forbidden``, :mod:`kora.memory.remote`). A spent step budget is
    not an error of the request: the turn ends with ``finish_reason = "length"``, a message saying so and the
    usage really spent (also stored as an ``error`` event); A2A ends its task ``failed``. However a turn ends,
    the events of every step that ran (tool calls and results) are stored before its ``error`` event.
    """

    def __init__(self, settings: AgentSettings, memory: Memory, tracing: AgentTracing | None = None) -> None:
        self.settings = settings
        self.memory = memory
        tracing = tracing or AgentTracing.from_env(settings.agent_name, settings.model_name)
        self.tracing = replace(tracing, trace_memory=memory.remote)
        observe_memory(memory, settings.agent_name)
        self.model = KoraChatModel.of(settings, self.tracing.model_requests(settings.model_api_url))
        self.loop = AgenticLoop(settings, memory, self.model, self.tracing)
        self.recorder = TurnRecorder(memory, self.loop.delegation.tool_agents, self.tracing)
        self._direct = settings.agent_direct_first_request
        self._prices = Prices.of(settings)
        self._locks = SessionLocks()
        self.approvals = ApprovalStore()
        #: How a paused turn that waits in an A2A task goes on in it once decided (set by the A2A server): given
        #: the turn, its :attr:`PausedTurn.resumer`. Used for the turns loaded from the journal.
        self.task_resumer: Callable[[PausedTurn], Callable[[PausedTurn], Awaitable[TurnOutcome | None]]] | None = None
        self._expiries: set[asyncio.Task[None]] = set()
        #: The keys of the turns of this process being written to the journal as they pause (not held here yet).
        self._pausing: set[str] = set()

    async def start(self) -> None:
        """Connect the tool servers (each tried once; failures are retried in the background), then take up the
        paused turns the approval journal keeps (their calls listed and decided here, expiring on time)."""
        await self.loop.start()
        await self.load_paused()

    async def load_paused(self) -> int:
        """Keep the paused turns of the approval journal this process does not know yet (an agent that restarted,
        or another replica's turns); the number taken up. Their expiry is timed here too: a turn expired meanwhile
        is rejected at once. Without a journal: 0."""
        journal = self.approvals.journal
        if journal is None:
            return 0
        found = []
        for record in await journal.load(skip={p.key for p in self.approvals.paused_turns()} | self._pausing):
            try:
                paused = paused_from_record(record)
            except ValidationError as error:
                log.error("a paused turn of the approval journal cannot be read back, skipped: %s", error)
                continue
            # Checked after the query: a turn of this process may have paused (or resumed) meanwhile.
            if paused.key not in self._pausing and not self.approvals.knows(paused):
                found.append(paused)
        for paused in found:
            self._watch(paused)
            if paused.decided:  # every call was decided before the process that held it stopped
                self._expire(paused)
        return len(found)

    async def sync_paused(self) -> None:
        """Bring the paused turns kept here in line with the approval journal, which every replica shares: forget
        those another process resumed (no longer in the journal) and take up those another process paused. Two
        queries (the keys kept, then the records of the turns not held here); nothing without a journal.

        Only a turn held here before the keys were read is dropped for missing from them: a turn held here is in the
        journal from before it is held (:meth:`_keep` writes it first), so the query saw it unless another process
        took it since; a turn that paused here while the query ran may be missing from its answer and is no other
        process's to resume."""
        journal = self.approvals.journal
        if journal is None:
            return
        held = {paused.key for paused in self.approvals.paused_turns()}
        kept = await journal.keys()
        for paused in self.approvals.paused_turns():
            if paused.key in held and paused.key not in kept:
                self.approvals.drop(paused)
        await self.load_paused()

    async def close(self) -> None:
        """Close tool-server sessions and HTTP clients; stop waiting for approvals."""
        for paused in self.approvals.paused_turns():
            if paused.timer is not None:
                paused.timer.cancel()
        for task in list(self._expiries):
            task.cancel()
        await self.loop.close()
        await self.model.aclose()

    def problems(self) -> list[str]:
        """Why the agent cannot fully serve now (empty when ready)."""
        return self.loop.problems()

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every tool the model can call now: ``{name, description, parameters, source}``."""
        return self.loop.tool_definitions()

    def check(self, turn: TurnRequest) -> None:
        """Refuse a turn the agent's tools make impossible before anything runs or is stored (see
        :meth:`~kora.agent.loop.AgenticLoop.check`). Raises :class:`~kora.core.errors.RequestError` (400)."""
        self.loop.check(turn)

    async def run(self, turn: TurnRequest, resume: PausedTurn | None = None, *, checked: bool = False) -> TurnOutcome:
        """Run a turn to its end and return the answer (the model is asked for whole responses). With
        ``resume``, a paused turn whose calls are all decided goes on instead (``turn`` is then its turn:
        :meth:`decide`). A new turn in a session whose turn waits for approvals is refused first
        (:meth:`refuse_waiting`, unless the caller did: ``checked``)."""
        if resume is None and not checked:
            await self.refuse_waiting(turn.session_id)
        with self.tracing.turn(turn.session_id) as span:
            outcome = await _outcome(self._turn(turn, span, None, resume, streaming=False, tool_steps=False))
            if span is not None:
                span.finish(outcome)
            return outcome

    async def stream(
        self,
        turn: TurnRequest,
        prepared: Callable[[], Awaitable[None]] | None = None,
        resume: PausedTurn | None = None,
        *,
        checked: bool = False,
    ) -> AsyncGenerator[str | TurnOutcome]:
        """Run a turn, yielding answer text deltas as the model streams them, then the :class:`TurnOutcome`.

        Tool calls and delegation happen inside the turn and yield no text. Closing the iterator early
        (a client that went away) cancels the model request and tool calls in flight; the steps that ran are
        stored with a ``cancelled`` error event. ``prepared`` is awaited once memory has given the turn its
        context, before the model is asked: a caller that must refuse a turn whose memory cannot be read (A2A in
        strict mode) publishes nothing before it. ``resume`` and ``checked``: as :meth:`run`'s.
        """
        if resume is None and not checked:
            await self.refuse_waiting(turn.session_id)
        with self.tracing.turn(turn.session_id) as span:
            async with aclosing(self._turn(turn, span, prepared, resume, streaming=True, tool_steps=False)) as items:
                async for item in items:
                    if isinstance(item, TurnOutcome):
                        if span is not None:
                            span.finish(item)
                    elif not isinstance(item, str):
                        continue  # no tool steps without tool_steps; narrows the type
                    yield item

    async def stream_steps(
        self, turn: TurnRequest, resume: PausedTurn | None = None, *, checked: bool = False
    ) -> AsyncGenerator[str | ToolStep | TurnOutcome]:
        """:meth:`stream`, also yielding each call of the agent's own tools (MCP, delegation, memory) as it starts
        (:class:`~kora.agent.turn.ToolCalled`) and as it returns (:class:`~kora.agent.turn.ToolReturned`), in the
        order they happen. Client tool calls are not steps: the outcome carries them. ``resume`` and ``checked``:
        as :meth:`run`'s."""
        if resume is None and not checked:
            await self.refuse_waiting(turn.session_id)
        with self.tracing.turn(turn.session_id) as span:
            async with aclosing(self._turn(turn, span, None, resume, streaming=True, tool_steps=True)) as items:
                async for item in items:
                    if span is not None and isinstance(item, TurnOutcome):
                        span.finish(item)
                    yield item

    async def _turn(
        self,
        turn: TurnRequest,
        span: TurnSpan | None,
        prepared: Callable[[], Awaitable[None]] | None,
        resume: PausedTurn | None,
        *,
        streaming: bool,
        tool_steps: bool,
    ) -> AsyncGenerator[str | ToolStep | TurnOutcome]:
        """A turn, written once for :meth:`run`, :meth:`stream` and :meth:`stream_steps`: the session's lock held,
        its two stages (module docstring), its end stored whichever stage ended it, then its outcome yielded last.

        ``streaming``: the model is asked for streamed responses and their text deltas are yielded as they come
        (a failed turn's message too, before its outcome); else only the outcome is yielded. ``tool_steps``: the
        recalled memory and each call of the agent's own tools are yielded as well (streaming only). ``prepared``:
        as :meth:`stream`'s.
        """
        if span is not None and resume is not None:
            span.resumed(resume)
        async with self._locks.hold(turn.session_id):
            if resume is None:  # again: a turn that waited for the lock may have paused meanwhile
                self.check_not_waiting(turn.session_id)
            else:
                await self.take(resume)
            recorded = False
            progress = _Progress(budget=self.budget(turn, resume))
            try:
                turn, messages, prompt_at, recalled = await self._opened(turn, resume)
                if tool_steps and recalled is not None:
                    yield recalled
                if prepared is not None:
                    await prepared()
                progress.messages = messages[prompt_at:]
                said_text = False
                # A turn with a time budget runs wholly in the loop, whose model requests and tool calls are cut at
                # its deadline (BudgetGuard): the direct request streams to the client from within this generator,
                # where no timeout can span the reader's own code.
                if resume is None and self._direct and turn.direct_first and progress.budget.limits.deadline is None:
                    parameters = self.loop.request_parameters(turn)
                    # Prepared as the Agent prepares every request (pydantic-ai's notes on framing lookalikes).
                    sent = self.model.prepare_messages(messages, parameters)
                    progress.budget.check_before_request(progress.usage)
                    with self.tracing.first_step(span):
                        if streaming:
                            async with self.model.request_stream(sent, _settings(turn), parameters) as streamed:
                                async for event in streamed:
                                    if text := text_delta(event):
                                        said_text = True
                                        yield text
                                first = streamed.get()
                        else:
                            first = await self.model.request(sent, _settings(turn), parameters)
                    calls = client_calls(turn, first)
                    if calls or ends_turn(first):
                        outcome = await self._ended(
                            turn,
                            [*messages[prompt_at:], first],
                            first.text or "",
                            _usage_of(first),
                            progress,
                            first.finish_reason,
                            calls,
                        )
                        recorded = True
                        yield outcome
                        return
                    messages, progress.usage = _hand_over(messages, first)
                    progress.messages = messages[prompt_at:]
                decided = _decisions(resume)
                if not streaming:
                    result = await self.loop.run(
                        turn, messages, progress.usage, progress.steps, progress.budget, decided
                    )
                    outcome = await self._loop_ended(turn, messages, prompt_at, result, progress)
                    recorded = True
                    yield outcome
                    return
                loop_stream = self.loop.stream(
                    turn,
                    messages,
                    progress.usage,
                    progress.steps,
                    progress.budget,
                    decided,
                    said_text=said_text,
                    tool_steps=tool_steps,
                )
                async with aclosing(loop_stream) as items:
                    async for item in items:
                        if not isinstance(item, LoopResult):
                            yield item
                        else:
                            outcome = await self._loop_ended(turn, messages, prompt_at, item, progress)
                            recorded = True
                            yield outcome
            except GeneratorExit:
                # The consumer stopped reading (aclose): the requests above are already cancelled. Keep the record,
                # unless the turn had ended and was stored before the consumer left.
                if not recorded:
                    stopped = TurnCancelled("The turn was stopped before it finished.")
                    spent = steps_usage(progress.usage, progress.steps)
                    self._account(spent, progress)
                    await self.recorder.record(turn, progress.ran(), stopped, tokens=_tokens(spent))
                    log_turn(turn, progress.ran(), spent, stopped.code)
                raise
            except (Exception, asyncio.CancelledError) as error:
                outcome = await self._failed(turn, error, progress)
                if streaming:
                    yield outcome.text
                yield outcome

    async def _loop_ended(
        self, turn: TurnRequest, messages: list[ModelMessage], prompt_at: int, result: LoopResult, progress: _Progress
    ) -> TurnOutcome:
        """:meth:`_ended` for a turn the agentic loop ended with ``result`` (``messages``: what the loop continued
        from, the turn's opening from ``prompt_at`` on); a turn whose calls wait for approval is paused."""
        return await self._ended(
            turn,
            [*messages[prompt_at:], *result.new_messages],
            result.text,
            result.usage,
            progress,
            result.finish_reason,
            result.calls,
            paused=self._pause(turn, [*messages, *result.new_messages], result, progress),
        )

    def _account(self, usage: RunUsage, progress: _Progress) -> None:
        """Add a turn's own model usage to the agent's spend metrics, once per turn (``progress`` remembers it: a
        turn whose store write fails after it was counted is not counted again as it fails)."""
        if progress.accounted:
            return
        progress.accounted = True
        prices = self._prices
        cost = prices.cost(usage.input_tokens, usage.output_tokens) if prices is not None else None
        record_turn_spend(self.settings.agent_name, usage.input_tokens, usage.output_tokens, cost)

    def budget(self, turn: TurnRequest, resume: PausedTurn | None = None) -> TurnBudget:
        """A budget for ``turn``, starting now: the agent's own ``BUDGET_MAX_*``, or the smaller one a delegating
        agent gave (:attr:`~kora.agent.turn.TurnRequest.budget`), priced at the model's prices when known. For a
        paused turn that resumes (``resume``), what is left of the budget it paused with: its spend so far is
        charged to the new one, and its time budget goes on from what was left when it paused."""
        started = time.time()
        carried = resume.budget if resume is not None else None
        if carried is not None:
            left = carried.seconds_left
            limits = replace(carried.limits, deadline=None if left is None else started + left)
            return TurnBudget(limits, self._prices, started, charged=carried.spent)
        limits = own_limits(self.settings, started)
        return TurnBudget(limits.tighter(turn.budget), self._prices, started)

    async def _opened(
        self, turn: TurnRequest, resume: PausedTurn | None
    ) -> tuple[TurnRequest, list[ModelMessage], int, Recalled | None]:
        """:meth:`_prepare`, or for a paused turn that resumes: its turn as it ran and every message of it so far
        (stored already: the resumed turn stores what follows), having recalled nothing anew."""
        if resume is None:
            return await self._prepare(turn)
        return resume.turn, list(resume.messages), len(resume.messages), None

    def _pause(
        self, turn: TurnRequest, messages: list[ModelMessage], result: LoopResult, progress: _Progress
    ) -> PausedTurn | None:
        """A paused turn for a loop result whose calls wait for approval (None: the turn did not pause), carrying
        what the turn spent of its budget (``progress.budget``, with the loop's usage ``result.usage``)."""
        if not result.approvals:
            return None
        calls = [
            (call.tool_call_id, call.name, self.loop.approval_target(call.name), call.arguments)
            for call in result.approvals
        ]
        paused = PausedTurn.of(turn, messages, calls, self.settings.tool_approval_timeout_seconds)
        budget = progress.budget
        deadline = budget.limits.deadline
        paused.budget = CarriedBudget(
            replace(budget.limits, deadline=None),
            budget.spent(result.usage),
            None if deadline is None else max(deadline - time.time(), 0.0),
        )
        return paused

    async def _keep(self, paused: PausedTurn) -> None:
        """Keep ``paused`` until its calls are decided (in the journal too, when there is one), rejecting those
        still waiting when it expires."""
        record_approvals_requested(self.settings.agent_name, len(paused.approvals))
        # Written first (a sync drops a turn held here that the journal lacks), and marked pausing meanwhile: a
        # load that reads the row before the turn is held here leaves it to this process.
        self._pausing.add(paused.key)
        try:
            if self.approvals.journal is not None:
                await self.approvals.journal.put(paused.key, paused.turn.session_id, paused_record(paused))
            self._watch(paused)
        finally:
            self._pausing.discard(paused.key)

    def _watch(self, paused: PausedTurn) -> None:
        """Keep ``paused`` in the process, its expiry timed."""
        self.approvals.add(paused)
        delay = max(min(a.expires_at for a in paused.approvals) - time.time(), 0.0)
        paused.timer = asyncio.get_running_loop().call_later(delay, self._expire, paused)

    async def take(self, paused: PausedTurn) -> None:
        """Take a decided paused turn from the journal before it resumes (once: a turn taken already is kept).
        Raises :class:`ApprovalConflict` when another process took it first (it resumes there), with nothing run
        or announced here; a surface that announces the resumption (A2A's ``working``) takes it first."""
        if paused.taken:
            return
        journal = self.approvals.journal
        if paused.written is not None:
            await asyncio.shield(paused.written)  # a decision's write lands before the row goes
        if journal is not None and not await journal.take(paused.key):
            raise ApprovalConflict("The paused turn was resumed by another replica of the agent.")
        paused.taken = True

    async def held_in(self, paused: PausedTurn, task: TaskRef) -> None:
        """Note the A2A ``task`` a paused turn waits in (written to the journal, so the turn resumes in its task
        after a restart)."""
        paused.task = task
        if self.approvals.journal is not None:
            await self.approvals.journal.update(paused.key, paused_record(paused))

    async def forget(
        self, dropped: list[PausedTurn], *, session_id: str | None = None, user_id: str | None = None
    ) -> None:
        """Drop paused turns :meth:`ApprovalStore.forget_session` / ``forget_user`` dropped from the journal too,
        and every other turn the journal keeps of ``session_id`` / ``user_id`` (paused by another replica, or not
        loaded here yet): an erasure leaves none of them to be listed or resumed anywhere."""
        journal = self.approvals.journal
        if journal is not None:
            for paused in dropped:
                await journal.take(paused.key)
            if session_id is not None or user_id is not None:
                await journal.erase(session_id=session_id, user_id=user_id)

    def _persist(self, paused: PausedTurn) -> None:
        """Write a paused turn's decisions so far to the journal, in the background, in order, and only over its
        row (an ``UPDATE``: a turn taken meanwhile is not brought back); its last decision resumes it instead, which
        takes it from the journal once the writes before have landed."""
        journal = self.approvals.journal
        if journal is None:
            return
        record = paused_record(paused)
        before = paused.written

        async def write() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)  # in order: the newest record is the last
            await journal.update(paused.key, record)

        task = asyncio.create_task(write(), name="kora-approval-journal")
        paused.written = task
        self._expiries.add(task)
        task.add_done_callback(self._expiries.discard)

    def _expire(self, paused: PausedTurn) -> None:
        task = asyncio.create_task(self._expired(paused), name="kora-approval-expired")
        self._expiries.add(task)
        task.add_done_callback(self._expiries.discard)

    async def _expired(self, paused: PausedTurn) -> None:
        """Reject the calls of ``paused`` still waiting and resume the turn (its answer is stored; a surface that
        left a :attr:`PausedTurn.resumer` resumes it its own way)."""
        paused.timer = None
        if self.approvals.paused_turn(paused.approvals[0].id) is not paused:
            return  # forgotten with its erased session or user meanwhile
        seconds = self.settings.tool_approval_timeout_seconds
        reason = f"nobody approved the call within {seconds:g} seconds"
        for approval in paused.approvals:
            if approval.decision is None:
                self.approvals.decide(approval.id, Decision(False, reason), None, by=EXPIRED)
                record_approval_decided(self.settings.agent_name, approval)
        if paused.decided:
            await self.resume(paused, notify=True)

    def decide(self, approval_id: str, decision: Decision, user_id: str | None, *, by: str = "") -> PausedTurn:
        """Record a person's ``decision`` on a pending call (see :meth:`ApprovalStore.decide` for who may, and
        the errors raised: 404, 403, 409, nothing changed). Returns the call's paused turn; once
        :attr:`PausedTurn.decided`, the caller resumes it (:meth:`resume`, or :meth:`run` / :meth:`stream` with
        ``resume``) and it is no longer pending."""
        paused = self.approvals.decide(approval_id, decision, user_id, by=by)
        record_approval_decided(self.settings.agent_name, next(a for a in paused.approvals if a.id == approval_id))
        if paused.decided:
            self.approvals.release(paused)
            if paused.timer is not None:
                paused.timer.cancel()
                paused.timer = None
        else:
            self._persist(paused)
        return paused

    def check_not_waiting(self, session_id: str) -> None:
        """Raise :class:`ApprovalConflict` (409, code ``approval_pending``) when a turn of ``session_id`` held in this
        process waits for approvals: the session goes on once they are decided (or expire), not with another turn
        beside them. :meth:`refuse_waiting` also looks in the shared journal."""
        paused = self.approvals.in_session(session_id)
        if paused is not None:
            raise _waiting(paused)

    async def refuse_waiting(self, session_id: str) -> None:
        """:meth:`check_not_waiting`, then, with the shared journal, the same refusal for a turn of ``session_id``
        that waits on another replica (or here, not loaded yet): one query by the journal's ``(agent, session_id)``
        index; none without a journal, nor for an agent whose ``TOOL_APPROVAL_REQUIRED`` names no tool (its turns
        never pause; turns an earlier configuration paused are loaded at start and checked here). A turn decided
        here and about to resume (its row not taken yet) is no refusal: the new turn waits for the session behind
        it. A journal that cannot be reached is logged and the check is this process's alone."""
        self.check_not_waiting(session_id)
        journal = self.approvals.journal
        if journal is None or not self.loop.approval:
            return
        try:
            record = await journal.waiting_in(session_id)
        except JournalUnavailable as error:
            log.warning(
                "a new turn in session %s was checked against this process's paused turns only: %s", session_id, error
            )
            return
        if record is None:
            return
        try:
            paused = paused_from_record(record)
        except ValidationError as error:
            log.error("a paused turn of the approval journal cannot be read back, skipped: %s", error)
            return
        if not self.approvals.knows(paused):
            raise _waiting(paused)

    def refuse_unknown_decisions(self, turn: TurnRequest) -> None:
        """Refuse the tool results of ``turn`` (Chat Completions or AG-UI ``tool`` messages, Responses
        ``function_call_output`` items) that answer a call of one of the agent's own tools (by the name the model
        sees; client tools, which the request declares, are not refused) while no paused turn of the session waits
        on that call nor decided it: the agent runs its own tools itself and never hands a client one of their
        calls but to decide it, so such a result is a decision the agent does not hold (sent without the session
        the call was made in, or forgotten in a restart) or a result made up for a call that never ran. Given to
        the model it would pass for the tool's output, and stored as a result of the tool.

        Raises, with nothing run or stored: :class:`ApprovalConflict` (409, code ``approval_unknown``) for a call of
        a tool that needs approval (the agent's ``TOOL_APPROVAL_REQUIRED`` patterns);
        :class:`~kora.core.errors.RequestError` (400, code ``invalid_value``) for a call of another of its tools."""
        if not turn.tool_results:
            return
        clients = {tool.name for tool in turn.client_tools}
        own: set[str] | None = None
        paused = self.approvals.in_session(turn.session_id)
        known = {a.tool_call_id for a in paused.approvals} if paused is not None else set()
        for result in turn.tool_results:
            call_id, name = result.tool_call_id, result.tool_name
            if name in clients or call_id in known:
                continue
            if own is None:
                own = {tool["name"] for tool in self.tool_definitions()}
            if name not in own or self.approvals.decided_call(turn.session_id, call_id) is not None:
                continue
            source, slash, tool = self.loop.approval_target(name).partition("/")
            if slash and self.loop.approval.requires(source, tool):
                raise ApprovalConflict(
                    f"The call '{call_id}' of '{name}' waits for no decision in this session: no turn of the session "
                    "holds it (the request does not continue the session the call was made in, or the agent "
                    "restarted since). Send the decision in the session the call was made in: the same X-Session-ID "
                    "header over Chat Completions, its previous_response_id or conversation over Responses; "
                    "GET /approvals lists the calls waiting for a decision, and POST /approvals/{id} decides one.",
                    code="approval_unknown",
                )
            raise RequestError(
                f"Invalid value: the result of call '{call_id}' answers '{name}', one of this agent's own tools, which "
                "the agent runs itself: a client sends results only for the tools it declares in 'tools' (and "
                "decisions for calls waiting for approval, in the session they were made in).",
                code="invalid_value",
            )

    def refuse_decided(self, session_id: str, call_ids: list[str], user_id: str | None) -> None:
        """Raise :class:`ApprovalConflict` (409) when one of ``call_ids`` in ``session_id`` is a call decided
        already (:class:`~kora.core.errors.Forbidden` when it is another user's)."""
        for call_id in call_ids:
            done = self.approvals.decided_call(session_id, call_id)
            if done is not None:
                check_decider(done, user_id)
                raise ApprovalConflict(f"The call '{call_id}' was already {done.status}.")

    def take_decisions(self, turn: TurnRequest) -> PausedTurn | None:
        """The decisions a continuing turn's tool results carry (Chat Completions ``tool`` messages, Responses
        ``function_call_output`` items, each a decision object) on the calls its session's paused turn waits on:
        recorded, and the paused turn returned (resume it once :attr:`PausedTurn.decided`). None when the results
        answer no such call (they are the client's own tools' results).

        Raises, with nothing decided: :class:`~kora.core.errors.RequestError` for a result that is no decision
        object, or for results that decide some calls and answer client tools too; :class:`ApprovalConflict` (409)
        for a call already decided or expired; :class:`~kora.core.errors.Forbidden` (403) for another user's."""
        if not turn.tool_results:
            return None
        paused = self.approvals.in_session(turn.session_id)
        waiting = {a.tool_call_id: a for a in paused.approvals if a.decision is None} if paused is not None else {}
        decisions: list[tuple[PendingApproval, Decision]] = []
        for result in turn.tool_results:
            call_id = result.tool_call_id
            approval = waiting.get(call_id)
            if approval is None:
                done = self.approvals.decided_call(turn.session_id, call_id) or next(
                    (a for a in paused.approvals if a.tool_call_id == call_id) if paused is not None else iter(()), None
                )
                if done is not None:
                    check_decider(done, turn.user_id)
                    raise ApprovalConflict(f"The call '{call_id}' was already {done.status}.")
                continue
            content = result.content if isinstance(result.content, str) else json.dumps(result.content)
            decisions.append((approval, Decision.parse_text(content, f"the result of call '{call_id}'")))
        if not decisions:
            return None
        if len(decisions) != len(turn.tool_results):
            raise RequestError(
                "Invalid value: the tool results decide calls waiting for approval and answer other calls too; "
                "send the decisions alone.",
                code="invalid_decision",
            )
        for approval, _ in decisions:
            check_decider(approval, turn.user_id)
        assert paused is not None
        for approval, decision in decisions:
            self.decide(approval.id, decision, turn.user_id)
        return paused

    async def resume(self, paused: PausedTurn, *, notify: bool = False) -> TurnOutcome | None:
        """Run a decided paused turn to its end, or have its surface resume it (:attr:`PausedTurn.resumer`); its
        outcome (None: it failed). With ``notify`` (the turn resumes on its own: an expiry, a decision over REST),
        errors are logged, not raised."""
        if not paused.decided:
            raise RuntimeError("resume() needs every call of the paused turn decided")
        self.approvals.release(paused)
        if paused.resumer is None and paused.task is not None and self.task_resumer is not None:
            paused.resumer = self.task_resumer(paused)  # a turn of an A2A task, loaded from the journal
        try:
            if paused.resumer is not None:
                return await paused.resumer(paused)
            return await self.run(paused.turn, resume=paused)
        except Exception as error:
            if not notify:
                raise
            if not isinstance(error, KoraError):
                log.exception("a resumed turn in session %s failed", paused.turn.session_id)
            return None

    async def _prepare(self, turn: TurnRequest) -> tuple[TurnRequest, list[ModelMessage], int, Recalled | None]:
        """The turn with what memory recalls (rolling summary, long-term facts) added to its instructions, its first
        request (what the model is shown before the turn: the session's window, else the history the client sent;
        then the turn's opening, :meth:`_opening`), where the turn's own messages start in it (what the turn
        stores) and what was recalled (None: nothing)."""
        limit = self.settings.memory_context_limit
        with self.tracing.memory("recall", turn.session_id):
            context = await self.memory.turn_context(turn.session_id, turn.prompt, limit, turn.user_id)
        recalled = None
        if note := memory_instructions(context):
            turn = replace(turn, system=f"{turn.system}\n\n{note}" if turn.system else note)
            recalled = Recalled(tuple(hit.text for hit in context.facts), bool(context.summary))
        history = self._history(turn, context.events, limit)
        if not turn.tool_results or turn.answered is None:
            return turn, [*history, prompt_request(turn)], len(history), recalled
        # A turn that continues client tool calls opens with the assistant message holding them and the client's
        # results. The calls are stored by this turn unless the session already holds them (the turn that made
        # them stored them; their replay leaves them out, as calls without results, so they are shown again here).
        opening = replay_to_messages([turn.answered, Request(list(turn.tool_results), turn.started)])
        held = await self._holds_calls(turn, context.events)
        return turn, [*history, *opening], len(history) + (1 if held else 0), recalled

    async def _holds_calls(self, turn: TurnRequest, window: list[MemoryEvent]) -> bool:
        """Whether the session already stores the calls ``turn`` answers: looked up in the replay ``window``,
        else among the session's latest ``tool_call`` events (a turn whose own tool steps pushed them out)."""
        assert turn.answered is not None
        wanted = {call.tool_call_id for call in turn.answered.calls}

        def found(events: list[MemoryEvent]) -> bool:
            ids = {tool_call_id(e) for e in events}
            return wanted <= ids

        if found([e for e in window if e.event_type == EventType.TOOL_CALL]):
            return True
        calls = await self.memory.get_session_events(turn.session_id, [EventType.TOOL_CALL], _CALLS_LOOKED_UP)
        return found(calls)

    def _history(self, turn: TurnRequest, events: list[MemoryEvent], limit: int) -> list[ModelMessage]:
        if limit == 0:
            return []
        if events:
            return events_to_messages(events)
        # A client that keeps the conversation itself (plain OpenAI usage) sends it every time.
        steps = turn.client_history[-limit:]
        while steps and isinstance(steps[0], Request) and not any(isinstance(p, Prompt) for p in steps[0].parts):
            steps = steps[1:]  # results whose calls the window cut off: a model API rejects them
        return replay_to_messages(steps)

    async def _ended(
        self,
        turn: TurnRequest,
        messages: list[ModelMessage],
        text: str,
        usage: RunUsage,
        progress: _Progress,
        finish: str | None = None,
        calls: tuple[ClientCall, ...] = (),
        *,
        paused: PausedTurn | None = None,
    ) -> TurnOutcome:
        """Store a turn that reached its answer (``messages``: from its opening on, whichever stage ended it); the
        outcome: ``finish_reason`` ``tool_calls`` with client ``calls``, or with the calls of a ``paused`` turn
        that wait for approval (then kept in :attr:`approvals` until decided or expired), ``length`` when the
        model's last answer was cut by a token limit (pydantic-ai's ``finish``), else ``stop``."""
        self.tracing.end_step()
        self._account(usage, progress)
        reason = "tool_calls" if calls or paused else "length" if finish == "length" else "stop"
        marked = paused.approvals if paused is not None else ()
        await self.recorder.record(turn, messages, tokens=_tokens(usage), finish_reason=reason, approvals=marked)
        log_turn(turn, messages, usage, reason)
        pending: tuple[PendingApproval, ...] = ()
        if paused is not None:
            # Kept once stored: a decision resumes from what the session holds.
            await self._keep(paused)
            pending = tuple(paused.approvals)
            calls = ()  # the client's calls of the same answer come back once the approvals are decided
        return TurnOutcome(
            text,
            reason,
            usage.input_tokens,
            usage.output_tokens,
            usage.requests,
            calls,
            progress.budget.spent(usage),
            pending,
        )

    async def _failed(self, turn: TurnRequest, error: BaseException, progress: _Progress) -> TurnOutcome:
        """Store the turn as far as it went (the steps that ran, then its ``error`` event); the outcome of a spent
        step budget (``finish_reason`` ``length``, the usage really spent), else raise the error as a
        :class:`~kora.core.errors.TurnError` (cancellation is re-raised). A session the memory store refuses
        (:func:`kora.memory.base.check_owner`) is re-raised as it is, with nothing stored."""
        spent = steps_usage(progress.usage, progress.steps)
        self._account(spent, progress)
        if isinstance(error, Forbidden) and error.code == SESSION_FORBIDDEN:
            # The memory store refused the session as another user's: the turn never started, and writing its
            # error event would write to that user's session.
            log_turn(turn, [], spent, error.code)
            raise error
        acknowledged = turn.response is not None and turn.response.acknowledged
        if (
            isinstance(error, Unavailable)
            and error.code == MEMORY_UNAVAILABLE
            and not progress.ran()
            and not acknowledged
        ):
            # Strict mode, the store unreachable before the turn ran: the request is refused, not a turn that
            # failed, so nothing of it is kept (the window and the outbox would bring it back as a failed turn).
            # A background response was answered already (queued): its failure is kept, to be read back.
            log_turn(turn, [], spent, error.code)
            raise error
        if isinstance(error, asyncio.CancelledError):
            stopped = TurnCancelled("The turn was cancelled.")
            await asyncio.shield(self.recorder.record(turn, progress.ran(), stopped, tokens=_tokens(spent)))
            log_turn(turn, progress.ran(), spent, stopped.code)
            raise error
        failure = turn_error(error)
        if isinstance(failure, StepLimitReached):  # the step budget or another budget ran out
            if isinstance(failure, BudgetExhausted):
                record_budget_exhausted(self.settings.agent_name, failure.budget)
                logged = failure.code
            else:
                failure = StepLimitReached(
                    f"I stopped before finishing: this turn reached its limit of "
                    f"{self.settings.agentic_loop_max_steps} model requests."
                )
                logged = "length"
            await self.recorder.record(turn, progress.ran(), failure, tokens=_tokens(spent), finish_reason="length")
            log_turn(turn, progress.ran(), spent, logged)
            return TurnOutcome(
                failure.message,
                "length",
                spent.input_tokens,
                spent.output_tokens,
                spent.requests,
                spent=progress.budget.spent(spent),
                exhausted=failure.budget if isinstance(failure, BudgetExhausted) else None,
            )
        if not isinstance(error, KoraError):
            # internal_error logged the exception under the reference its message names.
            log.error("turn failed in session %s: %s", turn.session_id, failure.message)
        await self.recorder.record(turn, progress.ran(), failure, tokens=_tokens(spent))
        log_turn(turn, progress.ran(), spent, failure.code)
        if failure is error:
            raise failure
        raise failure from error


@dataclass
class _Progress:
    """How far a turn got, so a turn that fails or is cancelled stores the steps that ran: ``messages`` from
    its prompt request up to the loop (the first answer, when it called tools), ``usage`` spent before the loop,
    ``steps``, the loop's messages (filled by :class:`~kora.agent.loop.AgenticLoop` however it ends), and the
    turn's ``budget``; ``accounted`` once its spend is in the agent's metrics."""

    budget: TurnBudget
    accounted: bool = False
    messages: list[ModelMessage] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    steps: list[ModelMessage] = field(default_factory=list)

    def ran(self) -> list[ModelMessage]:
        """The turn's messages so far, from its prompt request on (empty before it was prepared)."""
        return [*self.messages, *self.steps]


async def _outcome(items: AsyncGenerator[str | ToolStep | TurnOutcome]) -> TurnOutcome:
    """The outcome a whole (not streamed) turn's items end with: the only item :meth:`AgentRuntime._turn` yields
    then. The items are read to their end, so the turn's lock is released before this returns."""
    outcome: TurnOutcome | None = None
    async with aclosing(items):
        async for item in items:
            if isinstance(item, TurnOutcome):
                outcome = item
    assert outcome is not None, "every path of a turn yields its outcome or raises"
    return outcome


def _hand_over(messages: list[ModelMessage], first: ModelResponse) -> tuple[list[ModelMessage], RunUsage]:
    """What the Agent continues from after a first answer that did not end the turn, and the usage so far.

    An answer with tool calls is appended (the Agent runs the calls). An empty or blank answer is not: the Agent
    asks again from the prompt, with that request counted, as a model that said nothing gives nothing to keep.
    """
    return ([*messages, first] if first.tool_calls else messages), _usage_of(first)


def _tokens(usage: RunUsage) -> tuple[int, int]:
    """``usage``'s (input, output) tokens, as the recorder keeps them."""
    return usage.input_tokens, usage.output_tokens


def _usage_of(response: ModelResponse) -> RunUsage:
    """The turn's usage after its first request: one request and that response's tokens."""
    return RunUsage(requests=1, input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens)


#: How many of a session's latest ``tool_call`` events a continuing turn looks through for the calls it answers.
_CALLS_LOOKED_UP = 64


def _decisions(paused: PausedTurn | None) -> DeferredToolResults | None:
    """The decisions on a paused turn's calls as pydantic-ai takes them: an approval runs the call once (with the
    edited arguments, if any); a rejection is the call's result, the model being told it was rejected and why."""
    if paused is None:
        return None
    results: dict[str, bool | ToolApproved | ToolDenied] = {}
    for approval in paused.approvals:
        decision = approval.decision
        assert decision is not None
        if decision.approve:
            results[approval.tool_call_id] = ToolApproved(override_args=decision.arguments)
        else:
            who = "" if approval.decided_by == EXPIRED else " by a person"
            because = f": {decision.reason}" if decision.reason else "."
            results[approval.tool_call_id] = ToolDenied(f"Error: the call was rejected{who}{because}")
    return DeferredToolResults(approvals=dict(results))


def _waiting(paused: PausedTurn) -> ApprovalConflict:
    """The refusal of a new turn in the session of ``paused``, naming the calls it waits on (all of them when every
    one is decided: the turn is about to resume)."""
    calls = [a for a in paused.approvals if a.decision is None] or paused.approvals
    waiting = ", ".join(f"{a.tool_name} ({a.id})" for a in calls)
    return ApprovalConflict(
        f"The session waits for decisions on tool calls: {waiting}. Decide them first.", code="approval_pending"
    )


def _settings(turn: TurnRequest) -> ModelSettings | None:
    """The settings of a turn's direct first request: the client's sampling fields and a ``tool_choice`` of
    ``none`` (a turn whose ``tool_choice`` forces a call never sends it directly)."""
    settings = turn_settings(turn)
    assert not callable(settings)
    return settings
