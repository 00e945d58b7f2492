"""Runs Kora turns as A2A tasks (docs/a2a.md "States", "Errors").

:class:`KoraAgentExecutor` is the SDK's ``AgentExecutor`` for Kora: the SDK creates the task
(``submitted``); the executor moves it to ``working``, runs one turn of :class:`~kora.agent.runtime.AgentRuntime`
and ends it ``completed`` with the answer as an artifact and as the status message, or ``failed`` with the
reason in the status message (the runtime has already stored the ``error`` memory event): a turn error, or a
turn that stopped short of an answer (``finish_reason`` other than ``stop``: the step budget ran out).

* The task's ``contextId`` is the memory session, so a later task in the same context sees earlier turns.
* ``tasks/cancel``: the SDK cancels the asyncio task running :meth:`KoraAgentExecutor.execute`; that closes
  the turn's stream, which aborts the model request and tool calls in flight, and :meth:`cancel` records
  ``canceled``.
* The turn's user is the request's verified identity (see :mod:`kora.agent.identity`), which the endpoint
  resolved before the SDK saw the request; the session is created under it. A context that belongs to another
  user is refused by the endpoint before the task exists (a JSON-RPC error); one the memory store refuses when
  the turn reads it ends the task ``failed``, with nothing stored.
* Memory is read before the task is published: in strict failure mode, a memory store that cannot be reached
  refuses the request with a JSON-RPC error (``-32603``, ``data.type`` ``memory_unavailable``; the chat
  endpoint's 503) instead of answering with a task (:data:`REFUSALS`); the SDK still files that task, ``failed``.
  Once the agent knows the store is gone, the endpoint refuses a message before the SDK sees it.
* A task delegated by another Kora agent names its parent in message metadata ``kora.delegated_by`` (or the
  ``X-Kora-Delegated-By`` header); the turn is then stored as ``task_delegation_received``.
* A turn that pauses at tool calls needing a person's approval (:mod:`kora.agent.approvals`) leaves its task
  ``input-required``, the status message naming each call (a text part, and a data part ``{"approvals": [...]}``
  as ``GET /approvals`` lists them). The next message on the task decides the oldest waiting call with a data part
  ``{"decision": "approve" | "reject", "reason"?, "arguments"?}``; once every call is decided the turn resumes
  and the task goes on (``working``, then ``completed``, ``failed`` or ``input-required`` again). A decision made
  elsewhere (``POST /approvals/{id}``) or an expiry resumes the turn on its task too, through the SDK's request
  handler: a message on the task (data part ``{"decisions": [...]}``, metadata ``kora.resume``) that only the
  agent itself can send. With the shared task store the paused turn is kept in the store's database with its task
  (:class:`~kora.agent.approvals.TaskRef`), so an agent that restarted, or another replica, takes the decision and
  resumes the turn in its task the same way.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from a2a.helpers.proto_helpers import new_data_part, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import RequestHandler
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from kora.agent.approval_calls import Decision
from kora.agent.approvals import PausedTurn, TaskRef
from kora.agent.budget import BUDGET_METADATA, SPENT_METADATA, Limits
from kora.agent.identity import ANONYMOUS, Identity, open_session
from kora.agent.turn import TurnOutcome, TurnRequest
from kora.core.errors import ApprovalConflict, KoraError, RequestError
from kora.core.protocol import DELEGATED_BY_HEADER, DELEGATED_BY_METADATA
from kora.memory import MEMORY_UNAVAILABLE

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime

log = logging.getLogger("kora.agent.a2a")

ANSWER_ARTIFACT = "answer"

RuntimeGetter = Callable[[], Awaitable["AgentRuntime"]]

_tracer = trace.get_tracer("kora.agent.a2a")

#: Key of the request's :class:`~kora.agent.identity.Identity` in the SDK call context's ``state``.
IDENTITY_STATE = "kora.identity"
#: Key of the task's owner in a call context's ``state``, for writes no request makes (an expired lease, a turn
#: resumed after a restart).
OWNER_STATE = "kora.a2a.owner"


def owner_of(context: ServerCallContext) -> str:
    """The owner tasks are filed under: the call context's user (the SDK's rule), or the owner a background write
    names in ``state[OWNER_STATE]``."""
    owner = context.state.get(OWNER_STATE)
    return owner if isinstance(owner, str) else resolve_user_scope(context)


def delegated_by(context: RequestContext) -> str | None:
    """The parent agent's name when the task is delegated (message metadata first, then the header)."""
    metadata = context.message.metadata if context.message is not None else None
    if metadata is not None and DELEGATED_BY_METADATA in metadata:
        value = metadata[DELEGATED_BY_METADATA]
        if isinstance(value, str) and value:
            return value
    headers = context.call_context.state.get("headers", {})
    value = headers.get(DELEGATED_BY_HEADER.lower()) if isinstance(headers, dict) else None
    return value if isinstance(value, str) and value else None


#: Integers up to this magnitude survive protobuf's JSON numbers (doubles) exactly.
_EXACT_INTEGERS = 2**53


def _json_numbers(value: object) -> object:
    """``value`` (a protobuf ``Value`` as Python) with integral doubles below 2^53 written back as integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _EXACT_INTEGERS:
        return int(value)
    if isinstance(value, list):
        return [_json_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_numbers(item) for key, item in value.items()}
    return value


def given_budget(context: RequestContext) -> Limits | None:
    """The budget a delegating agent gave in message metadata ``kora.budget`` (None: none given). The endpoint
    already refused one that cannot be read."""
    metadata = context.message.metadata if context.message is not None else None
    if metadata is None or BUDGET_METADATA not in metadata:
        return None
    return Limits.from_metadata(_json_numbers(MessageToDict(metadata)[BUDGET_METADATA]))


def prompt_of(message: Message | None) -> str:
    """The turn's prompt from an A2A message: text parts as they are, data parts as compact JSON text (integers
    exact below 2^53), one part per line. File parts never get here: the endpoint refuses them (-32005)."""
    if message is None:
        return ""
    lines: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            lines.append(part.text)
        elif kind == "data":
            data = _json_numbers(MessageToDict(part.data))
            lines.append(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines)


def decision_of(message: Message | None) -> Decision:
    """The decision a message on an ``input-required`` task carries (:func:`decision_in`)."""
    parts = message.parts if message is not None else []
    return decision_in([_json_numbers(MessageToDict(p.data)) for p in parts if p.WhichOneof("content") == "data"])


def decision_in(data: list[object]) -> Decision:
    """The decision of a message whose data parts hold ``data``: exactly one, a decision object
    (:meth:`~kora.agent.approvals.Decision.parse`). Raises :class:`~kora.core.errors.RequestError` (-32602)."""
    if len(data) != 1:
        raise RequestError(
            "Invalid params: the task waits for a decision on a tool call: send one data part "
            '{"decision": "approve" | "reject", "reason": "...", "arguments": {...}}.',
            code="invalid_decision",
        )
    return Decision.parse(data[0], "the decision data part")


def approval_message(updater: TaskUpdater, paused: PausedTurn) -> Message:
    """The status message of a task waiting for decisions: a text part naming each waiting call (tool and
    arguments), and a data part ``{"approvals": [...]}`` as ``GET /approvals`` lists them."""
    waiting = [a for a in paused.approvals if a.decision is None]
    text = "Waiting for approval: " + "; ".join(f"{a.tool_name}({a.arguments}) [{a.id}]" for a in waiting)
    return updater.new_agent_message(
        [new_text_part(text), new_data_part({"approvals": [a.to_json() for a in waiting]})]
    )


#: Message metadata key of the message that resumes a task whose calls were decided elsewhere (its value: a
#: secret of the paused turn, so no client can send it).
RESUME_METADATA = "kora.resume"


def identity_of(context: RequestContext) -> Identity:
    """The identity the request was verified with (:mod:`kora.agent.identity`), put in the call context's
    ``state`` by the endpoint; :data:`~kora.agent.identity.ANONYMOUS` when there is none."""
    identity = context.call_context.state.get(IDENTITY_STATE)
    return identity if isinstance(identity, Identity) else ANONYMOUS


class KoraAgentExecutor(AgentExecutor):
    """Executes A2A tasks with the agent runtime returned by ``runtime`` (awaited per task, so tasks sent
    while the agent starts wait for it, like chat requests)."""

    def __init__(self, runtime: RuntimeGetter, agent_name: str) -> None:
        self._runtime = runtime
        self._agent_name = agent_name
        #: The SDK request handler serving this executor (set by the endpoint): how a turn resumed by a decision
        #: made elsewhere goes on in its task.
        self.handler: RequestHandler | None = None
        # Tasks waiting for decisions: task id -> (the paused turn, the secret of its resume message).
        self._paused: dict[str, tuple[PausedTurn, str]] = {}
        # What the turns resumed through the handler ended with, by that secret, for the decision's caller.
        self._resumed: dict[str, TurnOutcome | None] = {}
        #: The runtime once it has started (:meth:`attach`): its approval store knows the paused turns loaded from
        #: the journal, which this executor did not pause itself.
        self.runtime: AgentRuntime | None = None

    def attach(self, runtime: AgentRuntime) -> None:
        """Resume the runtime's paused turns of A2A tasks that this executor did not pause (loaded from the
        journal) in their tasks (:meth:`resumer_of`)."""
        self.runtime = runtime
        runtime.task_resumer = self.resumer_of

    def paused(self, task_id: str) -> PausedTurn | None:
        """The paused turn a task waits on (None: the task waits for nothing)."""
        held = self._paused.get(task_id)
        runtime = self.runtime
        if held is not None:
            paused = held[0]
            if runtime is None or paused.decided or runtime.approvals.paused_turn(paused.key) is paused:
                return paused
            del self._paused[task_id]  # resumed by another replica (the shared task store)
        return runtime.approvals.of_task(task_id) if runtime is not None else None

    def resumer_of(self, paused: PausedTurn) -> Callable[[PausedTurn], Awaitable[TurnOutcome | None]]:
        """How a paused turn loaded from the journal goes on in its task once decided elsewhere: as
        :meth:`_resume_in_task`, as the task's owner and the turn's user."""
        assert paused.task is not None
        task = paused.task
        secret = uuid.uuid4().hex
        self._paused[task.task_id] = (paused, secret)
        identity = Identity(user_id=paused.turn.user_id)
        call_context = ServerCallContext(state={OWNER_STATE: task.owner, IDENTITY_STATE: identity})
        return self._resume_in_task(task.task_id, task.context_id, call_context, secret)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the task's turn: ``working``, then ``completed`` (artifact ``answer``) or ``failed``.

        The task is an ``a2a task`` span (``kora.a2a.task_id``, ``kora.a2a.context_id``) with one
        ``a2a.task.state`` event per state it enters; the turn's ``invoke_agent`` span is its child."""
        assert context.task_id is not None
        assert context.context_id is not None
        attributes = {"kora.a2a.task_id": context.task_id, "kora.a2a.context_id": context.context_id}
        with _tracer.start_as_current_span("a2a task", attributes=attributes) as span:
            await self._execute(context, event_queue, span)

    async def _execute(self, context: RequestContext, event_queue: EventQueue, span: Span) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        task_id, context_id = context.task_id, context.context_id
        updater = TaskUpdater(event_queue, task_id, context_id)
        published = False

        async def publish() -> None:
            # submitted (the SDK expects the executor to publish a new task first, the request in its history),
            # then working; once per task.
            nonlocal published
            if published:
                return
            published = True
            if context.current_task is None:
                history = [context.message] if context.message is not None else []
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
                )
                _entered(span, "submitted")
            await updater.start_work()
            _entered(span, "working")

        try:
            runtime = await self._runtime()
        except Exception as error:  # the agent failed to start: a failed task, not a protocol error
            await publish()
            await updater.failed(updater.new_agent_message([new_text_part(str(error))]))
            _entered(span, "failed", str(error))
            return
        identity = identity_of(context)
        current = context.current_task
        resume: PausedTurn | None = None
        secret = ""
        if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            if self.paused(task_id) is None:
                await runtime.sync_paused()  # the shared task store: a turn another replica paused
            try:
                resume, secret = self._decide(runtime, task_id, context, identity)
            except KoraError as refusal:
                if refuse_request(refusal):
                    raise
                await updater.requires_input(current.status.message if current.status.HasField("message") else None)
                return
            if not resume.decided:  # other calls of the turn still wait
                await updater.requires_input(approval_message(updater, resume))
                _entered(span, "input-required")
                return
            try:
                # Taken before the task is announced working again: a replica that loses the turn to another
                # (which resumes it in this task) announces nothing and changes nothing.
                await runtime.take(resume)
            except ApprovalConflict as conflict:
                if refuse_request(conflict):
                    raise
                return
            published = True  # the task exists: it goes back to working
            await updater.start_work()
            _entered(span, "working")
        turn = TurnRequest(
            session_id=context_id,
            prompt=prompt_of(context.message),
            delegated_by=delegated_by(context),
            user_id=identity.user_id,
            credential=identity.credential,
            budget=given_budget(context),
        )
        outcome: TurnOutcome | None = None
        # The task is published once memory gave the turn its context: a strict-mode memory that cannot be read
        # refuses the request (a JSON-RPC error, MemoryRefusal) before any task exists.
        stream = (
            runtime.stream(turn, prepared=publish) if resume is None else runtime.stream(resume.turn, resume=resume)
        )
        try:
            # The endpoint refused another user's context already (A2AServer); this catches one that a concurrent
            # request opened meanwhile, as a failed task.
            await open_session(runtime.memory, context_id, self._agent_name, identity)
            async for item in stream:
                if isinstance(item, TurnOutcome):
                    outcome = item
        except KoraError as failure:
            if not published and failure.code == MEMORY_UNAVAILABLE and refuse_request(failure):
                raise
            await publish()
            await updater.failed(updater.new_agent_message([new_text_part(failure.message)]))
            _entered(span, "failed", failure.message)
            return
        finally:
            # On cancellation this closes the turn at once, aborting the model call (not at garbage collection).
            await stream.aclose()
            if secret in self._resumed:
                self._resumed[secret] = outcome
        await publish()  # a turn that yields without memory (none configured) published already; never twice
        assert outcome is not None
        await self._ended(runtime, updater, outcome, span, context.call_context)

    def _decide(
        self, runtime: AgentRuntime, task_id: str, context: RequestContext, identity: Identity
    ) -> tuple[PausedTurn, str]:
        """Record the decision the request's message carries on the oldest call its task waits on, or take the
        agent's own resume message (its secret matches: the calls were decided elsewhere). Returns the paused turn,
        and the secret when it is the resume message (else ``""``). Raises the :class:`~kora.core.errors.KoraError`
        that refuses it (nothing changed): no decision in the message, the task waits for no decision now (decided
        or expired meanwhile: 409), another user's call (403)."""
        paused, secret = self._paused.get(task_id, (None, ""))
        if paused is None:  # loaded from the journal: paused by a process that stopped since
            paused = runtime.approvals.of_task(task_id)
        metadata = context.message.metadata if context.message is not None else None
        if metadata is not None and RESUME_METADATA in metadata:
            if paused is not None and secret and metadata[RESUME_METADATA] == secret and paused.decided:
                self._paused.pop(task_id, None)
                return paused, secret
            raise RequestError(f"Invalid params: '{RESUME_METADATA}' is the agent's own.", code="invalid_decision")
        decision = decision_of(context.message)
        waiting = [a for a in paused.approvals if a.decision is None] if paused is not None else []
        if paused is None or not waiting:
            raise ApprovalConflict(f"Invalid params: task {task_id!r} waits for no decision now.")
        paused = runtime.decide(waiting[0].id, decision, identity.user_id)
        if paused.decided:
            self._paused.pop(task_id, None)
        return paused, ""

    async def _ended(
        self,
        runtime: AgentRuntime,
        updater: TaskUpdater,
        outcome: TurnOutcome,
        span: Span,
        call_context: ServerCallContext,
    ) -> None:
        """Publish the end of the task's turn: ``completed`` with the answer, ``failed`` when it stopped short, or
        ``input-required`` when it paused at calls waiting for approval."""
        if outcome.approvals:
            paused = runtime.approvals.paused_turn(outcome.approvals[0].id)
            if paused is not None:
                secret = uuid.uuid4().hex
                self._paused[updater.task_id] = (paused, secret)
                await runtime.held_in(paused, TaskRef(updater.task_id, updater.context_id, owner_of(call_context)))
                paused.resumer = self._resume_in_task(updater.task_id, updater.context_id, call_context, secret)
                await updater.requires_input(approval_message(updater, paused))
                _entered(span, "input-required")
                return
        # What the turn spent, its delegations included, goes with the final status for a delegating agent to
        # charge to its own budget.
        spent = {SPENT_METADATA: outcome.spent.to_metadata()} if outcome.spent is not None else None
        if outcome.finish_reason != "stop":
            # The turn stopped short (its step budget or another budget ran out): a failure of the task, not a
            # JSON-RPC error, with the reason as the status message; the runtime stored the steps that ran and the
            # error event.
            await updater.failed(updater.new_agent_message([new_text_part(outcome.text)], metadata=spent))
            _entered(span, "failed", outcome.text)
            return
        await updater.add_artifact([new_text_part(outcome.text)], name=ANSWER_ARTIFACT, last_chunk=True)
        await updater.complete(updater.new_agent_message([new_text_part(outcome.text)], metadata=spent))
        _entered(span, "completed")

    def _resume_in_task(
        self, task_id: str, context_id: str, call_context: ServerCallContext, secret: str
    ) -> Callable[[PausedTurn], Awaitable[TurnOutcome | None]]:
        """How a turn whose calls were decided elsewhere goes on in its task: the agent's own resume message on
        the task, sent through the SDK's request handler as the task's user (so the task's subscribers, push
        notifications and store see it as any turn); returns the turn's outcome (None: it failed)."""

        async def resume(paused: PausedTurn) -> TurnOutcome | None:
            if self.handler is None:
                raise RuntimeError("the A2A executor has no request handler")
            decisions = [
                {"id": a.id, "status": a.status, "reason": a.decision.reason if a.decision else ""}
                for a in paused.approvals
            ]
            message = Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                task_id=task_id,
                context_id=context_id,
                parts=[new_data_part({"decisions": decisions})],
            )
            message.metadata.update({RESUME_METADATA: secret})
            self._resumed[secret] = None
            try:
                await self.handler.on_message_send(SendMessageRequest(message=message), call_context)
                return self._resumed.get(secret)
            finally:
                self._resumed.pop(secret, None)

        return resume

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Record ``canceled``; the SDK then cancels the asyncio task running :meth:`execute`."""
        assert context.task_id is not None
        assert context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("The task was canceled.")]))
        _entered(trace.get_current_span(), "canceled", task_id=context.task_id)


#: Per JSON-RPC request: where the executor leaves the error that refuses it (:func:`refuse_request`); set by
#: the endpoint around the SDK's dispatch, copied into the task the SDK runs the executor in.
REFUSALS: ContextVar[list[KoraError] | None] = ContextVar("kora_a2a_refusals", default=None)


def refuse_request(error: KoraError) -> bool:
    """Leave ``error`` for the endpoint to answer as the request's JSON-RPC error instead of a task (True), when
    the request came through the endpoint (False otherwise: the caller then fails the task)."""
    holder = REFUSALS.get()
    if holder is None:
        return False
    holder.append(error)
    return True


def _entered(span: Span, state: str, reason: str = "", task_id: str = "") -> None:
    """Record on ``span`` that the task entered ``state`` (an ``a2a.task.state`` event; a failure also sets the
    span's error status with ``reason``)."""
    attributes = {"kora.a2a.task.state": state}
    if task_id:
        attributes["kora.a2a.task_id"] = task_id
    span.add_event("a2a.task.state", attributes)
    if state == "failed":
        span.set_status(Status(StatusCode.ERROR, reason))
