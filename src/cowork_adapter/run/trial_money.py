"""A trial set's spending projection, made before trial 1 starts (`run --trials K`).

A set of K trials over N selected tasks is K x N task-trials, all spending under one `--budget-usd` and one
campaign; a set that runs out of money part-way leaves trials without the later ones, and pass^k needs all K.
So before anything is written the set is priced two ways:

  - expected: K x N x the campaign's observed cost per task, which is the sum of what its earlier runs spent
    (their meter figures in the campaign record) over the sum of the tasks they handed their runners (their
    manifests). No history (a new campaign, or no readable earlier run) gives no expected figure.
  - worst case: K x N x `--per-task-cost-usd`, the engine's own per-task limit (a call in flight may
    overshoot it; the gateway reserves it before each request).

The money the set may spend is the smaller of its `--budget-usd` and the campaign's remainder above its
reserve (the campaign record's last reading; trial 1's admission reads the meter again). An expected figure
above that refuses the set (exit 2, nothing written); the worst case above it is said, never refused: the
per-task limit is a fence, not a forecast. A dry run says the same and refuses nothing. The projection is
recorded in trials.json so `status R` shows the set's spend against it.

`project` is pure; `projection_for` reads the campaign record and the earlier runs' manifests (host-written
files, at most MAX_HISTORY_RUNS of them, the newest).
"""

from __future__ import annotations

from pathlib import Path

from ..benchmark.provenance import dataset_ids
from ..config import RunConfig
from ..errors import Refusal
from ..runroot.manifest import read_manifest
from ..schemas.campaign import CampaignRecord
from ..schemas.record import RecordInvalid
from ..schemas.trials import TrialProjection
from ..vocab import RunOutcome

# The campaign's newest runs read for the observed cost per task: a bound on the manifests read.
MAX_HISTORY_RUNS = 50


def observed_cost(history: list[tuple[float, int]]) -> tuple[float | None, int]:
    """(cost per task, runs counted) from (spent, tasks handed to the runner) of earlier runs; runs that
    handed no task are left out (their spend, if any, belongs to no task)."""
    counted = [(spent, tasks) for spent, tasks in history if tasks > 0]
    total_tasks = sum(t for _, t in counted)
    if not total_tasks:
        return None, 0
    return sum(s for s, _ in counted) / total_tasks, len(counted)


def project(
    *,
    k: int,
    tasks: int,
    per_task_cap_usd: float,
    history: list[tuple[float, int]],
    budget_usd: float | None,
    available_usd: float | None,
) -> TrialProjection:
    """The set's projection (pure): see the module's docstring for each figure."""
    per_task, runs = observed_cost(history)
    return TrialProjection(
        k=k,
        tasks=tasks,
        per_task_cap_usd=per_task_cap_usd,
        worst_case_usd=k * tasks * per_task_cap_usd,
        observed_cost_per_task_usd=per_task,
        observed_runs=runs,
        expected_usd=None if per_task is None else k * tasks * per_task,
        budget_usd=budget_usd,
        campaign_available_usd=available_usd,
    )


def limit_usd(p: TrialProjection) -> float | None:
    """What the set may spend: the smaller of its budget and the campaign's money above its reserve."""
    known = [v for v in (p.budget_usd, p.campaign_available_usd) if v is not None]
    return min(known) if known else None


def refusal_sentence(p: TrialProjection) -> str | None:
    """The refusal when the expected cost exceeds what the set may spend, else None."""
    limit = limit_usd(p)
    if p.expected_usd is None or limit is None or p.expected_usd <= limit:
        return None
    return (
        f"{p.k} trials of {p.tasks} tasks are expected to cost ${p.expected_usd:.2f} (the campaign's "
        f"${p.observed_cost_per_task_usd or 0.0:.2f} per task over {p.observed_runs} earlier runs), above the "
        f"${limit:.2f} the set may spend ({_limit_words(p)}); select fewer tasks or trials, or give more money."
    )


def _limit_words(p: TrialProjection) -> str:
    parts = []
    if p.budget_usd is not None:
        parts.append(f"--budget-usd ${p.budget_usd:.2f}")
    if p.campaign_available_usd is not None:
        parts.append(f"the campaign's ${p.campaign_available_usd:.2f} above its reserve")
    return "the smaller of " + " and ".join(parts) if len(parts) > 1 else parts[0]


def projection_line(p: TrialProjection) -> str:
    """The one line said before trial 1 (and by a dry run): what K trials would cost."""
    expected = (
        "no expected cost (the campaign has no earlier run to price a task from)"
        if p.expected_usd is None
        else f"expected ${p.expected_usd:.2f} at the campaign's ${p.observed_cost_per_task_usd or 0.0:.2f} per task"
    )
    limit = limit_usd(p)
    room = "" if limit is None else f"; the set may spend ${limit:.2f}"
    over = "" if limit is None or p.worst_case_usd <= limit else " (the worst case is above it: a trial may stop)"
    return (
        f"{p.k} trials of {p.tasks} tasks: {expected}; worst case ${p.worst_case_usd:.2f} at "
        f"--per-task-cost-usd {p.per_task_cap_usd:g}{room}{over}."
    )


def _selected_count(cfg: RunConfig) -> int | None:
    if cfg.selection.task_ids is not None:
        return len(cfg.selection.task_ids)
    try:
        return len(dataset_ids(cfg.bench_root))
    except OSError:
        return None


def _history(record: CampaignRecord) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for run in record.runs[-MAX_HISTORY_RUNS:]:
        if run.outcome == RunOutcome.REFUSED.value:
            continue  # refused before its runner: its selection never ran, so it prices no task
        try:
            selection = read_manifest(Path(run.run_root)).selection
        except (OSError, RecordInvalid, ValueError):
            continue  # a run root moved or unreadable: its spend prices no task
        if selection is not None:
            out.append((run.spent_usd, len(selection.task_ids)))
    return out


def projection_for(cfg: RunConfig, tasks: int | None = None) -> TrialProjection | None:
    """The set's projection, or None for a set that spends nothing (oracle, nop) or whose selection cannot
    be counted here (trial 1's own preflight then refuses it). A campaign that cannot be read is a Refusal."""
    if cfg.spends_nothing or not cfg.money.has_campaign:
        return None
    count = _selected_count(cfg) if tasks is None else tasks
    if count is None:
        return None
    from .spending import peek_campaign

    try:
        record = peek_campaign(cfg.money)
    except (OSError, ValueError) as exc:
        raise Refusal("campaign", f"the campaign {cfg.money.campaign_location()} cannot be read ({exc}).") from None
    money = cfg.money
    reserve = money.budget_reserve_usd
    budget = money.budget_usd
    available: float | None = None
    history: list[tuple[float, int]] = []
    if record is not None:
        reserve = record.reserve_usd if reserve is None else reserve
        budget = record.run_budget_usd if budget is None else budget
        available = record.remaining_usd - (reserve or 0.0)
        history = _history(record)
    elif money.campaign_budget_usd is not None:
        available = money.campaign_budget_usd - (money.prior_spend_usd or 0.0) - (reserve or 0.0)
    return project(
        k=cfg.selection.trials,
        tasks=count,
        per_task_cap_usd=cfg.agent.per_task_cost_usd,
        history=history,
        budget_usd=budget,
        available_usd=None if available is None else max(0.0, available),
    )
