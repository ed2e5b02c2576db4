"""monitor.json: the run's live snapshot (rewritten while it runs, final once cleanup is proven).

`finished: true` is written only after exact-label cleanup succeeded, so a reader may take it as
proof of cleanup. Every number is finite: a non-finite meter value appears only as a repr string
inside a rejected observation.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from .record import Finite, NonNegative, Record, convert

MONITOR_SCHEMA: Final = "cowork_adapter.monitor.v1"

Count = NonNegative
Usd = Finite
Bytes = NonNegative
# How a run's campaign settled (run/spending.py): pending while it runs, not_applicable without money.
CampaignSettlement = Literal["pending", "recorded", "unconfirmed", "not_applicable"]


class Progress(Record):
    selected: Count = 0
    done: Count = 0
    passed: Count = 0
    failed: Count = 0
    agent_failed: Count = 0
    infra_failed: Count = 0
    not_attempted: Count = 0
    environment_blocked: Count = 0  # in `selected`, never handed to the runner, so never `done`
    running: Count = 0


class Spending(Record):
    campaign_spent_usd: Usd | None = None
    campaign_remaining_usd: Usd | None = None
    run_spent_usd: Usd | None = None
    reserve_usd: Usd | None = None
    run_budget_usd: Usd | None = None


class RejectedObservation(Record):
    observed_at: str
    phase: str
    attempt: int
    previous_usage: Usd | None
    observed_usage: Usd | str | None  # a repr string for NaN/inf or a non-numeric value
    error_type: str
    error: str

    @classmethod
    def from_observation(cls, observation: Mapping[str, Any]) -> RejectedObservation:
        """From observe.Observation.to_dict() of a rejected read (its `accepted` flag is dropped)."""
        return convert({k: v for k, v in observation.items() if k != "accepted"}, cls)


class MeterConfirmation(Record):
    """The accepted reading that ended a run of rejected ones (kept until the next such one)."""

    observed_at: str
    phase: str
    attempt: int
    previous_usage: Usd | None
    usage: Usd
    rejections: Count  # rejected reads since the acceptance before it


class MeterState(Record):
    blindness_sec: Annotated[float, msgspec.Meta(gt=0, le=sys.float_info.max)]
    last_accepted_at: datetime | None = None
    age_sec: Annotated[float, msgspec.Meta(ge=0, le=sys.float_info.max)] | None = None
    last_usage: Usd | None = None
    rejected: list[RejectedObservation] = msgspec.field(default_factory=list)  # the most recent ones
    rejected_total: Count = 0  # every rejected read of the run
    rejected_dropped: Count = 0  # the older ones no longer in `rejected`
    last_error: str | None = None
    confirmed_after_rejection: bool = False  # the latest acceptance followed a rejection
    confirmation: MeterConfirmation | None = None  # the latest acceptance that followed rejections


class Disk(Record):
    resource_free_bytes: Bytes | None = None
    root_free_bytes: Bytes | None = None
    resource_reserve_bytes: Bytes | None = None
    root_reserve_bytes: Bytes | None = None


class WriteFailure(Record):
    count: Count
    error: str


class Monitor(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.monitor.v1"] = MONITOR_SCHEMA
    observed_at: datetime
    launcher_pid: int
    runner_pid: int | None = None
    finished: bool = False
    progress: Progress = msgspec.field(default_factory=Progress)
    spending: Spending = msgspec.field(default_factory=Spending)
    meter: MeterState
    disk: Disk = msgspec.field(default_factory=Disk)
    stop_reason: str | None = None  # the first cause
    stop_causes: list[str] = msgspec.field(default_factory=list)  # every cause, in the order seen
    campaign_settlement: CampaignSettlement = "pending"
    diagnostic_write_failures: dict[str, WriteFailure] = msgspec.field(default_factory=dict)
