"""Time the ledger and the documented `report` and `status` commands on a synthetic 496-task run root.

No ratio against a baseline: every figure is an absolute time. The commands run as a user runs
them, as subprocesses (`cowork-adapter report RUN --output-dir DIR`, `cowork-adapter status RUN`),
so the CLI's interpreter start-up and imports are included; `cowork-adapter version` is timed the
same way as the start-up floor every command pays. Each command runs --repeat times (a fresh
output folder per report), alternating, and min / median / max are printed. With --budget-s,
exit 1 when the report command's median exceeds it.

Also timed in-process (printed, not budgeted): the ledger build+write the launcher does at the end
of a run; recovery from that run as an ancestor (the recovery plan, which rebuilds the ancestor's
settled tasks from its dumps and receipts, plus the child's first ledger build with its carried
rows, and the child's second build, a live refresh, cached); one refresher tick over the unchanged
run.

    .venv/bin/python benchmarks/bench_ledger_report.py [--tasks 496] [--repeat 5] [--budget-s S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.score.ledger import build_index, write_index

# The synthetic run roots are test support (tests/synthetic_run.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import synthetic_run as synth  # noqa: E402
from synthetic_run import synth_run  # noqa: E402


def cli() -> list[str]:
    """The installed console script beside this interpreter (what a user runs), else python -m."""
    script = Path(sys.executable).with_name("cowork-adapter")
    found = str(script) if script.is_file() else shutil.which("cowork-adapter")
    return [found] if found else [sys.executable, "-m", "cowork_adapter"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f} s"


def recovery_times(ancestor: Path, child: Path) -> tuple[float, float, float]:
    """(recovery plan, child's first ledger build+write, child's second build) in seconds."""
    from cowork_adapter.run.recovery import resolve_ancestry
    from cowork_adapter.score.context import IndexContext

    tasks = synth.task_names(len(json.loads((ancestor / "run_manifest.json").read_text())["selection"]["task_ids"]))
    start = time.perf_counter()
    plan = resolve_ancestry(
        [ancestor],
        current_applied_config=synth.CONFIG,
        seed_head=synth.SEED_HEAD,
        bench_commit=synth.BENCH_COMMIT,
        image_id=synth.IMAGE_ID,
        explicit_selection=None,
        dataset_ids=tasks,
    )
    plan_s = time.perf_counter() - start
    synth.write_manifest(
        child, plan.selection_task_ids, task_ids=plan.remaining, resume_from=plan.ancestors, generation=plan.generation
    )
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
    from cowork_adapter.score.context import IndexContext

    ctx = IndexContext.load(root)
    build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    start = time.perf_counter()
    ctx.refresh()
    build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=496)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=None, help="optional limit on the report command's median")
    args = parser.parse_args()
    command = cli()
    times: dict[str, list[float]] = {"version": [], "status": [], "report": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        synth_run(root, args.tasks)
        start = time.perf_counter()
        write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
        ledger_s = time.perf_counter() - start
        for i in range(args.repeat):
            order = ["version", "status", "report"]
            shift = i % len(order)
            for name in order[shift:] + order[:shift]:
                argv = {
                    "version": [*command, "version"],
                    "status": [*command, "status", str(root)],
                    "report": [*command, "report", str(root), "--output-dir", str(Path(tmp) / f"report-{i}")],
                }[name]
                times[name].append(timed(argv))
        plan_s, child_s, again_s = recovery_times(root, Path(tmp) / "child")
        tick_s = refresher_tick(root)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")
    print(
        f"tasks={args.tasks}; {args.repeat} runs of each command, alternating; min / median / max; "
        f"command: {' '.join(command)}"
    )
    print(f"  {'version':<44}{spread(times['version'])}   (start-up floor of every command)")
    print(f"  {'status RUN':<44}{spread(times['status'])}")
    print(f"  {'report RUN --output-dir DIR':<44}{spread(times['report'])}   (md, json, html)")
    print("in-process, once:")
    print(f"  ledger build+write at the end of a run      {ledger_s:.3f} s")
    print(
        f"  recovery plan {plan_s:.3f} s; child ledger build+write {child_s:.3f} s; "
        f"child refresh (cached) {again_s:.3f} s"
    )
    print(f"  refresher tick over the unchanged run (re-list + signatures, cached rows) {tick_s:.3f} s")
    if args.budget_s is not None and statistics.median(times["report"]) > args.budget_s:
        print(f"FAIL: the report command's median exceeds {args.budget_s:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
