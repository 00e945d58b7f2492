"""A2A push notifications, delivered in the background with retries (shared task store only).

The SDK's request handler stores a task's ``pushNotificationConfig`` (on ``SendMessage`` or by the push-config
methods) in its :class:`~a2a.server.tasks.DatabasePushNotificationConfigStore` and hands every stored state change
and artifact update to a sender, awaiting it. :class:`BackgroundPushSender` returns at once instead, so a slow or
failing receiver never holds up the task: each task's notifications go out in order, one task's chain after the
other's, through the SDK's :class:`~a2a.server.tasks.BasePushNotificationSender` (the configured token in
``X-A2A-Notification-Token``, the event as A2A's ``StreamResponse`` JSON). A delivery that fails (connection error,
HTTP status >= 400) is retried :data:`RETRIES` times, after :data:`BACKOFF_SECONDS` (0.5, 1, 2, 4, 8 s); each
attempt is counted in ``kora.a2a.push.deliveries`` (``kora.outcome``: ``ok``, ``retry``, ``failed``).
"""

from __future__ import annotations

import asyncio
import logging

import httpx
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.server.tasks.push_notification_sender import PushNotificationEvent, PushNotificationSender
from a2a.types.a2a_pb2 import TaskPushNotificationConfig
from opentelemetry import metrics

log = logging.getLogger("kora.agent.a2a.push")

#: Seconds to wait before each retry of a delivery that failed.
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)
#: Retries of a failed delivery (after the first attempt).
RETRIES = len(BACKOFF_SECONDS)
#: Seconds one delivery attempt may take.
ATTEMPT_TIMEOUT_SECONDS = 10.0
#: Tasks whose configurations are noted at most (beyond it the notes are dropped: a send without one reads).
MAX_NOTED_TASKS = 10_000

_deliveries = metrics.get_meter("kora.agent").create_counter(
    "kora.a2a.push.deliveries",
    unit="{attempt}",
    description="Push-notification delivery attempts, by kora.outcome: ok, retry (failed, tried again), failed "
    "(failed, given up).",
)


class _Dispatcher(BasePushNotificationSender):
    """The SDK's sender, for one delivery to one configuration (True when the receiver accepted it)."""

    async def deliver(self, event: PushNotificationEvent, config: TaskPushNotificationConfig, task_id: str) -> bool:
        """POST ``event`` to ``config``'s URL once; True on a 2xx answer."""
        return await self._dispatch_notification(event, config, task_id)


class BackgroundPushSender(PushNotificationSender):
    """Sends the notifications of ``configs``' tasks in the background, in order per task, with retries."""

    def __init__(self, configs: PushNotificationConfigStore) -> None:
        self._configs = configs
        self._client = httpx.AsyncClient(timeout=ATTEMPT_TIMEOUT_SECONDS)
        self._dispatcher = _Dispatcher(self._client, configs)
        #: task id -> the delivery of its newest notification (the next one waits for it).
        self._chains: dict[str, asyncio.Task[None]] = {}
        #: task id -> whether it had configurations when its latest change was stored (note_configs).
        self._configured: dict[str, bool] = {}
        #: task id -> the notifications of its changes held by the store, not stored yet (hold), oldest first.
        self._held: dict[str, list[PushNotificationEvent]] = {}

    def hold(self, task_id: str) -> None:
        """Hold ``task_id``'s next notifications until the store stores the change they announce (it holds an
        artifact of a turn answered at its end to store it with the next change): :meth:`note_configs` releases
        them to the configurations the task has then, :meth:`drop_held` drops them (the change was never stored).
        At most :data:`MAX_NOTED_TASKS` tasks are held (beyond it the oldest are released, their configurations
        read)."""
        if task_id not in self._held and len(self._held) >= MAX_NOTED_TASKS:
            oldest = next(iter(self._held))
            for event in self._held.pop(oldest):
                self._queue(oldest, event)
        self._held.setdefault(task_id, [])

    def drop_held(self, task_id: str) -> None:
        """Drop ``task_id``'s held notifications: the change they announce was not stored."""
        self._held.pop(task_id, None)

    def note_configs(self, task_id: str, present: bool | None) -> None:
        """Record whether ``task_id`` has configurations, as read with the change just stored (None: not known).
        The notification of that change then skips the read of its configurations when there are none: a
        configuration set after the change was stored is not one that change is delivered to. Notifications held
        for the change (:meth:`hold`) go out first, unless the task had no configurations."""
        for event in self._held.pop(task_id, []):
            if present is not False:
                self._queue(task_id, event)
        if present is None:
            self._configured.pop(task_id, None)
            return
        if len(self._configured) >= MAX_NOTED_TASKS and task_id not in self._configured:
            self._configured.clear()  # a missing note only costs a read: each send consumes its task's note
        self._configured[task_id] = present

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        """Queue ``event``'s delivery to every configuration of ``task_id``; returns at once (with nothing to do
        when its change was noted as stored while the task had no configurations)."""
        held = self._held.get(task_id)
        if held is None and self._configured.pop(task_id, True) is False:
            return
        # A copy: the SDK goes on updating its task object in place, and the delivery may happen later.
        snapshot = type(event)()
        snapshot.CopyFrom(event)
        if held is not None:
            held.append(snapshot)
        else:
            self._queue(task_id, snapshot)

    def _queue(self, task_id: str, snapshot: PushNotificationEvent) -> None:
        """Deliver ``snapshot`` after ``task_id``'s notifications queued before it."""
        previous = self._chains.get(task_id)
        chain = asyncio.create_task(self._deliver(previous, task_id, snapshot), name=f"kora-a2a-push-{task_id}")
        self._chains[task_id] = chain
        chain.add_done_callback(
            lambda done: self._chains.pop(task_id, None) if self._chains.get(task_id) is done else None
        )

    async def _deliver(self, previous: asyncio.Task[None] | None, task_id: str, event: PushNotificationEvent) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            configs = await self._configs.get_info_for_dispatch(task_id)
        except Exception:  # the store is unreachable: nothing to deliver to, the task goes on
            log.exception("push notifications of task %s: cannot read its configurations", task_id)
            _deliveries.add(1, {"kora.outcome": "failed"})
            return
        await asyncio.gather(*(self._with_retries(task_id, event, config) for config in configs))

    async def _with_retries(
        self, task_id: str, event: PushNotificationEvent, config: TaskPushNotificationConfig
    ) -> None:
        for attempt in range(RETRIES + 1):
            if await self._dispatcher.deliver(event, config, task_id):
                _deliveries.add(1, {"kora.outcome": "ok"})
                return
            if attempt == RETRIES:
                break
            _deliveries.add(1, {"kora.outcome": "retry"})
            await asyncio.sleep(BACKOFF_SECONDS[attempt])
        _deliveries.add(1, {"kora.outcome": "failed"})
        log.warning("push notification of task %s to %s failed %d times; given up", task_id, config.url, RETRIES + 1)

    async def close(self) -> None:
        """Stop deliveries still pending and close the HTTP client."""
        for chain in list(self._chains.values()):
            chain.cancel()
        await asyncio.gather(*self._chains.values(), return_exceptions=True)
        await self._client.aclose()
