"""Small, pure statistics for the report: Wilson interval, quantiles, full-run projection."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError("successes must lie in [0, n]")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile (q in [0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def project_full_run(
    costs: Sequence[float],
    durations: Sequence[float],
    *,
    tasks: int,
    concurrency: int,
) -> dict[str, float | int | None]:
    """Cost and wall time of `tasks` tasks at `concurrency`, from observed per-task means and p90.

    Wall time assumes the slots stay full: tasks × per-task duration / concurrency. The p90
    figures price every task at the observed 90th percentile: a pessimistic bound, not a forecast.
    """
    c = max(1, int(concurrency))
    m_cost, p_cost = mean(costs), quantile(costs, 0.9)
    m_dur, p_dur = mean(durations), quantile(durations, 0.9)
    return {
        "tasks": tasks,
        "concurrency": c,
        "cost_samples": len(costs),
        "duration_samples": len(durations),
        "mean_cost_per_task_usd": m_cost,
        "p90_cost_per_task_usd": p_cost,
        "mean_duration_per_task_s": m_dur,
        "p90_duration_per_task_s": p_dur,
        "projected_cost_usd": None if m_cost is None else m_cost * tasks,
        "projected_cost_p90_usd": None if p_cost is None else p_cost * tasks,
        "projected_wall_s": None if m_dur is None else m_dur * tasks / c,
        "projected_wall_p90_s": None if p_dur is None else p_dur * tasks / c,
    }
