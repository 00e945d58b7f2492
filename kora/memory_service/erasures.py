"""The erasure log: how one erasure reaches every copy of what it erases (docs/memory.md, "Erasure").

``POST /v1/forget`` erases a user or a session from the store's tiers and appends a row to ``erasures`` in the same
transaction. The store's *mark*, ``<store_id>:<seq>`` (``store_id`` random per database, ``seq`` the newest row),
rides on every response as the :data:`~kora.memory.wire.ERASURE_HEADER` header. An agent that sees a mark it has not
seen reads ``GET /v1/erasures?after=<seq>`` (all of them when the ``store_id`` changed) and drops what they name from
its local window and its queue of unsent writes before it uses the answer, so an agent that reached its store
after an erasure never replays or lists what was erased, whatever happens to the store later. A queued write that
reaches the store after an erasure of its session or user is dropped too (:func:`predates_erasure`): it carries
the mark its agent had seen when it queued it.

The mark is kept in memory by the one service process of a store (a MemoryStore runs one replica) and moved
forward by each erasure it commits.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from psycopg.rows import dict_row
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kora.memory.wire import ERASURE_HEADER, Erasure, Mark
from kora.memory_service.database import Conn


async def load_mark(conn: Conn) -> Mark:
    """The store's mark as the database has it now."""
    row = await (await conn.execute("SELECT value FROM store_meta WHERE key = 'store_id'")).fetchone()
    newest = await (await conn.execute("SELECT coalesce(max(seq), 0) FROM erasures")).fetchone()
    return Mark(str(row[0]) if row else "", int(str(newest[0])) if newest else 0)


async def record(conn: Conn, user_id: str | None, session_id: str | None) -> int:
    """Append an erasure of ``user_id`` or ``session_id`` (in the caller's transaction); its ``seq``."""
    cur = await conn.execute(
        "INSERT INTO erasures (user_id, session_id) VALUES (%s, %s) RETURNING seq", (user_id, session_id)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(str(row[0]))


async def since(conn: Conn, after: int, limit: int) -> list[Erasure]:
    """The erasures with ``seq > after``, oldest first, at most ``limit``."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT seq, user_id, session_id FROM erasures WHERE seq > %s ORDER BY seq LIMIT %s", (after, limit)
        )
        return [Erasure.model_validate(row) for row in await cur.fetchall()]


async def predates_erasure(
    conn: Conn, store_id: str, seen: Mark | None, session_id: str, user_id: str | None, oldest: datetime
) -> bool:
    """Whether a write of events of ``session_id`` (of ``user_id``) queued by a client that had seen ``seen`` was
    overtaken by an erasure of that session or user: one after ``seen`` (of this store), or, when the client had
    seen no mark of this store, one made after its ``oldest`` event."""
    known = seen.seq if seen is not None and seen.store_id == store_id else None
    params = {"sid": session_id, "user": user_id, "known": known, "oldest": oldest}
    row = await (await conn.execute(_OVERTAKEN, params)).fetchone()
    return row is not None


#: An erasure of the session or user of a write, after what its client had seen (:func:`predates_erasure`).
_OVERTAKEN = """
SELECT 1 FROM erasures
WHERE (session_id = %(sid)s OR (%(user)s::text IS NOT NULL AND user_id = %(user)s))
  AND CASE WHEN %(known)s::bigint IS NULL THEN at > %(oldest)s ELSE seq > %(known)s END
LIMIT 1
"""


class MarkHeader:
    """Pure ASGI middleware: every HTTP response carries ``mark()`` (the store's mark, once its database is open)
    as the :data:`~kora.memory.wire.ERASURE_HEADER` header. Costs a tuple append per response."""

    def __init__(self, app: ASGIApp, mark: Callable[[], Mark | None]) -> None:
        self.app = app
        self.mark = mark

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_mark(message: Message) -> None:
            mark = self.mark()
            if message["type"] == "http.response.start" and mark is not None:
                headers = [*message.get("headers", []), (_HEADER, str(mark).encode())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_mark)


_HEADER = ERASURE_HEADER.lower().encode()
