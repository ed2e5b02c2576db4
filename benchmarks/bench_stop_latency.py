"""Benchmark the campaign stop, measured over the meter's poll interval: detection, stop, overshoot,
for each stop path side by side.

Two stop paths (vocab.StopPath; the run's hidden --stop-path flag selects one):
  fast         the default: fence, SIGTERM to the runner group, then the run's containers removed
               by exact label in parallel (custody/stop_removal.py: the admitted creations waited
               for, proven by a fresh listing) without waiting for the runner's EXIT trap; then
               the group waited for (SIGKILL after the grace)
  runner_trap  the old path, kept for this script: fence, SIGTERM, and the runner's own EXIT trap
               removes its containers one by one while the supervisor waits for the group
Each phase is run once with each path, alternating, so both see the same load.

For each crossing phase (default 0.1, 0.3, 0.5, 0.7, 0.9 of the supervisor's meter poll interval,
POLL_SEC) the script makes one paid demo run at concurrency 4 on four tasks (demo-hang and three
others) with the meter stand-in and a fresh campaign. Once the agents are in flight it reads the
supervisor's last meter reading (events.jsonl), jumps the stand-in's usage to just below the
campaign boundary (ceiling − reserve) and lets it climb at --rate USD/s so that the boundary is
crossed at that phase of the interval after a poll. It then tails events.jsonl and lists the
daemon's containers with the run's exact label every 0.05 s. Per run it records:

  phase      when the crossing fell, measured: seconds since the last meter reading before it
  detection  true crossing (from the stand-in's schedule) → stop decided: the supervisor's first
             accepted meter reading at or past the boundary (events.jsonl; the supervisor fences
             admission and signals the runner group on the same pass)
  fence      stop decided → the stop file the docker shim reads is in place (its ctime: the
             link that created it), a part of `stop`
  stop       stop decided → the script first sees no container with the run's label; on the fast
             path also its parts from the stop_cleared event: decided → the stop's own removal
             starts, and that removal to its proof
  total      true crossing → no labelled container
  overshoot  rate × total: what a provider spending at --rate charges past the boundary

and prints min / median / max of each over the runs. Every figure is measured; nothing is
calculated from the poll interval. Exit 2 when a run did not stop on the campaign reserve.

With --llm-gateway it then makes the same runs (same tasks, same phases, both paths) with the
model gateway, the chat stand-in on loopback as the provider. There the crossing request itself
is the detection: at the same phase after a meter reading one chat completion goes through the
gateway with the task's token (minted from the run's gateway secret, as the shim does) from
inside the first task's own agent container (a `docker exec` of a small Python script there: the
gateway serves only the run's containers), which the stand-in answers with a cost taking the
gateway's sum past the run's allowance, then one request every 20 ms until one is refused; the
script reports both moments on the shared kernel clock. Per run:

  refused    crossing request answered → the next request refused (403, the gateway's fence)
  fence      crossing request answered → the stop file in place (its ctime)
  total      crossing request answered → no labelled container

The meter stays below the boundary in these runs, so the stop reason must be gateway_budget.

With --stop-command N it also times `cowork-adapter stop RUN_ROOT` N times a path on a run whose
four agents are in flight: the command's start → no labelled container, and → the command returned.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_stop_latency.py --rate 0.25
    ... bench_stop_latency.py --llm-gateway --stop-command 2   # all three series, both paths
    ... bench_stop_latency.py --path fast --tasks 1            # one path, one task a run
    eval "$(bash testbed/realbench.sh env)"; ... bench_stop_latency.py --realbench   # one stop on the real benchmark

With --realbench it makes instead one paid run of the real pinned Cowork Bench with the real
Ouroboros server (the real-benchmark suite's set-up: tests/integration/realbench_env.RealRun) on the
first --tasks tasks at that concurrency, and once 2 agents run it starts `cowork-adapter stop` and
prints: the command's start → no labelled container, → the command returned, and the launcher's own
removal (objects, duration, proven).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stop_latency_runs import (
    FAST,
    PATHS,
    PHASES,
    POLL_S,
    RUNNER_TRAP,
    TASKS,
    one_gateway_run,
    one_run,
    one_stop_command_run,
)

from cowork_adapter.campaign.observe import POLL_SEC
from cowork_adapter.custody.docker_ops import list_labelled
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import prepare
from cowork_adapter.runroot.events import parse_ts


def summary(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]  # NaN: a figure the path does not have
    return f"{min(values):6.2f} / {statistics.median(values):6.2f} / {max(values):6.2f}" if values else "(none)"


def ratio(series: dict[str, list[dict]], key: str) -> str:
    """The old path's median over the fast path's, when both were measured."""
    medians = {}
    for path in (RUNNER_TRAP, FAST):
        values = [r[key] for r in series.get(path, []) if r[key] == r[key]]
        medians[path] = statistics.median(values) if values else None
    old, new = medians[RUNNER_TRAP], medians[FAST]
    return f"{old / new:9.2f}x" if old is not None and new else ""


def side_by_side(title: str, rows: list[tuple[str, str]], series: dict[str, list[dict]], unit: str = "s") -> None:
    """One line per figure: min / median / max of each stop path's runs, the paths in columns, and
    the ratio of their medians (runner_trap / fast) when both ran."""
    both = FAST in series and RUNNER_TRAP in series
    print(f"\n{title} (min / median / max, {unit})")
    print(f"  {'':<52}" + "".join(f"{path:>26}" for path in series) + (f"{'old/fast':>10}" if both else ""))
    for label, key in rows:
        cells = "".join(f"{summary([r[key] for r in runs]):>26}" for runs in series.values())
        print(f"  {label:<52}{cells}" + (f"{ratio(series, key):>10}" if both else ""))


def realbench_stop(docker_host: str, tasks: int, in_flight: int, path: str) -> int:
    """--realbench: one `cowork-adapter stop` on the real-benchmark test bed (the real-benchmark
    suite's RealRun: the pinned Cowork Bench, the real Ouroboros 6.97.2 seed, cowork-pack:d943e75,
    the meter and chat stand-ins) on the first `tasks` tasks at that concurrency, once `in_flight`
    agents run: the command's start → no labelled container, → the command returned, and the
    launcher's own removal (stop_cleared)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
    from realbench_env import RealRun, real_testbed, started_tasks, summary_tasks

    bed = real_testbed()
    real = RealRun(bed, Path(tempfile.mkdtemp(prefix="cowork-realbench-stop-")) / "root", docker_host).start()
    name = "stop"
    run_root = real.run_root(name)
    extra = ["--concurrency", str(tasks), "--stop-path", path]
    proc = real.launch(real.args(name, bed.tasks(tasks), extra=extra), name)
    try:
        deadline = time.monotonic() + 3600
        while len(started_tasks(run_root) - summary_tasks(run_root)) < in_flight:
            if proc.poll() is not None or time.monotonic() > deadline:
                print(f"the run ended or took too long before {in_flight} agents ran; see {real.root}/{name}.log")
                return 2
            time.sleep(1.0)
        flight = len(started_tasks(run_root) - summary_tasks(run_root))
        label = run_label(run_root)  # drawn at the run's start: its manifest has it by now
        containers = len(list_labelled(docker_host, label, timeout=10).containers)
        started = time.monotonic()
        stop = subprocess.Popen(
            [sys.executable, "-m", "cowork_adapter", "stop", str(run_root), "--timeout", "300"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        empty = returned = empty_wall = None
        while empty is None or returned is None:
            now = time.monotonic()
            if returned is None and stop.poll() is not None:
                returned = now - started
            if empty is None and not list_labelled(docker_host, label, timeout=10).containers:
                empty, empty_wall = now - started, time.time()
            if now - started > 600:
                break
            time.sleep(POLL_S)
        code = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.terminate()
        real.stop()
    events = [json.loads(line) for line in (run_root / "events.jsonl").read_text().splitlines() if line.strip()]
    cleared = [e for e in events if e.get("kind") == "stop_cleared"]
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    print(
        f"real benchmark, {tasks} tasks at concurrency {tasks}, {flight} agents in flight, {containers} "
        f"labelled containers at the stop; path {path}; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    print(f"  `stop` start → no labelled container  {empty if empty is None else round(empty, 2)} s")
    print(
        f"  `stop` start → the command returned   {returned if returned is None else round(returned, 2)} s "
        f"(exit {stop.returncode})"
    )
    for event in cleared:
        print(
            f"  the launcher's own removal: {event['removed']} object(s) in {event['seconds']} s, "
            f"proven {event['proven']}"
        )
        # The launcher decides the stop when the signal reaches it and starts its removal at once
        # (to_removal 0.00 s in the demo series): its start, on the shared wall clock, is the decision.
        decided = (parse_ts(event.get("ts")) or float("nan")) - float(event["seconds"])
        if empty_wall is not None:
            print(
                f"  stop decided (the launcher's removal starts) → no labelled container  {empty_wall - decided:.2f} s"
            )
    print(f"  stop reason {manifest.get('stop_reason')}, run exit {code}; run root {run_root}")
    return 0 if empty is not None and stop.returncode == 0 else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    parser.add_argument("--rate", type=float, default=0.25, help="spending rate after the jump, USD/s")
    parser.add_argument(
        "--phase",
        type=float,
        action="append",
        dest="phases",
        help="crossing phase as a fraction of the poll interval (repeatable; default 0.1 0.3 0.5 0.7 0.9)",
    )
    parser.add_argument(
        "--tasks",
        type=int,
        default=len(TASKS),
        help=f"tasks a run, at that concurrency: the first N of {TASKS} (default all)",
    )
    parser.add_argument(
        "--path",
        action="append",
        dest="paths",
        choices=PATHS,
        help="stop path to measure (repeatable; default both, each phase run once with each, "
        "alternating, so both see the same load)",
    )
    parser.add_argument(
        "--llm-gateway",
        action="store_true",
        help="also make the runs with the model gateway and print both series side by side",
    )
    parser.add_argument(
        "--gateway-path",
        action="append",
        dest="gateway_paths",
        choices=PATHS,
        help="stop path of the --llm-gateway runs (repeatable; default: those of --path)",
    )
    parser.add_argument(
        "--stop-command",
        type=int,
        default=0,
        metavar="N",
        help="also time `cowork-adapter stop` N times per path (command start → no labelled container)",
    )
    parser.add_argument(
        "--realbench",
        action="store_true",
        help="instead: one `cowork-adapter stop` on the real-benchmark test bed (realbench.sh env), "
        "--tasks tasks at that concurrency, 2 agents in flight, the first --path",
    )
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if args.realbench:
        if not args.docker_host:
            print(
                'bench_stop_latency: --realbench needs DOCKER_HOST (eval "$(bash testbed/realbench.sh env)")',
                file=sys.stderr,
            )
            return 2
        return realbench_stop(args.docker_host, args.tasks, min(2, args.tasks), (args.paths or [FAST])[0])
    phases = args.phases or list(PHASES)
    paths = list(dict.fromkeys(args.paths or PATHS))
    gateway_paths = list(dict.fromkeys(args.gateway_paths or paths))
    if (
        not args.docker_host
        or args.rate <= 0
        or any(not 0 <= p < 1 for p in phases)
        or not 1 <= args.tasks <= len(TASKS)
        or args.stop_command < 0
    ):
        print(
            f"bench_stop_latency: pass --docker-host (or DOCKER_HOST), a positive --rate, phases in [0, 1), "
            f"--tasks from 1 to {len(TASKS)} and --stop-command >= 0",
            file=sys.stderr,
        )
        return 2
    tasks = TASKS[: args.tasks]
    work = Path(tempfile.mkdtemp(prefix="cowork-bench-stop-"))
    env = prepare(work / "demo", args.docker_host)
    results: dict[str, list[dict]] = {path: [] for path in paths}
    gw_results: dict[str, list[dict]] = {path: [] for path in gateway_paths}
    cmd_results: dict[str, list[dict]] = {path: [] for path in paths}
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.0001).start() if args.llm_gateway else None

    def meter_line(r: dict) -> str:
        return (
            f"run {r['index']} [{r['path']}]: target phase {r['target_phase']:.1f} "
            f"({r['target_phase'] * POLL_SEC:4.1f} s), measured {r['phase_s']:5.2f} s after a reading; in flight "
            f"{r['flight_at_jump']}; detection {r['detection']:6.2f} s, fence {r['fence']:5.2f} s, stop "
            f"{r['stop']:6.2f} s (its own removal: starts {r['to_removal']:5.2f} s, takes {r['removal']:5.2f} s), "
            f"total {r['total']:6.2f} s; stop reason {r['stop_reason']}, exit {r['exit']}"
        )

    def gateway_line(r: dict) -> str:
        return (
            f"gateway run {r['index']} [{r['path']}]: target phase {r['target_phase']:.1f} "
            f"({r['target_phase'] * POLL_SEC:4.1f} s), crossing answered {r['phase_s']:5.2f} s after a reading; "
            f"in flight {r['flight_at_jump']}; next request refused {r['refused']:5.3f} s ({r['refused_how']}), "
            f"fence {r['fence']:5.2f} s, "
            f"no container {r['total']:6.2f} s; stop reason {r['stop_reason']}, exit {r['exit']}"
        )

    def command_line(r: dict) -> str:
        return (
            f"stop command {r['index']} [{r['path']}]: in flight {r['flight']}; no container {r['empty']:6.2f} s, "
            f"command returned {r['command']:6.2f} s (exit {r['stop_exit']}); stop reason {r['stop_reason']}, "
            f"run exit {r['exit']}"
        )

    def measure(into: dict[str, list[dict]], count: int, one, line) -> None:
        """`count` runs a path, the paths alternating so both see the same load; each printed as it ends."""
        for index in range(count):
            for path in into:
                result = {**one(index, path), "index": index}
                into[path].append(result)
                print(line(result), flush=True)

    try:
        measure(
            results,
            len(phases),
            lambda i, path: one_run(env, i, phases[i], args.rate, args.docker_host, tasks, path),
            meter_line,
        )
        if provider is not None:
            measure(
                gw_results,
                len(phases),
                lambda i, path: one_gateway_run(env, i, phases[i], args.docker_host, tasks, provider, path),
                gateway_line,
            )
        measure(
            cmd_results,
            args.stop_command,
            lambda i, path: one_stop_command_run(env, i, args.docker_host, tasks, path),
            command_line,
        )
    finally:
        env.meter.stop()
        if provider is not None:
            provider.stop()
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")
    print(
        f"{len(phases)} phases a path, tasks {tasks} at concurrency {len(tasks)}, meter poll every {POLL_SEC:g} s, "
        f"rate ${args.rate:g}/s, the label listed every {POLL_S:g} s"
    )
    side_by_side(
        "meter crossing, each stop path",
        [
            ("detection  crossing → stop decided (the reading)", "detection"),
            ("fence      stop decided → stop file in place", "fence"),
            ("stop       stop decided → no labelled container", "stop"),
            ("           of it: decided → the stop's removal starts", "to_removal"),
            ("           of it: the removal, to its proof", "removal"),
            ("total      crossing → no labelled container", "total"),
        ],
        results,
    )
    side_by_side(
        "overshoot: rate × total",
        [("overshoot", "overshoot")],
        {path: [{"overshoot": args.rate * r["total"]} for r in runs] for path, runs in results.items()},
        "USD",
    )
    if provider is not None:
        side_by_side(
            "with --llm-gateway, from the crossing request's answer",
            [
                ("crossing → new requests refused (the gateway's fence)", "refused"),
                ("crossing → stop file in place", "fence"),
                ("crossing → no labelled container", "total"),
            ],
            gw_results,
        )
    if args.stop_command:
        side_by_side(
            "`cowork-adapter stop`, from the command's start",
            [
                ("→ no labelled container", "empty"),
                ("→ the command returned", "command"),
            ],
            cmd_results,
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    ok = all(r["stop_reason"] == "campaign_budget_reserve" for runs in results.values() for r in runs)
    ok = ok and all(r["stop_reason"] == "gateway_budget" for runs in gw_results.values() for r in runs)
    ok = ok and all(r["stop_reason"] == "signal_15" for runs in cmd_results.values() for r in runs)
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
