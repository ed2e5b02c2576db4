"""Pure rule of bench_admission_load.py: the highest load per CPU whose start-up stays within bounds.

A row is one background load level: the load per CPU it actually reached and the worst ratio of a
start-up time to the timeout that bounds it. The limit is the reached load of the highest level
such that it and every level below it stayed at or under `fraction` (a level that passed above a
failing one does not count: load only makes start-up slower, so that pass is noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LevelRow:
    load_per_cpu: float  # the load the level reached (not the one asked for)
    worst_ratio: float  # slowest start-up / its timeout, over every sample of the level


@dataclass(frozen=True)
class Threshold:
    limit: float | None  # None: even the lightest level was over the fraction
    first_failing: float | None  # None: no level failed, so `limit` is a lower bound only

    def rounded(self, step: float = 0.5) -> float | None:
        """`limit` rounded DOWN to a multiple of `step` (a default should be a plain number that
        the measurement still supports)."""
        if self.limit is None:
            return None
        return math.floor(self.limit / step + 1e-9) * step


def choose_threshold(rows: list[LevelRow], fraction: float) -> Threshold:
    if not rows:
        raise ValueError("no measured level")
    if not (0 < fraction <= 1):
        raise ValueError(f"fraction must be in (0, 1] (got {fraction})")
    limit = None
    for row in sorted(rows, key=lambda r: r.load_per_cpu):
        if not (row.worst_ratio <= fraction):  # NaN (nothing measured) fails too
            return Threshold(limit=limit, first_failing=row.load_per_cpu)
        limit = row.load_per_cpu
    return Threshold(limit=limit, first_failing=None)
