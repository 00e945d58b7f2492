"""The a2a-sdk side of delegation (:mod:`kora.agent.delegation`): a peer's card and client, and one task sent.

Kept apart so that only an agent that delegates imports the SDK's client, its protobuf types and ``culsans``
(~5 MB, ~170 modules, ~0.15 s of CPU here): :class:`~kora.agent.delegation.Delegation` loads this module on its
first use, off the event loop.
"""

from __future__ import annotations

import uuid

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    ClientConfig,
    create_client,
)
from a2a.client.client import Client, ClientCallContext
from a2a.helpers.proto_helpers import get_message_text, new_text_part
from a2a.types.a2a_pb2 import AgentCard, Message, Role, SendMessageRequest, Task, TaskState
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry.trace import Span
from pydantic_ai.usage import RunUsage

from kora.agent.budget import BUDGET_METADATA, SPENT_METADATA, Spend, TurnBudget
from kora.core.protocol import DELEGATED_BY_METADATA

__all__ = [
    "A2AClientError",
    "A2AClientTimeoutError",
    "AgentCardResolutionError",
    "Client",
    "peer_client",
    "send_task",
]


async def peer_client(http: httpx.AsyncClient, url: str) -> tuple[AgentCard, Client]:
    """The card of the peer at ``url`` and an A2A client for it (blocking sends, requests made with ``http``).

    Raises ``AgentCardResolutionError`` when the card cannot be read (its ``status_code`` is ``None`` when the
    peer could not be reached at all, the HTTP status when it answered without a card)."""
    card = await A2ACardResolver(http, url).get_agent_card()
    return card, await create_client(card, client_config=ClientConfig(streaming=False, httpx_client=http))


async def send_task(
    client: Client,
    agent_name: str,
    name: str,
    task: str,
    session: str,
    headers: dict[str, str],
    span: Span,
    budget: TurnBudget | None,
    usage: RunUsage | None,
) -> str:
    """Send ``task`` from agent ``agent_name`` to peer ``name`` in context ``session`` with the HTTP ``headers``
    (the user's credential); the answer, or ``Error: ...`` text when the task did not complete. The peer's task id
    goes on ``span``; what the peer reports spent is charged to ``budget`` (and what the turn has left, after its
    ``usage``, travels in message metadata ``kora.budget``). Raises the SDK's ``A2AClientError`` or httpx's
    errors when the peer cannot be reached."""
    message = Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=session, parts=[new_text_part(task)]
    )
    message.metadata.update({DELEGATED_BY_METADATA: agent_name})
    if budget is not None and budget.limits.bounded:
        message.metadata.update({BUDGET_METADATA: budget.remaining(usage or RunUsage()).to_metadata()})
    # The SDK sends a call context's service parameters as HTTP headers of that request only.
    context = ClientCallContext(service_parameters=headers) if headers else None
    answer = ""
    async for response in client.send_message(SendMessageRequest(message=message), context=context):
        if response.HasField("message"):
            answer = get_message_text(response.message)
        elif response.HasField("task"):
            span.set_attribute("kora.a2a.task_id", response.task.id)
            answer = _task_answer(name, response.task)
            if budget is not None and (spent := _task_spend(response.task)) is not None:
                budget.charge(spent)
    return answer


def _task_answer(name: str, task: Task) -> str:
    """The answer of a finished task: its artifacts' text, or ``Error: ...`` text when it did not complete."""
    status_text = get_message_text(task.status.message) if task.status.HasField("message") else ""
    if task.status.state != TaskState.TASK_STATE_COMPLETED:
        state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
        return f"Error: agent '{name}' ended the task {state}: {status_text or 'no reason given'}"
    texts = [part.text for artifact in task.artifacts for part in artifact.parts if part.HasField("text")]
    return "".join(texts) or status_text


def _task_spend(task: Task) -> Spend | None:
    """What a finished task reports it spent (``kora.spent`` on its status message); None when it says nothing."""
    if not task.status.HasField("message") or SPENT_METADATA not in task.status.message.metadata:
        return None
    return Spend.from_metadata(MessageToDict(task.status.message.metadata).get(SPENT_METADATA))
