"""trials.json: a trial-set folder's record (`run --trials K`), written atomically before any trial starts.

The folder holds it and the trials' run roots, each a complete run root of its own (`trial-1` ... `trial-K`,
named relative to the folder, in trial order). Every trial runs under the one campaign named here. Readers:
runroot/trials.py (report, export, compare), status and stop over the folder.
"""

from __future__ import annotations

from pathlib import Path

from ..runroot.layout import TRIAL_PREFIX, TRIALS
from .record import Positive, Record, RecordInvalid, decode

TRIALS_SCHEMA = "cowork_adapter.trials.v1"
TRIALS_VERSION = 1


class TrialProjection(Record):
    """What the set was projected to cost before trial 1 started (run/trial_money.py says how)."""

    k: Positive
    tasks: int  # the selected tasks each trial runs
    per_task_cap_usd: float  # --per-task-cost-usd, the engine's own limit per task
    worst_case_usd: float  # k x tasks x per_task_cap_usd
    observed_cost_per_task_usd: float | None = None  # the campaign's earlier runs' spend over their tasks
    observed_runs: int = 0  # how many earlier runs that figure is from
    expected_usd: float | None = None  # k x tasks x observed_cost_per_task_usd
    budget_usd: float | None = None  # the set's --budget-usd (given, or the campaign's stored run budget)
    campaign_available_usd: float | None = None  # the campaign's remainder above its reserve, when read


class TrialSet(Record, rename={"schema_": "schema"}):
    schema_: str = TRIALS_SCHEMA
    version: int = TRIALS_VERSION
    created_at: str
    k: Positive  # the number of trials
    run_roots: list[str]  # the trials' run-root names, relative to the folder, in trial order
    campaign: str | None = None  # the campaign every trial spends under (file or database name), if any
    resume_from: str | None = None  # the trial set this one resumes (each trial resumes its namesake)
    projection: TrialProjection | None = None  # None: a set that spends nothing, or written before it was kept

    def _check(self) -> None:
        if len(self.run_roots) != self.k:
            raise RecordInvalid(f"{TRIALS} names {len(self.run_roots)} run roots for k = {self.k}")
        for name in self.run_roots:
            # Names only, never paths: a record cannot point a reader outside its folder.
            if Path(name).name != name or not name.startswith(TRIAL_PREFIX):
                raise RecordInvalid(f"{TRIALS} names {name!r}, which is not a trial run root's name")
        if len(set(self.run_roots)) != len(self.run_roots):
            raise RecordInvalid(f"{TRIALS} names a trial run root twice")


def trial_names(k: int) -> list[str]:
    return [f"{TRIAL_PREFIX}{i}" for i in range(1, k + 1)]


def read_trial_set(folder: Path) -> TrialSet:
    """The folder's trials.json (OSError when absent or unreadable, RecordInvalid when not a trial set)."""
    return decode((Path(folder) / TRIALS).read_bytes(), TrialSet)
