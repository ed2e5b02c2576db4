"""Budget arithmetic: tables for the order of causes, hypothesis for the exact stop point."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowork_adapter.campaign.budget import Spending, admission_check, key_exhausted, stop_decision
from cowork_adapter.errors import Refusal
from cowork_adapter.vocab import StopReason

cents = st.integers(min_value=0, max_value=5_000_000)


def usd(c: int) -> float:
    """Cents to the float a human would type (repr round-trips to the decimal)."""
    return float(Decimal(c) / 100)


def test_spent_counts_prior_and_everything_since_baseline():
    s = Spending(ceiling_usd=1000, prior_spend_usd=12.5, usage_baseline=40.0, usage=100.25, usage_at_run_start=90.0)
    assert s.spent_usd == 72.75
    assert s.remaining_usd == 927.25
    assert s.run_spent_usd == 10.25


def test_float_rounding_does_not_move_the_stop():
    # 0.3 − 0.1 in floats is 0.19999999999999998; the stop must still be exactly at 0.2 spent.
    s = Spending(ceiling_usd=0.3, prior_spend_usd=0.0, usage_baseline=0.0, usage=0.2)
    assert stop_decision(s, reserve_usd=0.1) == StopReason.CAMPAIGN_BUDGET_RESERVE
    below = Spending(ceiling_usd=0.3, prior_spend_usd=0.0, usage_baseline=0.0, usage=0.19)
    assert stop_decision(below, reserve_usd=0.1) is None


@pytest.mark.parametrize(
    ("usage", "limit_remaining", "run_budget", "expected"),
    [
        (0.0, None, None, None),
        (0.0, 0.0, None, StopReason.BUDGET_EXHAUSTED),  # the meter's own word wins even with money left
        (0.0, -3.0, None, StopReason.BUDGET_EXHAUSTED),
        (950.0, 0.0, 10.0, StopReason.BUDGET_EXHAUSTED),  # before reserve and run budget
        (950.0, 5.0, 10.0, StopReason.CAMPAIGN_BUDGET_RESERVE),  # reserve before run budget
        (900.0, None, None, StopReason.CAMPAIGN_BUDGET_RESERVE),  # remaining 100 == reserve 100
        (899.99, None, None, None),
        (160.0, None, 150.0, StopReason.RUN_BUDGET),  # run spent 160 − 10 = 150 ≥ 150
        (159.99, None, 150.0, None),
        (159.99, math.nan, 150.0, None),  # a NaN limit is not knowledge of exhaustion
    ],
)
def test_stop_decision_order(usage, limit_remaining, run_budget, expected):
    s = Spending(ceiling_usd=1000, prior_spend_usd=0, usage_baseline=0, usage=usage, usage_at_run_start=10.0)
    assert stop_decision(s, reserve_usd=100, run_budget_usd=run_budget, limit_remaining=limit_remaining) == expected


def test_key_exhausted_null_is_uncapped():
    assert key_exhausted(None) is False
    assert key_exhausted(0.0) is True
    assert key_exhausted(0.01) is False


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, True, "5"])
def test_spending_rejects_non_finite_or_negative(bad):
    with pytest.raises(ValueError):
        Spending(ceiling_usd=100, prior_spend_usd=0, usage_baseline=0, usage=bad)


def test_spending_rejects_zero_ceiling():
    with pytest.raises(ValueError):
        Spending(ceiling_usd=0.0, prior_spend_usd=0, usage_baseline=0, usage=0)


def test_admission_refuses_inside_reserve_and_on_exhausted_key():
    inside = Spending(ceiling_usd=1000, prior_spend_usd=0, usage_baseline=0, usage=900)
    with pytest.raises(Refusal) as refused:
        admission_check(inside, reserve_usd=100)
    assert refused.value.stage == "campaign"
    admission_check(Spending(ceiling_usd=1000, prior_spend_usd=0, usage_baseline=0, usage=899), reserve_usd=100)
    with pytest.raises(Refusal):
        admission_check(
            Spending(ceiling_usd=1000, prior_spend_usd=0, usage_baseline=0, usage=0), reserve_usd=0, limit_remaining=0
        )


@pytest.mark.parametrize("reserve", [0, 100, 250])
def test_seed_example_32_tasks_at_25_never_enter_the_reserve(reserve):
    """32 tasks × $25 is not reserved: a $2000 campaign runs on to exactly 2000 − reserve."""
    ceiling = 2000.0
    stops = []
    for step in range(0, 200_001):  # spend in one-cent steps
        s = Spending(ceiling_usd=ceiling, prior_spend_usd=0, usage_baseline=0, usage=usd(step))
        if stop_decision(s, reserve_usd=reserve, run_budget_usd=None) is not None:
            stops.append(step)
            break
    assert stops == [int((ceiling - reserve) * 100)]
    assert usd(stops[0]) > 32 * 25  # the per-task limits took nothing from the campaign


@settings(max_examples=300, deadline=None)
@given(
    ceiling=st.integers(min_value=1, max_value=5_000_000),
    reserve=st.sampled_from([0, 10_000, 25_000]),
    prior=cents,
    baseline=cents,
)
def test_reserve_stop_is_exactly_at_ceiling_minus_reserve(ceiling, reserve, prior, baseline):
    """With reserve 0/$100/$250 the reserve stop starts exactly at spent = C − reserve."""
    threshold = ceiling - reserve - prior  # cents of usage above the baseline at the stop
    if threshold <= 0:
        return  # this campaign starts inside its reserve: admission refuses it (tested above)

    def decide(usage_cents: int):
        s = Spending(usd(ceiling), usd(prior), usd(baseline), usd(baseline + usage_cents))
        return stop_decision(s, reserve_usd=usd(reserve))

    assert decide(threshold) == StopReason.CAMPAIGN_BUDGET_RESERVE
    assert decide(threshold - 1) is None


@settings(max_examples=300, deadline=None)
@given(start=cents, spent_in_run=cents, budget=st.integers(min_value=1, max_value=5_000_000))
def test_run_budget_stops_iff_run_spent_reaches_budget(start, spent_in_run, budget):
    s = Spending(1e9, 0.0, 0.0, usd(start + spent_in_run), usage_at_run_start=usd(start))
    got = stop_decision(s, reserve_usd=0.0, run_budget_usd=usd(budget))
    assert (got == StopReason.RUN_BUDGET) == (spent_in_run >= budget)


@settings(max_examples=200, deadline=None)
@given(
    ceiling=st.integers(min_value=1, max_value=5_000_000),
    reserve=cents,
    usages=st.lists(cents, min_size=2, max_size=20),
)
def test_once_inside_the_reserve_more_spending_never_leaves_it(ceiling, reserve, usages):
    decisions = [
        stop_decision(Spending(usd(ceiling), 0.0, 0.0, usd(u)), reserve_usd=usd(reserve)) for u in sorted(usages)
    ]
    first = next((i for i, d in enumerate(decisions) if d is not None), len(decisions))
    assert all(d == StopReason.CAMPAIGN_BUDGET_RESERVE for d in decisions[first:])


@settings(max_examples=200, deadline=None)
@given(ceiling=st.integers(min_value=1, max_value=5_000_000), reserve=cents, usage=cents)
def test_admission_agrees_with_the_reserve_stop(ceiling, reserve, usage):
    s = Spending(usd(ceiling), 0.0, 0.0, usd(usage))
    stops = stop_decision(s, reserve_usd=usd(reserve)) is not None
    try:
        admission_check(s, reserve_usd=usd(reserve))
        refused = False
    except Refusal:
        refused = True
    assert refused == stops
