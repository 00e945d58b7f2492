"""A work queue of keys to reconcile: coalescing, one worker per key at a time, retries with backoff.

The shape controller-runtime uses: events only *add* a key; workers take keys and reconcile the latest
state. A key added while queued is queued once (a burst of events costs one reconcile); a key added while
a worker holds it is reconciled again after that worker finishes (nothing is missed, and two workers never
reconcile the same resource at once). A failed reconcile is retried after a backoff that doubles per
consecutive failure of that key, up to ``max_backoff`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

KeyT = TypeVar("KeyT", bound=Hashable)


class WorkQueue(Generic[KeyT]):
    """Keys waiting for ``handler``; :meth:`run` starts ``workers`` tasks until cancelled."""

    def __init__(
        self,
        handler: Callable[[KeyT], Awaitable[None]],
        *,
        workers: int = 4,
        base_backoff: float = 0.5,
        max_backoff: float = 60.0,
    ) -> None:
        self._handler = handler
        self._workers = workers
        self._base_backoff = base_backoff
        self._max_backoff = max_backoff
        self._queue: asyncio.Queue[KeyT] = asyncio.Queue()
        self._queued: set[KeyT] = set()
        self._active: set[KeyT] = set()
        self._again: set[KeyT] = set()
        self._failures: dict[KeyT, int] = {}
        self._retries: dict[KeyT, asyncio.TimerHandle] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, key: KeyT) -> None:
        """Ask for ``key`` to be reconciled (soon, once, whatever else is pending)."""
        if key in self._active:
            self._again.add(key)
            return
        if key in self._queued:
            return
        retry = self._retries.pop(key, None)
        if retry is not None:
            retry.cancel()
        self._queued.add(key)
        self._idle.clear()
        self._queue.put_nowait(key)

    def __len__(self) -> int:
        """Keys queued or being reconciled."""
        return len(self._queued) + len(self._active)

    async def wait_idle(self) -> None:
        """Return once nothing is queued or being reconciled (retries scheduled for later do not count)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Run the workers until cancelled."""
        async with asyncio.TaskGroup() as group:
            for n in range(self._workers):
                group.create_task(self._work(), name=f"reconcile-worker-{n}")

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                await self._handler(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(self._max_backoff, self._base_backoff * 2 ** (failures - 1))
                log.exception("reconcile of %s failed (attempt %d); retrying in %.1f s", key, failures, delay)
                self._retries[key] = asyncio.get_running_loop().call_later(delay, self._retry, key)
            else:
                self._failures.pop(key, None)
            finally:
                self._active.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)
                if not self._queued and not self._active:
                    self._idle.set()

    def _retry(self, key: KeyT) -> None:
        self._retries.pop(key, None)
        self.add(key)

    def close(self) -> None:
        """Cancel the scheduled retries."""
        for handle in self._retries.values():
            with contextlib.suppress(Exception):
                handle.cancel()
        self._retries.clear()
