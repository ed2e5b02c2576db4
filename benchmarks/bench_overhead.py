"""Benchmark the adapter's overhead on the same engine, alternated with the demo runner run bare.

On the demo benchmark and the real daemon (DOCKER_HOST or --docker-host), for --pairs pairs:

  bare      `bash run_parallel.sh 1 TASKS` in a materialized bench with the demo pack image and
            the bench's own main.py engine (like tests/integration/test_demo_bench_bare.py);
  adapter   `cowork-adapter run --engine upstream:main.py` on the same tasks: the bare runner's own
            engine under the adapter's whole custody (entrypoint wrapper, docker shim, limits,
            meter stand-in, ledger), a fresh campaign per launch;
  custody   (with --custody) the same bare runner with only the adapter's docker shim and BASH_ENV
            installed (custody.bash_env.install_custody), plus the shim's cost per docker call.

The order inside a pair alternates (bare first, then adapter first, ...) so a drift of the shared
machine falls on both. Printed, as min / median / max over the pairs:

  runner ratio   adapter's runner wall time (runner_started → runner_exited in events.jsonl)
                 / the bare runner's wall time, per pair: the adapter's overhead per task;
  fixed costs    per launch, in seconds, not spread over tasks: before the runner (preflight,
                 clone, image resolve, meter, custody) and after it (cleanup proof, final
                 reading, ledger, audit), and the whole launch;
  custody ratio  (with --custody) custody runner wall / bare runner wall.

Limits: adapter and custody runs use --cpus (default: every CPU) and --memory (default 8g), so
the limits themselves do not throttle the comparison. Exit 2 when a run went wrong.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_overhead.py --pairs 3
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.docker_ops import cleanup_run, label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.env import prepare
from cowork_adapter.runroot.events import parse_ts

DEFAULT_TASKS = ["demo-csv-totals", "demo-crm-postgres", "demo-deck-stateful"]
TASK_TIMEOUT_S = 240
RUN_TIMEOUT_S = 1800


def summary_rows(bench: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in (bench / "benchmark_logs").glob("fully_parallel_*/summary.csv"):
        with path.open(newline="") as fh:
            rows.update({row["task"]: row for row in csv.DictReader(fh)})
    return rows


def bare_env(image_id: str, tmpdir: Path, docker_host: str) -> dict[str, str]:
    """The bare runner's environment: phase split, the bench's own engine, nothing of the adapter."""
    env = {k: v for k, v in os.environ.items() if k != "BASH_ENV"}
    env.update(
        DOCKER_HOST=docker_host,
        IMAGE=image_id,
        AGENT_PHASE_AWARE="1",
        ENTRY="main.py",
        MODEL_NAME="demo",
        MODEL_PROVIDER="demo",
        TASK_TIMEOUT=str(TASK_TIMEOUT_S),
        TMPDIR=str(tmpdir),
    )
    return env


def run_runner(bench: Path, tasks: list[str], env: dict[str, str], log: Path) -> float:
    """`bash run_parallel.sh 1 TASKS`; returns its wall time in seconds."""
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.run(
            ["bash", "run_parallel.sh", "1", *tasks],
            cwd=bench,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"runner in {bench} exited {proc.returncode}; see {log}")
    return wall


def bare_round(work: Path, name: str, tasks: list[str], image_id: str, docker_host: str) -> dict:
    bench = work / name / "bench"
    materialize_bench(bench)
    tmp = work / name / "tmp"
    tmp.mkdir()
    wall = run_runner(bench, tasks, bare_env(image_id, tmp, docker_host), work / name / "runner.log")
    return {"name": name, "wall": wall, "rows": summary_rows(bench)}


def custody_round(work: Path, name: str, tasks: list[str], image_id: str, docker_host: str, limits: dict) -> dict:
    root = work / name
    bench = root / "bench"
    materialize_bench(bench)
    label = run_label(root)
    custody = install_custody(
        root,
        real_docker=shutil.which("docker") or "",
        docker_host=docker_host,
        run_label=label,
        limits=limits,
        stop_file=root / "custody" / "stop",
        resource_root=work,
        min_free_bytes=1 << 30,
        evidence_dir=root / "custody" / "evidence",
        agent_env_file=None,
        environ={k: v for k, v in os.environ.items() if k != "BASH_ENV"},
    )
    env = custody.environment(bare_env(image_id, custody.tmpdir, docker_host))
    try:
        wall = run_runner(bench, tasks, env, root / "runner.log")
    finally:
        report = cleanup_run(docker_host, label, lambda entry: None)  # proves the label is empty
    leftovers = len(report.removed_containers) + len(report.removed_networks)
    return {
        "name": name,
        "wall": wall,
        "rows": summary_rows(bench),
        "leftovers": leftovers,
        "wrapper": custody.wrapper,
        "empty": label_is_empty(docker_host, label),
    }


def adapter_round(env, name: str, tasks: list[str], cpus: float, memory: str, engine: str = "upstream:main.py") -> dict:
    """One `cowork-adapter run`; engine "upstream:main.py" runs the bare runner's own engine under the
    adapter's whole custody, so its ratio to the bare runner is the adapter's overhead alone."""
    extra = [
        "--concurrency",
        "1",
        "--cpus",
        f"{cpus:g}",
        "--memory",
        memory,
        "--task-timeout",
        str(TASK_TIMEOUT_S),
        "--engine",
        engine,
    ]
    args = env.run_args(name, tasks, campaign=f"campaign-{name}.json", extra=extra)
    started_wall, started = time.time(), time.monotonic()
    proc = env.launch(args, name)
    code = proc.wait(timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - started
    run_root = env.run_root(name)
    events = [json.loads(line) for line in (run_root / "events.jsonl").read_text().splitlines() if line.strip()]
    first = {}
    for event in events:
        first.setdefault(event.get("kind"), parse_ts(event.get("ts")))
    runner_start, runner_end = first.get("runner_started"), first.get("runner_exited")
    if code != 0 or runner_start is None or runner_end is None:
        raise RuntimeError(f"the adapter run exited {code}; see {run_root}")
    return {
        "name": name,
        "wall": wall,
        "rows": summary_rows(run_root / "bench"),
        "exit": code,
        "runner_wall": runner_end - runner_start,
        "before_runner": runner_start - started_wall,
        "after_runner": started_wall + wall - runner_end,
    }


def shim_call_cost(wrapper: Path, docker_host: str, image_id: str, n: int = 12) -> tuple[float, float]:
    """Seconds the shim adds to one pass-through call and to one creation (median of n pairs each).

    Alternates real and shim calls so drift falls on both; creations are removed right away.
    """
    import secrets
    import statistics

    real = shutil.which("docker") or "docker"
    env = {**os.environ, "DOCKER_HOST": docker_host}
    env.pop("BASH_ENV", None)

    def timed(argv: list[str]) -> float:
        started = time.monotonic()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=True)
        return time.monotonic() - started

    passthrough, creation = [], []
    for _ in range(n):
        version = ["version", "--format", "{{.Server.Version}}"]
        passthrough.append(timed([str(wrapper), *version]) - timed([real, *version]))
        deltas = []
        for docker in (str(wrapper), real):
            name = f"cowork-bench-overhead-{secrets.token_hex(4)}"
            deltas.append(timed([docker, "create", "--name", name, image_id, "true"]))
            subprocess.run([real, "rm", "-f", name], env=env, capture_output=True, timeout=60)
        creation.append(deltas[0] - deltas[1])
    return statistics.median(passthrough), statistics.median(creation)


def durations(result: dict) -> dict[str, int]:
    return {task: int(row["duration_s"]) for task, row in result["rows"].items()}


def spread(values: list[float], fmt: str = "7.3f") -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    parser.add_argument("--task", action="append", dest="tasks", help="task id (repeatable)")
    parser.add_argument("--pairs", type=int, default=3, help="bare/adapter pairs (alternating order)")
    parser.add_argument("--custody", action="store_true", help="add a custody-only round to every pair")
    parser.add_argument("--cpus", type=float, default=float(os.cpu_count() or 1))
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if not args.docker_host or args.pairs < 1:
        print("bench_overhead: pass --docker-host (or set DOCKER_HOST) and --pairs of at least 1", file=sys.stderr)
        return 2
    tasks = args.tasks or DEFAULT_TASKS
    work = Path(tempfile.mkdtemp(prefix="cowork-bench-overhead-"))
    from cowork_adapter.config import parse_docker_size

    memory_bytes = parse_docker_size(args.memory)
    limits = {"cpus": args.cpus, "memory_bytes": memory_bytes, "memory_swap_bytes": memory_bytes, "pids_limit": 512}
    env = prepare(work / "demo", args.docker_host)
    image_id = __import__("docker").DockerClient(base_url=args.docker_host, timeout=60).images.get(env.pack_tag).id
    bares, adapters, custodies = [], [], []
    try:
        print(
            f"tasks {tasks}; {args.pairs} pairs; limits cpus={args.cpus:g} memory={args.memory}; work {work}",
            flush=True,
        )
        for i in range(args.pairs):
            kinds = ["bare", "adapter"] + (["custody"] if args.custody else [])
            shift = i % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                if kind == "bare":
                    bares.append(bare_round(work, f"bare-{i}", tasks, image_id, args.docker_host))
                    print(f"pair {i}: bare runner {bares[-1]['wall']:.1f} s", flush=True)
                elif kind == "adapter":
                    adapters.append(adapter_round(env, f"adapter-{i}", tasks, args.cpus, args.memory))
                    a = adapters[-1]
                    print(
                        f"pair {i}: adapter launch {a['wall']:.1f} s (runner {a['runner_wall']:.1f} s, "
                        f"before {a['before_runner']:.1f} s, after {a['after_runner']:.1f} s)",
                        flush=True,
                    )
                else:
                    custodies.append(custody_round(work, f"custody-{i}", tasks, image_id, args.docker_host, limits))
                    print(f"pair {i}: custody runner {custodies[-1]['wall']:.1f} s", flush=True)
        per_call = per_create = None
        if custodies:
            per_call, per_create = shim_call_cost(custodies[-1]["wrapper"], args.docker_host, image_id)
    finally:
        env.meter.stop()
    for result in bares + custodies + adapters:
        if set(result["rows"]) != set(tasks):
            print(
                f"bench_overhead: {result['name']} has summary rows for {sorted(result['rows'])}, not {tasks}",
                file=sys.stderr,
            )
            return 2
    for result in custodies:
        if result["leftovers"] or not result["empty"]:
            print(f"bench_overhead: {result['name']} left {result['leftovers']} labelled resources", file=sys.stderr)
            return 2

    print("\nper-task duration_s (summary.csv, whole seconds)")
    shown = bares + adapters + custodies
    print(f"  {'task':<22}" + "".join(f"{r['name'][:11]:>12}" for r in shown))
    for task in tasks:
        print(f"  {task:<22}" + "".join(f"{durations(r)[task]:>12}" for r in shown))
    n = len(tasks)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")
    print(f"{args.pairs} pairs, same engine (the bench's main.py), {n} tasks at concurrency 1; min / median / max")
    print(f"  bare runner wall             {spread([r['wall'] for r in bares], '7.1f')} s")
    print(f"  adapter runner wall          {spread([r['runner_wall'] for r in adapters], '7.1f')} s")
    runner_ratios = [a["runner_wall"] / b["wall"] for a, b in zip(adapters, bares, strict=True)]
    print(f"  runner ratio adapter / bare  {spread(runner_ratios)}   (per pair: the adapter's overhead on the tasks)")
    print("fixed costs per launch (seconds, whatever the number of tasks)")
    print(
        f"  before the runner            {spread([a['before_runner'] for a in adapters], '7.1f')} s"
        "   (preflight, clone, image resolve, meter, custody)"
    )
    print(
        f"  after the runner             {spread([a['after_runner'] for a in adapters], '7.1f')} s"
        "   (cleanup proof, final reading, ledger, audit)"
    )
    print(f"  whole launch                 {spread([a['wall'] for a in adapters], '7.1f')} s")
    if custodies:
        custody_ratios = [c["wall"] / b["wall"] for c, b in zip(custodies, bares, strict=True)]
        print(
            f"  custody ratio custody / bare {spread(custody_ratios)}   (per pair: the docker shim and BASH_ENV alone)"
        )
        print(
            f"  shim cost per docker call (median of alternating pairs): pass-through {per_call * 1000:.1f} ms, "
            f"creation {per_create * 1000:.1f} ms"
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
