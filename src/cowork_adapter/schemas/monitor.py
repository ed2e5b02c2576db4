"""monitor.json: the run's live snapshot (rewritten while it runs, final once cleanup is proven).

`finished: true` is written only after exact-label cleanup succeeded, so a reader may take it as
proof of cleanup. Every number is finite: a non-finite meter value appears only as a repr string
inside a rejected observation.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MONITOR_SCHEMA = "cowork_adapter.monitor.v1"

Count = Annotated[int, Field(ge=0)]
Usd = Annotated[float, Field(allow_inf_nan=False)]
Bytes = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Progress(_Model):
    selected: Count = 0
    done: Count = 0
    passed: Count = 0
    failed: Count = 0
    agent_failed: Count = 0
    infra_failed: Count = 0
    not_attempted: Count = 0
    environment_blocked: Count = 0  # in `selected`, never handed to the runner, so never `done`
    running: Count = 0


class Spending(_Model):
    campaign_spent_usd: Usd | None = None
    campaign_remaining_usd: Usd | None = None
    run_spent_usd: Usd | None = None
    reserve_usd: Usd | None = None
    run_budget_usd: Usd | None = None


class RejectedObservation(_Model):
    observed_at: str
    phase: str
    attempt: int
    previous_usage: Usd | None
    observed_usage: Usd | str | None  # a repr string for NaN/inf or a non-numeric value
    error_type: str
    error: str

    @classmethod
    def from_observation(cls, observation: Mapping[str, Any]) -> "RejectedObservation":
        """From observe.Observation.to_dict() of a rejected read (its `accepted` flag is dropped)."""
        return cls.model_validate({k: v for k, v in observation.items() if k != "accepted"})


class MeterConfirmation(_Model):
    """The accepted reading that ended a run of rejected ones (kept until the next such one)."""

    observed_at: str
    phase: str
    attempt: int
    previous_usage: Usd | None
    usage: Usd
    rejections: Count  # rejected reads since the acceptance before it


class MeterState(_Model):
    blindness_sec: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    last_accepted_at: datetime | None = None
    age_sec: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    last_usage: Usd | None = None
    rejected: list[RejectedObservation] = Field(default_factory=list)  # the most recent ones
    rejected_total: Count = 0  # every rejected read of the run
    rejected_dropped: Count = 0  # the older ones no longer in `rejected`
    last_error: str | None = None
    confirmed_after_rejection: bool = False  # the latest acceptance followed a rejection
    confirmation: MeterConfirmation | None = None  # the latest acceptance that followed rejections


class Disk(_Model):
    resource_free_bytes: Bytes | None = None
    root_free_bytes: Bytes | None = None
    resource_reserve_bytes: Bytes | None = None
    root_reserve_bytes: Bytes | None = None


class WriteFailure(_Model):
    count: Count
    error: str


class Monitor(_Model):
    schema_: Literal["cowork_adapter.monitor.v1"] = Field(default=MONITOR_SCHEMA, alias="schema")
    observed_at: datetime
    launcher_pid: int
    runner_pid: int | None = None
    finished: bool = False
    progress: Progress = Field(default_factory=Progress)
    spending: Spending = Field(default_factory=Spending)
    meter: MeterState
    disk: Disk = Field(default_factory=Disk)
    stop_reason: str | None = None  # the first cause
    stop_causes: list[str] = Field(default_factory=list)  # every cause, in the order seen
    campaign_settlement: Literal["pending", "recorded", "unconfirmed", "not_applicable"] = "pending"
    diagnostic_write_failures: dict[str, WriteFailure] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"
