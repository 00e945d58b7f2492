"""Sessions, events, the short- and medium-term tiers, and erasure: the SQL behind the memory service's API.

Every function takes a connection of the pool
(autocommit; writes open their own transaction) so that a request's work is atomic: a write of events stores them
*and* queues their background jobs (fact extraction, summary fold) in one transaction, so an accepted write is
never left without its jobs, even if the service is killed right after answering.

The short-term window of a session is its newest events, at most ``max_events`` and within a token budget (the
smaller of the client's and the store's); events older than the window are the medium tier's input: once
``compaction_trigger`` of them are not yet summarised, a fold job is queued (:mod:`kora.memory_service.jobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from kora.core.errors import NotFound
from kora.core.events import EventType, MemoryEvent
from kora.memory import SessionInfo, check_owner, event_text
from kora.memory.wire import EventList, Removed
from kora.memory_service.database import Conn
from kora.memory_service.settings import MemoryServiceSettings

#: Event types whose text says something about the user: the input of fact extraction.
CONVERSATION_TYPES = (EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED, EventType.AGENT_RESPONSE)

#: Characters of an event's text kept for full-text search: Postgres refuses a tsvector over 1 MB, which a long
#: enough text reaches; the event itself (``content``) is stored whole, and its token estimate counts all of it.
MAX_SEARCH_CHARS = 100_000

_SESSION_COLUMNS = (
    "sid, session_id, app_name, user_id, created_at, updated_at, event_count, rolling_summary, window_events, "
    "window_tokens"
)
_EVENT_COLUMNS = "event_id, ts AS timestamp, event_type, content, metadata"


def estimate_tokens(text: str) -> int:
    """Tokens of ``text``, estimated as one per 4 characters (at least 1)."""
    return len(text) // 4 + 1


@dataclass(frozen=True)
class Session:
    """A stored session: ``sid`` is its row key, ``session_id`` the client's id (unique per ``app_name``)."""

    sid: int
    session_id: str
    app_name: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    event_count: int
    rolling_summary: bool
    window_events: int | None = None
    window_tokens: int | None = None

    def window_bounds(self, settings: MemoryServiceSettings) -> tuple[int, int]:
        """The window whose leavers the rolling summary folds: the client's (as its last write said), within the
        store's ``short_term_hard_event_cap`` and ``short_term_token_budget``; (events, tokens)."""
        cap = settings.short_term_hard_event_cap
        budget = settings.short_term_token_budget
        events = cap if self.window_events is None else min(self.window_events, cap)
        tokens = budget if self.window_tokens is None else min(self.window_tokens, budget)
        return events, tokens

    def info(self) -> SessionInfo:
        """As the API lists it."""
        return SessionInfo(
            session_id=self.session_id,
            app_name=self.app_name,
            user_id=self.user_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
            event_count=self.event_count,
        )


def _session(row: dict[str, Any]) -> Session:
    return Session(**row)


def _event(row: dict[str, Any]) -> MemoryEvent:
    return MemoryEvent.model_validate(row)


async def get_or_create_session(
    conn: Conn,
    session_id: str,
    app_name: str,
    user_id: str | None,
    rolling_summary: bool = False,
    window: tuple[int | None, int | None] = (None, None),
) -> Session:
    """The session ``session_id`` of ``app_name``, created when missing; ``window`` (events, tokens) records the
    client's window when given.

    Raises :class:`~kora.core.errors.Forbidden` (``session_forbidden``) when it belongs to a verified user other
    than ``user_id``, anonymous included (:func:`kora.memory.base.check_owner`): a session id never opens another
    user's memory. Callers that write run this inside their transaction, so a refusal also undoes the update of
    the session's window settings.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"INSERT INTO sessions (session_id, app_name, user_id, rolling_summary, window_events, window_tokens) "
            f"VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (app_name, session_id) DO UPDATE "
            f"SET rolling_summary = sessions.rolling_summary OR excluded.rolling_summary, "
            f"window_events = coalesce(excluded.window_events, sessions.window_events), "
            f"window_tokens = coalesce(excluded.window_tokens, sessions.window_tokens) "
            f"RETURNING {_SESSION_COLUMNS}",
            (session_id, app_name, user_id, rolling_summary, *window),
        )
        row = await cur.fetchone()
    assert row is not None  # INSERT ... RETURNING always returns the row
    session = _session(row)
    check_owner(session_id, session.user_id, user_id)
    return session


async def check_access(conn: Conn, session_id: str, app_name: str, user_id: str | None) -> None:
    """Raise :class:`~kora.core.errors.Forbidden` when ``app_name``'s session ``session_id`` exists and belongs to
    a user other than ``user_id`` (:func:`kora.memory.base.check_owner`); an unknown session raises nothing."""
    session = await find_session(conn, session_id, app_name)
    if session is not None:
        check_owner(session_id, session.user_id, user_id)


async def find_session(conn: Conn, session_id: str, app_name: str) -> Session | None:
    """The session, or None."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE app_name = %s AND session_id = %s", (app_name, session_id)
        )
        row = await cur.fetchone()
    return None if row is None else _session(row)


async def session_by_sid(conn: Conn, sid: int, lock: bool = False) -> Session | None:
    """The session of row ``sid``, or None when it is gone. ``lock`` takes a share lock on its row until the
    caller's transaction ends, so an erasure (which locks the sessions it removes first) cannot remove it
    meanwhile, and waits for a locker that came first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE sid = %s{' FOR SHARE' if lock else ''}", (sid,)
        )
        row = await cur.fetchone()
    return None if row is None else _session(row)


async def require_session(conn: Conn, session_id: str, app_name: str) -> Session:
    """The session; raises :class:`~kora.core.errors.NotFound` when ``app_name`` has no such session."""
    session = await find_session(conn, session_id, app_name)
    if session is None:
        raise NotFound(f"agent {app_name!r} has no session {session_id!r}")
    return session


async def session_metadata(conn: Conn, session_id: str, app_name: str) -> dict[str, str]:
    """The metadata of ``app_name``'s session; raises :class:`~kora.core.errors.NotFound` when it has no such
    session."""
    cur = await conn.execute(
        "SELECT metadata FROM sessions WHERE app_name = %s AND session_id = %s", (app_name, session_id)
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"agent {app_name!r} has no session {session_id!r}")
    return dict(row[0])


async def set_session_metadata(
    conn: Conn, session_id: str, app_name: str, user_id: str | None, metadata: dict[str, str]
) -> None:
    """Replace the metadata of ``app_name``'s session ``session_id``, created for ``user_id`` when missing. Raises
    :class:`~kora.core.errors.Forbidden` for another user's session (:func:`get_or_create_session`)."""
    session = await get_or_create_session(conn, session_id, app_name, user_id)
    await conn.execute("UPDATE sessions SET metadata = %s WHERE sid = %s", (Jsonb(metadata), session.sid))


async def list_sessions(conn: Conn, app_name: str | None, user_id: str | None, limit: int | None) -> list[SessionInfo]:
    """Sessions of ``app_name`` and/or ``user_id`` (all when None), oldest first, at most ``limit``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions "
            f"WHERE (%(app)s::text IS NULL OR app_name = %(app)s) AND (%(user)s::text IS NULL OR user_id = %(user)s) "
            f"ORDER BY created_at, sid LIMIT %(limit)s",
            {"app": app_name, "user": user_id, "limit": limit},
        )
        return [_session(row).info() for row in await cur.fetchall()]


async def delete_session(conn: Conn, session_id: str, app_name: str) -> bool:
    """Remove the session with its events, summaries and queued jobs; True if it existed.

    The session's long-term facts stay (they belong to the user); :func:`forget` erases those too.
    """
    cur = await conn.execute("DELETE FROM sessions WHERE app_name = %s AND session_id = %s", (app_name, session_id))
    return cur.rowcount > 0


@dataclass(frozen=True)
class Written:
    """What a write of events stored: the session, how many events were new, and the new events' row range."""

    session: Session
    added: int
    first_seq: int | None
    last_seq: int | None
    conversation: bool


async def add_events(conn: Conn, session: Session, events: Sequence[MemoryEvent]) -> Written:
    """Append ``events`` to ``session`` in order; events whose id the session holds already are skipped.

    Must run inside the caller's transaction (with the jobs it queues).
    """
    if not events:
        return Written(session, 0, None, None, False)
    texts = [event_text(event) for event in events]
    async with conn.cursor() as cur:
        await cur.execute(
            "INSERT INTO events (sid, event_id, ts, event_type, content, metadata, body, tokens) "
            "SELECT %s, e.event_id, e.ts, e.event_type, e.content, e.metadata, e.body, e.tokens "
            "FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::jsonb[], %s::jsonb[], "
            "%s::text[], %s::int[]) WITH ORDINALITY AS e(event_id, ts, event_type, content, metadata, body, tokens, n) "
            "ORDER BY n ON CONFLICT (sid, event_id) DO NOTHING RETURNING seq, event_type",
            (
                session.sid,
                [event.event_id for event in events],
                [event.timestamp for event in events],
                [str(event.event_type) for event in events],
                [Jsonb(event.content) for event in events],
                [Jsonb(event.metadata) for event in events],
                [text[:MAX_SEARCH_CHARS] for text in texts],
                [estimate_tokens(text) for text in texts],
            ),
        )
        rows = await cur.fetchall()
    if not rows:
        return Written(session, 0, None, None, False)
    await conn.execute(
        "UPDATE sessions SET event_count = event_count + %s, updated_at = now() WHERE sid = %s",
        (len(rows), session.sid),
    )
    seqs = [int(str(row[0])) for row in rows]
    conversation = any(row[1] in CONVERSATION_TYPES for row in rows)
    return Written(session, len(rows), min(seqs), max(seqs), conversation)


async def session_events(
    conn: Conn, session: Session, event_types: Sequence[str] | None, limit: int | None
) -> EventList:
    """The session's events of ``event_types`` (all when None), the newest ``limit`` of them, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_EVENT_COLUMNS} FROM (SELECT * FROM events WHERE sid = %(sid)s "
            f"AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s)) ORDER BY seq DESC LIMIT %(limit)s) e "
            f"ORDER BY seq",
            {"sid": session.sid, "types": list(event_types) if event_types else None, "limit": limit},
        )
        events = [_event(row) for row in await cur.fetchall()]
        await cur.execute(
            "SELECT count(*) AS n FROM events WHERE sid = %(sid)s "
            "AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s))",
            {"sid": session.sid, "types": list(event_types) if event_types else None},
        )
        row = await cur.fetchone()
    return EventList(events=events, total=int(str(row["n"])) if row else 0)


async def app_events(conn: Conn, app_name: str | None, limit: int | None, user_id: str | None = None) -> EventList:
    """Events across the sessions of ``app_name`` (every agent's when None) and, with ``user_id``, of the sessions
    that user started; the newest ``limit``, oldest first."""
    where = "(%(app)s::text IS NULL OR s.app_name = %(app)s) AND (%(user)s::text IS NULL OR s.user_id = %(user)s)"
    params = {"app": app_name, "user": user_id, "limit": limit}
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_EVENT_COLUMNS} FROM (SELECT e.* FROM events e JOIN sessions s USING (sid) "
            f"WHERE {where} ORDER BY e.ts DESC, e.seq DESC LIMIT %(limit)s) e "
            f"ORDER BY ts, seq",
            params,
        )
        events = [_event(row) for row in await cur.fetchall()]
        await cur.execute(f"SELECT count(*) AS n FROM events e JOIN sessions s USING (sid) WHERE {where}", params)
        row = await cur.fetchone()
    return EventList(events=events, total=int(str(row["n"])) if row else 0)


# -- short- and medium-term tiers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRow:
    """An event of a session as the tiers see it: its row ``seq``, token estimate and the event."""

    seq: int
    tokens: int
    event: MemoryEvent


async def newest_events(conn: Conn, session: Session, after_seq: int, count: int) -> list[WindowRow]:
    """The session's newest ``count`` events with ``seq > after_seq``, newest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT seq, tokens, {_EVENT_COLUMNS} FROM events WHERE sid = %s AND seq > %s ORDER BY seq DESC LIMIT %s",
            (session.sid, after_seq, count),
        )
        rows = await cur.fetchall()
    return [WindowRow(int(str(row.pop("seq"))), int(str(row.pop("tokens"))), _event(row)) for row in rows]


async def oldest_events(conn: Conn, session: Session, after_seq: int, before_seq: int, count: int) -> list[WindowRow]:
    """The session's oldest ``count`` events with ``after_seq < seq < before_seq``, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT seq, tokens, {_EVENT_COLUMNS} FROM events WHERE sid = %s AND seq > %s AND seq < %s "
            f"ORDER BY seq LIMIT %s",
            (session.sid, after_seq, before_seq, count),
        )
        rows = await cur.fetchall()
    return [WindowRow(int(str(row.pop("seq"))), int(str(row.pop("tokens"))), _event(row)) for row in rows]


def window_size(newest_first: Sequence[WindowRow], max_events: int, token_budget: int) -> int:
    """How many of ``newest_first`` fit the window: at most ``max_events``, their tokens within ``token_budget``."""
    used = 0
    for count, row in enumerate(newest_first[:max_events]):
        used += row.tokens
        if used > token_budget:
            return count
    return min(len(newest_first), max_events)


async def latest_summary(conn: Conn, session: Session) -> tuple[str, int] | None:
    """The session's newest rolling summary and the last event ``seq`` it covers, or None."""
    cur = await conn.execute(
        "SELECT body, through_seq FROM summaries WHERE sid = %s ORDER BY version DESC LIMIT 1", (session.sid,)
    )
    row = await cur.fetchone()
    return None if row is None else (str(row[0]), int(str(row[1])))


@dataclass(frozen=True)
class TurnWindow:
    """What the short- and medium-term tiers put before a turn: the ``session`` (None when unknown), its newest
    rolling ``summary`` (None when there is none, or the tier is off) and the ``events`` of its window, oldest
    first."""

    session: Session | None
    summary: str | None
    events: list[MemoryEvent]


async def turn_window(
    conn: Conn,
    app_name: str,
    session_id: str,
    settings: MemoryServiceSettings,
    max_events: int,
    token_budget: int,
    user_id: str | None,
) -> TurnWindow:
    """The session, its summary and its window for a turn of ``user_id``, in two queries. Raises
    :class:`~kora.core.errors.Forbidden` after the first, reading no event, when the session belongs to another
    user (:func:`kora.memory.base.check_owner`).

    The window is the newest ``max_events`` events within ``token_budget`` (both within the store's bounds). On a
    session with a rolling summary it reaches back to the first event the summary does not cover yet (still
    within the store's hard event cap and the token budget): the summary covers what the window leaves out, even
    while a fold is pending or before the first one.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {', '.join(f's.{c.strip()}' for c in _SESSION_COLUMNS.split(','))}, "
            f"sm.body AS summary, sm.through_seq FROM sessions s LEFT JOIN LATERAL (SELECT body, through_seq "
            f"FROM summaries WHERE sid = s.sid ORDER BY version DESC LIMIT 1) sm ON true "
            f"WHERE s.app_name = %s AND s.session_id = %s",
            (app_name, session_id),
        )
        row = await cur.fetchone()
        if row is None:
            return TurnWindow(None, None, [])
        summary, through = row.pop("summary"), row.pop("through_seq")
        session = _session(row)
        check_owner(session_id, session.user_id, user_id)
        rolling = settings.medium_term_enabled and session.rolling_summary
        hard_cap = settings.short_term_hard_event_cap
        cap = min(max_events, hard_cap)
        budget = min(token_budget, settings.short_term_token_budget)
        # Without the medium tier nothing is summarised, so the window never reaches back past ``cap``.
        reach = (int(str(through)) if through is not None else 0) if rolling else None
        await cur.execute(
            f"SELECT seq, tokens, {_EVENT_COLUMNS} FROM (SELECT seq, tokens, event_id, ts, event_type, content, "
            f"metadata, row_number() OVER (ORDER BY seq DESC) AS n FROM events WHERE sid = %(sid)s "
            f"ORDER BY seq DESC LIMIT %(hard)s) e "
            f"WHERE n <= %(cap)s OR seq > %(reach)s ORDER BY seq DESC",
            {"sid": session.sid, "hard": hard_cap if rolling else cap, "cap": cap, "reach": reach},
        )
        newest = [WindowRow(int(str(r.pop("seq"))), int(str(r.pop("tokens"))), _event(r)) for r in await cur.fetchall()]
    size = window_size(newest, len(newest), budget)
    return TurnWindow(
        session,
        str(summary) if rolling and summary is not None else None,
        [r.event for r in reversed(newest[:size])],
    )


async def needs_fold(conn: Conn, session: Session, settings: MemoryServiceSettings) -> bool:
    """True when ``compaction_trigger`` or more events have left the session's window (the client's, within the
    store's bounds: :meth:`Session.window_bounds`) and are not yet summarised."""
    summary = await latest_summary(conn, session)
    through = summary[1] if summary else 0
    cap, budget = session.window_bounds(settings)
    newest = await newest_events(conn, session, through, cap + settings.compaction_trigger)
    in_window = window_size(newest, cap, budget)
    return len(newest) - in_window >= settings.compaction_trigger


# -- erasure --------------------------------------------------------------------------------------------------


async def forget(conn: Conn, user_id: str | None, session_id: str | None) -> Removed:
    """Erase one user's (every agent's sessions of theirs) or one session id's (in every agent) events, summaries,
    facts with their embeddings, fact history and queued jobs, in one transaction; the counts removed per tier.

    Erasure first locks the sessions it removes. A background job commits its results only while holding a share
    lock on its session and after checking the session still exists (:mod:`kora.memory_service.jobs`): so a job
    that committed first has its writes removed here, and one that commits after finds its session gone and drops
    them. A recall after this returns can never see an erased fact, and erasure never waits for a model request,
    only for a job's short commit.
    """
    column, key = ("user_id", user_id) if user_id is not None else ("session_id", session_id)
    sessions_where = facts_where = f"{column} = %(key)s"
    params = {"key": key}
    removed: dict[str, int] = {}
    async with conn.transaction():
        sids = f"(SELECT sid FROM sessions WHERE {sessions_where})"
        # Each statement below sees what had committed when it started (read committed): once these locks are held,
        # no job commit on these sessions is under way, and none can start before this transaction ends.
        await conn.execute(f"SELECT 1 FROM sessions WHERE {sessions_where} FOR UPDATE", params)
        for tier, statement in (
            ("jobs", f"DELETE FROM jobs WHERE sid IN {sids}"),
            ("events", f"DELETE FROM events WHERE sid IN {sids}"),
            ("summaries", f"DELETE FROM summaries WHERE sid IN {sids}"),
            (
                "fact_history",
                f"DELETE FROM fact_history WHERE {facts_where} "
                f"OR fact_id IN (SELECT fact_id FROM facts WHERE {facts_where})",
            ),
            ("facts", f"DELETE FROM facts WHERE {facts_where}"),
            ("sessions", f"DELETE FROM sessions WHERE {sessions_where}"),
        ):
            cur = await conn.execute(statement, params)
            removed[tier] = max(cur.rowcount, 0)
    return Removed(**removed)
