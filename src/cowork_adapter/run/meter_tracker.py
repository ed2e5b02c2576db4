"""What monitor.json says about a paid run's key meter (MeterTracker: the last acceptance, recent
rejections, errors) and its money block. Pure record-keeping, apart from the spending policy
(spending.py) that feeds it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from ..campaign.budget import Spending
from ..campaign.observe import AcceptedReading, Observation
from ..config import RunConfig
from ..resolved import Unresolved
from ..schemas.monitor import MeterConfirmation, MeterState, RejectedObservation
from ..schemas.monitor import Spending as MonitorSpending

# Rejected meter reads monitor.json lists one by one; older ones are only counted (rejected_dropped).
KEEP_REJECTED = 20


@dataclass
class MeterTracker:
    """What monitor.json says about the meter: last acceptance, recent rejections, errors."""

    blindness_sec: float
    last_usage: float | None = None
    last_accepted_mono: float | None = None
    last_accepted_at: datetime | None = None
    rejected: list[RejectedObservation] = field(default_factory=list)
    rejected_total: int = 0
    rejected_dropped: int = 0
    pending_rejections: int = 0  # rejected since the last acceptance
    last_error: str | None = None
    confirmed_after_rejection: bool = False
    confirmation: MeterConfirmation | None = None

    def accepted(self, reading: AcceptedReading) -> None:
        self.last_usage = reading.usage
        self.last_accepted_mono = reading.request_time
        self.last_accepted_at = reading.observed_at
        self.confirmed_after_rejection = reading.attempts > 1

    def observation(self, obs: Observation) -> MeterConfirmation | None:
        """Count a rejected read (the latest KEEP_REJECTED kept, the rest counted as dropped), or
        record the acceptance that followed rejections; returns that confirmation."""
        if obs.accepted:
            if obs.observed_usage is None:  # observe.py gives every acceptance its usage
                raise Unresolved("an accepted meter observation has no usage")
            self.confirmation = MeterConfirmation(
                observed_at=obs.observed_at,
                phase=obs.phase,
                attempt=obs.attempt,
                previous_usage=obs.previous_usage,
                usage=float(obs.observed_usage),
                rejections=self.pending_rejections,
            )
            self.pending_rejections = 0
            return self.confirmation
        self.rejected_total += 1
        self.pending_rejections += 1
        self.last_error = f"{obs.error_type}: {obs.error}"
        self.rejected.append(
            RejectedObservation(
                observed_at=obs.observed_at,
                phase=obs.phase,
                attempt=obs.attempt,
                previous_usage=obs.previous_usage,
                observed_usage=obs.observed_usage,
                error_type=obs.error_type or "error",
                error=obs.error or "",
            )
        )
        if len(self.rejected) > KEEP_REJECTED:
            self.rejected_dropped += len(self.rejected) - KEEP_REJECTED
            del self.rejected[:-KEEP_REJECTED]
        return None

    def state(self) -> MeterState:
        age = None if self.last_accepted_mono is None else max(0.0, time.monotonic() - self.last_accepted_mono)
        return MeterState(
            blindness_sec=self.blindness_sec,
            last_accepted_at=self.last_accepted_at,
            age_sec=age,
            last_usage=self.last_usage,
            rejected=list(self.rejected),
            rejected_total=self.rejected_total,
            rejected_dropped=self.rejected_dropped,
            last_error=self.last_error,
            confirmed_after_rejection=self.confirmed_after_rejection,
            confirmation=self.confirmation,
        )


def monitor_spending(spending: Spending | None, cfg: RunConfig) -> MonitorSpending:
    """monitor.json's money block: the campaign's figures once admitted, the run's bounds always."""
    return MonitorSpending(
        campaign_spent_usd=max(0.0, spending.spent_usd) if spending else None,
        campaign_remaining_usd=max(0.0, spending.remaining_usd) if spending else None,
        run_spent_usd=max(0.0, spending.run_spent_usd or 0.0) if spending else None,
        reserve_usd=cfg.money.budget_reserve_usd,
        run_budget_usd=cfg.money.budget_usd,
    )
