"""Estimators over repeated trials of the same tasks, pure: pass@1 over trials, pass^k, pass@k, and which
tasks changed their outcome between trials (METHODOLOGY.md §trials says how each figure is read).

A trial's outcome for a task is its ledger row's status, under the denominator rules of METHODOLOGY.md
applied per trial: only `passed` is a success, every other status (`infra_failed`, `environment_blocked`,
`not_attempted`, no row at all) counts as not passed and stays in the denominator. Infrastructure failures are
therefore failures in every figure here, as they are in a single run's pass@1; they are counted per task and
overall so that a reader sees how much of the spread between trials they make.

The interval of pass@1 over trials accounts for tasks and trials: trials of one task are correlated (an easy
task passes every time), so the tasks are the sampling units (clusters) and the trials their repeated measures.
The variance of the mean over tasks of each task's trial mean is estimated from the spread of those task means
(the between-task variance, which holds the within-task trial variance as well), turned into Kish's effective
sample size n_eff = p(1-p)/Var, clamped between the number of tasks (trials of a task entirely dependent) and
the number of task-trials (entirely independent), and a Wilson 95 % interval is taken at n_eff. With one trial
it is exactly the single run's Wilson interval (n_eff = tasks), so K=1 reports what `report` always has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..vocab import TaskStatus

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that k trials drawn without replacement from n, c of them passed, all pass:
    C(c, k) / C(n, k), the unbiased estimator (tau-bench)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k: the chance that at least one of k trials drawn without replacement from n passes:
    1 - C(n - c, k) / C(n, k), the unbiased estimator (Chen et al. 2021)."""
    _check(n, c, k)
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total  # one division of exact integers


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"passed trials {c} must lie in [0, {n}]")
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must lie in [1, {n}] (the trials of the task)")


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion `p` observed over an effective sample size `n` (may be
    fractional); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0.0 <= p <= 1.0:
        raise ValueError("p must lie in [0, 1]")
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # At p = 0 (or 1) the bound is 0 (or 1) exactly; rounding would otherwise leave it just inside.
    return (0.0 if p == 0 else max(0.0, centre - half)), (1.0 if p == 1 else min(1.0, centre + half))


def effective_size(task_means: Sequence[float], task_trials: int) -> float:
    """Kish's effective sample size of the mean of `task_means` (each the mean of one task's trials,
    `task_trials` in all): p(1-p) / (s^2 / T), clamped to [T, task_trials].

    Without a spread to read it from (fewer than two tasks, or every task passed or failed every trial),
    the conservative end is taken: T, the tasks themselves are the sample."""
    t = len(task_means)
    if t == 0:
        return 0.0
    p = sum(task_means) / t
    if t < 2 or p * (1 - p) == 0:
        return float(t)
    s2 = sum((m - p) ** 2 for m in task_means) / (t - 1)
    if s2 == 0:
        # Every task has the same mean strictly between 0 and 1: no task-to-task correlation is visible.
        return float(task_trials)
    return min(float(task_trials), max(float(t), p * (1 - p) / (s2 / t)))


@dataclass(frozen=True)
class TaskOutcomes:
    """One task's statuses, one per trial in trial order (None: the trial has no row for it: not passed)."""

    task: str
    statuses: tuple[TaskStatus | None, ...]

    @property
    def n(self) -> int:
        return len(self.statuses)

    @property
    def passed(self) -> int:
        return sum(1 for s in self.statuses if s is TaskStatus.PASSED)

    @property
    def infra(self) -> int:
        return sum(1 for s in self.statuses if s is TaskStatus.INFRA_FAILED)

    @property
    def changed(self) -> bool:
        """Passed in some trial and not in another."""
        return 0 < self.passed < self.n

    @property
    def changed_by_infra(self) -> bool:
        """Changed, and every trial it did not pass was an infrastructure failure: the change may be the
        environment's, not the agent's."""
        return self.changed and self.passed + self.infra == self.n


@dataclass(frozen=True)
class TaskFigures:
    task: str
    trials: int
    passed: int
    infra_failed: int
    pass_rate: float
    pass_hat: tuple[float, ...]  # pass^k for k = 1..trials
    pass_at: tuple[float, ...]  # pass@k for k = 1..trials
    changed: bool
    changed_by_infra: bool


@dataclass(frozen=True)
class TrialFigures:
    trials: int  # K: the most trials any task has
    tasks: int
    task_trials: int
    pass_at_1: float | None  # mean over tasks of each task's trial mean
    interval95: tuple[float, float]
    effective_n: float
    per_trial_pass_at_1: tuple[float, ...]  # trial i's own pass@1 over every task
    pass_hat_k: tuple[float, ...]  # overall pass^k for k = 1..K (over tasks with at least k trials)
    pass_at_k: tuple[float, ...]
    infra_failed: int  # task-trials that were infrastructure failures
    changed: tuple[str, ...]
    changed_by_infra: tuple[str, ...]
    per_task: tuple[TaskFigures, ...]


def task_figures(outcome: TaskOutcomes) -> TaskFigures:
    n, c = outcome.n, outcome.passed
    return TaskFigures(
        task=outcome.task,
        trials=n,
        passed=c,
        infra_failed=outcome.infra,
        pass_rate=c / n if n else 0.0,
        pass_hat=tuple(pass_hat_k(n, c, k) for k in range(1, n + 1)),
        pass_at=tuple(pass_at_k(n, c, k) for k in range(1, n + 1)),
        changed=outcome.changed,
        changed_by_infra=outcome.changed_by_infra,
    )


def trial_figures(outcomes: Sequence[TaskOutcomes]) -> TrialFigures:
    """Every figure of §trials over `outcomes` (tasks without any trial are left out: they have no figure)."""
    per_task = tuple(task_figures(o) for o in outcomes if o.n > 0)
    k_max = max((f.trials for f in per_task), default=0)
    means = [f.pass_rate for f in per_task]
    task_trials = sum(f.trials for f in per_task)
    n_eff = effective_size(means, task_trials)
    p = sum(means) / len(means) if means else None
    per_trial = tuple(
        sum(1 for o in outcomes if o.n > i and o.statuses[i] is TaskStatus.PASSED) / max(1, len(per_task))
        for i in range(k_max)
    )

    def over_tasks(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return TrialFigures(
        trials=k_max,
        tasks=len(per_task),
        task_trials=task_trials,
        pass_at_1=p,
        interval95=wilson(p, n_eff) if p is not None else (0.0, 1.0),
        effective_n=n_eff,
        per_trial_pass_at_1=per_trial,
        pass_hat_k=tuple(over_tasks([f.pass_hat[k] for f in per_task if f.trials > k]) for k in range(k_max)),
        pass_at_k=tuple(over_tasks([f.pass_at[k] for f in per_task if f.trials > k]) for k in range(k_max)),
        infra_failed=sum(f.infra_failed for f in per_task),
        changed=tuple(f.task for f in per_task if f.changed),
        changed_by_infra=tuple(f.task for f in per_task if f.changed_by_infra),
        per_task=per_task,
    )
