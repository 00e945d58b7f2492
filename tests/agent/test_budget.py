"""kora.agent.budget: the smaller of two budgets, what is left after a spend, charge-back, and the ``kora.budget``
metadata a peer reads (fuzzed: anything is read or refused with a RequestError, never another exception)."""

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.usage import RunUsage

from kora.agent.budget import Limits, Prices, Spend, TurnBudget
from kora.core.errors import BudgetExhausted, RequestError

pytestmark = pytest.mark.unit


def test_the_tighter_budget_takes_the_smaller_of_each_and_an_unset_one_takes_the_other():
    own = Limits(tool_calls=5, model_requests=None, tokens=100, cost_usd=None, deadline=200.0)
    given_ = Limits(tool_calls=2, model_requests=3, tokens=None, cost_usd=0.5, deadline=100.0)
    assert own.tighter(given_) == Limits(tool_calls=2, model_requests=3, tokens=100, cost_usd=0.5, deadline=100.0)
    assert own.tighter(None) is own


def test_metadata_round_trips_and_names_the_deadline_in_utc():
    limits = Limits(tool_calls=1, model_requests=2, tokens=3, cost_usd=0.25, deadline=1_700_000_000.0)
    data = limits.to_metadata()
    assert data["deadline"] == "2023-11-14T22:13:20Z"
    assert Limits.from_metadata(data) == limits
    assert Limits().to_metadata() == {}
    # protobuf Struct numbers arrive as floats
    assert Limits.from_metadata({"model_requests": 2.0}).model_requests == 2
    for infinite in (float("inf"), float("nan")):
        with pytest.raises(RequestError, match="'tokens' must be an integer"):
            Limits.from_metadata({"tokens": infinite})


def test_remaining_subtracts_own_and_charged_spend_and_never_goes_below_zero():
    budget = TurnBudget(Limits(tool_calls=3, model_requests=4, tokens=50, cost_usd=1.0), Prices(1e6, 1e6))
    budget.charge(Spend(tool_calls=1, model_requests=2, input_tokens=10, output_tokens=5, cost_usd=None))
    left = budget.remaining(RunUsage(requests=1, input_tokens=20, output_tokens=30))
    # a peer's unknown cost is priced at ours: 15 tokens at a dollar each, then 50 own
    assert (left.tool_calls, left.model_requests, left.tokens, left.cost_usd) == (2, 1, 0, 0.0)


def test_each_check_names_its_budget():
    usage = RunUsage(requests=2, input_tokens=3, output_tokens=4)
    with pytest.raises(BudgetExhausted) as caught:
        TurnBudget(Limits(model_requests=2)).check_before_request(usage)
    assert caught.value.budget == "model_requests"
    assert caught.value.message.startswith("budget_exhausted: model_requests")
    assert caught.value.code == "budget_exhausted"
    with pytest.raises(BudgetExhausted, match=r"^budget_exhausted: tokens"):
        TurnBudget(Limits(tokens=7)).check_before_request(usage)
    with pytest.raises(BudgetExhausted, match=r"^budget_exhausted: seconds"):
        TurnBudget(Limits(deadline=time.time() - 1)).check_before_tool_call(usage)
    with pytest.raises(BudgetExhausted, match=r"^budget_exhausted: cost_usd"):
        TurnBudget(Limits(cost_usd=0.000007), Prices(1, 1)).check_before_request(usage)
    budget = TurnBudget(Limits(tool_calls=1))
    budget.check_before_tool_call(usage)
    with pytest.raises(BudgetExhausted, match=r"^budget_exhausted: tool_calls"):
        budget.check_before_tool_call(usage)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
_budget_like = st.dictionaries(
    st.sampled_from(["tool_calls", "model_requests", "tokens", "cost_usd", "deadline", "other"]), _json, max_size=5
)


@given(st.one_of(_json, _budget_like))
def test_any_metadata_is_read_or_refused_clearly(value):
    refused: RequestError | None = None
    try:
        limits = Limits.from_metadata(value)
    except RequestError as error:
        refused = error
    if refused is not None:
        assert "kora.budget" in refused.message
    else:
        assert Limits.from_metadata(limits.to_metadata()).to_metadata() == limits.to_metadata()


@given(_json)
def test_any_reported_spend_is_read_or_ignored(value):
    spent = Spend.from_metadata(value)
    assert spent is None or Spend.from_metadata(spent.to_metadata()) == spent
