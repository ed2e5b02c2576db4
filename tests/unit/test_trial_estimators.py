"""The trial and paired-comparison estimators (score/trials.py, score/paired.py) against cases computed by
hand, and against brute-force enumeration for generated inputs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowork_adapter.report.stats import wilson_interval
from cowork_adapter.score.paired import PairedTask, compare_pairs, mcnemar_exact, paired_bootstrap, permutation_p
from cowork_adapter.score.trials import (
    TaskOutcomes,
    effective_size,
    pass_at_k,
    pass_hat_k,
    trial_figures,
    wilson,
)
from cowork_adapter.vocab import TaskStatus

P, F, INF, A = TaskStatus.PASSED, TaskStatus.FAILED, TaskStatus.INFRA_FAILED, TaskStatus.AGENT_FAILED


def test_pass_hat_and_pass_at_k_by_hand() -> None:
    assert pass_hat_k(5, 3, 2) == pytest.approx(3 / 10)  # C(3,2)/C(5,2)
    assert pass_at_k(5, 3, 2) == pytest.approx(9 / 10)  # 1 - C(2,2)/C(5,2)
    assert pass_hat_k(5, 3, 3) == pytest.approx(1 / 10)
    assert pass_at_k(5, 3, 3) == 1.0  # only 2 failures: any 3 hold a pass
    assert pass_hat_k(4, 4, 3) == 1.0 and pass_at_k(4, 0, 3) == 0.0
    assert pass_hat_k(3, 1, 1) == pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.booleans(), min_size=1, max_size=7), st.data())
def test_estimators_are_the_subset_means(outcomes: list[bool], data: st.DataObject) -> None:
    """Unbiased: pass^k and pass@k are the mean over every k-subset of the trials of 'all passed' and
    'one passed'."""
    n, c = len(outcomes), sum(outcomes)
    k = data.draw(st.integers(1, n))
    subsets = list(itertools.combinations(outcomes, k))
    assert pass_hat_k(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_one_trial_interval_is_the_single_run_wilson() -> None:
    outcomes = [TaskOutcomes(f"t{i}", (P if i < 3 else F,)) for i in range(10)]
    fig = trial_figures(outcomes)
    assert fig.trials == 1 and fig.tasks == 10 and fig.pass_at_1 == pytest.approx(0.3)
    assert fig.effective_n == 10.0
    assert fig.interval95 == pytest.approx(wilson_interval(3, 10))
    assert fig.pass_hat_k == fig.pass_at_k == pytest.approx((0.3,))


def test_two_trials_by_hand() -> None:
    """Task means 1, .5, 0, .5: p = .5, s^2 = 1/6, Var = 1/24, n_eff = .25 / (1/24) = 6 (within [4, 8])."""
    fig = trial_figures(
        [
            TaskOutcomes("t1", (P, P)),
            TaskOutcomes("t2", (P, F)),
            TaskOutcomes("t3", (A, F)),
            TaskOutcomes("t4", (P, INF)),
        ]
    )
    assert fig.pass_at_1 == pytest.approx(0.5)
    assert fig.effective_n == pytest.approx(6.0)
    z2 = 1.959963984540054**2
    half = math.sqrt(z2) * math.sqrt(0.25 / 6 + z2 / 144) / (1 + z2 / 6)
    assert fig.interval95 == pytest.approx((0.5 - half, 0.5 + half))
    assert fig.interval95 == pytest.approx((0.1876, 0.8124), abs=1e-4)
    assert fig.pass_hat_k == pytest.approx((0.5, 0.25))  # pass^2: only t1
    assert fig.pass_at_k == pytest.approx((0.5, 0.75))  # pass@2: t1, t2, t4
    assert fig.per_trial_pass_at_1 == pytest.approx((0.75, 0.25))
    assert fig.changed == ("t2", "t4") and fig.changed_by_infra == ("t4",)
    assert fig.infra_failed == 1


def test_no_spread_takes_the_conservative_end() -> None:
    assert effective_size([1.0, 1.0, 1.0], 9) == 3.0  # all passed: the tasks are the sample
    assert effective_size([0.5, 0.5], 4) == 4.0  # equal means inside (0, 1): the trials are
    assert effective_size([0.5], 3) == 1.0
    assert wilson(0.0, 0) == (0.0, 1.0)


def test_missing_trial_row_counts_as_not_passed() -> None:
    fig = trial_figures([TaskOutcomes("t1", (P, None))])
    assert fig.pass_at_1 == 0.5 and fig.changed == ("t1",) and fig.changed_by_infra == ()


def test_mcnemar_by_hand() -> None:
    assert mcnemar_exact(1, 6) == pytest.approx(2 * 8 / 128)  # (C(7,0)+C(7,1)) / 2^7, doubled
    assert mcnemar_exact(6, 1) == mcnemar_exact(1, 6)
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024)  # 2 (1+10+45) / 2^10
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 1) == 1.0


def test_permutation_by_hand() -> None:
    assert permutation_p([1.0, 1.0, 1.0]) == pytest.approx(2 / 8)
    # non-zero 0.5, 1, -0.5: |sum| = 1; of the 8 sign sums 2,1,0,-1,1,0,-1,-2 six reach 1
    assert permutation_p([0.5, 1.0, -0.5, 0.0]) == pytest.approx(6 / 8)
    assert permutation_p([0.0, 0.0]) == 1.0
    sampled = permutation_p([1.0] * 20)  # beyond exact: sampled, 2/2^20 true p, floor 1/(R+1)
    assert sampled == permutation_p([1.0] * 20) and sampled < 0.001


def test_compare_pairs_single_trial_uses_mcnemar() -> None:
    pairs = [PairedTask(f"t{i}", a, b, 1, 1) for i, (a, b) in enumerate([(1, 1), (1, 0), (1, 0), (0, 1), (0, 0)])]
    fig = compare_pairs(pairs)
    assert (fig.both, fig.only_a, fig.only_b, fig.neither) == (1, 2, 1, 1)
    assert fig.test == "mcnemar_exact" and fig.p_value == pytest.approx(mcnemar_exact(2, 1)) == 1.0
    assert fig.difference == pytest.approx(0.2) and fig.a_rate == pytest.approx(0.6)
    lo, hi = fig.interval95
    assert -1 <= lo < 0.2 < hi <= 1


def test_compare_pairs_trials_use_permutation() -> None:
    pairs = [PairedTask("t1", 1.0, 0.5, 2, 2), PairedTask("t2", 0.5, 0.5, 2, 2), PairedTask("t3", 1.0, 0.0, 2, 2)]
    fig = compare_pairs(pairs)
    assert fig.test == "paired_permutation"
    assert fig.p_value == pytest.approx(permutation_p([0.5, 0.0, 1.0])) == pytest.approx(2 / 4)
    assert (fig.both, fig.only_a, fig.only_b, fig.neither) == (2, 1, 0, 0)


def test_bootstrap_is_fixed_and_brackets_the_mean() -> None:
    diffs = [1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.0]
    assert paired_bootstrap(diffs) == paired_bootstrap(diffs)
    lo, hi = paired_bootstrap(diffs)
    assert lo < sum(diffs) / len(diffs) < hi
    assert paired_bootstrap([0.5, 0.5]) == (0.5, 0.5)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from([P, F, INF, A, None]), min_size=3, max_size=3), min_size=1, max_size=12))
def test_figures_are_ordered_and_the_interval_holds_the_estimate(rows: list[list[TaskStatus | None]]) -> None:
    fig = trial_figures([TaskOutcomes(f"t{i}", tuple(r)) for i, r in enumerate(rows)])
    assert fig.pass_at_1 is not None
    lo, hi = fig.interval95
    assert 0.0 <= lo <= fig.pass_at_1 <= hi <= 1.0
    assert fig.tasks <= fig.effective_n <= fig.task_trials
    assert fig.pass_hat_k[0] == pytest.approx(fig.pass_at_1) == pytest.approx(fig.pass_at_k[0])
    for k in range(1, fig.trials):  # pass^k falls and pass@k rises with k
        assert fig.pass_hat_k[k] <= fig.pass_hat_k[k - 1] + 1e-12
        assert fig.pass_at_k[k] >= fig.pass_at_k[k - 1] - 1e-12
    assert set(fig.changed_by_infra) <= set(fig.changed)
