"""What one result for a campaign over two hosts costs against the report of one run root.

Builds a synthetic 496-task campaign (--tasks) on a real PostgreSQL server: two hosts' run roots
with real ledgers, each settling half of the tasks (registered, claimed and settled through
TaskClaims as hosts would), plus one run root holding all of them alone. Then, alternating
--repeat times, the documented commands as subprocesses (start-up included):
  report ONE-ROOT --output-dir D                                  (the baseline: no database)
  report --campaign-db URL --campaign-name c A B --output-dir D   (two hosts, one result)
  status --campaign-db URL --campaign-name c A B                  (read-only)
Prints min / median / max of each, the ratio campaign report / one-root report per pair, and the
load average. The server is the test bed's postgres:15 image on DOCKER_HOST (labelled, removed by
its label at the end), or --db URL.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_campaign_report.py \
        [--tasks 496] [--repeat 5] [--db postgresql://USER:PASSWORD@HOST:PORT/DB]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import synthetic_run as synth  # noqa: E402
from bench_multihost import fresh  # noqa: E402  (a new database on the server; this folder is on sys.path)

from cowork_adapter.campaign.pg_store import TaskClaims  # noqa: E402


def outcomes(tasks: list[str]) -> dict[str, str]:
    return {t: ("pass" if i % 3 else "fail") for i, t in enumerate(tasks)}


def build(url: str, tmp: Path, n: int) -> tuple[Path, Path, Path]:
    tasks = synth.task_names(n)
    half = {"a": tasks[: n // 2], "b": tasks[n // 2 :]}
    roots = {h: synth.ledger_run(tmp / f"host-{h}", tasks, outcomes(half[h]), campaign_name="c") for h in half}
    alone = synth.ledger_run(tmp / "alone", tasks, outcomes(tasks))
    with TaskClaims(url, "c") as claims:
        claims.add_selection(tasks)
        for h, root in roots.items():
            run = claims.register_run(host=f"host-{h}", run_root=str(root), lease_sec=3600)
            # The host takes every open task at once, settles its own half and gives the rest back.
            verdict = outcomes(tasks)
            for t in claims.claim(run.run_id, n):  # the ledger's verdict, so no row disagrees with the database
                claims.settle(
                    run.run_id, t, ("passed" if verdict[t] == "pass" else "failed") if t in half[h] else "infra_failed"
                )
            claims.finish_run(run.run_id)
    return roots["a"], roots["b"], alone


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-400:]}")
    return elapsed


def spread(values: list[float], unit: str = " s") -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=496)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", help="a PostgreSQL server URL (default: start one on DOCKER_HOST)")
    args = parser.parse_args()
    server = None
    if args.db:
        base = args.db
    else:
        from pg_server import PgServer

        server = PgServer(os.environ.get("DOCKER_HOST", "unix:///var/lib/cowork-testbed/docker.sock"))
        base = server.url
    try:
        url = fresh(base)
        parts = urlsplit(url)
        bare = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))
        env = {**os.environ, "PGPASSWORD": parts.password or ""}
        command = [str(Path(sys.executable).with_name("cowork-adapter"))]
        times: dict[str, list[float]] = {"one": [], "campaign": [], "status": []}
        with tempfile.TemporaryDirectory() as tmp:
            a, b, alone = build(url, Path(tmp), args.tasks)
            for i in range(args.repeat):
                argv = {
                    "one": [*command, "report", str(alone), "--output-dir", f"{tmp}/one-{i}"],
                    "campaign": [
                        *command,
                        "report",
                        "--campaign-db",
                        bare,
                        "--campaign-name",
                        "c",
                        str(a),
                        str(b),
                        "--output-dir",
                        f"{tmp}/campaign-{i}",
                    ],
                    "status": [*command, "status", "--campaign-db", bare, "--campaign-name", "c", str(a), str(b)],
                }
                order = ["one", "campaign", "status"] if i % 2 == 0 else ["campaign", "one", "status"]
                for name in order:
                    times[name].append(timed(argv[name], env))
    finally:
        if server is not None:
            server.remove()
    ratios = [c / o for c, o in zip(times["campaign"], times["one"], strict=True)]
    print(f"tasks={args.tasks} over 2 hosts (half each); {args.repeat} alternating runs; min / median / max")
    print(f"  report ONE-ROOT (no database)                 {spread(times['one'])}")
    print(f"  report --campaign-db ... HOST-A HOST-B        {spread(times['campaign'])}")
    print(f"  ratio campaign / one root, per pair           {spread(ratios, '')}")
    print(f"  status --campaign-db ... HOST-A HOST-B        {spread(times['status'])}")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
