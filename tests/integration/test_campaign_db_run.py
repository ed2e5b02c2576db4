"""A real paid demo run whose campaign lives in PostgreSQL (`--campaign-db`), on the real Docker engine.

- the run is admitted, registers, records its meter readings and settles in the database record
  (the file store is never touched), and the database password appears nowhere in argv or the run root;
- the PostgreSQL server restarted under a running launcher: its next save fails, and the run stops
  with exit 3 and campaign_persistence_failed, cleanup proven, its active run kept in the record
  (unsettled), never a silent continuation; `campaign reconcile --campaign-db` then settles it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pg_server import PASSWORD, PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)

from cowork_adapter.campaign.pg_store import PostgresCampaignStore, read_campaign_db
from cowork_adapter.campaign.store import open_campaign
from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import agent_started, prepare, read_json, wait_for
from cowork_adapter.errors import Refusal
from cowork_adapter.ops.run_view import campaign_active, read_run
from cowork_adapter.schemas.campaign import key_fingerprint
from cowork_adapter.vocab import ExitCode, StopReason

CPF = StopReason.CAMPAIGN_PERSISTENCE_FAILED.value


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("campaigndb") / "root", docker_host)
    yield env
    env.meter.stop()


def no_password(url: str) -> str:
    return url.replace(f":{PASSWORD}@", "@")


def launch(
    demo,
    server: PgServer | None,
    name: str,
    db_url: str,
    tasks: list[str],
    *,
    campaign: str | None = None,
    extra: tuple[str, ...] = (),
    flags: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> subprocess.Popen:
    """A paid demo run on the campaign `campaign` (default: `name`) in `db_url`; `extra` flags are
    added after --campaign-name, `flags` replace the demo's value of a flag it already gives;
    `prefix` runs the launcher through another command (which must exec it)."""
    args = demo.run_args(name, tasks, campaign="unused.json")
    at = args.index("--campaign-file")
    args[at : at + 2] = ["--campaign-db", no_password(db_url), "--campaign-name", campaign or name, *extra]
    for flag, value in (flags or {}).items():
        args[args.index(flag) + 1] = value
    assert PASSWORD not in " ".join(args)
    env = {**os.environ, demo.key_env: demo.key, "PGPASSWORD": PASSWORD}
    with open(demo.root / f"{name}.log", "ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [*prefix, *args], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


def test_a_paid_run_keeps_its_campaign_in_postgres(demo, server: PgServer) -> None:
    db = server.fresh_database("r" + uuid.uuid4().hex[:10])
    name = "pg-ok"
    proc = launch(demo, server, name, db, ["demo-csv-totals"])
    code = proc.wait(timeout=900)
    log = (demo.root / f"{name}.log").read_text(errors="replace")
    assert code == ExitCode.OK, log[-3000:]
    record = read_campaign_db(db, name)
    assert record is not None and record.fingerprint == key_fingerprint(demo.key)
    assert record.active_run is None and [r.run_root for r in record.runs] == [str(demo.run_root(name))]
    assert record.last_usage >= record.usage_baseline
    assert not (demo.root / "unused.json").exists()  # the file store was never used
    manifest = read_json(demo.run_root(name) / "run_manifest.json")
    assert manifest["campaign_file"] is None and manifest["campaign_db"] == no_password(db)
    assert manifest["campaign_name"] == name
    assert manifest.get("campaign_settlement") == "recorded"
    assert files_containing(demo.run_root(name), PASSWORD.encode()) == []


def test_postgres_restarted_under_a_running_launcher_stops_the_run_cleanly(demo, server: PgServer, monkeypatch) -> None:
    db = server.fresh_database("r" + uuid.uuid4().hex[:10])
    name = "pg-restart"
    run_root = demo.run_root(name)
    proc = launch(demo, server, name, db, ["demo-hang"])
    try:
        assert wait_for(lambda: agent_started(run_root) or proc.poll() is not None, 600, 0.5)
        assert proc.poll() is None, (demo.root / f"{name}.log").read_text(errors="replace")[-3000:]
        server.restart()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (demo.root / f"{name}.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert code == ExitCode.STOPPED, log[-3000:]
    manifest = read_json(run_root / "run_manifest.json")
    assert manifest.get("stop_reason") == CPF, manifest.get("stop_reason")
    assert label_is_empty(demo.docker_host, run_label(run_root))
    db = server.url.rsplit("/", 1)[0] + "/" + db.rsplit("/", 1)[1]  # the server's address may have changed
    record = read_campaign_db(db, name)
    assert record.active_run is not None and record.active_run.run_root == str(run_root)  # kept, unsettled
    with pytest.raises(Refusal, match="unsettled active run"):
        with open_campaign(
            PostgresCampaignStore(db, name),
            key_fingerprint=record.fingerprint,
            ceiling=record.ceiling_usd,
            startup_usage=record.last_usage,
            create_if_missing=False,
        ):
            pass

    # status and stop find the run's active run (its launcher pid) in the database record too.
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    files = read_run(run_root)
    if files.manifest.campaign_db != no_password(db):  # the server's address changed on restart
        files.manifest = files.manifest.replace(campaign_db=no_password(db))
    assert campaign_active(files).run_root == str(run_root)
    monkeypatch.delenv("PGPASSWORD")
    assert campaign_active(files) is None  # unreachable (no password): nothing added, no crash

    # `campaign reconcile --campaign-db` proves the run over and settles it in the database record.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "campaign",
            "reconcile",
            "--campaign-db",
            no_password(db),
            "--campaign-name",
            name,
            "--run-root",
            str(run_root),
            "--operator-note",
            "postgres restarted in a test",
            "--docker-host",
            demo.docker_host,
            "--meter-url",
            demo.meter.base_url,
            "--api-key-env",
            demo.key_env,
        ],
        env={**os.environ, demo.key_env: demo.key, "PGPASSWORD": PASSWORD},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    settled = read_campaign_db(db, name)
    assert settled.active_run is None and [r.outcome for r in settled.runs] == ["reconciled"]
    assert settled.reconciliations[0].run_root == str(run_root)
