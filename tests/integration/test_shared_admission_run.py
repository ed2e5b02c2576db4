"""Admission by load in a real shared run (issue 20, deliverable 4): real Docker engine (test bed),
real PostgreSQL, the demo benchmark, the stub engine and the meter stand-in.

A host whose --max-load-per-cpu no machine meets waits before its first claim, claims nothing, and
`status` says "waiting for load: ..."; `stop` ends the wait. A host of the same campaign with a
limit the machine meets then claims and settles the task (its wait file never written).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import msgspec
from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)
from test_campaign_db_run import launch as launch_db_run  # the same directory (on sys.path under pytest)
from test_shared_campaign_run import LEASE_SEC, claim_rows, demo, log_of  # noqa: F401 (demo: a fixture)

from cowork_adapter.run.batch_runner import ADMISSION_FILE
from cowork_adapter.schemas.admission import AdmissionState
from cowork_adapter.schemas.multihost import read_claimed
from cowork_adapter.vocab import ExitCode

TASK = "demo-csv-totals"


def host(demo, db: str, name: str, *limits: str) -> subprocess.Popen:
    storage = demo.root / f"storage-{name}"
    storage.mkdir()
    return launch_db_run(
        demo,
        None,
        name,
        db,
        [TASK],
        campaign="admit",
        extra=("--shared-campaign", "--claim-batch", "1", "--host-lease-sec", LEASE_SEC, *limits),
        flags={"--resource-root": str(storage), "--concurrency": "1"},
    )


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def test_a_loaded_host_waits_shows_it_and_claims_nothing_then_a_host_within_limits_runs(demo, server: PgServer) -> None:
    db = server.fresh_database("a" + uuid.uuid4().hex[:10])
    print("load average", os.getloadavg())
    waiting = host(demo, db, "adm-wait", "--max-load-per-cpu", "0.0001")  # no busy machine is under this
    root = demo.run_root("adm-wait")
    try:
        deadline = time.monotonic() + 240
        shown = ""
        while time.monotonic() < deadline and waiting.poll() is None:
            shown = cli("status", str(root)).stdout
            if "waiting for load: load average" in shown:
                break
            time.sleep(2)
        assert "waiting for load: load average" in shown, (shown, log_of(demo, "adm-wait"))
        assert "over 0.0001" in shown
        assert msgspec.json.decode((root / ADMISSION_FILE).read_bytes(), type=AdmissionState).waiting
        time.sleep(float(LEASE_SEC) + 2)  # longer than a lease: still waiting, nothing claimed, not failed
        assert waiting.poll() is None, log_of(demo, "adm-wait")
        assert (
            read_claimed(root / "claims.jsonl") == [] and claim_rows(db, "admit").get(TASK, ("open",))[0] != "claimed"
        )
        stopped = cli("stop", str(root), "--timeout", "60")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert waiting.wait(timeout=120) == ExitCode.STOPPED, log_of(demo, "adm-wait")
    finally:
        if waiting.poll() is None:
            waiting.kill()
    # `stop` ends the runner's group, the loop with it (its last record may still say "waiting"):
    # status shows a wait only while the run lives.
    assert "waiting for load" not in cli("status", str(root)).stdout
    assert '"max_load_per_cpu":0.0001' in (root / "run_manifest.json").read_text().replace(" ", "")

    admits = host(demo, db, "adm-run", "--max-load-per-cpu", "1000", "--min-mem-available-gib", "0")
    assert admits.wait(timeout=600) == ExitCode.OK, log_of(demo, "adm-run")
    other = demo.run_root("adm-run")
    assert read_claimed(other / "claims.jsonl") == [TASK]
    assert claim_rows(db, "admit")[TASK][0] == "settled"
    assert not (other / ADMISSION_FILE).exists()  # it never waited
