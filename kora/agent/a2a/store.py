"""Task stores for the A2A server: ``local`` keeps tasks, ``null`` keeps none
once they have finished (``TASK_STORE_TYPE``).

Both keep running tasks, because the SDK's request handler re-reads a task while it runs; they differ in
what happens once a task is finished (completed, failed, canceled, rejected):

* :class:`BoundedTaskStore` (``local``) keeps finished tasks too, at most ``max_tasks`` in all; when over
  the bound it evicts finished tasks oldest first and never evicts a running one.
* :class:`RunningOnlyTaskStore` (``null``) hides a task the moment it finishes, so ``tasks/get`` on it
  answers task-not-found (-32001); only the cancel that finished it may still read it.
"""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import Task, TaskState

#: Default bound of the ``local`` store (tasks, running and finished together).
DEFAULT_MAX_TASKS = 10_000
#: Finished tasks the ``null`` store keeps hidden for a cancel that is answering (see RunningOnlyTaskStore).
FINISHED_KEPT = 256
#: The cancel method's names (A2A 0.3 and 1.0), as the SDK puts them in the call context's ``state["method"]``.
CANCEL_METHODS = frozenset({"tasks/cancel", "CancelTask"})

FINISHED_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def is_finished(task: Task) -> bool:
    """True when ``task`` is in a terminal state (no further transitions)."""
    return task.status.state in FINISHED_STATES


class KoraTaskStore(InMemoryTaskStore):
    """The SDK's in-memory store (tasks filed per owner, the call context's user) that also knows every task id
    it holds, whoever owns it: the SDK runs tasks by id alone, so a client-chosen id must be free for all."""

    def holds(self, task_id: str) -> bool:
        """True when some owner's task has id ``task_id``."""
        raise NotImplementedError


class BoundedTaskStore(KoraTaskStore):
    """In-memory store keeping at most ``max_tasks`` tasks; finished ones are evicted oldest first.

    "Oldest" is by first save (submission order). Running tasks are never evicted, so the store may hold
    more than ``max_tasks`` while more than that many tasks run at once.
    """

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        super().__init__()
        self.max_tasks = max_tasks
        # task id -> (finished?, the context needed to delete it again), in submission order.
        self._order: OrderedDict[str, tuple[bool, ServerCallContext]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def holds(self, task_id: str) -> bool:
        """True when some owner's task has id ``task_id``."""
        return task_id in self._order

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task``, then evict finished tasks while over the bound."""
        await super().save(task, context)
        known = task.id in self._order
        self._order[task.id] = (is_finished(task), context)
        if not known and len(self._order) > self.max_tasks:
            await self._evict()

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete ``task_id`` (no error when it is unknown)."""
        self._order.pop(task_id, None)
        await super().delete(task_id, context)

    async def _evict(self) -> None:
        excess = len(self._order) - self.max_tasks
        victims = [task_id for task_id, (finished, _) in self._order.items() if finished][:excess]
        for task_id in victims:
            _, context = self._order[task_id]
            await self.delete(task_id, context)


class RunningOnlyTaskStore(KoraTaskStore):
    """The ``null`` store: clients see a task only while it runs; once finished, ``tasks/get`` finds nothing.

    A finished task is still kept, hidden, for the request that cancels it: the SDK reads the task back after
    cancelling it to answer ``tasks/cancel``, and would answer -32603 "Task should have been created" if it were
    gone. At most :data:`FINISHED_KEPT` finished tasks are kept so; older ones are deleted.
    """

    def __init__(self) -> None:
        super().__init__()
        self._running: set[str] = set()
        # finished task id -> the context needed to delete it, oldest first.
        self._finished: OrderedDict[str, ServerCallContext] = OrderedDict()

    def holds(self, task_id: str) -> bool:
        """True when some owner's running task has id ``task_id``."""
        return task_id in self._running

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save a task; a finished one is hidden from every request but a cancel."""
        await super().save(task, context)
        if not is_finished(task):
            self._running.add(task.id)
            return
        self._running.discard(task.id)
        self._finished[task.id] = context
        self._finished.move_to_end(task.id)
        while len(self._finished) > FINISHED_KEPT:
            old_id, old_context = self._finished.popitem(last=False)
            await super().delete(old_id, old_context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task while it runs; a finished one only to the request cancelling it."""
        if task_id in self._finished and context.state.get("method") not in CANCEL_METHODS:
            return None
        return await super().get(task_id, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete ``task_id`` (no error when it is unknown)."""
        self._running.discard(task_id)
        self._finished.pop(task_id, None)
        await super().delete(task_id, context)


def build_task_store(kind: str, max_tasks: int = DEFAULT_MAX_TASKS) -> KoraTaskStore:
    """The store for ``task_store_type`` ``kind`` (``local`` or ``null``); raises ``ValueError`` otherwise."""
    if kind == "local":
        return BoundedTaskStore(max_tasks)
    if kind == "null":
        return RunningOnlyTaskStore()
    raise ValueError(f"unknown task store type {kind!r} (expected 'local' or 'null')")
