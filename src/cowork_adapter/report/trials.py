"""The report's Trials section over a trial group (runroot/trials.py): pass@1 over trials with its interval,
pass^k and pass@k for every k up to K, each trial's own pass@1, and the tasks whose outcome changed
(score/trials.py holds the estimators; METHODOLOGY.md §trials says how to read them)."""

from __future__ import annotations

from html import escape
from typing import Any

from ..errors import Refusal
from ..runroot.trials import TrialGroup, same_identity
from ..score.trials import TaskOutcomes, trial_figures
from ..vocab import TaskStatus
from . import svg
from .build import FULL_DATASET, build_report, row_cost, row_duration
from .merge import RunRecord, denominator, load_runs, merge_rows, own_attempts
from .numbers import pct
from .stats import project_full_run

STAGE = "report"
INTERVAL_METHOD = (
    "Wilson 95 % interval at Kish's effective sample size, tasks as clusters of their trials (METHODOLOGY.md §trials)"
)


def load_group(group: TrialGroup) -> list[list[RunRecord]]:
    """Each trial's runs with their ancestry (empty for a trial not started); refuses trials of different
    configurations (a trial set's trials are one configuration by construction: a hand-edited one is not)."""
    loaded = [load_runs(list(trial.shards)) if trial.shards else [] for trial in group.trials]
    firsts = [runs[-1] for runs in loaded if runs]
    for run in firsts[1:]:
        diff = same_identity(run.manifest, firsts[0].manifest)
        if diff is not None:
            raise Refusal(
                STAGE,
                f"Trial run {run.root} differs in {diff} from {firsts[0].root}, and trials of different "
                "configurations are never combined.",
            )
    return loaded


def group_outcomes(group: TrialGroup, loaded: list[list[RunRecord]]) -> tuple[list[str], list[TaskOutcomes]]:
    """(the tasks, in first-selected order, and each task's status per trial: None where the trial has no row,
    or has not started). The tasks are every trial's selection: a trial answers for each (§denominator)."""
    tasks: dict[str, None] = {}
    merged = []
    for runs in loaded:
        for task in denominator(runs) if runs else []:
            tasks.setdefault(task, None)
        merged.append({task: m.row.status for task, m in merge_rows(runs).items()} if runs else {})
    outcomes = [TaskOutcomes(task, tuple(rows.get(task) for rows in merged)) for task in tasks]
    return list(tasks), outcomes


def _status_count(outcomes: list[TaskOutcomes], trial: int, status: TaskStatus) -> int:
    return sum(1 for o in outcomes if (o.statuses[trial] or TaskStatus.NOT_ATTEMPTED) is status)


def trials_section(group: TrialGroup, loaded: list[list[RunRecord]]) -> dict[str, Any]:
    tasks, outcomes = group_outcomes(group, loaded)
    fig = trial_figures(outcomes)
    trials = []
    for i, (trial, runs) in enumerate(zip(group.trials, loaded, strict=True)):
        trials.append(
            {
                "name": trial.name,
                "run_roots": [str(p) for p in trial.shards],
                "started": bool(runs),
                "passed": _status_count(outcomes, i, TaskStatus.PASSED),
                "infra_failed": _status_count(outcomes, i, TaskStatus.INFRA_FAILED),
                "not_attempted": _status_count(outcomes, i, TaskStatus.NOT_ATTEMPTED),
                "pass_at_1": fig.per_trial_pass_at_1[i] if i < len(fig.per_trial_pass_at_1) else None,
                "run_spent_usd": _spent(runs),
            }
        )
    return {
        "k": group.k,
        "trial_set": str(group.trial_set) if group.trial_set else None,
        "tasks": len(tasks),
        "task_trials": fig.task_trials,
        "pass_at_1": fig.pass_at_1,
        "interval95": list(fig.interval95),
        "interval_method": INTERVAL_METHOD,
        "effective_n": fig.effective_n,
        "pass_hat_k": list(fig.pass_hat_k),
        "pass_at_k": list(fig.pass_at_k),
        "infra_failed_task_trials": fig.infra_failed,
        "changed": list(fig.changed),
        "changed_by_infra": list(fig.changed_by_infra),
        "not_started": [t["name"] for t in trials if not t["started"]],
        "trials": trials,
        "per_task": [
            {
                "instance_id": f.task,
                "trials": f.trials,
                "passed": f.passed,
                "infra_failed": f.infra_failed,
                "pass_rate": f.pass_rate,
                "pass_hat_k": list(f.pass_hat),
                "pass_at_k": list(f.pass_at),
                "changed": f.changed,
                "statuses": [(s or TaskStatus.NOT_ATTEMPTED).value for s in o.statuses],
            }
            for f, o in zip(fig.per_task, [o for o in outcomes if o.n > 0], strict=True)
        ],
    }


def _money(group: TrialGroup, loaded: list[list[RunRecord]], concurrency: int) -> dict[str, Any]:
    """Every trial's spend and the projection of K trials of the full dataset from all trials' attempts (the
    report's own projection below is trial 1's)."""
    attempts = [row for runs in loaded for run in runs for row in own_attempts(run)]
    costs = [c for c in (row_cost(r) for r in attempts) if c is not None]
    durations = [d for d in (row_duration(r) for r in attempts) if d is not None]
    spends = [_spent(runs) for runs in loaded if runs]
    return {
        "meter_spent_usd": sum(v for v in spends if v is not None) if any(v is not None for v in spends) else None,
        "trials_without_reading": sum(1 for v in spends if v is None),
        "projection": project_full_run(costs, durations, tasks=FULL_DATASET * group.k, concurrency=concurrency),
    }


def _money_line(section: dict[str, Any]) -> str | None:
    money = section.get("money")
    if not money:
        return None
    p = money["projection"]
    spent = "n/a" if money["meter_spent_usd"] is None else f"${money['meter_spent_usd']:,.2f}"
    cost = "n/a" if p["projected_cost_usd"] is None else f"${p['projected_cost_usd']:,.2f}"
    p90 = "n/a" if p["projected_cost_p90_usd"] is None else f"${p['projected_cost_p90_usd']:,.2f}"
    return (
        f"All {section['k']} trials: key-meter spend {spent}"
        + (
            f" ({money['trials_without_reading']} trial(s) without a reading)"
            if money["trials_without_reading"]
            else ""
        )
        + f"; {section['k']} trials of all {p['tasks'] // section['k']} tasks project to {cost} (p90 {p90}) from "
        f"{p['cost_samples']} attempts of known cost."
    )


def _spent(runs: list[RunRecord]) -> float | None:
    known = [v for v in (r.run_spent_usd() for r in runs) if v is not None]
    return sum(known) if known else None


def trial_report(group: TrialGroup, concurrency: int) -> dict[str, Any]:
    """The report over a trial group: the usual report of its first started trial, with the Trials section
    over all of them and its headline."""
    loaded = load_group(group)
    started = [(trial.name, runs) for trial, runs in zip(group.trials, loaded, strict=True) if runs]
    if not started:
        raise Refusal(STAGE, f"No trial of {group.name} has started, so there is nothing to report.")
    report = build_report(started[0][1], concurrency=concurrency)
    section = trials_section(group, loaded)
    section["money"] = _money(group, loaded, concurrency)
    report["trials"] = section
    report["disclosures"].append(f"{trials_disclosure(section, started[0][0])} (METHODOLOGY.md §trials)")
    return report


def trials_disclosure(section: dict[str, Any], described: str) -> str:
    k, infra = section["k"], section["infra_failed_task_trials"]
    text = (
        f"The figures are over {k} trials of {section['tasks']} tasks; the sections after the Trials section "
        f"describe {described} alone. Each trial's rows follow the denominator rules: "
        f"{infra} task-trial{'' if infra == 1 else 's'} ended infra_failed and count as not passed in every figure"
    )
    if section["changed_by_infra"]:
        text += f", and {len(section['changed_by_infra'])} of the changed tasks changed only through them"
    if section["not_started"]:
        text += f"; {', '.join(section['not_started'])} never started, so every task counts as not passed there"
    return text + "."


def trials_headline(section: dict[str, Any]) -> str:
    lo, hi = section["interval95"]
    return (
        f"pass@1 over {section['k']} trials = {pct(section['pass_at_1'])} (95 % interval {pct(lo)} – {pct(hi)}, "
        f"{section['tasks']} tasks)"
    )


def _k_rows(section: dict[str, Any]) -> list[list[str]]:
    return [
        [str(k + 1), pct(hat), pct(at)]
        for k, (hat, at) in enumerate(zip(section["pass_hat_k"], section["pass_at_k"], strict=True))
    ]


def _trial_rows(section: dict[str, Any]) -> list[list[str]]:
    return [
        [
            t["name"],
            pct(t["pass_at_1"]),
            str(t["passed"]),
            str(t["infra_failed"]),
            str(t["not_attempted"]),
            ", ".join(t["run_roots"]) or "not started",
        ]
        for t in section["trials"]
    ]


def _changed_rows(section: dict[str, Any]) -> list[list[str]]:
    return [
        [t["instance_id"], " ".join(t["statuses"]), pct(t["pass_rate"])] for t in section["per_task"] if t["changed"]
    ]


K_HEAD = ["k", "pass^k (all k passed)", "pass@k (at least one of k passed)"]
TRIAL_HEAD = ["trial", "pass@1", "passed", "infra_failed", "not attempted", "run roots"]
CHANGED_HEAD = ["task", "status per trial", "pass rate"]


def trials_markdown(section: dict[str, Any], table: Any) -> list[str]:
    """The section's Markdown lines; `table(head, rows)` is render.py's table writer."""
    out = ["## Trials", "", f"**{trials_headline(section)}**", "", section["interval_method"] + ".", ""]
    out += [line, ""] if (line := _money_line(section)) else []
    out += [table(K_HEAD, _k_rows(section)), "", table(TRIAL_HEAD, _trial_rows(section)), ""]
    changed = _changed_rows(section)
    out += [f"{len(changed)} task{'' if len(changed) == 1 else 's'} changed outcome between trials.", ""]
    if changed:
        out += [table(CHANGED_HEAD, changed), ""]
    return out


def trials_plot(section: dict[str, Any]) -> str:
    ks = [str(k + 1) for k in range(len(section["pass_hat_k"]))]
    return svg.bar_chart(
        "pass^k and pass@k by k",
        [f"pass^{k}" for k in ks] + [f"pass@{k}" for k in ks],
        list(section["pass_hat_k"]) + list(section["pass_at_k"]),
        x_label="estimator and k (trials drawn)",
        y_label="share of tasks (%)",
        y_max=1.0,
    )


def trials_html(section: dict[str, Any], table: Any) -> list[str]:
    changed = _changed_rows(section)
    parts = [
        "<h2>Trials</h2>",
        f"<p><strong>{escape(trials_headline(section))}</strong></p>",
        f"<p>{escape(section['interval_method'])}.</p>",
        *([f"<p>{escape(line)}</p>"] if (line := _money_line(section)) else []),
        table(K_HEAD, _k_rows(section)),
        table(TRIAL_HEAD, _trial_rows(section)),
        f"<div class='plots'>{trials_plot(section)}</div>",
        f"<p>{len(changed)} task{'' if len(changed) == 1 else 's'} changed outcome between trials.</p>",
    ]
    if changed:
        parts.append(table(CHANGED_HEAD, changed))
    return parts
