"""Time the full ledger rebuild and the report for a synthetic 496-task run root.

Baseline, measured in the same run on the same files: one plain read + json.load of every
JSON file of the run root (the least any reader must do). Prints both and their ratio; exits 1
if ledger + report take more than 2 s.

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
from cowork_adapter.report.synth import synth_run


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
    total = ledger_s + report_s
    print(f"tasks={args.tasks} files={files}")
    print(f"baseline json.load of every file: {base_s:.3f} s")
    print(f"ledger build+write: {ledger_s:.3f} s; report build+write: {report_s:.3f} s; total {total:.3f} s")
    print(f"ratio total/baseline: {total / base_s:.2f}x (budget {args.budget_s:.1f} s)")
    if total > args.budget_s:
        print("FAIL: ledger + report exceed the budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
