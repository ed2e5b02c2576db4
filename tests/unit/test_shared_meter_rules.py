"""The shared meter's pure rules: which reading the poller stores, and when a stored one is no reading."""

from __future__ import annotations

import math

import pytest

from cowork_adapter.campaign.shared_meter import stored_reading_problem, worth_storing


@pytest.mark.parametrize("age", [0.0, 0.5, 14.9, 15.0])
def test_a_reading_no_older_than_the_poll_interval_stands_for_the_meter(age: float) -> None:
    assert stored_reading_problem(age, 15.0) is None


@pytest.mark.parametrize("age", [15.01, 16.0, 3600.0])
def test_a_reading_older_than_the_poll_interval_is_no_reading(age: float) -> None:
    problem = stored_reading_problem(age, 15.0)
    assert problem is not None and problem[0] == "stale_shared_reading"
    assert f"{age:.1f}s old" in problem[1]


def test_no_stored_reading_is_no_reading() -> None:
    assert stored_reading_problem(None, 15.0)[0] == "no_shared_reading"  # type: ignore[index]


@pytest.mark.parametrize(("usage", "stored"), [(0.0, None), (1.5, None), (2.0, 2.0), (2.5, 2.0)])
def test_the_poller_stores_what_an_observer_accepts(usage: float, stored: float | None) -> None:
    assert worth_storing(usage, stored)


@pytest.mark.parametrize(
    ("usage", "stored"),
    [
        (math.nan, None),
        (math.inf, None),
        (-0.01, None),
        (1.9, 2.0),
        ("3.0", None),
        (True, None),
    ],
)
def test_the_poller_never_stores_a_reading_an_observer_rejects(usage: object, stored: float | None) -> None:
    assert not worth_storing(usage, stored)
