"""RemoteMemory's local side: the window it serves from while the memory service is away, and that state itself.

:class:`LocalFallback` holds a bounded :class:`~kora.memory.local.LocalMemory` (the sessions this agent served,
with who started them), the verified user of each recent session (sent with its writes), and whether the store is
unusable now (:attr:`LocalFallback.degraded`). With ``MEMORY_FAILURE_MODE`` ``soft`` a read the store cannot answer
is answered from the window; with ``strict`` it raises :class:`~kora.core.errors.Unavailable` (503).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Literal, TypeVar

from kora.core.errors import Unavailable
from kora.memory.base import MEMORY_UNAVAILABLE, MemoryStatus
from kora.memory.local import LocalMemory
from kora.memory.remote_outbox import Outbox

log = logging.getLogger("kora.memory")

ResultT = TypeVar("ResultT")


class LocalFallback:
    """The local window of agent ``app_name`` (``sessions`` sessions of at most ``session_events`` events), the
    degraded state of the store and what ``failure_mode`` makes of it; wakes ``outbox``'s sender on a change."""

    def __init__(
        self,
        app_name: str,
        failure_mode: Literal["soft", "strict"],
        sessions: int,
        session_events: int,
        outbox: Outbox,
    ) -> None:
        self.failure_mode = failure_mode
        self.window = LocalMemory(sessions, session_events, app_name)
        self._outbox = outbox
        self._users: OrderedDict[str, str | None] = OrderedDict()
        self._users_limit = sessions
        #: Why the store is unusable now, or None while it answers.
        self.degraded: str | None = None

    # -- the store's state ---------------------------------------------------------------------------------

    def store_unreachable(self, reason: str) -> None:
        """The store could not be used: degraded, and the sender doubles as the probe that notices recovery."""
        if self.degraded is None:
            log.warning("memory store unreachable (%s mode): %s", self.failure_mode, reason)
        self.degraded = reason
        self._outbox.pending.set()

    def store_reachable(self) -> None:
        """The store answered: no longer degraded, and the queued writes are replayed."""
        if self.degraded is not None:
            log.info("memory store reachable again; replaying %d queued writes", len(self._outbox))
            self.degraded = None
            self._outbox.pending.set()

    def away(self) -> bool:
        """Whether the store is unusable now."""
        return self.degraded is not None

    def status(self) -> MemoryStatus:
        """``memory: degraded`` (soft) or a problem (strict) while the store is unreachable; dropped writes."""
        details: dict[str, str] = {}
        if self._outbox.dropped:
            details["memory_dropped_writes"] = str(self._outbox.dropped)
        if self.degraded is None:
            return MemoryStatus(details=details)
        if self.failure_mode == "strict":
            return MemoryStatus(problems=[f"memory store unreachable: {self.degraded}"], details=details)
        details["memory"] = (
            f"degraded: {self.degraded}; serving the short-term window, {len(self._outbox)} writes queued"
        )
        return MemoryStatus(details=details)

    def unavailable(self, error: Exception) -> Unavailable:
        """The 503 of a request the store could not serve."""
        return Unavailable(f"The memory store is unavailable: {error}", code=MEMORY_UNAVAILABLE)

    async def fallback(self, error: Exception, local: Coroutine[None, None, ResultT]) -> ResultT:
        """Strict mode: :class:`~kora.core.errors.Unavailable`; soft mode: what the local window says."""
        if self.failure_mode == "strict":
            local.close()
            raise self.unavailable(error) from error
        return await local

    # -- who each session belongs to ---------------------------------------------------------------------

    def remember_user(self, session_id: str, user_id: str | None) -> None:
        """``session_id`` is ``user_id``'s (remembered for its writes, the newest ``sessions`` sessions)."""
        self._users[session_id] = user_id
        self._users.move_to_end(session_id)
        while len(self._users) > self._users_limit:
            self._users.popitem(last=False)

    def user_of(self, session_id: str) -> str | None:
        """The verified user remembered for ``session_id`` (None: anonymous or not remembered)."""
        return self._users.get(session_id)

    async def refused(self, session_id: str) -> None:
        """The store says ``session_id`` is another user's: the window forgets what it held under that id (opened
        by the refused request, or written while the store was away), so it is never served as a fallback. Queued
        writes stay: the store takes or refuses each by its user."""
        await self.window.delete_session(session_id)
        self._users.pop(session_id, None)

    async def forget(self, session_id: str | None, user_id: str | None) -> dict[str, int]:
        """Erase a session or a user from the window and the outbox; counts (``local_*``, ``outbox_events``)."""
        if user_id is not None:
            local = await self.window.erase_user(user_id)
        else:
            assert session_id is not None
            local = await self.window.erase_session(session_id)
        sessions = {session_id} if session_id is not None else set()
        dropped = self._outbox.purge(sessions, user_id)
        for sid in sessions:
            self._users.pop(sid, None)
        if user_id is not None:
            for sid in [sid for sid, owner in self._users.items() if owner == user_id]:
                del self._users[sid]
        return {f"local_{tier}": count for tier, count in local.items()} | {"outbox_events": dropped}
