"""Benchmark `cowork-adapter export --format inspect` against `cowork-adapter audit` on the same run.

The run root is the audit benchmark's (benchmarks/bench_audit.py `synthesise`: 496 tasks, about
--size of Ouroboros logs drawn afresh), made a whole run for the report and the export: a typed
manifest (tests/synthetic_run.py) and a typed ledger row per task (two passed in three, each with its
usage). Both commands run as child processes, interpreter start-up and imports included, --repeat
times each, alternating (so both see the same machine weather), the page cache warmed first. Prints
both times side by side (min / median / max), their CPU (user + sys, worker processes included), the
ratio export / audit per pair (min / median / max; the target is a median below 1), the log's size,
and checks the log: 496 samples, read back with inspect_ai.

    .venv/bin/python benchmarks/bench_export.py [--size 256M] [--repeat 3] [--root DIR] [--keep]

Exit 1 when the target is missed, 2 on a wrong result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_audit import TASKS, _log_files, _size_mib, _spread, synthesise  # noqa: E402  (this folder)
from synthetic_run import write_manifest  # noqa: E402  (test support, not shipped)

from cowork_adapter.schemas.ledger import OfficialReceipt, TaskRow, UsageFacts  # noqa: E402


def make_whole_run(root: Path) -> list[str]:
    """The audit benchmark's run root given the typed manifest and ledger the report reads."""
    rows = [json.loads(line) for line in (root / "result_index.jsonl").read_text().splitlines() if line.strip()]
    tasks = [r["instance_id"] for r in rows]
    write_manifest(root, tasks)
    typed = []
    for i, r in enumerate(rows):
        passed = i % 3 != 0
        typed.append(
            TaskRow(
                ts="2026-01-01T00:00:00Z",
                instance_id=r["instance_id"],
                status="passed" if passed else "failed",
                reason_code="passed" if passed else "verifier_failed",
                official_eval_status="completed",
                official_receipt=OfficialReceipt(pass_=passed, cause="evaluated"),
                usage=UsageFacts(
                    records=40,
                    token_records=40,
                    prompt_tokens=40_000 + i,
                    completion_tokens=4_000 + i,
                    known_cost_usd=0.4,
                ),
                task_dump=str(root / r["task_dump"]),
                attempt_run_root=str(root),
                tampering=[],
            ).to_line()
        )
    (root / "result_index.jsonl").write_text("".join(typed))
    return tasks


def _timed(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child and its waited-for children, exit code, stderr tail)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=_size_mib, default=256.0, help="agent logs to write: 256M, 1G... (default 256M)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each command, alternating")
    parser.add_argument("--root", type=Path, default=None, help="synthesise into this folder once and reuse it (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    command = shutil.which("cowork-adapter", path=str(Path(sys.executable).parent))
    if command is None:
        parser.error("the cowork-adapter command is not installed (bash scripts/install.sh)")
    base = Path(tempfile.mkdtemp(prefix="bench-export-", dir=os.environ.get("BENCH_TMPDIR")))
    try:
        root = base / "run" if args.root is None else args.root
        facts_path = root / "bench_export_facts.json"
        if facts_path.is_file():
            facts = json.loads(facts_path.read_text())
            print(f"reusing {root}: {facts['bytes'] / (1 << 20):.1f} MiB of logs")
        else:
            root.mkdir(parents=True)
            t0 = time.perf_counter()
            facts = synthesise(root, args.size)
            make_whole_run(root)
            facts_path.write_text(json.dumps(facts))
            print(
                f"synthesised {facts['bytes'] / (1 << 20):.1f} MiB of logs for {TASKS} tasks in "
                f"{time.perf_counter() - t0:.1f}s under {root}"
            )
        subprocess.run(["cat", *_log_files(root)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        package = importlib.util.find_spec("cowork_adapter").submodule_search_locations[0]
        subprocess.run([sys.executable, "-m", "compileall", "-q", package], stdout=subprocess.DEVNULL, check=True)
        audits, exports, audit_cpu, export_cpu, sizes = [], [], [], [], []
        for run in range(args.repeat):
            order = ["audit", "export"] if run % 2 == 0 else ["export", "audit"]
            for name in order:
                if name == "audit":
                    report = base / f"audit-{run}.json"
                    wall, cpu, code, err = _timed([command, "audit", "--run-dir", str(root), "--output", str(report)])
                    report.unlink(missing_ok=True)
                    audits.append(wall)
                    audit_cpu.append(cpu)
                else:
                    out = base / f"logs-{run}"
                    wall, cpu, code, err = _timed(
                        [command, "export", str(root), "--format", "inspect", "--output-dir", str(out)]
                    )
                    exports.append(wall)
                    export_cpu.append(cpu)
                    if code == 0:
                        logs = list(out.glob("*.eval"))
                        sizes.append(sum(p.stat().st_size for p in logs))
                        if run == 0 and not _check(logs):
                            return 2
                        shutil.rmtree(out)
                if code != 0:
                    print(f"{name} exited {code}: {err}", file=sys.stderr)
                    return 2
        ratios = [e / a for e, a in zip(exports, audits, strict=True)]
        mib = facts["bytes"] / (1 << 20)
        print(
            f"{'':30s}   min   / median  /   max   ({args.repeat} alternating runs each, {mib:.0f} MiB of logs, "
            f"{TASKS} tasks)"
        )
        print(f"{'cowork-adapter audit (s)':30s}{_spread(audits)}")
        print(f"{'cowork-adapter export (s)':30s}{_spread(exports)}")
        print(f"{'audit CPU incl. workers (s)':30s}{_spread(audit_cpu)}")
        print(f"{'export CPU incl. workers (s)':30s}{_spread(export_cpu)}")
        print(f"{'ratio export / audit time':30s}{_spread(ratios)}   target: median < 1")
        print(
            f"the .eval log: {statistics.median(sizes) / (1 << 20):.1f} MiB; load average {os.getloadavg()[0]:.2f} "
            f"on {os.cpu_count()} CPUs"
        )
        if statistics.median(ratios) >= 1:
            print("target missed: the export took longer than the audit")
            return 1
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def _check(logs: list[Path]) -> bool:
    """The log reads back with inspect_ai: one per run, a sample per task."""
    from inspect_ai.log import read_eval_log

    if len(logs) != 1:
        print(f"expected one .eval, found {len(logs)}", file=sys.stderr)
        return False
    header = read_eval_log(str(logs[0]), header_only=True)
    if header.results is None or header.results.total_samples != TASKS or header.eval.dataset.samples != TASKS:
        print(f"the log does not hold {TASKS} samples", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
