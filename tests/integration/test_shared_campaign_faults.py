"""Faults under two hosts of ONE shared campaign (`run --campaign-db ... --shared-campaign`), on the
real Docker engine, a real PostgreSQL server, the demo benchmark, the stub engine and the meter stand-in
(the hosts and helpers of test_shared_campaign_run.py):

  - the key's meter goes silent while both hosts run: each stops within its blindness bound
    (measured from the silence to its stop_requested event), cleanup proven, its claims back to open
    or settled, no task settled twice;
  - the PostgreSQL server restarts under both hosts: each stops cleanly (exit 3, a persistence or
    lease stop, cleanup proven) or continues; no claim is lost, and a later shared host finishes the
    campaign with every task settled once.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)
from test_shared_campaign_run import QUICK, claim_rows, demo, events_of, host_runs, launch, log_of, wait_all  # noqa: F401 (demo is a module fixture)

from cowork_adapter.campaign.observe import POLL_SEC, READ_SLICE_SEC
from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import read_json, wait_for
from cowork_adapter.schemas.multihost import read_claimed
from cowork_adapter.vocab import ExitCode, StopReason

BLINDNESS_SEC = 21.0  # the smallest bound the run accepts (> one 15 s poll plus one 5 s read): a short test
# After the bound lapses the supervisor needs at most the read in flight (one slice) to see it; the
# rest is slack for a loaded 2-core machine (load 10-30) between its check and the event's line.
STOP_MARGIN_SEC = READ_SLICE_SEC + 10.0
# Enough tasks that neither host runs out of work within the bound; demo-hang holds one host's agent.
TASKS = ["demo-hang", *QUICK, "demo-deck-stateful"]


def both_claimed(demo, procs) -> bool:
    return all(read_claimed(demo.run_root(n) / "claims.jsonl") for n in procs) or any(
        p.poll() is not None for p in procs.values()
    )


def first_stop_at(run_root: Path) -> tuple[float, str] | None:
    """Wall-clock time and reason of the run's first stop_requested event."""
    for event in events_of(run_root):
        if event.get("kind") == "stop_requested":
            return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp(), event["reason"]
    return None


def claimers(demo, names, task: str) -> list[str]:
    """The hosts whose claims.jsonl lists `task` (one line per claim it took)."""
    return [n for n in names if task in read_claimed(demo.run_root(n) / "claims.jsonl")]


def test_a_silent_meter_stops_both_hosts_within_the_blindness_bound(demo, server: PgServer) -> None:
    db = server.fresh_database("m" + uuid.uuid4().hex[:10])
    blind = ("--meter-blindness-sec", str(BLINDNESS_SEC))
    procs = {name: launch(demo, db, "blind", name, TASKS, blind) for name in ("blind-a", "blind-b")}
    try:
        assert wait_for(lambda: both_claimed(demo, procs), 600, 0.5)
        assert all(p.poll() is None for p in procs.values()), [log_of(demo, n) for n in procs]
        silenced = time.time()
        demo.meter.silence(True)  # every /key read hangs until the client's own timeout
        codes = wait_all(procs, 240)
    finally:
        demo.meter.silence(False)
        for p in procs.values():
            if p.poll() is None:
                p.kill()

    claims = claim_rows(db, "blind")
    runs = host_runs(db, "blind")
    reasons = []
    for name, code in codes.items():
        root = demo.run_root(name)
        assert code == ExitCode.STOPPED, (name, code, log_of(demo, name))
        assert "Traceback" not in log_of(demo, name), (name, log_of(demo, name))
        stop = first_stop_at(root)
        assert stop is not None, (name, log_of(demo, name))
        waited = stop[0] - silenced
        print(f"{name}: stop_requested {stop[1]} {waited:.1f} s after the silence (bound {BLINDNESS_SEC} s)")
        # Its last accepted read was at most one poll before the silence, so the bound lapses after it.
        assert BLINDNESS_SEC - POLL_SEC - READ_SLICE_SEC <= waited <= BLINDNESS_SEC + STOP_MARGIN_SEC, (name, waited)
        reasons.append(read_json(root / "run_manifest.json")["stop_reason"])
        assert label_is_empty(demo.docker_host, run_label(root))
        run_id = runs[str(root)][0]
        mine = read_claimed(root / "claims.jsonl")
        assert {t for t, c in claims.items() if c[1] == run_id and c[0] == "settled"} <= set(mine)
    assert StopReason.BUDGET_METER_UNAVAILABLE.value in reasons, reasons  # blindness, not something else
    assert set(reasons) <= {StopReason.BUDGET_METER_UNAVAILABLE.value, StopReason.CAMPAIGN_STOPPED.value}, reasons
    assert {c[0] for c in claims.values()} <= {"open", "settled"}, claims  # no claim left held
    for task, c in claims.items():  # no fence ran: each task claimed once at most, by one host
        assert c[2] == len(claimers(demo, procs, task)) <= 1, (task, c)


def test_postgres_restarted_under_two_hosts_loses_no_claim(demo, server: PgServer) -> None:
    name_db = "p" + uuid.uuid4().hex[:10]
    db = server.fresh_database(name_db)
    tasks = [*QUICK, "demo-deck-stateful"]
    procs = {name: launch(demo, db, "restart", name, tasks) for name in ("pg-a", "pg-b")}
    try:
        assert wait_for(lambda: both_claimed(demo, procs), 600, 0.5)
        assert all(p.poll() is None for p in procs.values()), [log_of(demo, n) for n in procs]
        server.restart()
        codes = wait_all(procs, 300)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()

    clean_stops = {StopReason.CAMPAIGN_PERSISTENCE_FAILED.value, StopReason.HOST_LEASE_LOST.value}
    for name, code in codes.items():
        log = log_of(demo, name)
        assert "Traceback" not in log, (name, log)
        assert code in (ExitCode.OK, ExitCode.STOPPED), (name, code, log)
        if code == ExitCode.STOPPED:
            assert read_json(demo.run_root(name) / "run_manifest.json")["stop_reason"] in clean_stops, (name, log)
        assert label_is_empty(demo.docker_host, run_label(demo.run_root(name)))
    print(
        "after the restart:",
        {n: (c, read_json(demo.run_root(n) / "run_manifest.json").get("stop_reason")) for n, c in codes.items()},
    )

    db = server.url.rsplit("/", 1)[0] + "/" + name_db  # the server's address may have changed
    # A later host finishes the campaign: it fences a stopped host's lapsed run and takes what it held.
    late = launch(demo, db, "restart", "pg-late", tasks)
    assert wait_all({"pg-late": late}, 600)["pg-late"] == ExitCode.OK, log_of(demo, "pg-late")
    names = [*procs, "pg-late"]
    claims = claim_rows(db, "restart")
    runs = {row[0]: root for root, row in host_runs(db, "restart").items()}  # run_id -> run root
    assert {t: c[0] for t, c in claims.items()} == {t: "settled" for t in tasks}
    print("times claimed:", {t: c[2] for t, c in claims.items()})
    for task, (_, run_id, times, _, _) in claims.items():
        took = claimers(demo, names, task)
        assert times == len(took), (task, times, took)  # every claim taken is on a host's claims.jsonl
        assert runs[run_id] == str(demo.run_root(took[-1])), (task, took)  # settled by its last claimer
        for earlier in took[:-1]:  # claimed again only after a host that did not settle it stopped
            assert codes.get(earlier) == ExitCode.STOPPED, (task, took, codes)
