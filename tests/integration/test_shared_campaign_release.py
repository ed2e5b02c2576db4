"""`campaign release` with two real adapter hosts of one campaign (real engine, real PostgreSQL, the
demo benchmark, the meter stand-in), as in test_shared_campaign_run.py.

  - a lost machine: host A runs in its own UTS namespace under another host name (so host B, on
    this machine, can never prove its processes gone: only A's machine could); A's launcher,
    watchdog and runner group are SIGKILLed together mid-task, leaving its containers on the
    daemon. A's unsettled claim stays stuck while B runs; the operator's `campaign release` removes
    A's containers by their exact label and reopens the claim; B then runs it. Every task is
    settled once, nothing A settled runs again.
  - a host that comes back: host R frozen whole (SIGSTOP: a suspended VM) until its lease lapsed,
    released by the operator's attestation, then resumed: it stops with host_run_released
    (exit 3), cleans up its own label and settles nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import docker
import msgspec
from pg_server import PASSWORD, PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path
from test_campaign_db_run import no_password
from test_shared_campaign_run import (  # the same directory (on sys.path under pytest)
    QUICK,
    claim_rows,
    demo,  # noqa: F401 (a module fixture)
    events_of,
    host_runs,
    launch,
    log_of,
    wait_all,
)

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.custody.watchdog import read_processes
from cowork_adapter.demo.env import read_json, wait_for
from cowork_adapter.schemas.multihost import ClaimedBatch, read_claimed
from cowork_adapter.vocab import ExitCode, StopReason

LOST_HOST = "lost-host-a"
# Run the launcher as on another machine: a UTS namespace of its own with another host name.
ANOTHER_MACHINE = ("unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', LOST_HOST)


def release(db: str, campaign: str, run_id: str, *flags: str) -> subprocess.CompletedProcess:
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
            campaign,
            "--host-run",
            run_id,
            "--operator-note",
            "test: the host's machine is gone",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PGPASSWORD": PASSWORD},
    )


def custody_pids(run_root) -> tuple[int, int | None, int | None]:
    """(launcher pid, watchdog pid, runner process group) as the run recorded them."""
    recorded = read_processes(run_root)
    assert recorded is not None, f"{run_root}: no custody/processes.json"
    return recorded.launcher.pid, recorded.watchdog.pid if recorded.watchdog else None, recorded.runner_pgid


def signal_all(run_root, sig: int, *, order: str) -> None:
    """`sig` to the watchdog (w), the launcher (l) and the runner group (r), in `order`."""
    launcher, watchdog, runner = custody_pids(run_root)
    for who in order:
        try:
            if who == "w" and watchdog:
                os.kill(watchdog, sig)
            elif who == "l":
                os.kill(launcher, sig)
            elif who == "r" and runner:
                os.killpg(runner, sig)
        except ProcessLookupError:
            pass


def batch_running(docker_host: str, run_root, batch: int) -> bool:
    """An agent container with the run's label (the runner's `agent-…`, which sleeps until the runner
    removes it; not the short `docker run --rm` image check), created after the run claimed its
    `batch`-th batch, is running."""
    lines = (run_root / "claims.jsonl").read_bytes().splitlines() if (run_root / "claims.jsonl").exists() else []
    if len(lines) < batch:
        return False
    try:
        claimed = msgspec.json.decode(lines[batch - 1], type=ClaimedBatch).claimed_at.timestamp()
    except msgspec.DecodeError:
        return False  # a torn line: not written yet
    client = docker.APIClient(base_url=docker_host, timeout=30)
    try:
        listed = client.containers(filters={"label": f"{RUN_LABEL_KEY}={run_label(run_root)}", "status": "running"})
    finally:
        client.close()
    return any(c["Created"] >= int(claimed) and any(n.startswith("/agent-") for n in c["Names"]) for c in listed)


def lapsed(db: str, run_id: str) -> bool:
    import psycopg2

    with psycopg2.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT lease_expires_at <= now() FROM host_runs WHERE run_id = %s", (run_id,))
        return bool(cur.fetchone()[0])


def test_a_lost_machines_claims_move_to_another_host_after_the_operators_release(demo, server: PgServer) -> None:
    db = server.fresh_database("lost" + uuid.uuid4().hex[:8])
    tasks = QUICK
    a = launch(demo, db, "lost", "lost-a", tasks, prefix=ANOTHER_MACHINE)
    root_a = demo.run_root("lost-a")
    b = None
    try:
        # Killed with its whole machine while its second task's containers run.
        assert wait_for(lambda: a.poll() is not None or batch_running(demo.docker_host, root_a, 2), 600, 0.2)
        assert a.poll() is None, log_of(demo, "lost-a")
        signal_all(root_a, signal.SIGKILL, order="wlr")
        a.wait(timeout=30)
        at_kill = claim_rows(db, "lost")
        run_a = host_runs(db, "lost")[str(root_a)][0]
        held_by_a = sorted(t for t, c in at_kill.items() if c[0] == "claimed" and c[1] == run_a)
        settled_by_a = {t for t, c in at_kill.items() if c[0] == "settled"}
        assert held_by_a, at_kill

        b = launch(demo, db, "lost", "lost-b", tasks)
        # Stuck without the operator: A's lease lapsed and B runs, yet A's claim stays A's (B cannot
        # prove A's processes gone: they were on another machine).
        assert wait_for(lambda: lapsed(db, run_a) and len(host_runs(db, "lost")) == 2, 300, 0.5)
        time.sleep(5)  # two of B's lease turns (lease 8 s): a fence would have happened by now
        assert b.poll() is None, log_of(demo, "lost-b")
        assert sorted(t for t, c in claim_rows(db, "lost").items() if c[0] == "claimed" and c[1] == run_a) == held_by_a

        done = release(db, "lost", run_a, "--docker-host", demo.docker_host)
        assert done.returncode == ExitCode.OK, done.stderr
        assert label_is_empty(demo.docker_host, run_label(root_a))  # A's leftovers removed by their label
        codes = wait_all({"lost-b": b}, 600)
        assert codes["lost-b"] == ExitCode.OK, log_of(demo, "lost-b")
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()

    after = claim_rows(db, "lost")
    assert {t: c[0] for t, c in after.items()} == {t: "settled" for t in tasks}
    claimed_b = read_claimed(demo.run_root("lost-b") / "claims.jsonl")
    assert not settled_by_a & set(claimed_b)  # nothing A settled ran again
    assert {t: c[2] for t, c in after.items()} == {t: 2 if t in held_by_a else 1 for t in tasks}  # each once, A's twice
    state, ended_at, _ = host_runs(db, "lost")[str(root_a)][1:]
    assert state == "released"
    for task in held_by_a:
        assert task in claimed_b and after[task][4] >= ended_at  # B took it only after the release
    with __import__("psycopg2").connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT host, release::text FROM host_runs WHERE run_id = %s", (run_a,))
        host, text = cur.fetchone()
    record = json.loads(text)
    assert host == LOST_HOST and record["host"] == LOST_HOST
    assert record["fence"] == "docker_label_cleaned" and record["removed"] and record["released_tasks"] == held_by_a
    # B never fenced A itself: the release was the operator's.
    assert not [e for e in events_of(demo.run_root("lost-b")) if e.get("action") == "fenced_run_released"]


def test_a_released_host_that_comes_back_stops_and_settles_nothing(demo, server: PgServer) -> None:
    db = server.fresh_database("back" + uuid.uuid4().hex[:8])
    r = launch(demo, db, "back", "back-r", ["demo-hang"])
    root = demo.run_root("back-r")
    frozen = False
    try:
        assert wait_for(lambda: r.poll() is not None or batch_running(demo.docker_host, root, 1), 600, 0.5)
        assert r.poll() is None, log_of(demo, "back-r")
        signal_all(root, signal.SIGSTOP, order="lwr")  # the whole machine suspended
        frozen = True
        run_id = host_runs(db, "back")[str(root)][0]
        assert wait_for(lambda: lapsed(db, run_id), 60, 0.5)
        done = release(db, "back", run_id, "--confirm-fenced")  # its daemon not named: attested
        assert done.returncode == ExitCode.OK, done.stderr
        released = claim_rows(db, "back")
        assert released["demo-hang"][:3] == ("open", None, 1)
        signal_all(root, signal.SIGCONT, order="lwr")
        frozen = False
        codes = wait_all({"back-r": r}, 300)
    finally:
        if frozen:
            signal_all(root, signal.SIGCONT, order="lwr")
        if r.poll() is None:
            r.kill()
    assert codes["back-r"] == ExitCode.STOPPED, log_of(demo, "back-r")
    assert read_json(root / "run_manifest.json")["stop_reason"] == StopReason.HOST_RUN_RELEASED.value
    assert label_is_empty(demo.docker_host, run_label(root))  # it cleaned up its own label
    assert claim_rows(db, "back") == released  # it settled, claimed and gave back nothing after the release
    run_id, state, _, _ = host_runs(db, "back")[str(root)]
    assert state == "released"  # its end did not turn the release into 'finished'
    stops = [e for e in events_of(root) if e.get("action") == "stop_seen"]
    assert [s["detail"]["reason"] for s in stops] == [StopReason.HOST_RUN_RELEASED.value]
