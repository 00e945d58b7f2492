"""Plain-text views of events and the keyword scoring behind ``Memory.search`` (the ``search_memory`` tool).

LocalMemory has no embedder, so ``search_memory`` at scope ``session`` ranks by keyword overlap: the share
of the query's distinct words that occur in a text. Words are lower-cased ``\\w+`` runs; a short list of
English function words is ignored so that "what did the user say" does not match every text through "the".
Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re

from pydantic import JsonValue

from kora.core.events import EventType, MemoryEvent, content_field

_WORD = re.compile(r"\w+")

# Function words carry no topic; a query made only of them falls back to using them (see query_terms).
_STOPWORD_TEXT = (
    "a an and are as at be by did do does for from had has have how i in is it me my of on or that the "
    "this to was were what when where which who why with you your"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def words(text: str) -> frozenset[str]:
    """The distinct lower-cased words (``\\w+`` runs) of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def query_terms(query: str) -> frozenset[str]:
    """The words of ``query`` that count for scoring: its non-function words, or all its words if it has none.

    Empty for a query without any word characters.
    """
    all_words = words(query)
    return (all_words - _STOPWORDS) or all_words


def keyword_score(terms: frozenset[str], text: str) -> float:
    """Share of ``terms`` that occur as words of ``text``: a float in ``[0, 1]``; ``0.0`` when ``terms`` is empty."""
    if not terms:
        return 0.0
    return len(terms & words(text)) / len(terms)


def json_text(value: JsonValue) -> str:
    """``value`` as text: strings unchanged, ``None`` as ``""``, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def event_text(event: MemoryEvent) -> str:
    """The human-readable text of an event, per the content shapes of :mod:`kora.core.events`.

    user_message / task_delegation_received / agent_response: the text; tool_call: ``name {args}``;
    tool_result: ``name: content``; delegation_request: ``agent: task``; delegation_response:
    ``agent: response``; error: ``error_type: message``. Content of an unexpected shape is rendered as JSON.
    """
    if not isinstance(event.content, dict):
        return json_text(event.content)
    match event.event_type:
        case EventType.TOOL_CALL:
            return f"{json_text(content_field(event, 'tool_name'))} {json_text(content_field(event, 'args'))}"
        case EventType.TOOL_RESULT:
            return f"{json_text(content_field(event, 'tool_name'))}: {json_text(content_field(event, 'content'))}"
        case EventType.DELEGATION_REQUEST:
            return f"{json_text(content_field(event, 'agent'))}: {json_text(content_field(event, 'task'))}"
        case EventType.DELEGATION_RESPONSE:
            return f"{json_text(content_field(event, 'agent'))}: {json_text(content_field(event, 'response'))}"
        case EventType.ERROR:
            return f"{json_text(content_field(event, 'error_type'))}: {json_text(content_field(event, 'message'))}"
        case _:
            return json_text(event.content)
