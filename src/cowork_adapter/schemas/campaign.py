"""The campaign file: one spending record shared by every paid run on one provider key.

Money is read from the key's own meter. `usage_baseline` is the meter's lifetime usage when the
campaign was created; everything the key spends after that (this tool's runs, or anyone else on
the same key) counts against the ceiling. `spent_usd` and `remaining_usd` are derived, never
stored as truth: the file carries them only so a human reading it sees them.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, computed_field, model_validator

from ..campaign import budget

CAMPAIGN_SCHEMA = "cowork_adapter.campaign.v1"

# Finite, non-negative dollars or meter units; NaN and infinity never enter the record.
Usd = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fingerprint = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{16}$")]

# Keys written for humans on each save and ignored on load (they are recomputed).
_DERIVED_KEYS = ("spent_usd", "remaining_usd")


def key_fingerprint(key: str) -> str:
    """`sha256:` + the first 16 hex digits of SHA-256 of the key. Never the key itself."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActiveRun(_Strict):
    """The run that currently holds custody of the campaign (set before its runner starts)."""

    run_root: str
    run_label: str
    launcher_pid: int
    runner_pgid: int | None = None  # None until the runner's process group exists
    started_at: AwareDatetime
    host: str
    usage_at_start: Usd  # meter usage when the run took custody: run spending is measured from it


class RunRecord(_Strict):
    """One finished (or reconciled) run in the campaign's history."""

    run_root: str
    run_label: str
    outcome: str  # a RunOutcome value, or "reconciled"
    stop_reason: str | None = None
    spent_usd: Usd
    meter_error: str | None = None
    started_at: AwareDatetime
    finished_at: AwareDatetime


class Reconciliation(_Strict):
    """An operator's guarded clearing of a stale active_run, with the checks that allowed it."""

    run_root: str
    operator_note: str
    checks: dict[str, Any]
    usage_at_reconcile: Usd
    at: AwareDatetime


class CampaignRecord(_Strict):
    """The whole campaign file. Mutate only through `model_copy(update=...)` and a store save."""

    schema_: Literal["cowork_adapter.campaign.v1"] = Field(default=CAMPAIGN_SCHEMA, alias="schema")
    fingerprint: Fingerprint
    ceiling_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    usage_baseline: Usd
    prior_spend_usd: Usd
    last_usage: Usd
    last_usage_observed_at: AwareDatetime
    created_at: AwareDatetime
    # What the creating run was given explicitly, kept so later runs that name neither bound use
    # these instead of an assumed amount (None in files written before they were stored).
    reserve_usd: Usd | None = None
    run_budget_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    # --diagnostic-eval-on-truncation of the campaign's first run: every later run must match it
    # (None: a file from before it was stored; the next run records its own).
    diagnostic_eval_on_truncation: bool | None = None
    runs: tuple[RunRecord, ...] = ()
    active_run: ActiveRun | None = None
    reconciliations: tuple[Reconciliation, ...] = ()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(k in data for k in _DERIVED_KEYS):
            data = {k: v for k, v in data.items() if k not in _DERIVED_KEYS}
        return data

    @model_validator(mode="after")
    def _usage_not_below_baseline(self) -> "CampaignRecord":
        if self.last_usage < self.usage_baseline:
            raise ValueError("last_usage is below usage_baseline")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def spent_usd(self) -> float:
        return self.spending().spent_usd

    @computed_field  # type: ignore[prop-decorator]
    @property
    def remaining_usd(self) -> float:
        return self.spending().remaining_usd

    def spending(self, usage: float | None = None) -> budget.Spending:
        """The budget arithmetic's view of this record (optionally at another meter usage)."""
        return budget.Spending(
            ceiling_usd=self.ceiling_usd,
            prior_spend_usd=self.prior_spend_usd,
            usage_baseline=self.usage_baseline,
            usage=self.last_usage if usage is None else usage,
            usage_at_run_start=self.active_run.usage_at_start if self.active_run else None,
        )

    def to_json(self) -> str:
        """Pretty JSON as written to disk (NaN can never appear: the fields forbid it)."""
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def parse_campaign(text: str) -> CampaignRecord:
    """Parse a campaign file's text; raises pydantic.ValidationError or ValueError."""
    return CampaignRecord.model_validate_json(text)

