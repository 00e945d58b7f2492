"""RemoteMemory's outbox: a turn's events wait here, in order, until the memory service has taken them.

:class:`Outbox` holds the batches (one per ``add_events``), bounded by ``limit`` batches: past it the oldest is
dropped and counted (:attr:`Outbox.dropped`), never silently. Its sender (:meth:`Outbox.drain_forever`) sends
the oldest batch first and, while the store is away, retries every :data:`RETRY_SECONDS`; a batch is popped once,
after the store answered it, so none is sent twice by two senders nor lost by a failed send.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from kora.core.events import MemoryEvent

log = logging.getLogger("kora.memory")

#: Seconds between probes of an unreachable store, and the longest pause between replays of queued writes.
RETRY_SECONDS = 1.0


@dataclass
class Batch:
    """The events of one ``add_events`` call, for one session, with the verified user who wrote them."""

    session_id: str
    user_id: str | None
    events: list[MemoryEvent]
    #: The store's erasure mark when the batch was queued (None: none seen yet); the store drops the batch when an
    #: erasure of its session or user came after it.
    erasures_seen: str | None = None


class Outbox:
    """Batches of events waiting for the store, oldest first, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._batches: deque[Batch] = deque()
        #: Batches dropped because the outbox was full while the store was unreachable.
        self.dropped = 0
        #: Set when there is something to send (or a store to probe): wakes the sender.
        self.pending = asyncio.Event()
        #: Held while a batch is on its way (the sender, ``close`` and an erasure purging the outbox take turns).
        self.sending = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._batches)

    def queue(self, batch: Batch) -> None:
        """Queue ``batch`` behind the others (dropping the oldest past :attr:`limit`) and wake the sender."""
        self._batches.append(batch)
        if len(self._batches) > self.limit:
            lost = self._batches.popleft()
            self.dropped += 1
            log.error(
                "memory outbox full (%d batches): dropped %d events of session %s",
                self.limit,
                len(lost.events),
                lost.session_id,
            )
        self.pending.set()

    def head(self) -> Batch | None:
        """The oldest batch, the next to send; None when there is none."""
        return self._batches[0] if self._batches else None

    def sent(self, batch: Batch) -> None:
        """The store answered ``batch``: drop it, unless an erasure applied meanwhile dropped it already."""
        if self._batches and self._batches[0] is batch:
            self._batches.popleft()

    def pending_events(self, session_id: str) -> list[MemoryEvent]:
        """The events of ``session_id`` still waiting, oldest first."""
        return [event for batch in self._batches if batch.session_id == session_id for event in batch.events]

    def purge(self, sessions: set[str], user_id: str | None) -> int:
        """Drop every batch of ``sessions`` or of ``user_id``; the number of events dropped."""
        kept: deque[Batch] = deque()
        dropped = 0
        for batch in self._batches:
            if batch.session_id in sessions or (user_id is not None and batch.user_id == user_id):
                dropped += len(batch.events)
            else:
                kept.append(batch)
        self._batches = kept
        return dropped

    async def send_next(self, send: Callable[[Batch | None], Awaitable[bool]]) -> bool:
        """``send`` the oldest batch (None: there is none, probe the store), one sender at a time; False when the
        store is away."""
        async with self.sending:
            return await send(self.head())

    async def drain_forever(self, send: Callable[[Batch | None], Awaitable[bool]], away: Callable[[], bool]) -> None:
        """Whenever woken, send until the outbox is empty and the store is not ``away``, pausing
        :data:`RETRY_SECONDS` after each failed send (the probe of an empty outbox is how recovery is noticed)."""
        while True:
            await self.pending.wait()
            self.pending.clear()
            while self._batches or away():
                if not await self.send_next(send):
                    await asyncio.sleep(RETRY_SECONDS)
