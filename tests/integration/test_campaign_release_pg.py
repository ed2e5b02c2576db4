"""`campaign release` against a REAL PostgreSQL server and the test bed's real Docker daemon.

Host runs registered through TaskClaims as launchers register them; the command runs as an
operator runs it (a subprocess, the password in PGPASSWORD only). Proves: every refusal is one
sentence with exit 2 and leaves the database as it was; a lapsed run whose daemon still holds an
object with its exact label is released only after that object is removed by the label (a
bystander without it untouched); its claimed tasks go back to open in the same transaction that
marks it released, its settled task untouched; the run that comes back can neither renew, claim
nor settle; without a daemon that answers, the operator's --confirm-fenced is recorded as the
evidence, and `status` says the release was attested, not proven.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest
from pg_server import PASSWORD, PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path
from test_watchdog import containers  # noqa: F401 (a fixture: labelled sleepers, removed after the test)

from cowork_adapter.campaign.pg_store import ClaimLost, HostRunReleased, TaskClaims
from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, new_run_label, path_label
from cowork_adapter.vocab import ExitCode

TASKS = ["t1", "t2", "t3", "t4"]
UNREACHABLE_DAEMON = "tcp://127.0.0.1:9"  # the discard port: nothing answers Docker's API there


def no_password(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))


def release(db: str, run_id: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "campaign",
            "release",
            "--campaign-db",
            no_password(db),
            "--campaign-name",
            "c1",
            "--host-run",
            run_id,
            "--operator-note",
            "host-a's VM was deleted",
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def db_digest(url: str) -> str:
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        rows = []
        for table in ("schema_migrations", "host_runs", "task_claims"):
            cur.execute(f"SELECT to_jsonb(t)::text FROM {table} t ORDER BY 1")
            rows += [r[0] for r in cur.fetchall()]
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def claims_of(url: str) -> dict[str, tuple]:
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT task_id, state, run_id, settled_status FROM task_claims WHERE campaign = 'c1'")
        return {r[0]: r[1:] for r in cur.fetchall()}


def run_row(url: str, run_id: str) -> tuple:
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT state, ended_at, release::text FROM host_runs WHERE run_id = %s", (run_id,))
        state, ended, text = cur.fetchone()
    return state, ended, json.loads(text) if text else None


def wait_lapsed(claims: TaskClaims, run_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while run_id not in [r.run_id for r in claims.expired_runs()]:
        assert time.monotonic() < deadline, f"run {run_id} did not lapse"
        time.sleep(0.2)


def test_a_lost_hosts_claims_are_released_only_on_evidence_and_the_run_cannot_come_back(
    server: PgServer, containers, docker_host: str, tmp_path
) -> None:  # noqa: F811 (module fixtures)
    db = server.fresh_database("rel" + uuid.uuid4().hex[:10])
    root_a = tmp_path.resolve() / "host-a" / "run-1"
    with TaskClaims(db, "c1") as claims:
        claims.add_selection(TASKS)
        label_a, _ = new_run_label(root_a)  # as A's launcher drew it and registered it
        a = claims.register_run(host="host-a", run_root=str(root_a), lease_sec=2, run_label=label_a)
        b = claims.register_run(host="host-b", run_root=str(tmp_path / "host-b" / "run-1"), lease_sec=600)
        assert claims.claim(a.run_id, 3) == ["t1", "t2", "t3"]
        claims.settle(a.run_id, "t1", "passed", receipt="t1/receipt.json")
        assert claims.claim(b.run_id, 1) == ["t4"]

        # Refused, each in one sentence, the database untouched: no such run; a live lease (B; A's is
        # kept short so that the test need not wait for it); no evidence at all; a daemon that does
        # not answer and no attestation.
        before = db_digest(db)
        refusals = [
            (release(db, "no-such-run", "--confirm-fenced"), "has no host run no-such-run"),
            (release(db, b.run_id, "--confirm-fenced"), "still renews its lease"),
        ]
        wait_lapsed(claims, a.run_id)
        refusals += [
            (release(db, a.run_id), "name its Docker daemon with --docker-host, or attest"),
            (release(db, a.run_id, "--docker-host", UNREACHABLE_DAEMON), "did not answer"),
        ]
        for done, words in refusals:
            assert done.returncode == ExitCode.REFUSED and words in done.stderr, done.stderr
            assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout
        assert db_digest(db) == before

        # A's daemon answers and still holds a container with A's exact label (its watchdog died with
        # its machine): it is removed by that label, a bystander without it stays.
        labelled = containers({RUN_LABEL_KEY: label_a})
        bystander = containers({RUN_LABEL_KEY: "0" * 32})
        same_path = containers({RUN_LABEL_KEY: path_label(root_a)})  # another run at A's path (path-only label)
        done = release(db, a.run_id, "--docker-host", docker_host)
        assert done.returncode == ExitCode.OK, done.stderr
        assert "2 unsettled claim(s) back to open (t2, t3)" in done.stdout
        assert label_is_empty(docker_host, label_a)  # removed by the label
        for other in (bystander, same_path):
            other.reload()
            assert other.status == "running"

        state, ended, record = run_row(db, a.run_id)
        assert state == "released" and ended is not None
        assert record["fence"] == "docker_label_cleaned" and record["attested"] is False
        assert record["removed"] == [f"container {labelled.name}"] and record["docker_host"] == docker_host
        assert record["released_tasks"] == ["t2", "t3"] and record["db_user"] == "postgres"
        assert record["operator_note"] == "host-a's VM was deleted" and "@" in record["operator"]
        rows = claims_of(db)
        assert rows["t1"] == ("settled", a.run_id, "passed")  # settled by its receipt: never touched
        assert rows["t2"] == rows["t3"] == ("open", None, None)
        assert rows["t4"] == ("claimed", b.run_id, None)  # another host's claim: untouched

        # A comes back (a healed partition): it can neither renew, claim nor settle.
        with pytest.raises(HostRunReleased, match="was released by"):
            claims.heartbeat(a.run_id)
        with pytest.raises(HostRunReleased):
            claims.claim(a.run_id, 1)
        with pytest.raises(ClaimLost):
            claims.settle(a.run_id, "t2", "passed")
        assert claims_of(db) == rows
        again = release(db, a.run_id, "--docker-host", docker_host)
        assert again.returncode == ExitCode.REFUSED and "already released" in again.stderr

        # Host C's daemon is gone with its machine: the operator's attestation is the evidence.
        c = claims.register_run(host="host-c", run_root=str(tmp_path / "host-c" / "run-1"), lease_sec=2)
        assert claims.claim(c.run_id, 1) == ["t2"]
        wait_lapsed(claims, c.run_id)
        done = release(db, c.run_id, "--docker-host", UNREACHABLE_DAEMON, "--confirm-fenced")
        assert done.returncode == ExitCode.OK, done.stderr
        state, _, record = run_row(db, c.run_id)
        assert state == "released" and record["fence"] == "operator_attested" and record["attested"] is True
        assert "did not answer" in record["evidence"] and record["released_tasks"] == ["t2"]

    # status shows each release for what it is: attested, or the label proven, never a fence proof.
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "status",
            "--campaign-db",
            no_password(db),
            "--campaign-name",
            "c1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PGPASSWORD": PASSWORD},
    )
    runs = {r["run_id"]: r for r in json.loads(shown.stdout)["runs"]}
    assert "operator-attested, not proven" in runs[c.run_id]["lease"]
    assert "processes not checked" in runs[a.run_id]["lease"]
