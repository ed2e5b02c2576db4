"""Budget arithmetic: pure functions over the campaign's numbers, no I/O.

spent     = prior_spend + usage − usage_baseline   (all spending on the key counts)
remaining = ceiling − spent
run_spent = usage − usage_at_run_start

Comparisons are done in decimal on the numbers as written (repr of each float), so a stop at
"ceiling − reserve" happens exactly there and not a rounding error earlier or later.
The per-task cost cap lives inside the container and is never reserved here: the reserve is an
explicit allowance for delayed provider charges, independent of task count and concurrency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from ..errors import Refusal
from ..vocab import StopReason


def _dec(value: float) -> Decimal:
    # repr is the shortest string that round-trips, i.e. the number a human or the meter wrote.
    return Decimal(repr(float(value)))


def _finite(name: str, value: float, *, minimum: float | None = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class Spending:
    """The campaign's numbers at one meter usage. Construction validates them."""

    ceiling_usd: float
    prior_spend_usd: float
    usage_baseline: float
    usage: float
    usage_at_run_start: float | None = None

    def __post_init__(self) -> None:
        _finite("ceiling_usd", self.ceiling_usd)
        if self.ceiling_usd <= 0:
            raise ValueError("ceiling_usd must be > 0")
        _finite("prior_spend_usd", self.prior_spend_usd)
        _finite("usage_baseline", self.usage_baseline)
        _finite("usage", self.usage)
        if self.usage_at_run_start is not None:
            _finite("usage_at_run_start", self.usage_at_run_start)

    @property
    def spent(self) -> Decimal:
        return _dec(self.prior_spend_usd) + _dec(self.usage) - _dec(self.usage_baseline)

    @property
    def remaining(self) -> Decimal:
        return _dec(self.ceiling_usd) - self.spent

    @property
    def run_spent(self) -> Decimal | None:
        if self.usage_at_run_start is None:
            return None
        return _dec(self.usage) - _dec(self.usage_at_run_start)

    @property
    def spent_usd(self) -> float:
        return float(self.spent)

    @property
    def remaining_usd(self) -> float:
        return float(self.remaining)

    @property
    def run_spent_usd(self) -> float | None:
        value = self.run_spent
        return None if value is None else float(value)


def key_exhausted(limit_remaining: float | None) -> bool:
    """True when the key meter itself reports no remaining limit (null means uncapped)."""
    return limit_remaining is not None and math.isfinite(limit_remaining) and limit_remaining <= 0


def stop_decision(
    spending: Spending,
    *,
    reserve_usd: float,
    run_budget_usd: float | None = None,
    limit_remaining: float | None = None,
) -> StopReason | None:
    """The first reason to stop now, or None. Order: known exhaustion, reserve, run budget."""
    _finite("reserve_usd", reserve_usd)
    if key_exhausted(limit_remaining):
        return StopReason.BUDGET_EXHAUSTED
    if spending.remaining <= _dec(reserve_usd):
        return StopReason.CAMPAIGN_BUDGET_RESERVE
    if run_budget_usd is not None:
        _finite("run_budget_usd", run_budget_usd)
        run_spent = spending.run_spent
        if run_spent is not None and run_spent >= _dec(run_budget_usd):
            return StopReason.RUN_BUDGET
    return None


def admission_check(spending: Spending, *, reserve_usd: float, limit_remaining: float | None = None) -> None:
    """Refuse to start a run that would stop at once: exhausted key or remaining ≤ reserve."""
    _finite("reserve_usd", reserve_usd)
    if key_exhausted(limit_remaining):
        raise Refusal("campaign", "The key meter reports no remaining limit on this key, so no run can start.")
    if spending.remaining <= _dec(reserve_usd):
        raise Refusal(
            "campaign",
            f"The campaign has ${spending.remaining_usd:.2f} remaining, which is not above the "
            f"${reserve_usd:.2f} reserve, so no run can start.",
        )
