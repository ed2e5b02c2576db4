"""One "host" of a shared campaign, as a separate process for the PostgreSQL tests (and the benchmark).

worker URL CAMPAIGN HOST RUN_ROOT BATCH [TASK_SEC [FLAKY]]  claim batches until none is left, settle each
                                                    task (passed) after TASK_SEC, print one JSON line per
                                                    event; a task ending in FLAKY fails unsettled once per host
holder URL CAMPAIGN HOST RUN_ROOT BATCH LEASE_SEC   take custody like a launcher (custody/processes.json
                                                    with itself and a runner group), claim one batch, print
                                                    it, renew the lease until killed
stall URL CAMPAIGN HOST RUN_ROOT BATCH              stop inside a claim's transaction, rows locked, until killed
hold URL NAME                                       hold the campaign record's lock until killed
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cowork_adapter.campaign.pg_store import PostgresCampaignStore, TaskClaims
from cowork_adapter.custody.daemon_watch import process_start_ticks
from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def worker(
    url: str, campaign: str, host: str, run_root: str, batch: str, task_sec: str = "0", flaky_suffix: str = ""
) -> None:
    """`flaky_suffix`: a task whose id ends with it gets infra_failed the first time this host runs
    it (an unsettled result: the claim goes back, and some host runs it again)."""
    seen: set[str] = set()
    with TaskClaims(url, campaign) as claims:
        run = claims.register_run(host=host, run_root=run_root, lease_sec=60)
        while True:
            ids = claims.claim(run.run_id, int(batch))
            if not ids:
                break
            say(event="claimed", run=run.run_id, tasks=ids, at=time.time())
            for task in ids:
                time.sleep(float(task_sec))  # the task's work
                status = (
                    "infra_failed" if flaky_suffix and task.endswith(flaky_suffix) and task not in seen else "passed"
                )
                seen.add(task)
                claims.settle(run.run_id, task, status, receipt=f"{host}:{task}")
                say(event="settled" if status == "passed" else "released", run=run.run_id, task=task, at=time.time())
            claims.renew(run.run_id)
        claims.finish_run(run.run_id)
        say(event="done", run=run.run_id)


def holder(url: str, campaign: str, host: str, run_root: str, batch: str, lease_sec: str) -> None:
    root = Path(run_root)
    (root / "custody").mkdir(parents=True, exist_ok=True)
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True, cwd=root)
    me = ProcessIdentity(pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()))
    (root / "custody" / "processes.json").write_text(CustodyProcesses(launcher=me, runner_pgid=runner.pid).to_json())
    with TaskClaims(url, campaign) as claims:
        run = claims.register_run(host=host, run_root=run_root, lease_sec=float(lease_sec))
        ids = claims.claim(run.run_id, int(batch))
        say(event="claimed", run=run.run_id, tasks=ids, runner_pgid=runner.pid)
        while True:
            time.sleep(float(lease_sec) / 4)
            claims.renew(run.run_id)


def stall(url: str, campaign: str, host: str, run_root: str, batch: str) -> None:
    """Claim one batch but stop inside the claim's transaction, right after its rows are locked
    (SELECT ... FOR UPDATE SKIP LOCKED), until killed: a host dying mid-claim."""
    import psycopg2.extensions

    class StallAfterLock(psycopg2.extensions.cursor):
        def execute(self, query, vars=None):  # noqa: A002 - psycopg2's own parameter name
            super().execute(query, vars)
            if "SKIP LOCKED" in query:
                say(event="locked", tasks=[row[0] for row in self.fetchall()])
                time.sleep(600)

    with TaskClaims(url, campaign) as claims:
        run = claims.register_run(host=host, run_root=run_root, lease_sec=60)
        claims._conn.cursor_factory = StallAfterLock
        claims.claim(run.run_id, int(batch))


def hold(url: str, name: str) -> None:
    with PostgresCampaignStore(url, name).locked():
        say(event="held")
        time.sleep(600)


if __name__ == "__main__":
    {"worker": worker, "holder": holder, "stall": stall, "hold": hold}[sys.argv[1]](*sys.argv[2:])
