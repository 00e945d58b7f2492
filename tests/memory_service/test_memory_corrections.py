"""kora.memory_service.corrections: what tells two nearly identical facts apart."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.memory_service.corrections import correction

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("older", "newer", "differs"),
    [
        ("The user is allergic to peanuts", "The user is not allergic to peanuts", "negation"),
        ("The user isn't vegan", "The user is vegan", "negation"),
        ("The user never drinks coffee", "The user drinks coffee", "negation"),
        ("Alice owes Bob 50 dollars", "Bob owes Alice 50 dollars", "swapped roles"),
        ("Emma is 7 years old", "Emma is 8 years old", "number"),
        ("The user has two cats", "The user has three cats", "number"),
        ("The meeting is at 3pm", "The meeting is at 4pm", "number"),
        ("The meeting is on Monday", "The meeting is on Tuesday", "date or time"),
        ("The user runs in the morning", "The user runs in the evening", "date or time"),
        ("The user keeps bees in Lyon", "The user keeps bees in Lyon now", None),
        ("The user likes green tea", "the user likes green tea!", None),
        ("The user likes the tea of the house", "The user likes the tea of the house", None),
    ],
)
def test_what_differs(older: str, newer: str, differs: str | None) -> None:
    assert correction(older, newer) == differs
    assert correction(newer, older) == differs  # either way round


@given(st.text(max_size=80))
def test_a_text_never_corrects_itself(text: str) -> None:
    assert correction(text, text) is None
