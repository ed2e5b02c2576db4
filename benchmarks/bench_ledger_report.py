"""Time the full ledger rebuild and the report for a synthetic 496-task run root.

Baseline, measured in the same run on the same files: one plain read + json.load of every
JSON file of the run root (the least any reader must do). Prints both and their ratio; exits 1
if ledger + report take more than 2 s.

Also times recovery from that run as an ancestor (printed, not budgeted): the recovery plan
(which rebuilds the ancestor's settled tasks from its dumps and receipts) plus the child's
ledger build with its carried rows, and the child's second build (a live refresh, cached);
and one refresher tick over the unchanged 496-task run.

    .venv/bin/python benchmarks/bench_ledger_report.py [--tasks 496] [--budget-s 2.0]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.ledger import build_index, write_index
from cowork_adapter.report import make_report, write_report

# The synthetic run roots are test support (tests/synthetic_run.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import synthetic_run as synth  # noqa: E402
from synthetic_run import synth_run  # noqa: E402


def baseline(root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    for path in root.rglob("*.json"):
        with open(path, "rb") as fh:
            json.load(fh)
        count += 1
    for path in root.rglob("*.jsonl"):  # events files: every line decoded once
        with open(path, "rb") as fh:
            for line in fh:
                if line.strip():
                    json.loads(line)
        count += 1
    return time.perf_counter() - start, count


def recovery_times(ancestor: Path, child: Path) -> tuple[float, float, float]:
    """(recovery plan, child's first ledger build+write, child's second build) in seconds."""
    from cowork_adapter.ledger import IndexContext
    from cowork_adapter.recovery import resolve_ancestry

    tasks = synth.task_names(len(json.loads((ancestor / "run_manifest.json").read_text())["selection"]["task_ids"]))
    start = time.perf_counter()
    plan = resolve_ancestry([ancestor], current_applied_config=synth.CONFIG, seed_head=synth.SEED_HEAD,
                            bench_commit=synth.BENCH_COMMIT, image_id=synth.IMAGE_ID, explicit_selection=None,
                            dataset_ids=tasks)
    plan_s = time.perf_counter() - start
    synth.write_manifest(child, plan.selection_task_ids, task_ids=plan.remaining, resume_from=plan.ancestors,
                         generation=plan.generation)
    start = time.perf_counter()
    ctx = IndexContext.load(child)
    write_index(child, build_index(child, live=True, interruption_cause="in_progress", ctx=ctx))
    child_s = time.perf_counter() - start
    start = time.perf_counter()
    ctx.refresh()
    build_index(child, live=True, interruption_cause="in_progress", ctx=ctx)
    return plan_s, child_s, time.perf_counter() - start


def refresher_tick(root: Path) -> float:
    """One live refresh of an unchanged run, as the ledger refresher does every ~2 s."""
    from cowork_adapter.ledger import IndexContext

    ctx = IndexContext.load(root)
    build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    start = time.perf_counter()
    ctx.refresh()
    build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=496)
    parser.add_argument("--budget-s", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        synth_run(root, args.tasks)
        base_s, files = baseline(root)
        start = time.perf_counter()
        rows = build_index(root, live=False, interruption_cause="runner_exited")
        write_index(root, rows)
        ledger_s = time.perf_counter() - start
        start = time.perf_counter()
        report = make_report([root], 8)
        write_report(report, root / "report")
        report_s = time.perf_counter() - start
        plan_s, child_s, again_s = recovery_times(root, Path(tmp) / "child")
        tick_s = refresher_tick(root)
    total = ledger_s + report_s
    print(f"tasks={args.tasks} files={files}")
    print(f"baseline json.load of every file: {base_s:.3f} s")
    print(f"ledger build+write: {ledger_s:.3f} s; report build+write: {report_s:.3f} s; total {total:.3f} s")
    print(f"ratio total/baseline: {total / base_s:.2f}x (budget {args.budget_s:.1f} s)")
    print(f"recovery plan: {plan_s:.3f} s; child ledger build+write: {child_s:.3f} s; "
          f"child refresh (cached): {again_s:.3f} s; ratio plan+child/baseline: {(plan_s + child_s) / base_s:.2f}x")
    print(f"refresher tick over the 496-task run with nothing changed (re-list + signatures, cached rows): {tick_s:.3f} s")
    if total > args.budget_s:
        print("FAIL: ledger + report exceed the budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
