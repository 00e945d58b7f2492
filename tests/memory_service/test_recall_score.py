"""A recalled fact's score (kora.memory_service.recall): in [0, 1], never below the fact's own score, and equal
to it without neighbours, for any cosine, text share and context."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.memory_service.recall import blend, own_score

pytestmark = pytest.mark.unit

unit = st.floats(min_value=0.0, max_value=1.0)
cosines = st.none() | st.floats(min_value=-1.0, max_value=1.0)


@given(cosines, unit, unit)
def test_the_score_stays_in_the_unit_interval_and_never_below_the_facts_own(
    cosine: float | None, text: float, context: float
):
    own = own_score(cosine, text)
    score = blend(cosine, text, context)
    assert 0.0 <= own <= 1.0
    assert own <= score <= 1.0
    assert blend(cosine, text) == own  # no neighbour, no lift


@given(cosines, unit, unit, unit)
def test_a_better_neighbour_never_lowers_the_score(cosine: float | None, text: float, lower: float, higher: float):
    lower, higher = sorted((lower, higher))
    assert blend(cosine, text, lower) <= blend(cosine, text, higher)


def test_without_an_embedding_the_own_score_is_the_text_score():
    assert own_score(None, 0.25) == 0.25
    assert own_score(0.5, 0.5) == 0.5
    assert own_score(-0.3, 0.5) == own_score(0.0, 0.5)  # an opposite vector counts as unrelated, not against
