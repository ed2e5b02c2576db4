"""Benchmark the adapter's per-task overhead against the demo runner run bare, on the same tasks.

One script run does, on the demo benchmark and the real daemon (DOCKER_HOST or --docker-host):

  bare      `bash run_parallel.sh 1 TASKS` in a materialized bench with the demo pack image and
            the bench's own main.py engine (like tests/integration/test_demo_bench_bare.py);
  custody   the same bare runner with the adapter's docker shim and BASH_ENV installed
            (custody.bash_env.install_custody: run label, limits, admission checks, evidence);
  adapter   `cowork-adapter run` on the same tasks with the stub engine (the stub Ouroboros
            server behind mcp-proxy in the derived image), the meter stand-in, a fresh campaign.

`bare` and `custody` alternate (bare, custody, custody, bare, ...) for --rounds pairs so a drift
of the shared machine falls on both. Two ratios are printed:

  custody-only  custody runner wall / bare runner wall: the custody machinery alone, same engine.
  same engine   `cowork-adapter run --engine upstream:main.py`: the bare runner's own engine under the
                adapter's whole custody (entrypoint wrapper, shim, meter, inventory, ledger): the
                adapter's overhead alone, runner part and whole launch.
  adapter       adapter per-task wall / bare per-task wall. Honest caveat: the engines differ
                (stub server + mcp-proxy + the container entrypoint against a direct stdio
                engine), so this ratio includes the engine difference; the launcher's fixed costs
                (preflight, clone, image resolve, meter, cleanup proof, settlement, audit) are
                broken out so the per-task part can be read apart from them.

Limits: custody and adapter runs use --cpus (default: every CPU) and --memory (default 8g), so
the limits themselves do not throttle the comparison; pass --cpus 1 to see their effect.

Target: custody-only ratio <= 1.05; exit 1 when it is missed, 2 when a run went wrong.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_overhead.py
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.docker_ops import cleanup_run, label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.scenarios import prepare
from cowork_adapter.events import parse_ts

DEFAULT_TASKS = ["demo-csv-totals", "demo-crm-postgres", "demo-deck-stateful"]
TARGET_CUSTODY_RATIO = 1.05
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
    env.update(DOCKER_HOST=docker_host, IMAGE=image_id, AGENT_PHASE_AWARE="1", ENTRY="main.py", MODEL_NAME="demo", MODEL_PROVIDER="demo",
               TASK_TIMEOUT=str(TASK_TIMEOUT_S), TMPDIR=str(tmpdir))
    return env


def run_runner(bench: Path, tasks: list[str], env: dict[str, str], log: Path) -> float:
    """`bash run_parallel.sh 1 TASKS`; returns its wall time in seconds."""
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.run(["bash", "run_parallel.sh", "1", *tasks], cwd=bench, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
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
        root, real_docker=shutil.which("docker") or "", docker_host=docker_host, run_label=label, limits=limits,
        stop_file=root / "custody" / "stop", resource_root=work, min_free_bytes=1 << 30,
        evidence_dir=root / "custody" / "evidence", agent_env_file=None,
        environ={k: v for k, v in os.environ.items() if k != "BASH_ENV"},
    )
    env = custody.environment(bare_env(image_id, custody.tmpdir, docker_host))
    try:
        wall = run_runner(bench, tasks, env, root / "runner.log")
    finally:
        report = cleanup_run(docker_host, label, lambda entry: None)  # proves the label is empty
    leftovers = len(report.removed_containers) + len(report.removed_networks)
    return {"name": name, "wall": wall, "rows": summary_rows(bench), "leftovers": leftovers, "wrapper": custody.wrapper,
            "empty": label_is_empty(docker_host, label)}


def adapter_round(env, tasks: list[str], cpus: float, memory: str, engine: str = "ouroboros") -> dict:
    """One `cowork-adapter run`; engine "upstream:main.py" runs the bare runner's own engine under the
    adapter's whole custody, so its ratio to the bare runner is the adapter's overhead alone."""
    name = "adapter" if engine == "ouroboros" else "adapter-same-engine"
    extra = ["--concurrency", "1", "--cpus", f"{cpus:g}", "--memory", memory, "--task-timeout", str(TASK_TIMEOUT_S),
             "--engine", engine]
    args = env.run_args(name, tasks, campaign="campaign-bench.json", extra=extra)
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
    in_container = {}
    for summary in (run_root / "bench" / "dumps").glob("*/SingleUserTurn-*/ouroboros_summary.json"):
        data = json.loads(summary.read_text())
        if data.get("engine") == "ouroboros":
            in_container[data.get("task")] = (data.get("adapter_overhead_sec"), data.get("elapsed_sec"))
    return {
        "name": name, "wall": wall, "rows": summary_rows(run_root / "bench"), "exit": code, "in_container": in_container,
        "runner_wall": runner_end - runner_start,
        "before_runner": runner_start - started_wall,
        "after_runner": started_wall + wall - runner_end,
    }


# Docker calls the demo runner makes per task (run_parallel.sh). Creations: network, pg, FK-fix
# helper, agent, eval. Pass-through: about 3 pg_isready polls, exec agent, exec eval, rm agent
# after its phase, rm agent/eval/pg at the end, network rm, and 3 registry rm at exit.
CREATIONS_PER_TASK = 5
PASSTHROUGH_PER_TASK = 13


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    parser.add_argument("--task", action="append", dest="tasks", help="task id (repeatable)")
    parser.add_argument("--rounds", type=int, default=1, help="bare/custody pairs (alternating order)")
    parser.add_argument("--cpus", type=float, default=float(os.cpu_count() or 1))
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if not args.docker_host:
        print("bench_overhead: pass --docker-host or set DOCKER_HOST", file=sys.stderr)
        return 2
    tasks = args.tasks or DEFAULT_TASKS
    work = Path(tempfile.mkdtemp(prefix="cowork-bench-overhead-"))
    from cowork_adapter.config import parse_docker_size

    memory_bytes = parse_docker_size(args.memory)
    limits = {"cpus": args.cpus, "memory_bytes": memory_bytes, "memory_swap_bytes": memory_bytes, "pids_limit": 512}
    env = prepare(work / "demo", args.docker_host)
    image_id = __import__("docker").DockerClient(base_url=args.docker_host, timeout=60).images.get(env.pack_tag).id
    try:
        print(f"tasks {tasks}; limits cpus={args.cpus:g} memory={args.memory}; work {work}", flush=True)
        adapter = adapter_round(env, tasks, args.cpus, args.memory)
        print(f"adapter run: {adapter['wall']:.1f} s", flush=True)
        same = adapter_round(env, tasks, args.cpus, args.memory, engine="upstream:main.py")
        print(f"adapter run, same engine as bare: {same['wall']:.1f} s", flush=True)
        bares, custodies = [], []
        for i in range(args.rounds):
            order = ("bare", "custody") if i % 2 == 0 else ("custody", "bare")
            for kind in order:
                if kind == "bare":
                    bares.append(bare_round(work, f"bare-{i}", tasks, image_id, args.docker_host))
                    print(f"bare round {i}: {bares[-1]['wall']:.1f} s", flush=True)
                else:
                    custodies.append(custody_round(work, f"custody-{i}", tasks, image_id, args.docker_host, limits))
                    print(f"custody round {i}: {custodies[-1]['wall']:.1f} s", flush=True)
        per_call, per_create = shim_call_cost(custodies[-1]["wrapper"], args.docker_host, image_id)
    finally:
        env.meter.stop()
    for result in bares + custodies + [adapter, same]:
        if set(result["rows"]) != set(tasks):
            print(f"bench_overhead: {result['name']} has summary rows for {sorted(result['rows'])}, not {tasks}",
                  file=sys.stderr)
            return 2
    for result in custodies:
        if result["leftovers"] or not result["empty"]:
            print(f"bench_overhead: {result['name']} left {result['leftovers']} labelled resources", file=sys.stderr)
            return 2

    n = len(tasks)
    bare_wall = sum(r["wall"] for r in bares)
    custody_wall = sum(r["wall"] for r in custodies)
    bare_per_task = bare_wall / (n * len(bares))
    custody_ratio = custody_wall / bare_wall
    adapter_per_task = adapter["wall"] / n
    runner_per_task = adapter["runner_wall"] / n

    print("\nper-task duration_s (summary.csv, whole seconds)")
    shown = bares + custodies + [adapter, same]
    print(f"  {'task':<22}" + "".join(f"{r['name'][:11]:>12}" for r in shown))
    for task in tasks:
        print(f"  {task:<22}" + "".join(f"{durations(r)[task]:>12}" for r in shown))
    print("\nwall time")
    print(f"  bare runner            {bare_wall / len(bares):8.1f} s per run   {bare_per_task:7.2f} s per task")
    print(f"  custody runner         {custody_wall / len(custodies):8.1f} s per run   "
          f"{custody_wall / (n * len(custodies)):7.2f} s per task")
    print(f"  adapter, whole launch  {adapter['wall']:8.1f} s            {adapter_per_task:7.2f} s per task")
    print(f"    before the runner    {adapter['before_runner']:8.1f} s  (preflight, clone, image resolve, meter, custody)")
    print(f"    runner               {adapter['runner_wall']:8.1f} s            {runner_per_task:7.2f} s per task")
    print(f"    after the runner     {adapter['after_runner']:8.1f} s  (cleanup proof, final reading, ledger, audit)")
    print("  adapter agent phase, in the container (ouroboros_summary.json: adapter_overhead_sec of elapsed_sec)")
    for task in tasks:
        overhead, elapsed = adapter["in_container"].get(task, (None, None))
        print(f"    {task:<22} {overhead if overhead is not None else '?':>8} s of {elapsed if elapsed is not None else '?'} s "
              "(entrypoint, mcp-proxy and engine start-up, polling)")
    added = PASSTHROUGH_PER_TASK * per_call + CREATIONS_PER_TASK * per_create
    print("\nshim cost per docker call (median of alternating pairs)")
    print(f"  pass-through {per_call * 1000:7.1f} ms   creation {per_create * 1000:7.1f} ms")
    print(f"  ~{PASSTHROUGH_PER_TASK} pass-through + {CREATIONS_PER_TASK} creations per task -> {added:.2f} s per task "
          f"= analytic custody ratio {(bare_per_task + added) / bare_per_task:.3f}")
    print("\nratios")
    print(f"  custody-only (same engine)          {custody_ratio:6.3f}   target <= {TARGET_CUSTODY_RATIO}")
    print(f"  adapter per task, runner only       {runner_per_task / bare_per_task:6.3f}   (stub engine vs bare engine)")
    print(f"  adapter per task, whole launch      {adapter_per_task / bare_per_task:6.3f}   (plus fixed costs over {n} tasks)")
    print(f"  adapter, same engine, runner only   {same['runner_wall'] / n / bare_per_task:6.3f}   "
          "(custody + entrypoint wrapper; the bare engine under the adapter)")
    print(f"  adapter, same engine, whole launch  {same['wall'] / n / bare_per_task:6.3f}   "
          f"(plus preflight, inventory, meter, cleanup proof, settlement, audit over {n} tasks)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if custody_ratio <= TARGET_CUSTODY_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
