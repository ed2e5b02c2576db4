"""Demo scenario `compare`: two configurations with two trials each on the demo bench, compared task by task.

Side A is the stub engine (a paid run against the meter stand-in, one campaign for both trials), side B the
`nop` engine (no model, no money), each `run --trials 2` over the same two tasks: demo-csv-totals (the stub
passes it, nop does nothing and fails it) and demo-wrong-answer (both fail it). Then `report` over side A's
trial set and `compare A --against B`. Checks: both sets exit 0 or 1 with trials.json and two complete trial
run roots each; custody proven for every trial; the campaign records both of A's trials and is settled;
`status` over a set lists its trials and the set's spend, and trials.json keeps its spending projection; the
report's Trials section is pass@1 0.5 with pass^2 0.5 and no changed task; the comparison is over the 2
tasks (only A 1, neither 1), A 50 % vs B 0 %, by the paired permutation test, with the engine difference
disclosed, and writes its three files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..runroot.layout import TRIALS
from ..vocab import ExitCode
from .env import Check, DemoEnv, campaign_checks, custody_checks, read_json, read_rows

TASKS = ["demo-csv-totals", "demo-wrong-answer"]
K = 2
RUN_BOUND_SEC = 1800
COMMAND_BOUND_SEC = 300
# The money flags a reference engine (nop) refuses (config.MONEY_FIELDS): name and whether a value follows.
MONEY_FLAGS = {
    "--campaign-file": True,
    "--new-campaign": False,
    "--campaign-budget-usd": True,
    "--budget-usd": True,
    "--budget-reserve-usd": True,
    "--meter-url": True,
    "--api-key-env": True,
    "--min-key-usd": True,
}


def without_money(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in MONEY_FLAGS:
            skip = MONEY_FLAGS[arg]
        else:
            out.append(arg)
    return out


def _command(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *words], capture_output=True, text=True, timeout=COMMAND_BOUND_SEC
    )


def _set_checks(env: DemoEnv, label: str, folder: Path, code: int) -> list[Check]:
    checks = [Check(f"[{label}] the trial set exits 0 or 1", code in (ExitCode.OK, ExitCode.FAILED), f"exit {code}")]
    record = read_json(folder / TRIALS) if (folder / TRIALS).is_file() else {}
    checks.append(Check(f"[{label}] trials.json names {K} trials", record.get("k") == K, str(record.get("run_roots"))))
    for i in range(1, K + 1):
        root = folder / f"trial-{i}"
        rows = read_rows(root) if root.is_dir() else {}
        checks.append(
            Check(f"[{label}] trial-{i} has a row for every task", set(rows) == set(TASKS), str(sorted(rows)))
        )
        checks += [Check(f"[{label}] trial-{i}: {c.name}", c.ok, c.detail) for c in custody_checks(env, root)]
    status = _command("status", str(folder), "--json")
    doc = json.loads(status.stdout) if status.returncode == 0 else {}
    started = [t.get("started") for t in doc.get("trials", [])]
    checks.append(Check(f"[{label}] status over the set lists {K} started trials", started == [True] * K, str(started)))
    return checks + _projection_checks(label, folder, record, doc)


def _projection_checks(label: str, folder: Path, record: dict, status: dict) -> list[Check]:
    """The spending projection made before trial 1 (run/trial_money.py): the paid side's priced at K x 2 tasks
    (worst case at the default --per-task-cost-usd 25; a new campaign has no expected figure), the nop side's
    none; `status` sums the trials' own monitor.json spend."""
    p = record.get("projection")
    if label == "nop":
        return [Check("[nop] a set that spends nothing records no projection", p is None, str(p))]
    want = {"k": K, "tasks": len(TASKS), "worst_case_usd": K * len(TASKS) * 25.0, "expected_usd": None}
    got = {key: (p or {}).get(key) for key in want}
    spends = [(read_json(folder / f"trial-{i}" / "monitor.json").get("spending") or {}) for i in range(1, K + 1)]
    total = sum(float(s.get("run_spent_usd") or 0.0) for s in spends)
    return [
        Check(f"[{label}] trials.json keeps the projection of {K} x {len(TASKS)} tasks", got == want, str(got)),
        Check(
            f"[{label}] status shows the set's spend, the trials' monitor.json figures summed",
            status.get("spent_usd") == total and status.get("trials_without_spend") == 0,
            f"{status.get('spent_usd')} vs {total}",
        ),
    ]


def scenario_compare(env: DemoEnv) -> list[Check]:
    campaign = "campaign-compare.json"
    side_a, side_b = env.run_root("compare-stub"), env.run_root("compare-nop")
    args_a = env.run_args("compare-stub", TASKS, campaign=campaign) + ["--trials", str(K)]
    code_a = env.launch(args_a, "compare-stub").wait(timeout=RUN_BOUND_SEC)
    args_b = without_money(env.run_args("compare-nop", TASKS, campaign=campaign, extra=["--engine", "nop"]))
    code_b = env.launch(args_b + ["--trials", str(K)], "compare-nop").wait(timeout=RUN_BOUND_SEC)
    checks = _set_checks(env, "stub", side_a, code_a) + _set_checks(env, "nop", side_b, code_b)
    for i in range(1, K + 1):
        checks += [
            Check(f"[stub] trial-{i}: {c.name}", c.ok, c.detail)
            for c in campaign_checks(env, campaign, side_a / f"trial-{i}")
        ]

    report = _command("report", str(side_a), "--json")
    trials = json.loads(report.stdout).get("trials") or {} if report.returncode == 0 else {}
    checks.append(
        Check(
            "[stub] the report over the set: pass@1 0.5 over 2 trials, pass^2 0.5, pass@2 0.5, no changed task",
            trials.get("k") == K
            and trials.get("pass_at_1") == 0.5
            and trials.get("pass_hat_k") == [0.5, 0.5]
            and trials.get("pass_at_k") == [0.5, 0.5]
            and trials.get("changed") == [],
            f"exit {report.returncode}: "
            + json.dumps({k: trials.get(k) for k in ("k", "pass_at_1", "pass_hat_k", "changed")}),
        )
    )

    out = env.root / "comparison"
    done = _command("compare", str(side_a), "--against", str(side_b), "--output-dir", str(out))
    c = read_json(out / "comparison.json") if (out / "comparison.json").is_file() else {}
    o = c.get("overall") or {}
    checks += [
        Check(
            "compare writes comparison.md, .json and .html",
            done.returncode == 0 and (out / "comparison.html").is_file(),
            done.stderr[-300:],
        ),
        Check(
            "the comparison is over both tasks: only A 1, neither 1",
            (o.get("tasks"), o.get("only_a"), o.get("neither"), o.get("only_b"), o.get("both")) == (2, 1, 1, 0, 0),
            json.dumps({k: o.get(k) for k in ("tasks", "both", "only_a", "only_b", "neither")}),
        ),
        Check(
            "A 50 % vs B 0 % by the paired permutation test over trial means",
            (o.get("a_rate"), o.get("b_rate"), o.get("test")) == (0.5, 0.0, "paired_permutation"),
            f"{o.get('a_rate')} vs {o.get('b_rate')}, {o.get('test')} p = {o.get('p_value')}",
        ),
        Check(
            "the engine difference is disclosed",
            any(d.startswith("Allowed difference, disclosed: engine") for d in c.get("disclosures", [])),
            "; ".join(c.get("disclosures", []))[:300],
        ),
    ]
    return checks
