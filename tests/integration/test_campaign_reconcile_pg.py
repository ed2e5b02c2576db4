"""`campaign reconcile --campaign-db` on a REAL PostgreSQL server keeps the usage it replaces.

The command runs as an operator runs it (the console entry, the password in PGPASSWORD, the real
Docker daemon of the test bed proving the run's label empty, the meter stand-in answering the key's
usage); the database record then holds the old usage in the reconciliation beside the new one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from pg_server import PASSWORD, PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path

from cowork_adapter.campaign.pg_store import PostgresCampaignStore, read_campaign_db
from cowork_adapter.campaign.store import open_campaign
from cowork_adapter.demo.meter_standin import MeterStandin
from cowork_adapter.schemas.campaign import key_fingerprint

KEY = "sk-or-v1-fake-reconcile-pg-key-000222"


def dead_pid() -> int:
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    return child.pid


def test_reconcile_in_postgres_keeps_the_previous_usage(server: PgServer, docker_host: str, tmp_path) -> None:
    db = server.fresh_database("r" + uuid.uuid4().hex[:10])
    url = db.replace(f":{PASSWORD}@", "@")
    run_root = tmp_path / "crashed"
    run_root.mkdir()
    label = uuid.uuid4().hex  # nothing on the daemon carries it
    with open_campaign(
        PostgresCampaignStore(db, "c"),
        key_fingerprint=key_fingerprint(KEY),
        ceiling=100.0,
        startup_usage=40.0,
        create_if_missing=True,
    ) as campaign:
        campaign.start_run(run_root=str(run_root), run_label=label, launcher_pid=dead_pid())
        campaign.record_usage(45.5)
    before = read_campaign_db(db, "c")
    assert before.active_run is not None and before.last_usage == 45.5
    with MeterStandin(KEY, usage=52.25, max_delay_sec=5.0) as meter:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cowork_adapter",
                "campaign",
                "reconcile",
                "--campaign-db",
                url,
                "--campaign-name",
                "c",
                "--run-root",
                str(run_root),
                "--operator-note",
                "launcher OOM-killed, checked",
                "--docker-host",
                docker_host,
                "--meter-url",
                meter.base_url,
                "--api-key-env",
                "RECONCILE_PG_KEY",
            ],
            env={**os.environ, "RECONCILE_PG_KEY": KEY, "PGPASSWORD": PASSWORD},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    after = read_campaign_db(db, "c")
    assert after.active_run is None and after.last_usage == 52.25
    note = after.reconciliations[-1]
    assert (note.previous_usage, note.usage_at_reconcile) == (45.5, 52.25)
    assert note.previous_usage_observed_at == before.last_usage_observed_at
    assert PASSWORD not in done.stdout + done.stderr
