"""Paired comparison of two configurations over the same tasks, pure (METHODOLOGY.md §compare).

Each side gives, per task, the mean of its trials' outcomes (1 passed, 0 anything else, per trial under the
denominator rules). The tasks are the pairs: the difference in pass rate is the mean over tasks of the
per-task differences, its 95 % interval a paired bootstrap over tasks (tasks resampled with replacement, each
keeping both sides' figures, so the pairing and each task's own trials stay together; fixed seed, percentile
interval). The test of "no difference" is exact: with one trial a side, McNemar's test (under the null a
discordant task is as likely to favour either side: a two-sided binomial test of the discordant pairs at 1/2);
with more, a paired permutation test of the per-task trial means (the sign of each task's difference flipped,
every assignment enumerated when at most 16 tasks differ, else a fixed-seed sample with the +1 correction).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

SEED = 20260539  # fixed: the same inputs give the same interval and p-value on every machine
BOOTSTRAP_RESAMPLES = 4000
PERMUTATION_RESAMPLES = 20000
EXACT_PERMUTATION_MAX = 16  # 2**16 sign assignments enumerated; more are sampled
_TIE = 1e-12  # float sums of the same terms in another order


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value of `only_a` and `only_b` discordant pairs: twice the smaller
    binomial tail at 1/2, capped at 1 (1 when there is no discordant pair)."""
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts must be non-negative")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


def permutation_p(diffs: Sequence[float], *, seed: int = SEED, resamples: int = PERMUTATION_RESAMPLES) -> float:
    """Two-sided paired permutation p-value of the mean of `diffs` (per-task A - B): the share of sign
    assignments whose |sum| is at least the observed one. Exact up to EXACT_PERMUTATION_MAX non-zero
    differences, else Monte Carlo with (hits + 1) / (resamples + 1)."""
    nonzero = [d for d in diffs if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero)) - _TIE
    if len(nonzero) <= EXACT_PERMUTATION_MAX:
        hits = sum(
            1
            for signs in product((1, -1), repeat=len(nonzero))
            if abs(sum(s * d for s, d in zip(signs, nonzero, strict=True))) >= observed
        )
        return hits / (1 << len(nonzero))
    rng = random.Random(seed)
    hits = sum(1 for _ in range(resamples) if abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed)
    return (hits + 1) / (resamples + 1)


def paired_bootstrap(
    diffs: Sequence[float], *, seed: int = SEED, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Percentile 95 % interval of the mean of `diffs` with tasks resampled with replacement."""
    n = len(diffs)
    if n == 0:
        return -1.0, 1.0
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return _percentile(means, 0.025), _percentile(means, 0.975)


def _percentile(ordered: Sequence[float], q: float) -> float:
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class PairedTask:
    task: str
    a: float  # side A's mean over its trials of the task
    b: float
    a_trials: int
    b_trials: int


def solved(mean: float) -> bool:
    """A side solves a task when it passed at least half of its trials (with one trial: it passed)."""
    return mean >= 0.5


@dataclass(frozen=True)
class PairedFigures:
    tasks: int
    both: int
    only_a: int
    only_b: int
    neither: int
    a_rate: float | None
    b_rate: float | None
    difference: float | None  # A - B
    interval95: tuple[float, float]
    test: str  # "mcnemar_exact" or "paired_permutation"
    p_value: float


def compare_pairs(pairs: Sequence[PairedTask]) -> PairedFigures:
    """Every figure of §compare over `pairs` (the tasks both sides selected)."""
    both = sum(1 for p in pairs if solved(p.a) and solved(p.b))
    only_a = sum(1 for p in pairs if solved(p.a) and not solved(p.b))
    only_b = sum(1 for p in pairs if solved(p.b) and not solved(p.a))
    diffs = [p.a - p.b for p in pairs]
    single = all(p.a_trials == 1 and p.b_trials == 1 for p in pairs)
    n = len(pairs)
    return PairedFigures(
        tasks=n,
        both=both,
        only_a=only_a,
        only_b=only_b,
        neither=n - both - only_a - only_b,
        a_rate=sum(p.a for p in pairs) / n if n else None,
        b_rate=sum(p.b for p in pairs) / n if n else None,
        difference=sum(diffs) / n if n else None,
        interval95=paired_bootstrap(diffs),
        test="mcnemar_exact" if single else "paired_permutation",
        p_value=mcnemar_exact(only_a, only_b) if single else permutation_p(diffs),
    )
