"""One stop on the real-benchmark test bed: `cowork-adapter stop` on a run of the pinned Cowork Bench
with the real Ouroboros server, its agents in flight, timed to no container with the run's label.

The run is the real-benchmark suite's (tests/integration/realbench_env.RealRun: the real benchmark
checkout, the real Ouroboros 6.97.2 seed, cowork-pack:d943e75, the meter and chat stand-ins) on the
first --tasks tasks of the test bed's list at that concurrency. Once --in-flight agents run (shim
evidence minus summary rows) the script starts `cowork-adapter stop RUN_ROOT` and lists the daemon's
containers with the run's exact label every 0.05 s. It prints: command start → no labelled
container, → the command returned, the launcher's own removal (stop_cleared: objects removed, its
duration, proven), the stop path and the stop reason. Exit 2 when the stop was not proven.

    eval "$(bash testbed/realbench.sh env)"
    .venv/bin/python benchmarks/bench_stop_realbench.py [--tasks 4] [--in-flight 2] [--stop-path fast]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

from realbench_env import RealRun, real_testbed, started_tasks, summary_tasks  # noqa: E402

from cowork_adapter.custody.docker_ops import list_labelled  # noqa: E402
from cowork_adapter.custody.labels import run_label  # noqa: E402
from cowork_adapter.vocab import StopPath  # noqa: E402

POLL_S = 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--stop-path", choices=[p.value for p in StopPath], default=StopPath.FAST.value)
    args = parser.parse_args(argv)
    docker_host = os.environ.get("DOCKER_HOST", "")
    if not docker_host or not 1 <= args.in_flight <= args.tasks:
        print("bench_stop_realbench: set DOCKER_HOST (realbench.sh env) and 1 <= --in-flight <= --tasks", file=sys.stderr)
        return 2
    bed = real_testbed()
    real = RealRun(bed, Path(tempfile.mkdtemp(prefix="cowork-realbench-stop-")) / "root", docker_host).start()
    name = "stop"
    run_root = real.run_root(name)
    label = run_label(run_root)
    extra = ["--concurrency", str(args.tasks), "--stop-path", args.stop_path]
    proc = real.launch(real.args(name, bed.tasks(args.tasks), extra=extra), name)
    try:
        deadline = time.monotonic() + 3600
        while len(started_tasks(run_root) - summary_tasks(run_root)) < args.in_flight:
            if proc.poll() is not None or time.monotonic() > deadline:
                print(f"the run ended or took too long before {args.in_flight} agents ran; see {real.root}/{name}.log")
                return 2
            time.sleep(1.0)
        flight = len(started_tasks(run_root) - summary_tasks(run_root))
        containers = len(list_labelled(docker_host, label).containers)
        started = time.monotonic()
        stop = subprocess.Popen([sys.executable, "-m", "cowork_adapter", "stop", str(run_root), "--timeout", "300"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        empty = returned = None
        while empty is None or returned is None:
            now = time.monotonic()
            if returned is None and stop.poll() is not None:
                returned = now - started
            if empty is None and not list_labelled(docker_host, label, timeout=10).containers:
                empty = now - started
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
    print(f"real benchmark, {args.tasks} tasks at concurrency {args.tasks}, {flight} agents in flight, {containers} "
          f"labelled containers at the stop; path {args.stop_path}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"  `stop` start → no labelled container  {empty if empty is None else round(empty, 2)} s")
    print(f"  `stop` start → the command returned   {returned if returned is None else round(returned, 2)} s "
          f"(exit {stop.returncode})")
    for event in cleared:
        print(f"  the launcher's own removal: {event['removed']} object(s) in {event['seconds']} s, "
              f"proven {event['proven']}")
    print(f"  stop reason {manifest.get('stop_reason')}, run exit {code}; run root {run_root}")
    return 0 if empty is not None and stop.returncode == 0 else 2


if __name__ == "__main__":
    sys.exit(main())
