"""`report` and `status` over one campaign spread over two hosts, against a REAL PostgreSQL server.

The tables hold what two hosts' launchers would have left (registered through TaskClaims: register,
claim, settle, finish; the money record through the campaign store), and each host's run root is a
synthetic run with a real ledger. The commands run as the operator runs them (a subprocess, the
password in PGPASSWORD only). Proves: one result with the selection as denominator, each task once
by the run that settled it, per-host figures beside the campaign's one spend, a disagreeing run
root disclosed, nothing written to the database or the run roots, and every bad input refused in
one sentence with exit code 2 (1 for status missing a run root).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest
import synthetic_run as synth  # tests/ is on sys.path (its conftest)
from pg_server import PASSWORD, PgServer, server  # noqa: F401 (a module fixture)

from cowork_adapter.campaign.pg_store import PostgresCampaignStore, TaskClaims
from cowork_adapter.campaign.store import open_campaign
from cowork_adapter.schemas.monitor import MeterState, Monitor, Spending

SELECTION = ["t1", "t2", "t3", "t4", "t5", "t6"]


def no_password(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))


def cli(*args: str, password: str | None = PASSWORD) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *args], capture_output=True, text=True, env=env, timeout=120
    )


def db_digest(url: str) -> str:
    """Every row of the campaign tables (and the schema history), to prove a command wrote nothing."""
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        rows = []
        for table in ("schema_migrations", "campaigns", "host_runs", "task_claims"):
            cur.execute(f"SELECT to_jsonb(t)::text FROM {table} t ORDER BY 1")
            rows += [r[0] for r in cur.fetchall()]
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def tree_digest(*roots: Path) -> str:
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(root.rglob("*")):
            h.update(str(p).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture()
def campaign(server: PgServer, tmp_path: Path):  # noqa: F811 (the module fixture)
    """Host a (finished) settled t1 pass, t2 fail; host b (live) settled t3 pass, t4 agent_failed and
    holds t5; t6 is open. Host a's run root also has a pass for t3, which b settled."""
    url = server.fresh_database("r" + uuid.uuid4().hex[:10])
    ra = synth.ledger_run(
        tmp_path / "host-a" / "run", SELECTION, {"t1": "pass", "t2": "fail", "t3": "pass"}, campaign_name="c1"
    )
    rb = synth.ledger_run(
        tmp_path / "host-b" / "run", SELECTION, {"t3": "pass", "t4": "agent", "t5": "infra"}, campaign_name="c1"
    )
    monitor = Monitor(
        observed_at="2026-12-01T10:00:00Z",
        launcher_pid=1,
        finished=True,
        spending=Spending(run_spent_usd=2.0),
        meter=MeterState(blindness_sec=30.0),
    )
    (ra / "monitor.json").write_text(monitor.to_json(), encoding="utf-8")  # host a's own meter delta
    with open_campaign(
        PostgresCampaignStore(url, "c1"),
        key_fingerprint="sha256:0123456789abcdef",
        ceiling=50.0,
        startup_usage=10.0,
        create_if_missing=True,
    ) as money:
        money.record_usage(13.25)
    with TaskClaims(url, "c1") as claims:
        claims.add_selection(SELECTION)
        a = claims.register_run(host="host-a", run_root=str(ra), lease_sec=600)
        b = claims.register_run(host="host-b", run_root=str(rb), lease_sec=600)
        assert claims.claim(a.run_id, 3) == ["t1", "t2", "t3"]
        claims.settle(a.run_id, "t1", "passed", receipt="r-t1")
        claims.settle(a.run_id, "t2", "failed", receipt="r-t2")
        assert claims.settle(a.run_id, "t3", "infra_failed").value == "open"  # a gave t3 back ...
        assert claims.finish_run(a.run_id) == []
        assert claims.claim(b.run_id, 3) == ["t3", "t4", "t5"]  # ... and b took and settled it
        claims.settle(b.run_id, "t3", "passed", receipt="r-t3")
        claims.settle(b.run_id, "t4", "agent_failed", receipt="r-t4")
    return url, ra, rb, a.run_id, b.run_id


def test_one_report_for_two_hosts_read_only(campaign, tmp_path: Path) -> None:
    url, ra, rb, run_a, run_b = campaign
    before_db, before_roots = db_digest(url), tree_digest(ra, rb)
    out = tmp_path / "out"
    done = cli(
        "report", "--campaign-db", no_password(url), "--campaign-name", "c1", str(ra), str(rb), "--output-dir", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert db_digest(url) == before_db and tree_digest(ra, rb) == before_roots  # read-only
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    r = json.loads((out / "report.json").read_text())
    assert (r["denominator"], r["passed"]) == (6, 2)
    assert {k: v for k, v in r["counts"].items() if v} == {
        "passed": 2,
        "failed": 1,
        "agent_failed": 1,
        "infra_failed": 1,
        "not_attempted": 1,
    }
    rows = {t["instance_id"]: t for t in r["tasks"]}
    assert rows["t3"]["provenance"] == str(rb) and rows["t1"]["provenance"] == str(ra)
    assert rows["t6"]["reason_code"] == "open_in_campaign" and rows["t5"]["status"] == "infra_failed"
    c = r["campaign"]
    assert c["claims"] == {"open": 1, "claimed": 1, "settled": 4}
    hosts = {h["host"]: h for h in c["hosts"]}
    assert (hosts["host-a"]["settled"], hosts["host-b"]["settled"], hosts["host-b"]["claimed"]) == (2, 2, 1)
    assert hosts["host-a"]["runs"][0]["run_id"] == run_a and hosts["host-b"]["runs"][0]["state"] == "live"
    assert all(h["settled_per_hour"] > 0 for h in hosts.values())
    assert (hosts["host-a"]["meter_spent_usd"], hosts["host-b"]["meter_spent_usd"]) == (2.0, None)
    assert r["cost"]["meter_run_spent_usd"] == pytest.approx(3.25) and c["money"]["remaining_usd"] == pytest.approx(
        46.75
    )
    assert any(
        d.startswith(f"Task t3: run {run_a} on host-a") and f"says run {run_b} settled it" in d
        for d in r["disclosures"]
    )
    md = (out / "report.md").read_text()
    assert "## Campaign" in md and "4 of 6 selected tasks settled" in md

    # The same over status: the database's view of both hosts, written nowhere.
    done = cli("status", "--campaign-db", no_password(url), "--campaign-name", "c1", str(ra), str(rb), "--json")
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    assert s["claims"] == {"open": 1, "claimed": 1, "settled": 4} and s["missing"] is None
    assert {r["host"]: r["settled"] for r in s["runs"]} == {"host-a": 2, "host-b": 2}
    assert db_digest(url) == before_db and tree_digest(ra, rb) == before_roots


def test_status_names_a_run_root_not_given(campaign) -> None:
    url, ra, rb, _, run_b = campaign
    done = cli("status", "--campaign-db", no_password(url), "--campaign-name", "c1", str(ra))
    assert done.returncode == 1, done.stderr
    assert f"host-b:{rb} (run {run_b}, live)" in done.stdout and "run root: not given here" in done.stdout


def one_sentence(done: subprocess.CompletedProcess, code: int, *says: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and all(s in lines[0] for s in says), done.stderr
    assert PASSWORD not in done.stderr + done.stdout


def test_bad_inputs_are_refused_in_one_sentence(campaign, server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    url, ra, rb, run_a, _ = campaign
    db = no_password(url)
    before = db_digest(url)
    for command in ("report", "status"):
        # a run root of the campaign missing (report), one not of it, an unknown name, no server.
        stranger = synth.ledger_run(tmp_path / command / "stranger", SELECTION, {"t1": "pass"})
        one_sentence(
            cli(command, "--campaign-db", db, "--campaign-name", "c1", str(ra), str(rb), str(stranger)),
            2,
            f"Run root {stranger}",
            "is not a run of campaign 'c1'",
        )
        one_sentence(
            cli(command, "--campaign-db", db, "--campaign-name", "nope", str(ra)), 2, "has no campaign named 'nope'"
        )
        one_sentence(
            cli(command, "--campaign-db", db, "--campaign-name", "c1", str(ra), password="wrong"),
            2,
            "Cannot reach the campaign database",
        )
        parts = urlsplit(db)
        closed = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:1"))
        one_sentence(
            cli(command, "--campaign-db", closed, "--campaign-name", "c1", str(ra)),
            2,
            "Cannot reach the campaign database",
        )
    one_sentence(
        cli("report", "--campaign-db", db, "--campaign-name", "c1", str(rb)),
        2,
        "run root is not given",
        f"host-a:{ra} (run {run_a}, finished)",
    )
    assert db_digest(url) == before

    # A database where no campaign was ever created: refused, and its schema is still not created.
    empty = server.fresh_database("e" + uuid.uuid4().hex[:10])
    one_sentence(cli("status", "--campaign-db", no_password(empty), "--campaign-name", "c1"), 2, "holds no campaign")
    with psycopg2.connect(empty) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('schema_migrations') IS NULL")
        assert cur.fetchone()[0]
