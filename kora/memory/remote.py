"""RemoteMemory: the agent's client of the memory service, selected when ``MEMORY_STORE_ENDPOINT`` is set
(docs/memory.md; while the service is unreachable: "When the store is unreachable").

Reads go to the service: before a turn, one request returns the rolling summary, the short-term window and the
facts recalled for the prompt within the agent's read scope (:meth:`RemoteMemory.turn_context`); the memory
endpoints and ``search_memory`` read the store too. ``save_memory`` writes a fact synchronously, so it can be
recalled as soon as the tool returns.

Writes of a turn's events never add to the reply's latency: :meth:`RemoteMemory.add_events` keeps them in a local
window (a bounded :class:`~kora.memory.local.LocalMemory`) and in an ordered outbox that a background task sends.
Until the store has acknowledged them, the events still pending for a session are merged into its window, so
the next turn sees the previous one even when the two follow each other closely.

When the store cannot be reached (``MEMORY_FAILURE_MODE``):

* ``soft`` (default): turns go on with the local window (no summary, no facts); ``status()`` reports
  ``memory: degraded`` (``/ready`` stays 200); writes wait in the outbox, bounded by ``outbox_limit`` batches
  (past it the oldest batch is dropped and counted in ``dropped_writes``, and said in the status, never silently),
  and are replayed in order as soon as the store answers again: a background probe notices that without waiting
  for the next turn.
* ``strict``: a turn's context read raises :class:`~kora.core.errors.Unavailable` (the chat endpoint answers
  503, A2A a JSON-RPC error), and ``status()`` lists a problem (``/ready`` 503). Writes still queue for replay.

Ownership (:func:`kora.memory.base.check_owner`) is checked twice, neither costing a round trip: against the local
window when a turn opens its session (:meth:`RemoteMemory.get_or_create_session`, a dict lookup: the window knows
who started the sessions this agent served), and by the store on the turn's context read, which carries the user.
A store that refuses the session (HTTP 403, code ``session_forbidden``) is not a store that is down: in either
failure mode the turn is refused with :class:`~kora.core.errors.Forbidden` (403), nothing is read from the local
window, and the window forgets what it held under that id.

RemoteMemory composes three parts: :class:`~kora.memory.remote_client.MemoryStoreClient` (the typed HTTP client),
:class:`~kora.memory.remote_outbox.Outbox` (the queued writes and their sender) and
:class:`~kora.memory.remote_fallback.LocalFallback` (the local window, who each session belongs to, and the
degraded state); this class decides, per operation, which of them answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Literal

import httpx2
from pydantic import JsonValue

from kora.core.errors import Forbidden, RequestError, StoreRefused, StoreUnreachable, Unavailable
from kora.core.events import EventType, MemoryEvent
from kora.memory.base import (
    MEMORY_UNAVAILABLE,
    SESSION_FORBIDDEN,
    Memory,
    MemoryHit,
    MemoryStatus,
    SessionInfo,
    TurnContext,
    check_owner,
    new_session_id,
    session_forbidden,
)
from kora.memory.local import ANONYMOUS_USER
from kora.memory.remote_client import MemoryStoreClient
from kora.memory.remote_fallback import LocalFallback
from kora.memory.remote_outbox import Batch, Outbox
from kora.memory.wire import (
    SCOPES,
    USER_SCOPES,
    ContextRequest,
    EventsWrite,
    FactCreate,
    ForgetRequest,
    Mark,
    RecallHit,
    RecallRequest,
    scope_rank,
)

log = logging.getLogger("kora.memory")

#: Erasures read per request while catching up with the store's log.
ERASURES_PAGE = 1000


class RemoteMemory(Memory):
    """A client of the memory service at ``endpoint`` for agent ``app_name``. Create, ``await start()``, use,
    ``await close()``.

    ``max_read_scope`` bounds automatic recall and ``search_memory`` (``session``, ``agent`` or ``user``);
    ``failure_mode`` is ``soft`` or ``strict`` (module docstring); ``rolling_summary`` asks the store for the
    medium-term tier; ``token_budget`` bounds (in tokens) what the window may take of the model's context; ``token``
    is the bearer token the store knows its bound agents by (``MEMORY_STORE_TOKEN``); ``local_sessions`` and
    ``local_session_events`` bound the local window, ``outbox_limit`` (batches) the writes queued while the store
    is away.
    """

    remote = True

    def __init__(
        self,
        endpoint: str,
        app_name: str,
        *,
        max_read_scope: str = "session",
        failure_mode: Literal["soft", "strict"] = "soft",
        rolling_summary: bool = False,
        token_budget: int = 2000,
        token: str = "",
        local_sessions: int = 1000,
        local_session_events: int = 500,
        outbox_limit: int = 10_000,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.app_name = app_name
        self.max_read_scope = max_read_scope
        self.rolling_summary = rolling_summary
        self.token_budget = token_budget
        self._outbox = Outbox(outbox_limit)
        self._fallback = LocalFallback(app_name, failure_mode, local_sessions, local_session_events, self._outbox)
        self._local = self._fallback.window
        self._store = MemoryStoreClient(
            endpoint,
            app_name,
            token=token,
            transport=transport,
            on_reachable=self._fallback.store_reachable,
            on_unreachable=self._fallback.store_unreachable,
            on_mark=self._catch_up,
        )
        self.endpoint = self._store.endpoint
        #: The window of the last turn's context request (events, tokens), sent with writes: the store folds what
        #: leaves this window into the rolling summary.
        self._window: tuple[int | None, int] = (None, token_budget)
        self._task: asyncio.Task[None] | None = None
        #: The store's erasure mark this agent has applied (module docstring, "Erasure"); None: none yet.
        self.erasure_mark: Mark | None = None
        self._catching_up = False

    @property
    def failure_mode(self) -> Literal["soft", "strict"]:
        """``soft`` or ``strict`` (module docstring)."""
        return self._fallback.failure_mode

    @property
    def degraded(self) -> str | None:
        """Why the store is unusable now, or None while it answers."""
        return self._fallback.degraded

    @property
    def dropped_writes(self) -> int:
        """Batches of events dropped because the outbox was full while the store was unreachable."""
        return self._outbox.dropped

    # -- life cycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background sender of queued writes (which also probes an unreachable store)."""
        if self._task is None:
            self._task = asyncio.create_task(
                self._outbox.drain_forever(self._send, self._fallback.away), name="remote-memory-outbox"
            )

    async def close(self) -> None:
        """Send what is queued (for up to 5 s while the store answers), then stop and close the connections."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                while self._outbox and self.degraded is None:
                    await self._outbox.send_next(self._send)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._outbox:
            log.warning("memory store: %d queued writes not sent at shutdown", len(self._outbox))
        await self._store.aclose()

    def status(self) -> MemoryStatus:
        """``memory: degraded`` (soft) or a problem (strict) while the store is unreachable; dropped writes."""
        return self._fallback.status()

    async def _catch_up(self, header: str | None) -> None:
        """Apply the store's erasures this agent has not applied yet (the answer's mark names a newer one), to the
        local window and the outbox, before the answer is used. A failed read of the log leaves the mark where it
        was, so the next answer tries again."""
        mark = Mark.parse(header)
        known = self.erasure_mark
        if mark is None or self._catching_up or mark == known:
            return
        same_store = known is not None and known.store_id == mark.store_id
        if same_store and known is not None and mark.seq <= known.seq:
            return
        if known is None and not self._local.holds_any() and not self._outbox:
            self.erasure_mark = mark  # nothing held that an earlier erasure could name
            return
        after = known.seq if same_store and known is not None else 0
        self._catching_up = True
        try:
            while True:
                try:
                    page = await self._store.erasure_page(after, ERASURES_PAGE)
                except StoreUnreachable as error:
                    log.warning("memory store: cannot read its erasure log now: %s", error)
                    return
                for erasure in page.erasures:
                    removed = await self._fallback.forget(erasure.session_id, erasure.user_id)
                    if any(removed.values()):
                        log.info("applied the store's erasure %d here: %s", erasure.seq, removed)
                    after = erasure.seq
                if len(page.erasures) < ERASURES_PAGE:
                    self.erasure_mark = Mark(page.store_id, max(after, page.seq))
                    return
        finally:
            self._catching_up = False

    # -- sessions ---------------------------------------------------------------------------------------------

    async def create_session(self, app_name: str, user_id: str | None = None) -> str:
        """A fresh session id (the store creates the session with its first write)."""
        return await self.get_or_create_session(None, app_name, user_id)

    async def get_or_create_session(self, session_id: str | None, app_name: str, user_id: str | None = None) -> str:
        """``session_id`` (a fresh one when None), remembered with its verified ``user_id`` for the writes of the
        turn; the store creates the session with its first write. Raises :class:`~kora.core.errors.Forbidden` when
        the session is another user's.

        A session this agent's local window holds is checked there, with no round trip. One it does not hold (a
        session another replica served, or this one before a restart or an eviction) costs one request to learn
        its owner from the store, so a refusal comes before the turn answers anything: a streamed answer's status
        line included. A store that cannot answer leaves the check to the turn's context read, as before.
        """
        sid = session_id or new_session_id()
        if session_id is not None and not self._local.holds(sid):
            await self._learn_owner(sid, app_name)
        await self._local.get_or_create_session(sid, app_name, user_id)  # refuses before anything is remembered
        self._fallback.remember_user(sid, user_id)
        return sid

    async def _learn_owner(self, session_id: str, app_name: str) -> None:
        """Open ``session_id`` in the local window under the owner the store has for it; nothing when the store
        has no such session or does not answer."""
        try:
            found = await self._store.session(session_id)
        except (StoreUnreachable, StoreRefused):
            return
        # The store's sessions carry None for anonymous ones (never the listing's "default").
        await self._local.get_or_create_session(session_id, app_name, found.user_id)

    def check_access(self, session_id: str, user_id: str | None) -> None:
        """What the local window knows (:meth:`kora.memory.local.LocalMemory.check_access`); the store checks the
        rest on the turn's context read."""
        self._local.check_access(session_id, user_id)

    async def list_sessions(self, user_id: str | None = None) -> list[SessionInfo]:
        """This agent's sessions in the store (with ``user_id``, that user's); soft mode, store unreachable: the
        local window's."""
        try:
            listed = await self._store.sessions(user_id)
        except (StoreUnreachable, StoreRefused) as error:
            return await self._fallback.fallback(error, self._local.list_sessions(user_id))
        # Listed as LocalMemory lists them: a session started anonymously under the user "default".
        return [
            s if s.user_id is not None else s.model_copy(update={"user_id": ANONYMOUS_USER}) for s in listed.sessions
        ]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """The session as the local window holds it (a session this replica opened, which the store creates with
        its first write), else as the store has it (one request); None when neither holds it. Raises
        :class:`~kora.core.errors.Unavailable` when the store cannot be reached."""
        if self._local.holds(session_id):
            return await self._local.session_info(session_id)
        try:
            found = await self._store.session(session_id)
        except StoreRefused:
            return None
        except StoreUnreachable as error:
            raise self._fallback.unavailable(error) from error
        return found if found.user_id is not None else found.model_copy(update={"user_id": ANONYMOUS_USER})

    #: The store keeps a session's metadata (``/v1/sessions/{id}/metadata``).
    keeps_session_metadata = True

    async def session_metadata(self, session_id: str) -> dict[str, str]:
        """The metadata the store keeps for the session (``{}`` for a session it does not hold). Raises
        :class:`~kora.core.errors.Unavailable` when the store cannot be reached."""
        try:
            found = await self._store.session_metadata(session_id)
        except StoreRefused:
            return {}
        except StoreUnreachable as error:
            raise self._fallback.unavailable(error) from error
        return found.metadata

    async def set_session_metadata(self, session_id: str, metadata: dict[str, str], user_id: str | None = None) -> None:
        """Replace the session's metadata in the store, which creates the session for ``user_id`` when its first
        write has not yet (nothing is kept locally: a later read would not find it). Raises
        :class:`~kora.core.errors.Unavailable` (503) when the store cannot be reached; when it refuses, the session
        of another user is :func:`~kora.memory.base.session_forbidden` (403) and any other refusal a
        :class:`~kora.core.errors.Forbidden` (403) or :class:`~kora.core.errors.RequestError` (400) with the
        store's message and code."""
        try:
            await self._store.set_session_metadata(session_id, user_id, metadata)
        except StoreRefused as refused:
            if refused.code == SESSION_FORBIDDEN:
                await self._fallback.refused(session_id)
                raise session_forbidden(session_id) from refused
            kind = Forbidden if refused.status == 403 else RequestError
            raise kind(
                f"The memory store refused the conversation's metadata: {refused}", code=refused.code or None
            ) from refused
        except StoreUnreachable as error:
            raise self._fallback.unavailable(error) from error

    async def check_reader(self, session_id: str, user_id: str | None) -> None:
        """What the local window knows; for a session it does not hold, the owner the store has (one request).
        A store that cannot answer leaves nothing to show but the local window, which does not hold it."""
        if self._local.holds(session_id):
            self._local.check_access(session_id, user_id)
            return
        try:
            found = await self._store.session(session_id)
        except (StoreUnreachable, StoreRefused):
            return
        check_owner(session_id, found.user_id, user_id)

    async def delete_session(self, session_id: str) -> bool:
        """Remove the session from the store and the local window; True if the store had it."""
        await self._local.delete_session(session_id)
        try:
            return await self._store.delete_session(session_id)
        except (StoreUnreachable, StoreRefused) as error:
            raise self._fallback.unavailable(error) from error

    # -- erasure ----------------------------------------------------------------------------------------------

    async def _forget(self, session_id: str | None, user_id: str | None) -> dict[str, int]:
        """Erase locally, then in the store (``POST /v1/forget``); the local counts and the store's per tier.
        Raises :class:`~kora.core.errors.Unavailable` when the store cannot be reached or refuses (the local copies
        are gone already; asking again erases the store's)."""
        async with self._outbox.sending:  # no batch of what is erased is on its way while the outbox is purged
            counts = await self._fallback.forget(session_id, user_id)
        request = ForgetRequest(user_id=user_id, session_id=session_id)
        try:
            result = await self._store.forget(request)
        except (StoreUnreachable, StoreRefused) as error:
            raise Unavailable(
                f"The memory store could not erase it now ({error}); this agent's copies are erased. Ask again.",
                code=MEMORY_UNAVAILABLE,
            ) from error
        return result.removed.model_dump() | counts

    async def erase_session(self, session_id: str) -> dict[str, int]:
        """Erase ``session_id`` from this agent's window and outbox and from the store (every agent's copy)."""
        return await self._forget(session_id, None)

    async def erase_user(self, user_id: str) -> dict[str, int]:
        """Erase ``user_id``'s sessions and facts from this agent's window and outbox and from the store."""
        return await self._forget(None, user_id)

    # -- events -----------------------------------------------------------------------------------------------

    async def add_event(self, session_id: str, event: MemoryEvent) -> None:
        """Queue one event (see :meth:`add_events`)."""
        await self.add_events(session_id, [event])

    async def add_events(self, session_id: str, events: Sequence[MemoryEvent]) -> None:
        """Keep ``events`` in the local window and queue them for the store; returns at once."""
        if not events:
            return
        await self._local.add_events(session_id, events)
        seen = str(self.erasure_mark) if self.erasure_mark is not None else None
        self._outbox.queue(Batch(session_id, self._fallback.user_of(session_id), list(events), seen))

    async def _send(self, batch: Batch | None) -> bool:
        """Send ``batch`` (None: nothing queued, probe the store); False when the store is away. A batch the store
        refuses is dropped: it will never take it (e.g. the session belongs to another user)."""
        if batch is None:
            try:
                await self._store.health()
            except (StoreUnreachable, StoreRefused):
                return False
            return True
        write = EventsWrite(
            app_name=self.app_name,
            user_id=batch.user_id,
            rolling_summary=self.rolling_summary,
            window_events=self._window[0],
            window_tokens=self._window[1],
            events=batch.events,
            erasures_seen=batch.erasures_seen,
        )
        try:
            await self._store.write_events(batch.session_id, write)
        except StoreUnreachable:
            return False
        except StoreRefused as refused:
            log.error("memory store refused %d events of session %s: %s", len(batch.events), batch.session_id, refused)
        self._outbox.sent(batch)
        return True

    async def get_session_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
    ) -> list[MemoryEvent]:
        """The session's events in the store, oldest first (with the writes not yet sent)."""
        # Taken before the request: a write that lands while it is answered is in one or the other, never neither.
        queued = self._outbox.pending_events(session_id)
        try:
            stored = await self._store.session_events(session_id, event_types, limit)
        except (StoreUnreachable, StoreRefused) as error:
            return await self._fallback.fallback(error, self._local.get_session_events(session_id, event_types, limit))
        wanted = {str(t) for t in event_types} if event_types else None
        pending = [e for e in queued if wanted is None or e.event_type in wanted]
        return _merged(stored.events, pending, limit)

    async def list_events(
        self, session_id: str | None = None, limit: int | None = None, user_id: str | None = None
    ) -> list[MemoryEvent]:
        """Events of one session or of all this agent's sessions (with ``user_id``, that user's) in the store,
        oldest first."""
        if session_id is not None:
            return await self.get_session_events(session_id, None, limit)
        try:
            stored = await self._store.events(limit, user_id)
        except (StoreUnreachable, StoreRefused) as error:
            return await self._fallback.fallback(error, self._local.list_events(None, limit, user_id))
        return stored.events

    async def count_events(self, session_id: str | None = None, user_id: str | None = None) -> int:
        """How many events the store holds for one session or for this agent (with ``user_id``, that user's)."""
        try:
            if session_id is not None:
                stored = await self._store.session_events(session_id, None, 0)
            else:
                stored = await self._store.events(0, user_id)
        except (StoreUnreachable, StoreRefused) as error:
            return await self._fallback.fallback(error, self._local.count_events(session_id, user_id))
        return stored.total

    # -- turns and recall -------------------------------------------------------------------------------------

    def _read_scope(self, user_id: str | None) -> str:
        """The agent's read scope, narrowed to the session without a verified user."""
        return self.max_read_scope if user_id is not None else "session"

    async def turn_context(self, session_id: str, prompt: str, limit: int, user_id: str | None = None) -> TurnContext:
        """Summary, window and recalled facts from the store in one request (module docstring for failures)."""
        self._fallback.remember_user(session_id, user_id)
        self._window = (limit, self.token_budget)
        request = ContextRequest(
            app_name=self.app_name,
            user_id=user_id,
            query=prompt[:16_000] if prompt.strip() else None,
            scope=self._read_scope(user_id),
            max_events=limit,
            token_budget=self.token_budget,
        )
        # Taken before the request: a write that lands while it is answered is in one or the other, never neither.
        queued = self._outbox.pending_events(session_id)
        try:
            context = await self._store.context(session_id, request)
        except StoreRefused as refused:
            if refused.code == SESSION_FORBIDDEN:
                await self._fallback.refused(session_id)
                raise session_forbidden(session_id) from refused
            if self.failure_mode == "strict":
                raise self._fallback.unavailable(refused) from refused
            return TurnContext(events=await self._local.get_session_events(session_id, limit=limit))
        except StoreUnreachable as error:
            if self.failure_mode == "strict":
                raise self._fallback.unavailable(error) from error
            return TurnContext(events=await self._local.get_session_events(session_id, limit=limit))
        # With a rolling summary the store's window reaches back to what the summary covers: keep all of it.
        return TurnContext(
            summary=context.summary,
            events=_merged(context.window, queued, None if self.rolling_summary else limit),
            facts=[_hit(fact) for fact in context.facts],
        )

    async def search(
        self, session_id: str, query: str, scope: str = "session", limit: int = 5, user_id: str | None = None
    ) -> list[MemoryHit]:
        """Facts and events of ``scope`` matching ``query`` in the store. Raises ``ValueError`` (for the model)
        for a scope above the agent's ceiling, a pooled scope without a verified user, or an unreachable store."""
        if scope not in SCOPES or scope_rank(scope) > scope_rank(self.max_read_scope):
            raise ValueError(f"Memory level {scope!r} is above this agent's ceiling {self.max_read_scope!r}.")
        if scope in USER_SCOPES and user_id is None:
            raise ValueError(
                f"Memory level {scope!r} needs a signed-in user; this conversation has none. Use level 'session'."
            )
        request = RecallRequest(
            query=query,
            scope=scope,
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            top_k=max(1, min(limit, 100)),
            include_events=True,
        )
        try:
            found = await self._store.recall(request)
        except StoreRefused as refused:
            raise ValueError(str(refused)) from refused
        except StoreUnreachable as error:
            raise ValueError(f"The memory store is unavailable now ({error}); try again later.") from error
        return [_hit(hit) for hit in found.hits]

    async def save(
        self,
        session_id: str,
        content: str,
        metadata: dict[str, JsonValue] | None = None,
        user_id: str | None = None,
    ) -> str:
        """Store ``content`` as a long-term fact now (deduplicated); its id, or the id of the fact it duplicates.
        Raises ``ValueError`` (for the model) when the store refuses it or cannot be reached."""
        attribution = (metadata or {}).get("attribution")
        fact = FactCreate(
            content=content,
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            attribution=attribution if isinstance(attribution, dict) else {},
        )
        try:
            written = await self._store.save_fact(fact)
        except StoreRefused as refused:
            raise ValueError(str(refused)) from refused
        except StoreUnreachable as error:
            raise ValueError(f"The memory store is unavailable now ({error}); nothing was saved.") from error
        return written.fact_id


def _hit(hit: RecallHit) -> MemoryHit:
    return MemoryHit(
        text=hit.text,
        score=hit.score,
        source=hit.source,
        event_id=hit.id if hit.source == "event" else None,
        timestamp=hit.timestamp,
    )


def _merged(stored: list[MemoryEvent], pending: list[MemoryEvent], limit: int | None) -> list[MemoryEvent]:
    """``stored`` then the ``pending`` events it does not hold yet, cut to the newest ``limit``."""
    if pending:
        held = {event.event_id for event in stored}
        stored = [*stored, *(event for event in pending if event.event_id not in held)]
    return stored if limit is None else stored[-limit:] if limit else []
