"""What the scripted model answers when neither a queued reply nor a rule does (:func:`default_reply`).

The defaults give the offline demo a working memory service without a script; tests that need other
answers script them. In order, first hit wins:

1. ``response_format`` json_schema named ``extracted_facts``: ``{"facts": [...]}``, the sentences of the
   last user message's ``user: ...`` lines that speak of the user (:func:`extract_facts`).
2. json_schema named ``fact_conflicts``: ``{"contradicted": []}`` (nothing is ever contradicted).
3. Any other json_schema: a 400 error (code ``no_scripted_rule``) naming the schema, so a missing rule
   shows at once instead of as a made-up answer.
4. ``{"type": "json_object"}``: ``{}``.
5. A system message starting ``Summarize`` (or ``Summarise``, any case): a condensed copy of the other
   messages' lines (:func:`summarize`).
6. The last message is a tool result: ``Tool result: <content>``.
7. Otherwise ``You said: <last user text>``.
"""

from __future__ import annotations

import json
import re
from typing import Final

from kora.scripted.script import Conversation, ErrorReply, Reply, TextReply, content_text

__all__ = [
    "EXTRACTED_FACTS",
    "FACT_CONFLICTS",
    "SUMMARY_LINE_WORDS",
    "SUMMARY_WORDS",
    "default_reply",
    "extract_facts",
    "summarize",
]

#: The json_schema names of the memory service's fact extraction and conflict check.
EXTRACTED_FACTS: Final = "extracted_facts"
FACT_CONFLICTS: Final = "fact_conflicts"
#: A default summary keeps at most this many words of each line, and this many words in all.
SUMMARY_LINE_WORDS: Final = 30
SUMMARY_WORDS: Final = 200

_USER_LINE: Final = "user:"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# "I", "I'm", "I've" match on the "I": the apostrophe ends the word.
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself)\b", re.IGNORECASE)
_BULLETS: Final = ("- ", "* ", "• ")


def extract_facts(text: str) -> list[str]:
    """The default facts of a fact-extraction request whose user message is ``text``.

    Only lines starting ``user:`` (any case) count; each is split into sentences at ``.``, ``!`` or
    ``?`` followed by a space. A sentence is a fact if it is not a question and has a first-person word
    (``I``, ``I'm``, ``me``, ``my``, ``mine``, ``myself``); it is kept verbatim, whitespace condensed,
    each distinct one once, in order. ``"user: Hi! I live in Paris. Where is a cafe?"`` ->
    ``["I live in Paris."]``.
    """
    facts: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.lower().startswith(_USER_LINE):
            continue
        for sentence in _SENTENCE_END.split(stripped[len(_USER_LINE) :].strip()):
            fact = " ".join(sentence.split())
            if fact and not fact.endswith("?") and _FIRST_PERSON.search(fact) and fact not in facts:
                facts.append(fact)
    return facts


def _is_summary_request(conversation: Conversation) -> bool:
    return conversation.system_text().lstrip().lower().startswith(("summarize", "summarise"))


def summarize(conversation: Conversation) -> str:
    """The default rolling summary: ``Summary:`` then one ``- <line>`` per distinct non-empty line of the
    non-system messages, in order, whitespace condensed.

    A line longer than :data:`SUMMARY_LINE_WORDS` words is cut there (ending ``...``); lines stop once
    :data:`SUMMARY_WORDS` words are used, so the earliest lines survive. A summary fed back in (its
    ``Summary:`` header and ``- `` bullets dropped) gives its lines again, so summaries of summaries do
    not nest. ``Summary: (nothing to summarize)`` when there is no text.
    """
    lines: list[str] = []
    for message in conversation.messages:
        if not isinstance(message, dict) or message.get("role") in ("system", "developer"):
            continue
        for raw in content_text(message.get("content")).splitlines():
            line = " ".join(raw.split())
            if line.startswith(_BULLETS):
                line = line[2:]
            if not line or line.lower() == "summary:":
                continue
            words = line.split()
            if len(words) > SUMMARY_LINE_WORDS:
                line = " ".join(words[:SUMMARY_LINE_WORDS]) + " ..."
            if line not in lines:
                lines.append(line)
    kept: list[str] = []
    used = 0
    for line in lines:
        used += len(line.split())
        if used > SUMMARY_WORDS:
            break
        kept.append(line)
    if not kept:
        return "Summary: (nothing to summarize)"
    return "Summary:\n" + "\n".join(f"- {line}" for line in kept)


def default_reply(conversation: Conversation) -> Reply:
    """The reply to a request nothing scripted answers (see the module docstring for the order)."""
    name = conversation.response_format
    if conversation.response_kind == "json_object":
        return TextReply("{}")
    if name == EXTRACTED_FACTS:
        return TextReply(json.dumps({"facts": extract_facts(conversation.user_text)}, ensure_ascii=False))
    if name == FACT_CONFLICTS:
        return TextReply('{"contradicted": []}')
    if name is not None:
        return ErrorReply(
            400,
            f"the scripted model has no rule for response_format {name!r}: script one with "
            f"when: {{response_format: {name}}}",
            "invalid_request_error",
            "no_scripted_rule",
        )
    if _is_summary_request(conversation):
        return TextReply(summarize(conversation))
    if conversation.last_is_tool:
        return TextReply(f"Tool result: {conversation.tool_result}")
    return TextReply(f"You said: {conversation.user_text}")
