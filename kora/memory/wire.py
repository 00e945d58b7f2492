"""The memory service's HTTP API under ``/v1``: the request and response bodies both sides use.

``kora memory`` (:mod:`kora.memory_service`) serves these bodies and RemoteMemory (:mod:`kora.memory.remote`)
sends them, so the two cannot drift apart.

Every value that reaches the database is checked here, at the boundary: identifiers (event ids included) are 1-256
characters without control characters; no string (event contents and metadata included, at any depth) may hold a
lone surrogate or a NUL character, which Postgres cannot store; no number may be NaN or infinite (JSON has no such
numbers, though Python's parser reads ``NaN`` and ``1e400``); event timestamps must lie within years 1-9999 once in
UTC (a naive one is taken as UTC), so that every stored event can be read back. A body that breaks a rule is a 400
naming the field, and nothing of it is stored.

An event's ``content`` may be any JSON value here, as a memory event's content may be: the shapes Kora writes are the
content types of :mod:`kora.core.events` (built by :func:`~kora.core.events.new_event`), and whoever reads a content
back reads it through :func:`~kora.core.events.content_field`, checking each value.

Scopes (narrowest first): ``session`` (this session), ``agent`` (this agent's memories of this user, across
sessions), ``user`` (this user's memories across every agent bound to the store) and ``store`` (everything;
for administrators, never offered to a model). ``agent`` and ``user`` need a ``user_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, model_validator

from kora.core.events import MemoryEvent
from kora.core.text import CONTROL, UNSTORABLE
from kora.core.text import check_storable_json as check_storable_json  # re-exported: the memory service uses it
from kora.core.text import check_storable_text as _storable_text
from kora.core.text import strip_unstorable as strip_unstorable  # re-exported: the memory service uses it
from kora.memory.base import SessionInfo

#: Read scopes, narrowest first.
SCOPES = ("session", "agent", "user", "store")
Scope = Literal["session", "agent", "user", "store"]
#: Scopes that pool memory across sessions of one user: they need a verified user id.
USER_SCOPES = frozenset({"agent", "user"})

#: Longest fact or query, in characters.
MAX_TEXT_CHARS = 16_000
#: Most events in one append.
MAX_EVENTS_PER_WRITE = 1000
#: Most results of one read.
MAX_LIMIT = 10_000
#: Longest identifier (session, agent, user, event ids), in characters.
MAX_ID_CHARS = 256


def scope_rank(scope: str) -> int:
    """Position of ``scope`` in :data:`SCOPES` (0 for ``session``); raises ``ValueError`` for an unknown scope."""
    return SCOPES.index(scope)


def _identifier(value: str) -> str:
    if CONTROL.search(value) or UNSTORABLE.search(value):
        raise ValueError("must not contain control characters or unpaired surrogates")
    return value


def _utc_timestamp(value: datetime) -> datetime:
    """``value`` in UTC (a naive one is taken as UTC); ``ValueError`` when that leaves years 1-9999."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("timestamp must lie within years 1-9999 in UTC") from None


def _storable_event(event: MemoryEvent) -> MemoryEvent:
    if not 1 <= len(event.event_id) <= MAX_ID_CHARS:
        raise ValueError(f"event_id must be 1-{MAX_ID_CHARS} characters")
    _identifier(event.event_id)
    check_storable_json(event.content)
    check_storable_json(event.metadata)
    timestamp = _utc_timestamp(event.timestamp)
    # Equal unless it was naive: an aware timestamp keeps its offset (Postgres stores the instant).
    return event if timestamp == event.timestamp else event.model_copy(update={"timestamp": timestamp})


Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_identifier)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS), AfterValidator(_storable_text)]
StoredEvent = Annotated[MemoryEvent, AfterValidator(_storable_event)]
Limit = Annotated[int, Field(ge=0, le=MAX_LIMIT)]
TopK = Annotated[int, Field(ge=1, le=100)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- sessions and events --------------------------------------------------------------------------------------


class SessionCreate(_Body):
    """``POST /v1/sessions``: get or create a session (idempotent when ``session_id`` is given)."""

    session_id: Identifier | None = None
    app_name: Identifier
    user_id: Identifier | None = None


#: A session's metadata as OpenAI bounds a conversation's: at most 16 pairs, keys of at most 64 characters, values
#: of at most 512.
MetadataMap = Annotated[
    dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]], Field(max_length=16)
]


class SessionMetadataWrite(_Body):
    """``PUT /v1/sessions/{id}/metadata``: replace the metadata of ``app_name``'s session, created for ``user_id``
    when missing (another user's session: 403 ``session_forbidden``)."""

    app_name: Identifier
    user_id: Identifier | None = None
    metadata: MetadataMap


class SessionMetadata(BaseModel):
    """A session's metadata (``GET`` / ``PUT /v1/sessions/{id}/metadata``)."""

    metadata: dict[str, str]


class SessionList(BaseModel):
    """``GET /v1/sessions``: sessions, oldest first."""

    sessions: list[SessionInfo]


class EventsWrite(_Body):
    """``POST /v1/sessions/{id}/events``: append ``events`` in order, creating the session when needed.

    ``rolling_summary`` asks for the medium-term tier on this session (folds of turns that leave the window);
    ``window_events`` / ``window_tokens`` are the window the client asks for before a turn (its ``max_events`` and
    ``token_budget``): the events that leave *that* window are folded (None: the store's own bounds).
    """

    app_name: Identifier
    user_id: Identifier | None = None
    rolling_summary: bool = False
    window_events: Limit | None = None
    window_tokens: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    events: list[StoredEvent] = Field(max_length=MAX_EVENTS_PER_WRITE)
    #: The last erasure mark (``<store_id>:<seq>``, :data:`ERASURE_HEADER`) the client had seen when it queued
    #: these events: an erasure of their session or user after it drops them (they predate it). None: the client
    #: had seen none, and events older than a matching erasure are dropped.
    erasures_seen: Annotated[str, Field(max_length=100, pattern=r"^[0-9a-f-]{1,64}:[0-9]{1,19}$")] | None = None


#: Kora's own memory tools: their calls and results, and the answers of turns that called ``search_memory``, are
#: never recalled (they only repeat what memory held, and would come back on every later search).
MEMORY_TOOL_NAMES = ("search_memory", "save_memory")

#: Response header of the memory service naming its erasure mark, ``<store_id>:<seq>`` (:class:`ErasureList`).
ERASURE_HEADER = "Kora-Erasures"


@dataclass(frozen=True)
class Mark:
    """A store's erasure mark (:data:`ERASURE_HEADER`): its ``store_id`` and the newest erasure's ``seq`` (0: none)."""

    store_id: str
    seq: int

    def __str__(self) -> str:
        return f"{self.store_id}:{self.seq}"

    @classmethod
    def parse(cls, text: str | None) -> Mark | None:
        """The mark ``text`` spells (``<store_id>:<seq>``); None for None or anything else."""
        if not text:
            return None
        store_id, _, seq = text.rpartition(":")
        return cls(store_id, int(seq)) if store_id and seq.isdigit() else None


class Deleted(BaseModel):
    """``DELETE /v1/sessions/{id}``: whether the delete removed something."""

    deleted: bool


class EventsWritten(BaseModel):
    """How many events were appended (events whose id the session already holds are skipped, so a retried write
    stores nothing twice)."""

    session_id: str
    added: int


class EventList(BaseModel):
    """Events, oldest first; ``total`` is how many the filter matches before ``limit``."""

    events: list[MemoryEvent]
    total: int


# -- recall ---------------------------------------------------------------------------------------------------


class RecallHit(BaseModel):
    """One recalled memory: a long-term fact (``source="fact"``) or a stored event (``source="event"``).

    ``score`` is in ``[0, 1]``: cosine similarity (when both sides have embeddings) and the share of the query's
    words blended (see :mod:`kora.memory_service.recall`); age only breaks ties.
    """

    id: str
    text: str
    score: float
    source: Literal["fact", "event"]
    session_id: str | None = None
    timestamp: datetime


class RecallRequest(_Body):
    """``POST /v1/recall``: what matches ``query`` within ``scope``, best first.

    ``session`` scope needs ``session_id``; ``agent`` and ``user`` need ``user_id`` (and ``agent`` the
    ``app_name``). ``include_events`` also searches stored events (full text), not only facts.
    """

    query: Text
    scope: Scope = "session"
    app_name: Identifier
    user_id: Identifier | None = None
    session_id: Identifier | None = None
    top_k: TopK | None = None
    include_events: bool = False


class RecallResult(BaseModel):
    """Hits of a recall, best first."""

    hits: list[RecallHit]


class ContextRequest(_Body):
    """``POST /v1/sessions/{id}/context``: what memory puts before a turn, in one round trip.

    The window is the session's newest events, at most ``max_events`` and within ``token_budget`` (and the
    store's own short-term bounds); the summary is the latest rolling summary; the facts are those recalled for
    ``query`` within ``scope`` (none when ``query`` is None). On a session with a rolling summary the window
    reaches back to the first event the summary does not cover (within the store's hard event cap and the token
    budget), so summary and window together leave no turn out while a fold is pending.
    """

    app_name: Identifier
    user_id: Identifier | None = None
    query: Text | None = None
    scope: Scope = "session"
    top_k: TopK | None = None
    max_events: Limit = 6
    token_budget: Annotated[int, Field(ge=0, le=1_000_000)] = 2000


class MemoryContext(BaseModel):
    """What memory contributes to a turn: ``summary`` (None when there is none), ``window`` (oldest first) and
    recalled ``facts`` (best first)."""

    summary: str | None = None
    window: list[MemoryEvent] = Field(default_factory=list)
    facts: list[RecallHit] = Field(default_factory=list)


# -- facts ----------------------------------------------------------------------------------------------------


class FactCreate(_Body):
    """``POST /v1/facts``: keep ``content`` as a long-term fact (``save_memory``), recallable once this returns.

    ``attribution`` records who stated it (agent, session, user, delegating agent); it is never used for scoping.
    """

    content: Text
    app_name: Identifier
    user_id: Identifier | None = None
    session_id: Identifier | None = None
    attribution: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _storable_attribution(self) -> FactCreate:
        check_storable_json(self.attribution)
        return self


class Fact(BaseModel):
    """A long-term fact. ``invalidated_at`` is set when a later fact superseded it (``superseded_by``);
    ``origin`` is ``extracted`` (from a turn, ``source_event_ids`` set) or ``saved`` (``save_memory``)."""

    fact_id: str
    text: str
    app_name: str
    user_id: str | None
    session_id: str | None
    origin: Literal["extracted", "saved"]
    attribution: dict[str, JsonValue]
    source_event_ids: list[str]
    created_at: datetime
    invalidated_at: datetime | None = None
    superseded_by: str | None = None


class FactWritten(BaseModel):
    """The outcome of a fact write: ``stored`` (a new fact), or ``duplicate`` (an equal or near-equal fact was
    already kept: ``fact_id`` is that one)."""

    fact_id: str
    status: Literal["stored", "duplicate"]


class FactList(BaseModel):
    """Facts, newest first."""

    facts: list[Fact]


# -- erasure --------------------------------------------------------------------------------------------------


class ForgetRequest(_Body):
    """``POST /v1/forget``: erase everything of one user or of one session (give exactly one)."""

    user_id: Identifier | None = None
    session_id: Identifier | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ForgetRequest:
        if (self.user_id is None) == (self.session_id is None):
            raise ValueError("give exactly one of user_id and session_id")
        return self


class Removed(BaseModel):
    """Rows removed per tier by one erasure."""

    sessions: int = 0
    events: int = 0
    summaries: int = 0
    facts: int = 0
    fact_history: int = 0
    jobs: int = 0


class Erasure(BaseModel):
    """One erasure of the log: of a user (``user_id``) or of a session id (``session_id``)."""

    seq: int
    user_id: str | None = None
    session_id: str | None = None


class ErasureList(BaseModel):
    """``GET /v1/erasures?after=``: the erasures after ``after`` of this store (``store_id``), oldest first, at
    most ``limit``; ``seq`` is the newest of the whole log (0: none yet)."""

    store_id: str
    seq: int
    erasures: list[Erasure]


class ForgetResult(BaseModel):
    """The counts removed, per tier."""

    removed: Removed
