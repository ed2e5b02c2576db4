"""The rule bench_admission_load.py sets --max-load-per-cpu by (benchmarks/admission_threshold.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from admission_threshold import LevelRow, Threshold, choose_threshold  # noqa: E402


def test_highest_level_within_the_fraction_before_the_first_failing_one():
    rows = [LevelRow(0.1, 0.03), LevelRow(2.2, 0.2), LevelRow(4.3, 0.45), LevelRow(6.1, 0.7), LevelRow(8.2, 0.9)]
    assert choose_threshold(rows, 0.5) == Threshold(limit=4.3, first_failing=6.1)


def test_rows_are_taken_in_order_of_reached_load_not_of_listing():
    rows = [LevelRow(6.1, 0.7), LevelRow(0.1, 0.03), LevelRow(4.3, 0.45)]
    assert choose_threshold(rows, 0.5) == Threshold(limit=4.3, first_failing=6.1)


def test_a_pass_above_a_failing_level_does_not_raise_the_limit():
    rows = [LevelRow(1.0, 0.1), LevelRow(2.0, 0.6), LevelRow(4.0, 0.3)]
    assert choose_threshold(rows, 0.5) == Threshold(limit=1.0, first_failing=2.0)


def test_the_fraction_itself_passes():
    assert choose_threshold([LevelRow(3.0, 0.5)], 0.5).limit == 3.0


def test_every_level_passing_gives_a_lower_bound_only():
    choice = choose_threshold([LevelRow(0.5, 0.1), LevelRow(7.9, 0.4)], 0.5)
    assert choice == Threshold(limit=7.9, first_failing=None)


def test_even_the_lightest_level_failing_gives_no_limit():
    choice = choose_threshold([LevelRow(0.2, 0.8), LevelRow(3.0, 0.9)], 0.5)
    assert choice == Threshold(limit=None, first_failing=0.2)
    assert choice.rounded() is None


def test_an_unmeasured_level_counts_as_failing():
    rows = [LevelRow(0.2, 0.1), LevelRow(3.0, float("inf")), LevelRow(5.0, float("nan"))]
    assert choose_threshold(rows, 0.5) == Threshold(limit=0.2, first_failing=3.0)


@pytest.mark.parametrize(
    "limit, step, expected", [(4.3, 0.5, 4.0), (4.0, 0.5, 4.0), (3.99, 0.5, 3.5), (7.9, 1.0, 7.0), (0.4, 0.5, 0.0)]
)
def test_rounded_goes_down_to_a_step(limit, step, expected):
    assert Threshold(limit=limit, first_failing=None).rounded(step) == expected


@pytest.mark.parametrize("rows, fraction", [([], 0.5), ([LevelRow(1.0, 0.1)], 0.0), ([LevelRow(1.0, 0.1)], 1.5)])
def test_bad_input_is_refused(rows, fraction):
    with pytest.raises(ValueError):
        choose_threshold(rows, fraction)
