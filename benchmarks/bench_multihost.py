"""Benchmark task claims of a campaign shared by several hosts, on a real PostgreSQL server.

Starts the test bed's postgres:15 image on DOCKER_HOST (labelled, removed by its own label at the
end), or uses --db URL. Then, on fresh databases of the same server:
  1. claim overhead: one host claims and settles --tasks tasks one at a time, with no work between
     (claim + settle round trips only); prints milliseconds per task.
  2. throughput: the same --tasks tasks, each "running" --task-sec seconds (a sleep standing in for
     the task), by one host, then by two host processes at once (tests/multihost_host.py worker,
     each with its own connection, batches of --batch). Prints tasks per minute for each and the
     ratio (2.0 is perfect scaling), and checks every task was settled exactly once.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_multihost.py \
        [--tasks 200] [--task-sec 0.05] [--batch 4] [--db postgresql://...]

Exit 2 when a task was settled twice or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

from cowork_adapter.campaign.pg_store import TaskClaims  # noqa: E402


def fresh(url: str) -> str:
    import psycopg2

    name = "bench" + uuid.uuid4().hex[:8]
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return url.rsplit("/", 1)[0] + "/" + name


def claim_overhead(url: str, tasks: list[str]) -> float:
    with TaskClaims(url, "bench") as claims:
        claims.add_selection(tasks)
        run = claims.register_run(host="bench", run_root="/bench", lease_sec=60)
        start = time.perf_counter()
        for _ in tasks:
            (task,) = claims.claim(run.run_id, 1)
            claims.settle(run.run_id, task, "passed")
        return (time.perf_counter() - start) / len(tasks)


def throughput(url: str, tasks: list[str], hosts: int, batch: int, task_sec: float) -> tuple[float, Counter]:
    with TaskClaims(url, "bench") as claims:
        claims.add_selection(tasks)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(TESTS / "multihost_host.py"),
                "worker",
                url,
                "bench",
                f"h{i}",
                f"/bench/h{i}",
                str(batch),
                str(task_sec),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(hosts)
    ]
    outs = [p.communicate()[0] for p in procs]
    elapsed = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise SystemExit(f"a host failed: exit codes {[p.returncode for p in procs]}")
    settled = Counter(e["task"] for out in outs for e in map(json.loads, out.splitlines()) if e["event"] == "settled")
    return len(tasks) / elapsed * 60, settled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--task-sec", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--db", help="a PostgreSQL server URL (default: start one on DOCKER_HOST)")
    args = parser.parse_args()
    tasks = [f"task-{i:04d}" for i in range(args.tasks)]
    server = None
    if args.db is None:
        from pg_server import PgServer

        server = PgServer(os.environ.get("DOCKER_HOST", "unix:///var/lib/cowork-testbed/docker.sock"))
    url = args.db or server.url
    try:
        per_task = claim_overhead(fresh(url), tasks)
        print(f"claim overhead: {per_task * 1000:.2f} ms per task (claim + settle, {args.tasks} tasks, one host)")
        results = {}
        for hosts in (1, 2):
            rate, settled = throughput(fresh(url), tasks, hosts, args.batch, args.task_sec)
            if set(settled) != set(tasks) or set(settled.values()) != {1}:
                print(f"WRONG: with {hosts} hosts, {len(settled)} tasks settled, max {max(settled.values())} times")
                return 2
            results[hosts] = rate
            print(
                f"{hosts} host(s): {rate:.0f} tasks/min "
                f"({args.tasks} tasks of {args.task_sec} s, batches of {args.batch})"
            )
        print(f"two hosts / one host: {results[2] / results[1]:.2f}x (2.00 is perfect scaling)")
    finally:
        if server is not None:
            server.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
