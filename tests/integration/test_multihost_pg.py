"""Several hosts, one campaign, against a REAL PostgreSQL server (the test bed's postgres:15 image).

Hosts are separate processes (tests/multihost_host.py) with their own connections, as two machines
would be. Proves: the campaign record behind the file store's interface (hold refused at once,
freed by SIGKILL, versioned schema); every task of a selection claimed and settled exactly once by
two concurrent hosts; a SIGKILLed host's claims move only after its lease lapsed AND its processes
are proven gone; a PostgreSQL restart mid-run stops the hosts' calls cleanly and loses no claim.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg2
import pytest
from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)

from cowork_adapter.campaign.claims import prove_fenced
from cowork_adapter.campaign.pg_conn import SCHEMA_VERSION, migrate
from cowork_adapter.campaign.pg_store import ClaimLost, PostgresCampaignStore, TaskClaims, read_campaign_db
from cowork_adapter.campaign.store import open_campaign
from cowork_adapter.errors import CampaignPersistenceError, Refusal
from cowork_adapter.schemas.multihost import ClaimCounts

HOST_SCRIPT = Path(__file__).resolve().parents[1] / "multihost_host.py"
FINGERPRINT = "sha256:0123456789abcdef"


@pytest.fixture()
def db(server: PgServer) -> str:
    return server.fresh_database("t" + uuid.uuid4().hex[:10])


def host(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(HOST_SCRIPT), *args], stdout=subprocess.PIPE, text=True, env=env)


def events(proc: subprocess.Popen) -> list[dict]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return [json.loads(line) for line in out.splitlines()]


def first_event(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"the host process ended first (exit {proc.wait()})"
    return json.loads(line)


def test_the_campaign_record_lives_in_postgres_behind_the_file_store_interface(db: str) -> None:
    store = PostgresCampaignStore(db, "c1")
    with open_campaign(
        store, key_fingerprint=FINGERPRINT, ceiling=10.0, startup_usage=1.5, create_if_missing=True
    ) as campaign:
        campaign.start_run(run_root="/runs/a", run_label="lab", launcher_pid=123, host="h1")
        with pytest.raises(Refusal, match="held by another launcher"):  # refused at once, never waits
            with PostgresCampaignStore(db, "c1").locked():
                pass
        campaign.record_usage(2.0)
        campaign.finish_run(outcome="completed")
    stored = read_campaign_db(db, "c1")
    assert stored is not None and stored.last_usage == 2.0 and stored.usage_baseline == 1.5
    assert stored.active_run is None and [r.run_root for r in stored.runs] == ["/runs/a"]
    assert stored.runs[0].spent_usd == pytest.approx(0.5)

    # A refusal (another ceiling) writes nothing: the row's version is unchanged.
    def version() -> int:
        with psycopg2.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SELECT version FROM campaigns WHERE name = 'c1'")
            return cur.fetchone()[0]

    before = version()
    with pytest.raises(Refusal, match="cannot change"):
        with open_campaign(
            store, key_fingerprint=FINGERPRINT, ceiling=11.0, startup_usage=2.0, create_if_missing=False
        ):
            pass
    assert version() == before
    # Another campaign name is another record.
    with pytest.raises(Refusal, match="needs --new-campaign"):
        with open_campaign(
            PostgresCampaignStore(db, "other"),
            key_fingerprint=FINGERPRINT,
            ceiling=10.0,
            startup_usage=2.0,
            create_if_missing=False,
        ):
            pass


def test_a_sigkilled_holder_frees_the_campaign_without_cleanup_code(db: str) -> None:
    proc = host("hold", db, "c1")
    try:
        assert first_event(proc)["event"] == "held"
        with pytest.raises(Refusal, match="held by another"):
            with PostgresCampaignStore(db, "c1").locked():
                pass
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20  # the server notices the closed socket at once; allow for load
    while True:
        try:
            with PostgresCampaignStore(db, "c1").locked() as session:
                assert session.load() is None
            break
        except Refusal:
            assert time.monotonic() < deadline, "the hold outlived its SIGKILLed holder"
            time.sleep(0.2)


def test_schema_migrations_are_versioned_and_a_newer_database_is_refused(db: str) -> None:
    conn = psycopg2.connect(db)
    try:
        assert migrate(conn) == SCHEMA_VERSION
        assert migrate(conn) == SCHEMA_VERSION  # applied once
        with conn, conn.cursor() as cur:
            cur.execute("SELECT version FROM schema_migrations ORDER BY version")
            assert [r[0] for r in cur.fetchall()] == list(range(1, SCHEMA_VERSION + 1))
            cur.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
        with pytest.raises(Refusal, match="newer than this adapter"):
            migrate(conn)
    finally:
        conn.close()


def test_two_hosts_claim_every_task_exactly_once(db: str, tmp_path: Path) -> None:
    tasks = [f"task-{i:03d}" for i in range(60)]
    with TaskClaims(db, "c1") as claims:
        assert claims.add_selection(tasks) == 60
        assert claims.add_selection(tasks) == 0  # idempotent
    # Tasks ending in 7 fail unsettled (infra_failed) the first time a host runs them: back to open.
    hosts = [host("worker", db, "c1", name, str(tmp_path / name), "3", "0.01", "7") for name in ("h1", "h2")]
    got = [events(p) for p in hosts]
    settled = Counter(e["task"] for evs in got for e in evs if e["event"] == "settled")
    assert set(settled) == set(tasks) and set(settled.values()) == {1}
    per_host = [{e["task"] for e in evs if e["event"] == "settled"} for evs in got]
    assert all(per_host), "both hosts took part"
    flaky = [t for t in tasks if t.endswith("7")]
    with TaskClaims(db, "c1") as claims:
        assert claims.counts() == ClaimCounts(settled=60)
        by = claims.settled_by()
    with psycopg2.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT task_id, times_claimed FROM task_claims")
        times = dict(cur.fetchall())
    assert all(times[t] == 1 for t in tasks if t not in flaky)
    assert all(times[t] >= 2 for t in flaky)  # released once, then claimed again and settled
    runs = {e["run"] for evs in got for e in evs}
    assert {r for r, _ in by.values()} <= runs


def test_a_host_killed_inside_its_claim_transaction_takes_nothing_and_blocks_no_one(db: str, tmp_path: Path) -> None:
    tasks = [f"task-{i:02d}" for i in range(12)]
    with TaskClaims(db, "c1") as b:
        b.add_selection(tasks)
        proc = host("stall", db, "c1", "h1", str(tmp_path / "a"), "5")
        try:
            locked = first_event(proc)
            assert locked["event"] == "locked" and locked["tasks"] == tasks[:5]
            run_b = b.register_run(host="h2", run_root=str(tmp_path / "b"), lease_sec=60)
            assert b.claim(run_b.run_id, 100) == tasks[5:]  # skips the locked rows instead of waiting on them
            # ... and returned while the stalled host still lives and holds them (a claim that waited on the
            # locks could return only after the kill below): the event, not a bound in seconds.
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
        deadline = time.monotonic() + 20  # the server rolls the dead session's transaction back
        taken: list[str] = []
        while not taken:
            taken = b.claim(run_b.run_id, 100)
            assert taken or time.monotonic() < deadline, "the dead host's locks outlived it"
            time.sleep(0.1)
        assert taken == tasks[:5]
        with psycopg2.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SELECT max(times_claimed) FROM task_claims")
            assert cur.fetchone()[0] == 1  # the killed claim never committed


def test_a_sigkilled_host_keeps_its_claims_until_its_lease_lapsed_and_its_runner_is_proven_gone(
    db: str, tmp_path: Path
) -> None:
    tasks = [f"task-{i:02d}" for i in range(12)]
    with TaskClaims(db, "c1") as b:
        b.add_selection(tasks)
        root_a = tmp_path / "host-a"
        # A 10 s lease: the refusal below must come while A's lease still runs, after a kill and four
        # round trips to the database, two of them commits (B's registration and claim) that a loaded
        # server, fsync on a busy disk, can take seconds over: a 3 s lease could lapse first.
        proc = host("holder", db, "c1", "h1", str(root_a), "5", "10")
        claimed = first_event(proc)
        a_tasks, a_run, runner = claimed["tasks"], claimed["run"], claimed["runner_pgid"]
        assert len(a_tasks) == 5
        try:
            proc.send_signal(signal.SIGKILL)  # host A's launcher dies; its runner group lives on
            proc.wait()
            run_b = b.register_run(host="h1", run_root=str(tmp_path / "host-b"), lease_sec=60)
            rest = b.claim(run_b.run_id, 100)
            assert set(rest) == set(tasks) - set(a_tasks)

            a = b.host_run(a_run)
            ok, why, _ = b.release_fenced(a_run, prove_fenced(a, host="h1"))
            assert not ok and "still renews its lease" in why  # killed, but its lease has not lapsed
            deadline = time.monotonic() + 30
            while not b.expired_runs():
                assert time.monotonic() < deadline
                time.sleep(0.2)
            ok, why, _ = b.release_fenced(a_run, None)
            assert not ok and "nothing proves" in why
            proof = prove_fenced(a, host="h1")
            assert not proof.all_gone and f"runner group {runner} alive" in proof.evidence
            ok, why, _ = b.release_fenced(a_run, proof)
            assert not ok and "is not fenced" in why
            assert b.claim(run_b.run_id, 100) == []  # still nothing: A's tasks stay A's
        finally:
            os.killpg(runner, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not (proof := prove_fenced(a, host="h1")).all_gone:
            assert time.monotonic() < deadline, proof.evidence
            time.sleep(0.1)
        ok, why, released = b.release_fenced(a_run, proof)
        assert ok and released == sorted(a_tasks), why
        assert b.host_run(a_run).state == "fenced"
        with pytest.raises(ClaimLost):  # a fenced run can neither claim nor renew nor settle
            b.claim(a_run, 1)
        with pytest.raises(ClaimLost):
            b.renew(a_run)
        with pytest.raises(ClaimLost, match="does not hold"):
            b.settle(a_run, a_tasks[0], "passed")
        again = b.claim(run_b.run_id, 100)
        assert sorted(again) == sorted(a_tasks)
        for task in tasks:
            b.settle(run_b.run_id, task, "passed")
        assert b.counts() == ClaimCounts(settled=12)
        assert {r for r, _ in b.settled_by().values()} == {run_b.run_id}


def test_postgres_restarted_mid_run_stops_calls_cleanly_and_loses_no_claim(
    server: PgServer, db: str, tmp_path: Path
) -> None:
    tasks = [f"task-{i:02d}" for i in range(8)]
    store = PostgresCampaignStore(db, "c1")
    claims = TaskClaims(db, "c1")
    try:
        claims.add_selection(tasks)
        run = claims.register_run(host="h1", run_root=str(tmp_path / "a"), lease_sec=120)
        held = claims.claim(run.run_id, 3)
        with open_campaign(
            store, key_fingerprint=FINGERPRINT, ceiling=10.0, startup_usage=1.0, create_if_missing=True
        ) as campaign:
            server.restart()
            db = server.url.rsplit("/", 1)[0] + "/" + db.rsplit("/", 1)[1]  # its address may change on restart
            with pytest.raises(ClaimLost, match="claiming tasks"):
                claims.claim(run.run_id, 3)
            with pytest.raises(CampaignPersistenceError):
                campaign.record_usage(1.2)
            assert campaign.record.last_usage == 1.0  # the handle keeps the last record that was stored
    finally:
        claims.close()
    assert read_campaign_db(db, "c1").last_usage == 1.0
    with TaskClaims(db, "c1") as after:
        assert after.counts() == ClaimCounts(open=5, claimed=3)
        other = after.register_run(host="h2", run_root=str(tmp_path / "b"), lease_sec=60)
        assert set(after.claim(other.run_id, 100)) == set(tasks) - set(held)  # never a held claim
        after.renew(run.run_id)  # the first run reconnects: its lease and claims survived the restart
        for task in held:
            assert after.settle(run.run_id, task, "passed") == "settled"
