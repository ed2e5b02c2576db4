"""Two adapter processes as two hosts of ONE campaign (`run --campaign-db ... --shared-campaign`),
on the real Docker engine (one daemon, separate run roots and resource roots), a real PostgreSQL
server, the demo benchmark, the stub engine and the meter stand-in.

  - both hosts finish the campaign: every task claimed and settled exactly once across hosts, each
    host's ledger holding only the tasks it claimed, one spend (one baseline, the meter's delta);
  - SIGKILL of one host's launcher mid-task: the other takes its unsettled task only after that
    run is fenced (lease lapsed and its processes proven gone), and repeats nothing it settled;
  - a budget crossing on the key's meter stops both hosts (exit 3), the campaign's stop written once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psycopg2
import pytest
from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)
from test_campaign_db_run import launch as launch_db_run  # the same directory (on sys.path under pytest)

from cowork_adapter.campaign.pg_store import read_campaign_db
from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import prepare, read_json, read_rows, wait_for
from cowork_adapter.schemas.multihost import read_claimed
from cowork_adapter.vocab import ExitCode, StopReason

LEASE_SEC = "8"
# Tasks with a settled designed outcome under the stub engine (demo.env.DESIGNED).
QUICK = ["demo-crm-postgres", "demo-csv-totals", "demo-wrong-answer"]


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("sharedcampaign") / "root", docker_host)
    yield env
    env.meter.stop()


def launch(
    demo,
    db_url: str,
    campaign: str,
    name: str,
    tasks: list[str],
    extra: tuple[str, ...] = (),
    prefix: tuple[str, ...] = (),
) -> subprocess.Popen:
    """One host: its own run root and resource root, one task per claim, concurrency 1; `extra` flags
    added; `prefix` runs it through another command that execs it."""
    storage = demo.root / f"storage-{name}"
    storage.mkdir()
    return launch_db_run(
        demo,
        None,
        name,
        db_url,
        tasks,
        campaign=campaign,
        # Admission by load is off here (it has its own test): CI's parallel workers
        # keep 2 CPUs far above the default 4.0 per CPU, so every host would wait.
        extra=(
            "--shared-campaign",
            "--claim-batch",
            "1",
            "--host-lease-sec",
            LEASE_SEC,
            "--max-load-per-cpu",
            "1000",
            *extra,
        ),
        flags={"--resource-root": str(storage), "--concurrency": "1"},
        prefix=prefix,
    )


def log_of(demo, name: str) -> str:
    return (demo.root / f"{name}.log").read_text(errors="replace")[-4000:]


def claim_rows(db_url: str, campaign: str) -> dict[str, tuple]:
    conn = psycopg2.connect(db_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT task_id, state, run_id, times_claimed, settled_status, claimed_at FROM task_claims "
                "WHERE campaign = %s",
                (campaign,),
            )
            return {r[0]: r[1:] for r in cur.fetchall()}
    finally:
        conn.close()


def host_runs(db_url: str, campaign: str) -> dict[str, tuple]:
    """run_root -> (run_id, state, ended_at, fence_proof)."""
    conn = psycopg2.connect(db_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT run_root, run_id, state, ended_at, fence_proof::text FROM host_runs WHERE campaign = %s",
                (campaign,),
            )
            return {r[0]: r[1:] for r in cur.fetchall()}
    finally:
        conn.close()


def events_of(run_root: Path) -> list[dict]:
    return [json.loads(line) for line in (run_root / "events.jsonl").read_text().splitlines() if line.strip()]


def meter_readings(run_root: Path) -> list[float]:
    return [e["usage"] for e in events_of(run_root) if e.get("kind") == "meter_reading"]


def wait_all(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    try:
        return {name: p.wait(timeout=max(1.0, deadline - time.monotonic())) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()


def test_two_hosts_run_one_campaign_each_task_once(demo, server: PgServer) -> None:
    db = server.fresh_database("h" + uuid.uuid4().hex[:10])
    tasks = QUICK
    procs = {name: launch(demo, db, "two", name, tasks) for name in ("two-a", "two-b")}
    codes = wait_all(procs, 600)
    for name, code in codes.items():
        assert code == ExitCode.OK, (name, code, log_of(demo, name))

    claims = claim_rows(db, "two")
    assert sorted(claims) == sorted(tasks)
    assert {t: (c[0], c[2]) for t, c in claims.items()} == {t: ("settled", 1) for t in tasks}  # each run once
    roots = {name: demo.run_root(name) for name in procs}
    claimed = {name: read_claimed(root / "claims.jsonl") for name, root in roots.items()}
    ledgers = {name: read_rows(root) for name, root in roots.items()}
    for name in procs:
        assert sorted(ledgers[name]) == sorted(claimed[name]), name  # its own tasks, no others
    assert sorted(claimed["two-a"] + claimed["two-b"]) == sorted(tasks)  # disjoint, and all of them
    runs = host_runs(db, "two")
    for name, root in roots.items():
        run_id, state, _, _ = runs[str(root)]
        assert state == "finished"
        assert {t for t, c in claims.items() if c[1] == run_id} == set(claimed[name])  # settled by the one that ran it
        assert label_is_empty(demo.docker_host, run_label(root))
        assert "PGPASSWORD" not in (root / "shared_runner.json").read_text()

    # One spend: one baseline (the first host's startup reading), both hosts' readings in one record.
    record = read_campaign_db(db, "two")
    readings = meter_readings(roots["two-a"]) + meter_readings(roots["two-b"])
    assert record.usage_baseline <= min(readings) and record.last_usage == max(readings)
    assert record.spent_usd == pytest.approx(record.last_usage - record.usage_baseline)
    assert sorted(r.run_root for r in record.runs) == sorted(str(r) for r in roots.values())
    assert record.active_run is None and record.stop is None


def test_a_killed_hosts_unsettled_task_moves_only_after_its_fence(demo, server: PgServer) -> None:
    db = server.fresh_database("k" + uuid.uuid4().hex[:10])
    tasks = QUICK
    a = launch(demo, db, "kill", "kill-a", tasks)
    root_a = demo.run_root("kill-a")
    try:
        # Killed while its SECOND task runs: its first is settled by its receipt, the second is not.
        assert wait_for(lambda: len(read_claimed(root_a / "claims.jsonl")) >= 2 or a.poll() is not None, 600, 0.5)
        assert a.poll() is None, log_of(demo, "kill-a")
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=30)
    finally:
        if a.poll() is None:
            a.kill()
    claimed_a = read_claimed(root_a / "claims.jsonl")
    before = claim_rows(db, "kill")
    settled_by_a = {t for t, c in before.items() if c[0] == "settled"}
    assert claimed_a[0] in settled_by_a and claimed_a[1] not in settled_by_a

    b = launch(demo, db, "kill", "kill-b", tasks)
    codes = wait_all({"kill-b": b}, 600)
    assert codes["kill-b"] == ExitCode.OK, log_of(demo, "kill-b")
    after = claim_rows(db, "kill")
    assert {t: c[0] for t, c in after.items()} == {t: "settled" for t in tasks}
    claimed_b = read_claimed(demo.run_root("kill-b") / "claims.jsonl")
    assert not settled_by_a & set(claimed_b)  # nothing A settled ran again
    assert claimed_a[1] in claimed_b and after[claimed_a[1]][2] == 2  # A's unsettled task: A, then B
    runs = host_runs(db, "kill")
    run_a, state, ended_at, proof = runs[str(root_a)]
    assert state == "fenced" and json.loads(proof)["all_gone"] is True
    assert after[claimed_a[1]][4] >= ended_at  # B claimed it only after A's run was fenced
    assert label_is_empty(demo.docker_host, run_label(root_a))
    # The fence itself gave the unsettled task back (release_fenced, under the run's row lock).
    fences = [e for e in events_of(demo.run_root("kill-b")) if e.get("action") == "fenced_run_released"]
    assert [(f["detail"]["run_id"], f["detail"]["tasks"]) for f in fences] == [(run_a, [claimed_a[1]])]


def test_a_budget_crossing_stops_both_hosts(demo, server: PgServer) -> None:
    db = server.fresh_database("b" + uuid.uuid4().hex[:10])
    tasks = ["demo-hang", *QUICK]
    procs = {name: launch(demo, db, "money", name, tasks) for name in ("money-a", "money-b")}
    try:
        # Both hosts hold a claim (admitted, their runners started): then the key's meter crosses.
        started = wait_for(
            lambda: (
                all(read_claimed(demo.run_root(n) / "claims.jsonl") for n in procs)
                or any(p.poll() is not None for p in procs.values())
            ),
            600,
            0.5,
        )
        assert started and all(p.poll() is None for p in procs.values()), [log_of(demo, n) for n in procs]
        demo.meter.add_usage(60.0)  # past the $50 ceiling's $5 reserve, for every host on the key
        crossed = time.monotonic()
        codes = wait_all(procs, 180)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    waited = time.monotonic() - crossed
    for name, code in codes.items():
        assert code == ExitCode.STOPPED, (name, code, log_of(demo, name))
        reason = read_json(demo.run_root(name) / "run_manifest.json")["stop_reason"]
        assert reason in (StopReason.CAMPAIGN_BUDGET_RESERVE.value, StopReason.CAMPAIGN_STOPPED.value), reason
        assert label_is_empty(demo.docker_host, run_label(demo.run_root(name)))
    record = read_campaign_db(db, "money")
    assert record.stop is not None and record.stop.reason == StopReason.CAMPAIGN_BUDGET_RESERVE.value
    assert waited < 120, waited
    assert {c[0] for c in claim_rows(db, "money").values()} <= {"open", "settled"}  # no claim left held

    # A host started after the stop is refused in preflight, in one sentence, with nothing written.
    late = launch(demo, db, "money", "money-late", tasks)
    assert wait_all({"money-late": late}, 300)["money-late"] == ExitCode.REFUSED, log_of(demo, "money-late")
    assert "was stopped by campaign_budget_reserve" in log_of(demo, "money-late")
    assert not demo.run_root("money-late").exists()
