"""The task id a legacy ``tasks/send`` (A2A 0.3) asked for, for the request being served: set by the endpoint
around the SDK's dispatch, read by the task-id generator (:class:`~kora.agent.a2a.legacy.RequestedTaskIdGenerator`)
and by the shared store's request handler (:mod:`kora.agent.a2a.shared_handler`)."""

from __future__ import annotations

from contextvars import ContextVar

#: Task id a legacy ``tasks/send`` asked for (None: none), in the request that asked.
requested_task_id: ContextVar[str | None] = ContextVar("kora_a2a_requested_task_id", default=None)
