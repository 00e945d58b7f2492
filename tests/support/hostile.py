"""Hostile input for the boundary tests: JSON text no encoder writes, and hypothesis strategies of the values a
hostile client sends (lone surrogates, NUL and other control characters, huge numbers, deep nesting, wrong types).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import httpx
from hypothesis import strategies as st


@dataclass(frozen=True)
class Raw:
    """JSON text written as is (tokens json.dumps cannot make: ``1e400``, 5 000-digit integers, deep nesting)."""

    text: str


def render(value: object) -> str:
    """``value`` as JSON text; lone surrogates are written as ``\\udXXX`` escapes, NaN as ``NaN``."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(item) for item in value) + "]"
    return json.dumps(value, allow_nan=True)


#: JSON tokens Python's parser chokes on or reads into values no encoder writes back.
RAW_TOKENS = [
    Raw("[" * 10_000 + "]" * 10_000),
    Raw('{"a":' * 5_000 + "1" + "}" * 5_000),
    Raw("9" * 5_000),
    Raw("-" + "1" * 200),
    Raw("1e400"),
    Raw("-1E+999"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("0." + "3" * 300),
]

#: Strings that break naive code: lone surrogates, NUL, line breaks, non-Latin-1.
NASTY_STRINGS = ["\udc80", "a\ud800b", "\x00", "x\x00y", "\r\n", "\u2028", "漢字", "\x7f", "", " ", "%00", "\\u0000"]

any_text = st.one_of(
    st.text(max_size=16),
    st.text(st.characters(exclude_categories=()), max_size=8),  # surrogates and control characters included
    st.sampled_from(NASTY_STRINGS),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
    st.sampled_from(RAW_TOKENS),
)
#: Any JSON-ish value, wrong types included (also at the place of an object or a list).
hostile_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(any_text, inner, max_size=3)),
    max_leaves=6,
)


def field(valid: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """A field's value: a valid one seven times in eight, else anything hostile (so that a request with several
    fields is often valid but for one)."""
    return st.one_of(*[valid] * 7, hostile_values)


#: Words a body of a server's error must never contain: tracebacks, validation dumps, internal type names.
INTERNALS = re.compile(
    r"Traceback|File \"|pydantic|validation errors? for|errors\.pydantic\.dev|"
    r"\b(?:Recursion|UnicodeEncode|UnicodeDecode|Type|Key|Attribute|Value|Index|Runtime|Assertion)Error\b|"
    r"PydanticSerializationError|ParseError|<class "
)


def assert_handled(response: httpx.Response) -> None:
    """Below 500, and nothing internal in the body."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    found = INTERNALS.search(response.text)
    assert found is None, (found, response.text[:500])
