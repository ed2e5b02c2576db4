"""`cowork-adapter compare A... --against B...`: two configurations over the tasks both selected, task by task.

Each side is one configuration: run roots and/or trial-set folders that runroot/trials.py groups into one
trial group. The sides are refused (one sentence, exit 2) when their results cannot be compared task by task:
a different benchmark commit, task trees or evaluator code that differ from the pin differently (replaced
objects, skip-worktree files, substitutes), or no task in common. What differs and is allowed (the model,
the engine, any other applied-configuration key, the seed, the image) is disclosed. The figures are
score/paired.py's (METHODOLOGY.md §compare); like `report`, it is offline and read-only over the run roots and
writes comparison.md, comparison.json and comparison.html only into an --output-dir, never over a file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import Any

from ..errors import Refusal
from ..fileio import create_exclusive
from ..runroot.identity import first_config_difference, normalized_config
from ..runroot.trials import TrialGroup, expand_run_roots
from ..schemas.manifest import RunManifest
from ..score.paired import PairedTask, compare_pairs, solved
from ..score.trials import TaskOutcomes
from ..vocab import ExitCode, TaskStatus
from . import svg
from .build import _task_meta, methodology_location, row_cost, row_duration
from .merge import RunRecord, own_attempts
from .numbers import pct
from .render import CSS, _html_table, _md_table  # one table dialect for report and compare
from .trials import group_outcomes, load_group

STAGE = "compare"
OUTPUT_NAMES = ("comparison.md", "comparison.json", "comparison.html")
COMPARISON_SCHEMA = "cowork_adapter.comparison.v1"
OUTCOME_CLASSES = ("both", "only_a", "only_b", "neither")


class Side:
    """One side: its trial group, each trial's runs, and each task's statuses per trial."""

    def __init__(self, label: str, paths: list[Path]) -> None:
        groups = expand_run_roots(paths)
        if len(groups) != 1:
            raise Refusal(
                STAGE,
                f"Side {label} holds runs of {len(groups)} configurations, and each side of a comparison is one "
                "configuration (its run roots or its trial set).",
            )
        self.label = label
        self.group: TrialGroup = groups[0]
        self.loaded = load_group(self.group)
        self.runs: list[RunRecord] = [run for runs in self.loaded for run in runs]
        if not self.runs:
            raise Refusal(STAGE, f"No trial of side {label} ({self.group.name}) has started: nothing to compare.")
        self.manifest: RunManifest = self.runs[-1].manifest
        tasks, outcomes = group_outcomes(self.group, self.loaded)
        self.tasks = tasks
        self.outcomes: dict[str, TaskOutcomes] = {o.task: o for o in outcomes}

    def mean(self, task: str) -> float:
        o = self.outcomes[task]
        return o.passed / o.n if o.n else 0.0

    def per_task_use(self, task: str) -> tuple[float | None, float | None, int]:
        """(mean known cost, mean duration over this side's own attempts of `task`, attempts of unknown cost)."""
        rows = [r for run in self.runs for r in own_attempts(run) if r.instance_id == task]
        costs = [c for c in (row_cost(r) for r in rows) if c is not None]
        durations = [d for d in (row_duration(r) for r in rows) if d is not None]
        return (
            sum(costs) / len(costs) if costs else None,
            sum(durations) / len(durations) if durations else None,
            len(rows) - len(costs),
        )


def _deviations(m: RunManifest) -> dict[str, Any]:
    """How the side's benchmark files differ from its pin: what changes a task tree or an evaluator."""
    bench = m.bench
    if bench is None:
        return {}
    return {
        "replaced objects": dict(bench.replaced_objects),
        "skip-worktree files": dict(bench.skip_worktree),
        "substitutes": sorted(s.path for s in (m.bench_verified.substitutes if m.bench_verified else [])),
        "runner script": bench.runner_sha256,
    }


def incomparable(a: RunManifest, b: RunManifest) -> str | None:
    """Why the two sides' verdicts cannot be compared task by task, as a clause, or None."""
    ca, cb = (a.bench.commit if a.bench else None), (b.bench.commit if b.bench else None)
    if ca != cb:
        return f"benchmark commit ({ca} on side A, {cb} on side B)"
    da, db = _deviations(a), _deviations(b)
    for what in sorted(da.keys() | db.keys()):
        if da.get(what) != db.get(what):
            return f"the benchmark's {what} (the task trees, runner or evaluator code each side ran)"
    ea = a.bench.evaluator_sha256 if a.bench else {}
    eb = b.bench.evaluator_sha256 if b.bench else {}
    for key in sorted(ea.keys() & eb.keys()):
        if ea[key] != eb[key]:
            return f"evaluator code ({key}: {ea[key][:12]} on side A, {eb[key][:12]} on side B)"
    return None


def allowed_differences(a: RunManifest, b: RunManifest) -> list[str]:
    """Each difference that is allowed and disclosed: applied-configuration keys (the model, the engine...),
    the seed, the image."""
    out = []
    ca, cb = normalized_config(a.applied_config), normalized_config(b.applied_config)
    while (key := first_config_difference(ca, cb)) is not None:
        out.append(f"{key}: {ca.get(key, '<absent>')!r} on side A, {cb.get(key, '<absent>')!r} on side B")
        ca.pop(key, None)
        cb.pop(key, None)
    sa, sb = (a.seed.head if a.seed else None), (b.seed.head if b.seed else None)
    if sa != sb:
        out.append(f"seed head: {sa} on side A, {sb} on side B")
    ia, ib = (a.image.id if a.image else None), (b.image.id if b.image else None)
    if ia != ib:
        out.append(f"image ID: {ia} on side A, {ib} on side B")
    return out


def _outcome_class(a: float, b: float) -> str:
    return {(True, True): "both", (True, False): "only_a", (False, True): "only_b"}.get(
        (solved(a), solved(b)), "neither"
    )


def _figures(pairs: list[PairedTask]) -> dict[str, Any]:
    fig = asdict(compare_pairs(pairs))
    fig["interval95"] = list(fig["interval95"])
    return fig


def _grouped(pairs: list[PairedTask], keys: dict[str, list[str]]) -> list[dict[str, Any]]:
    members: dict[str, list[PairedTask]] = {}
    for p in pairs:
        for key in keys.get(p.task) or ["unknown"]:
            members.setdefault(key, []).append(p)
    return [{"name": name, **_figures(members[name])} for name in sorted(members)]


def verdict(fig: dict[str, Any]) -> str:
    """Which side is better and how sure that is, in one sentence."""
    if fig["difference"] is None:
        return "No task is compared."
    lo, hi = fig["interval95"]
    test = "exact McNemar test" if fig["test"] == "mcnemar_exact" else "paired permutation test"
    p = fig["p_value"]
    if p < 0.05 and (lo > 0 or hi < 0):
        better = "A" if fig["difference"] > 0 else "B"
        return f"Side {better} is better: the difference is unlikely to be chance ({test}, p = {p:.3g} < 0.05)."
    return f"No difference is shown at the 5 % level ({test}, p = {p:.3g}): neither side can be called better."


def make_comparison(a_paths: list[Path], b_paths: list[Path]) -> dict[str, Any]:
    if not a_paths or not b_paths:
        raise Refusal(STAGE, "A comparison needs at least one run root or trial set on each side.")
    a, b = Side("A", a_paths), Side("B", b_paths)
    reason = incomparable(a.manifest, b.manifest)
    if reason is not None:
        raise Refusal(STAGE, f"The two sides differ in {reason}, so their verdicts are not comparable task by task.")
    common = [t for t in a.tasks if t in set(b.tasks)]
    if not common:
        raise Refusal(STAGE, "The two sides selected no task in common, so there is nothing to compare.")
    only_one = (len(a.tasks) - len(common), len(b.tasks) - len(common))
    pairs = [PairedTask(t, a.mean(t), b.mean(t), a.outcomes[t].n, b.outcomes[t].n) for t in common]
    domains, servers = _task_meta(a.runs + b.runs, common)
    overall = _figures(pairs)
    rows: list[dict[str, Any]] = []
    for p in pairs:
        a_cost, a_dur, a_unknown = a.per_task_use(p.task)
        b_cost, b_dur, b_unknown = b.per_task_use(p.task)
        rows.append(
            {
                "instance_id": p.task,
                "domain": domains[p.task][0],
                "mcp_servers": servers[p.task],
                "outcome": _outcome_class(p.a, p.b),
                "a_statuses": [(s or TaskStatus.NOT_ATTEMPTED).value for s in a.outcomes[p.task].statuses],
                "b_statuses": [(s or TaskStatus.NOT_ATTEMPTED).value for s in b.outcomes[p.task].statuses],
                "a_pass_rate": p.a,
                "b_pass_rate": p.b,
                "a_cost_usd": a_cost,
                "b_cost_usd": b_cost,
                "a_duration_s": a_dur,
                "b_duration_s": b_dur,
                "a_unknown_cost_attempts": a_unknown,
                "b_unknown_cost_attempts": b_unknown,
            }
        )
    disclosures = [f"Allowed difference, disclosed: {d}." for d in allowed_differences(a.manifest, b.manifest)]
    if any(only_one):
        disclosures.append(
            f"{only_one[0]} task(s) only side A selected and {only_one[1]} only side B selected are left out; the "
            f"comparison is over the {len(common)} tasks both selected (METHODOLOGY.md §compare)."
        )
    infra = [sum(o.infra for t, o in side.outcomes.items() if t in set(common)) for side in (a, b)]
    disclosures.append(
        "Infrastructure failures count as not passed on both sides (METHODOLOGY.md §trials): "
        f"{infra[0]} task-trial(s) "
        f"on side A, {infra[1]} on side B."
    )
    return {
        "schema": COMPARISON_SCHEMA,
        "methodology": methodology_location(),
        "sides": {
            side.label: {
                "name": side.group.name,
                "trials": side.group.k,
                "trial_set": str(side.group.trial_set) if side.group.trial_set else None,
                "run_roots": [str(r) for r in side.group.roots],
                "engine": side.manifest.engine,
                "model": normalized_config(side.manifest.applied_config).get("model"),
                "mean_cost_per_task_usd": _mean(rows, f"{side.label.lower()}_cost_usd"),
                "mean_duration_per_task_s": _mean(rows, f"{side.label.lower()}_duration_s"),
                "unknown_cost_attempts": sum(int(r[f"{side.label.lower()}_unknown_cost_attempts"]) for r in rows),
            }
            for side in (a, b)
        },
        "bench_commit": a.manifest.bench.commit if a.manifest.bench else None,
        "overall": overall,
        "verdict": verdict(overall),
        "by_domain": _grouped(pairs, domains),
        "by_mcp_server": _grouped(pairs, servers),
        "disclosures": disclosures,
        "tasks": rows,
    }


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    known = [float(r[key]) for r in rows if r[key] is not None]
    return sum(known) / len(known) if known else None


def _pp(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} pp"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.4f}"


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f} s"


def headline(c: dict[str, Any]) -> str:
    o = c["overall"]
    lo, hi = o["interval95"]
    return (
        f"A − B = {_pp(o['difference'])} (paired 95 % interval {_pp(lo)} to {_pp(hi)}) over {o['tasks']} tasks: "
        f"A {pct(o['a_rate'])}, B {pct(o['b_rate'])}"
    )


GROUP_HEAD = ["name", "tasks", "both", "only A", "only B", "neither", "A", "B", "A − B", "95 % interval", "p"]
SIDE_HEAD = ["side", "name", "trials", "engine", "model", "cost per task", "time per task", "unknown-cost attempts"]
TASK_HEAD = ["task", "domain", "outcome", "A trials", "B trials", "A cost", "B cost", "A time", "B time"]


def _group_rows(groups: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            g["name"],
            str(g["tasks"]),
            str(g["both"]),
            str(g["only_a"]),
            str(g["only_b"]),
            str(g["neither"]),
            pct(g["a_rate"]),
            pct(g["b_rate"]),
            _pp(g["difference"]),
            f"{_pp(g['interval95'][0])} to {_pp(g['interval95'][1])}",
            f"{g['p_value']:.3g}",
        ]
        for g in groups
    ]


def _side_rows(c: dict[str, Any]) -> list[list[str]]:
    return [
        [
            label,
            s["name"],
            str(s["trials"]),
            str(s["engine"]),
            str(s["model"]),
            _usd(s["mean_cost_per_task_usd"]),
            _secs(s["mean_duration_per_task_s"]),
            str(s["unknown_cost_attempts"]),
        ]
        for label, s in c["sides"].items()
    ]


def _task_rows(c: dict[str, Any]) -> list[list[str]]:
    return [
        [
            t["instance_id"],
            t["domain"],
            t["outcome"],
            " ".join(t["a_statuses"]),
            " ".join(t["b_statuses"]),
            _usd(t["a_cost_usd"]),
            _usd(t["b_cost_usd"]),
            _secs(t["a_duration_s"]),
            _secs(t["b_duration_s"]),
        ]
        for t in c["tasks"]
    ]


def _overall_rows(c: dict[str, Any]) -> list[list[str]]:
    o = c["overall"]
    return [[k.replace("_", " "), str(o[k])] for k in OUTCOME_CLASSES] + [
        ["test", o["test"]],
        ["p-value", f"{o['p_value']:.4g}"],
    ]


def to_markdown(c: dict[str, Any]) -> str:
    out = ["# Cowork Bench comparison", "", f"**{headline(c)}**", "", c["verdict"], ""]
    out += [f"Read METHODOLOGY.md §compare ({c['methodology']}) before interpreting this comparison.", ""]
    out += [_md_table(SIDE_HEAD, _side_rows(c)), "", _md_table(["per-task outcome", "tasks"], _overall_rows(c)), ""]
    out += ["## Disclosures", ""] + [f"- {d}" for d in c["disclosures"]] + [""]
    out += ["## By domain", "", _md_table(GROUP_HEAD, _group_rows(c["by_domain"])), ""]
    out += ["## By MCP server", "", _md_table(GROUP_HEAD, _group_rows(c["by_mcp_server"])), ""]
    out += ["## Tasks", "", _md_table(TASK_HEAD, _task_rows(c)), ""]
    return "\n".join(out)


def plot(c: dict[str, Any]) -> str:
    labels, values = [], []
    for g in c["by_domain"]:
        labels += [f"A {g['name']}", f"B {g['name']}"]
        values += [g["a_rate"] or 0.0, g["b_rate"] or 0.0]
    return svg.bar_chart(
        "Pass rate by domain, side A and side B",
        labels,
        values,
        x_label="side and task domain",
        y_label="pass rate (% of the domain's task-trials)",
        y_max=1.0,
    )


def to_html(c: dict[str, Any]) -> str:
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Cowork Bench comparison</title><style>{CSS}</style>"
        "</head><body><h1>Cowork Bench comparison</h1>",
        f"<p><strong>{escape(headline(c))}</strong></p><p>{escape(c['verdict'])}</p>",
        f"<p>Read METHODOLOGY.md §compare ({escape(c['methodology'])}) before interpreting this comparison.</p>",
        _html_table(SIDE_HEAD, _side_rows(c)),
        _html_table(["per-task outcome", "tasks"], _overall_rows(c)),
        "<h2>Disclosures</h2><ul>",
        *[f"<li>{escape(d)}</li>" for d in c["disclosures"]],
        "</ul>",
        f"<h2>Plots</h2><div class='plots'>{plot(c)}</div>",
        "<h2>By domain</h2>",
        _html_table(GROUP_HEAD, _group_rows(c["by_domain"])),
        "<h2>By MCP server</h2>",
        _html_table(GROUP_HEAD, _group_rows(c["by_mcp_server"])),
        "<h2>Tasks</h2>",
        _html_table(TASK_HEAD, _task_rows(c)),
        "</body></html>\n",
    ]
    return "".join(parts)


def write_comparison(c: dict[str, Any], output_dir: Path) -> list[Path]:
    existing = [output_dir / n for n in OUTPUT_NAMES if (output_dir / n).exists()]
    if existing:
        raise Refusal(STAGE, f"{existing[0]} already exists, and a comparison never overwrites one.")
    output_dir.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(c, indent=2, allow_nan=False) + "\n"
    outputs = {"comparison.md": to_markdown(c), "comparison.json": payload, "comparison.html": to_html(c)}
    for name in OUTPUT_NAMES:
        create_exclusive(output_dir / name, outputs[name])  # exclusive: never over a file that appeared since
    return [output_dir / n for n in OUTPUT_NAMES]


def run_compare_command(a: list[Path], b: list[Path], output_dir: Path | None, as_json: bool) -> int:
    """Build the comparison; write its files only into `output_dir`. Returns an exit code (0, or 2 refused)."""
    try:
        c = make_comparison(a, b)
        paths = write_comparison(c, output_dir) if output_dir is not None else []
    except Refusal as refusal:
        print(f"cowork-adapter compare refused ({refusal.stage}): {refusal.sentence}", file=sys.stderr)
        return int(ExitCode.REFUSED)
    if as_json:
        sys.stdout.write(json.dumps(c, indent=2, allow_nan=False) + "\n")
    elif not paths:
        sys.stdout.write(to_markdown(c))
    else:
        print(headline(c))
        print(c["verdict"])
        print("wrote " + ", ".join(str(p) for p in paths))
    return int(ExitCode.OK)
