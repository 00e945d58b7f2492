"""Whether two near-identical facts say different things: a correction, never a duplicate (long-term memory).

Two facts with nearly the same words can still disagree: "The user is allergic to peanuts" and "The user is not
allergic to peanuts", "Alice owes Bob 50 dollars" and "Bob owes Alice 50 dollars", "Emma is 7 years old" and "Emma
is 8 years old", a meeting "on Monday at 3pm" and "on Tuesday at 3pm". :func:`correction` says what tells two such
texts apart: a negation, a number, a date or time word among the words only one of them has, or the same words in
another order (swapped roles). :mod:`kora.memory_service.facts` then stores the newer one as its own fact and, with
no model to judge the conflict, lets it supersede the older one (with history). Pure functions, no I/O.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+")


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Words that negate: the ``\\w+`` pieces of "isn't", "don't", "can't" ("isn", "don", "can" + "t") included.
NEGATIONS = _set(
    "not no never none nobody nothing nowhere neither nor without cannot t isn aren wasn weren doesn don didn won "
    "wouldn hasn haven hadn couldn shouldn mustn needn"
)
#: Number words (a word with a digit is a number too).
NUMBERS = _set(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "billion dozen half twice once first second third fourth fifth sixth seventh eighth ninth tenth"
)
#: Date and time words ("may", "sun", "sat", "wed", "mon" and "mar" left out: as often other words).
DATES = _set(
    "january february march april june july august september october november december jan feb apr jul aug sep "
    "sept oct nov dec monday tuesday wednesday thursday friday saturday sunday tues thur thurs today tomorrow "
    "yesterday tonight morning afternoon evening night noon midnight am pm week weekend month year daily weekly "
    "monthly yearly annually o clock"
)


def _sequence(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def correction(older: str, newer: str) -> str | None:
    """What makes ``newer`` say something else than ``older`` although their words nearly agree: ``"negation"``,
    ``"number"``, ``"date or time"`` (a word of that kind that only one of them has, the first found in that
    order) or ``"swapped roles"`` (the same words in another order); None when they say the same thing."""
    a, b = _sequence(older), _sequence(newer)
    differing = set(a) ^ set(b)
    if differing & NEGATIONS:
        return "negation"
    if any(word in NUMBERS or any(c.isdigit() for c in word) for word in differing):
        return "number"
    if differing & DATES:
        return "date or time"
    if not differing and _deduplicated(a) != _deduplicated(b):
        return "swapped roles"
    return None


def _deduplicated(sequence: list[str]) -> list[str]:
    """``sequence`` with each word kept at its first place only (so "the" repeated does not count as an order)."""
    return list(dict.fromkeys(sequence))
