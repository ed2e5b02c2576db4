"""Benchmark `cowork-adapter qualify`: tasks per minute at a concurrency, and the projected time
for the whole benchmark (496 tasks, each run once by oracle and once by nop).

Oracle and nop never start the agent's model (nor the Ouroboros server or mcp-proxy), so a task
costs its containers, preprocess and evaluation. The script runs qualify once on the demo
benchmark with the real daemon (DOCKER_HOST or --docker-host) and reads, per engine run, the
runner's wall time (events runner_started -> runner_exited) and the launch's (manifest created_at
-> finished_at, which adds preflight, clone, inventory, cleanup proof and audit once per run).

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_qualify.py

With --real it runs on the real-benchmark test bed instead (`eval "$(bash testbed/realbench.sh up)"`
sets COWORK_REAL_BENCH, COWORK_REAL_OUROBOROS_SEED, COWORK_REAL_TASKS_FILE, COWORK_REAL_BASE_IMAGE),
over every task of COWORK_REAL_TASKS_FILE unless --task is given, and also prints the count per class
and where a task's time goes. --from-root ROOT only prints the numbers of a finished qualify root.

    eval "$(cat /tmp/rb.env)"; .venv/bin/python benchmarks/bench_qualify.py --real --concurrency 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed
from cowork_adapter.runroot.events import parse_ts

DEFAULT_TASKS = [
    "demo-csv-totals",
    "demo-wrong-answer",
    "demo-crm-postgres",
    "demo-nop-passes",
    "demo-audit-planted",
    "demo-deck-stateful",
]
FULL = 496


def _events(run_root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in (run_root / "events.jsonl").read_text().splitlines():
        if line.strip():
            event = json.loads(line)
            out.setdefault(event["kind"], parse_ts(event["ts"]))
    return out


def _walls(run_root: Path) -> tuple[float, float]:
    events = _events(run_root)
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    runner = events["runner_exited"] - events["runner_started"]
    launch = parse_ts(manifest["finished_at"]) - parse_ts(manifest["created_at"])
    return runner, launch


def _real_argv(args: argparse.Namespace, work: Path) -> tuple[list[str], list[str], Path, str]:
    """qualify's argv on the real test bed, the tasks, the root, and a label for the output."""
    names = ("COWORK_REAL_BENCH", "COWORK_REAL_OUROBOROS_SEED", "COWORK_REAL_TASKS_FILE", "COWORK_REAL_BASE_IMAGE")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise SystemExit(f'--real needs {", ".join(missing)}: run `eval "$(bash testbed/realbench.sh up)"` first')
    tasks_file = Path(os.environ["COWORK_REAL_TASKS_FILE"])
    tasks = args.tasks or [
        line.strip() for line in tasks_file.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    storage = work / "storage"
    storage.mkdir()
    root = storage / "q"
    argv = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "qualify",
        "--repo-dir",
        os.environ["COWORK_REAL_OUROBOROS_SEED"],
        "--bench-root",
        os.environ["COWORK_REAL_BENCH"],
        "--docker-host",
        args.docker_host,
        "--resource-root",
        str(storage),
        "--run-root",
        str(root),
        "--base-image",
        os.environ["COWORK_REAL_BASE_IMAGE"],
        "--build-image",
        "--concurrency",
        str(args.concurrency),
        "--task-timeout",
        "600",
        "--cpus",
        "1",
        "--memory",
        "4g",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
    ]
    return argv, tasks, root, "real test-bed"


def _demo_argv(args: argparse.Namespace, work: Path) -> tuple[list[str], list[str], Path, str]:
    tasks = args.tasks or DEFAULT_TASKS
    bench, seed, storage = work / "bench", work / "seed", work / "storage"
    storage.mkdir()
    commit = materialize_bench(bench)
    make_stub_seed(seed)
    pack, _ = ensure_demo_pack_image(args.docker_host)
    root = storage / "q"
    argv = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "qualify",
        "--repo-dir",
        str(seed),
        "--bench-root",
        str(bench),
        "--bench-commit",
        commit,
        "--docker-host",
        args.docker_host,
        "--resource-root",
        str(storage),
        "--run-root",
        str(root),
        "--base-image",
        pack,
        "--build-image",
        "--concurrency",
        str(args.concurrency),
        "--task-timeout",
        "240",
        "--cpus",
        "1",
        "--memory",
        "2g",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
    ]
    return argv, tasks, root, "demo"


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _per_task(run_root: Path) -> tuple[list[float], list[float]]:
    """Each graded task's wall time as the runner measured it (its summary.csv duration: containers,
    agent phase, evaluator) and its agent phase alone (workspace, preprocess, ground truth placed)."""
    walls, agent = [], []
    for line in (run_root / "result_index.jsonl").read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if (row.get("runner_row") or {}).get("duration_s") is not None:
            walls.append(float(row["runner_row"]["duration_s"]))
        if (row.get("adapter_summary") or {}).get("elapsed_sec") is not None:
            agent.append(float(row["adapter_summary"]["elapsed_sec"]))
    return walls, agent


def _inventory_s(run_root: Path) -> tuple[float, str | None]:
    inventory = json.loads((run_root / "run_manifest.json").read_text()).get("inventory") or {}
    if not inventory.get("started_at"):
        return 0.0, None
    return parse_ts(inventory["finished_at"]) - parse_ts(inventory["started_at"]), inventory.get("reused_from")


def report(root: Path, bed: str) -> None:
    """Print the numbers of a finished qualify root."""
    manifest = json.loads((root / "oracle" / "run_manifest.json").read_text())
    command = manifest.get("official_command") or []  # bash run_parallel.sh <concurrency> <tasks...>
    concurrency = command[2] if len(command) > 2 else "?"
    n = len((manifest.get("selection") or {}).get("selection_task_ids") or [])
    total_runner = total_launch = 0.0
    print(f"qualify over {n} {bed} tasks at concurrency {concurrency} ({root})")
    ran = n
    for engine in ("oracle", "nop"):
        runner, launch = _walls(root / engine)
        total_runner += runner
        total_launch += launch
        inventory, reused = _inventory_s(root / engine)
        walls, agent = _per_task(root / engine)
        ran = len(walls) or n  # environment-blocked tasks never reach the runner: rate over those that did
        print(
            f"  {engine:6s} runner {runner:7.1f} s = {60 * ran / runner:5.2f} tasks/min over {ran} run; "
            f"launch {launch:7.1f} s (fixed costs {launch - runner:5.1f} s, of which inventory "
            + ("reused" if reused else f"{inventory:5.1f} s")
            + ")"
        )
        print(
            f"         per task (median of {len(walls)}): {_median(walls):5.1f} s in the runner, of which the agent "
            f"phase (workspace, preprocess{', ground truth' if engine == 'oracle' else ''}) {_median(agent):5.1f} s; "
            f"the rest is containers, database and the evaluator"
        )
    per_task = total_runner / ran  # both engines' runner time per task that reached the runner
    projected = FULL * per_task + (total_launch - total_runner)
    print(
        f"  both engines: {60 * ran / total_runner:5.2f} tasks/min qualified (oracle + nop); "
        f"qualify took {total_launch / 60:.1f} min"
    )
    print(
        f"  projected for all {FULL} tasks at concurrency {concurrency}: {projected / 3600:.1f} h "
        f"({FULL * 2} task runs; {bed} tasks)"
    )
    counts = json.loads((root / "task_validity.json").read_text())["counts"]
    print("  classes: " + ", ".join(f"{n} {k}" for k, n in counts.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--task", action="append", dest="tasks")
    ap.add_argument("--real", action="store_true", help="the real-benchmark test bed ($COWORK_REAL_*)")
    ap.add_argument("--from-root", type=Path, help="only print the numbers of a finished qualify root")
    args = ap.parse_args()
    if args.from_root:
        report(args.from_root, "real test-bed" if args.real else "selected")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-qualify-"))
    argv, tasks, root, bed = (_real_argv if args.real else _demo_argv)(args, work)
    for task in tasks:
        argv += ["--task", task]
    # No provider key in a reference run's environment.
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=4 * 3600, env=env)
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
        print(f"qualify exited {proc.returncode}; see {root}")
        return 2
    report(root, bed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
