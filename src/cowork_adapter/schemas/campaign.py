"""The campaign file: one spending record shared by every paid run on one provider key.

Money is read from the key's own meter. `usage_baseline` is the meter's lifetime usage when the
campaign was created; everything the key spends after that (this tool's runs, or anyone else on
the same key) counts against the ceiling. `spent_usd` and `remaining_usd` are derived, never
stored as truth: the file carries them only so a human reading it sees them.
"""

from __future__ import annotations

import hashlib
import sys
from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from ..campaign import budget
from .record import Record, RecordInvalid, convert

CAMPAIGN_SCHEMA: Final = "cowork_adapter.campaign.v1"

# Finite, non-negative dollars or meter units; NaN and infinity never enter the record.
Usd = Annotated[float, msgspec.Meta(ge=0, le=sys.float_info.max)]
PositiveUsd = Annotated[float, msgspec.Meta(gt=0, le=sys.float_info.max)]
Fingerprint = Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{16}$")]
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]  # a naive timestamp is refused

# Keys written for humans on each save and ignored on load (they are recomputed).
_DERIVED_KEYS = ("spent_usd", "remaining_usd")


def key_fingerprint(key: str) -> str:
    """`sha256:` + the first 16 hex digits of SHA-256 of the key. Never the key itself."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


class _Strict(Record, frozen=True):  # type: ignore[misc]  # msgspec allows a frozen Struct over a mutable base; dataclasses (mypy's model) do not
    pass


class ActiveRun(_Strict):  # type: ignore[misc]  # frozen, inherited: see _Strict
    """The run that currently holds custody of the campaign (set before its runner starts)."""

    run_root: str
    run_label: str
    launcher_pid: int
    runner_pgid: int | None = None  # None until the runner's process group exists
    started_at: AwareDatetime
    host: str
    usage_at_start: Usd  # meter usage when the run took custody: run spending is measured from it


class RunRecord(_Strict):  # type: ignore[misc]  # frozen, inherited: see _Strict
    """One finished (or reconciled) run in the campaign's history."""

    run_root: str
    run_label: str
    outcome: str  # a RunOutcome value, or "reconciled"
    stop_reason: str | None = None
    spent_usd: Usd
    meter_error: str | None = None
    started_at: AwareDatetime
    finished_at: AwareDatetime


class Reconciliation(_Strict):  # type: ignore[misc]  # frozen, inherited: see _Strict
    """An operator's guarded clearing of a stale active_run, with the checks that allowed it."""

    run_root: str
    operator_note: str
    checks: dict[str, Any]
    usage_at_reconcile: Usd
    at: AwareDatetime
    # The usage the reconcile replaced (last_usage and when it was observed before this save), so the
    # history keeps both values (None in records written before it was kept).
    previous_usage: Usd | None = None
    previous_usage_observed_at: AwareDatetime | None = None


class CampaignStop(_Strict):  # type: ignore[misc]  # frozen, inherited: see _Strict
    """A campaign-wide stop written by one host of a shared campaign (a crossing it saw on the key's
    meter): every host reads it with its lease renewal and stops; no host is admitted after it."""

    reason: str  # a StopReason value
    host: str
    run_root: str
    at: AwareDatetime


class CampaignRecord(_Strict, rename={"schema_": "schema"}):  # type: ignore[misc]  # as above
    """The whole campaign file. Mutate only through `replace(...)` and a store save."""

    schema_: Literal["cowork_adapter.campaign.v1"] = CAMPAIGN_SCHEMA
    fingerprint: Fingerprint
    ceiling_usd: PositiveUsd
    usage_baseline: Usd
    prior_spend_usd: Usd
    last_usage: Usd
    last_usage_observed_at: AwareDatetime
    created_at: AwareDatetime
    # What the creating run was given explicitly, kept so later runs that name neither bound use
    # these instead of an assumed amount (None in files written before they were stored).
    reserve_usd: Usd | None = None
    run_budget_usd: PositiveUsd | None = None
    # --diagnostic-eval-on-truncation of the campaign's first run: every later run must match it
    # (None: a file from before it was stored; the next run records its own).
    diagnostic_eval_on_truncation: bool | None = None
    runs: tuple[RunRecord, ...] = ()
    active_run: ActiveRun | None = None
    reconciliations: tuple[Reconciliation, ...] = ()
    stop: CampaignStop | None = None  # shared campaigns only (campaign/shared.py)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CampaignRecord:
        """The record from a file's decoded JSON; the derived keys are dropped (recomputed)."""
        return convert({k: v for k, v in data.items() if k not in _DERIVED_KEYS}, cls)

    def _check(self) -> None:
        if self.last_usage < self.usage_baseline:
            raise ValueError("last_usage is below usage_baseline")

    @property
    def spent_usd(self) -> float:
        return self.spending().spent_usd

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

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON values: the stored fields, then the derived ones for a human reader."""
        return {**super().to_dict(), "spent_usd": self.spent_usd, "remaining_usd": self.remaining_usd}

    def to_json(self) -> str:
        """Pretty JSON as written to disk (NaN can never appear: the fields forbid it)."""
        return msgspec.json.format(msgspec.json.encode(self.to_dict()), indent=2).decode("utf-8") + "\n"


def parse_campaign(text: str | bytes) -> CampaignRecord:
    """Parse a campaign file's text; raises RecordInvalid (a ValueError)."""
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise RecordInvalid(str(exc)) from None
    if not isinstance(data, dict):
        raise RecordInvalid(f"Expected `object`, got `{type(data).__name__}`")
    return CampaignRecord.from_dict(data)
