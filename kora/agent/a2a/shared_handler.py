"""The SDK's request handler over the shared task store, counting the requests that may subscribe to a task.

The store holds an artifact of a turn whose client is answered at its end, to store it with the task's next
change in one statement (:mod:`kora.agent.a2a.task_rows`, "Held artifacts"). The SDK hands each event to this
replica's subscribers of the task right after the store returns, so an artifact may be held only while none can
subscribe: every request that may (``SendMessage`` naming a task, by its ``taskId`` or a legacy ``tasks/send``'s
requested id, streamed or not, and ``SubscribeToTask``) is counted as it starts, before the SDK taps the task's
events, and the held change is stored before it goes on (:meth:`~kora.agent.a2a.shared.SharedTasks.watch`). A
blocking send that created its task is answered only once nothing of its task is held.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types.a2a_pb2 import Task

from kora.agent.a2a.requested import requested_task_id

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable

    from a2a.server.agent_execution import AgentExecutor, RequestContextBuilder
    from a2a.server.context import ServerCallContext
    from a2a.server.events import Event
    from a2a.types.a2a_pb2 import AgentCard, Message, SendMessageRequest, SubscribeToTaskRequest

    from kora.agent.a2a.shared import SharedTasks


def _named_task(params: SendMessageRequest) -> str | None:
    """The existing task a send names (its ``taskId``, or a legacy ``tasks/send``'s requested id), or None."""
    return params.message.task_id or requested_task_id.get() or None


class SharedRequestHandler(DefaultRequestHandler):
    """:class:`DefaultRequestHandler` on ``shared``'s store, event stream and push notifications; counts the
    requests that may subscribe to a task (see the module)."""

    def __init__(
        self,
        shared: SharedTasks,
        *,
        agent_executor: AgentExecutor,
        agent_card: AgentCard,
        request_context_builder: RequestContextBuilder | None = None,
        extended_agent_card: AgentCard | None = None,
        extended_card_modifier: Callable[[AgentCard, ServerCallContext], Awaitable[AgentCard]] | None = None,
    ) -> None:
        super().__init__(
            agent_executor=agent_executor,
            task_store=shared.store,
            agent_card=agent_card,
            event_stream=shared.events,
            push_config_store=shared.push_configs,
            push_sender=shared.push,
            request_context_builder=request_context_builder,
            extended_agent_card=extended_agent_card,
            extended_card_modifier=extended_card_modifier,
        )
        self._shared = shared
        shared.guarded = True

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        """The SDK's, counted while it runs when it names a task; a new task's held change is stored before its
        answer."""
        async with self._shared.watch(_named_task(params)):
            result: Message | Task = await super().on_message_send(params, context)
        if isinstance(result, Task):
            await self._shared.store.settle(result.id)
        return result

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """The SDK's, counted while it runs when it names a task."""
        async with (
            self._shared.watch(_named_task(params)),
            aclosing(super().on_message_send_stream(params, context)) as events,
        ):
            async for event in events:
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """The SDK's, counted while it runs."""
        async with self._shared.watch(params.id), aclosing(super().on_subscribe_to_task(params, context)) as events:
            async for event in events:
                yield event
