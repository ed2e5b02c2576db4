"""Throughput of a real shared campaign: one host, then two hosts (`run --shared-campaign`), same tasks.

On DOCKER_HOST (the test bed): the demo benchmark, stub engine and meter stand-in, a labelled
PostgreSQL server (tests/pg_server.py, removed by its label at the end). Each round runs the same
--tasks demo tasks as one campaign by one adapter process, then by two at once (separate run and
resource roots, one daemon), each on a fresh database; a round's time is from the first launch to
the last exit, so every launcher's fixed cost (preflight, MCP inventory, final reading) is in it.
Prints tasks per minute min / median / max for each and the ratio of medians, with the load average.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_shared_run.py [--rounds 3]

Both "hosts" share this machine's CPUs and one daemon: the ratio shows the claim protocol's
overhead and the launchers' fixed cost, not what two machines would gain. Exit 2 when a host fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

from pg_server import PASSWORD, PgServer  # noqa: E402

from cowork_adapter.demo.env import prepare  # noqa: E402

TASKS = ["demo-crm-postgres", "demo-csv-totals", "demo-deck-stateful", "demo-wrong-answer"]


def launch(demo, db: str, campaign: str, name: str, tasks: list[str]) -> subprocess.Popen:
    args = demo.run_args(name, tasks, campaign="unused.json")
    at = args.index("--campaign-file")
    args[at : at + 2] = [
        "--campaign-db",
        db.replace(f":{PASSWORD}@", "@"),
        "--campaign-name",
        campaign,
        "--shared-campaign",
        "--claim-batch",
        "1",
        "--max-load-per-cpu",
        "1000",
    ]  # both "hosts" share these 2 CPUs: no admission wait
    storage = demo.root / f"storage-{name}"
    storage.mkdir()
    args[args.index("--resource-root") + 1] = str(storage)
    args[args.index("--concurrency") + 1] = "1"
    with open(demo.root / f"{name}.log", "ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            args,
            env={**os.environ, demo.key_env: demo.key, "PGPASSWORD": PASSWORD},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def one_round(demo, server: PgServer, hosts: int, tasks: list[str]) -> float:
    db = server.fresh_database("r" + uuid.uuid4().hex[:10])
    campaign = f"c{hosts}-{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    procs = [launch(demo, db, campaign, f"{campaign}-h{i}", tasks) for i in range(hosts)]
    codes = [p.wait(timeout=1800) for p in procs]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"a host failed (exit codes {codes}); see the logs under {demo.root}")
    return len(tasks) / elapsed * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    # CI's short mode (tests/integration/test_benchmarks_short.py) takes 2: one task a host when two share it.
    parser.add_argument("--tasks", type=int, default=len(TASKS), help=f"the first N of {TASKS} (default all)")
    args = parser.parse_args()
    if not 1 <= args.tasks <= len(TASKS):
        print(f"--tasks must be from 1 to {len(TASKS)} (got {args.tasks})", file=sys.stderr)
        return 2
    tasks = TASKS[: args.tasks]
    docker_host = os.environ.get("DOCKER_HOST")
    if not docker_host:
        print("DOCKER_HOST is not set: name the test bed's daemon", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        demo = prepare(Path(tmp) / "root", docker_host)
        server = PgServer(docker_host)
        try:
            one_round(demo, server, 1, TASKS[:1])  # warm-up: builds the derived image once
            rates = {1: [], 2: []}
            for _ in range(args.rounds):
                for hosts in (1, 2):
                    rates[hosts].append(one_round(demo, server, hosts, tasks))
        finally:
            server.remove()
            demo.meter.stop()
    print(
        f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}; "
        f"{len(tasks)} demo tasks, claim batch 1, concurrency 1 per host, {args.rounds} round(s)"
    )
    for hosts, values in rates.items():
        print(
            f"{hosts} host(s): tasks/min min {min(values):.2f} median {statistics.median(values):.2f} "
            f"max {max(values):.2f}"
        )
    print(f"two hosts / one host (medians): {statistics.median(rates[2]) / statistics.median(rates[1]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
