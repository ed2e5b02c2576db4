"""`status` and `stop` on run roots written by real (stand-in) launcher processes.

The stand-in launcher is a real process whose argv looks like `cowork_adapter run --run-root R`;
on SIGTERM it finalises monitor.json and run_manifest.json the way run/run.py does. `stop` must
signal only such a process for the exact run root, and say what happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter.ops.run_view import is_launcher_of, read_run
from cowork_adapter.ops.status import build_status, status_command
from cowork_adapter.ops.stop import stop_command
from cowork_adapter.runroot.events import EventLog
from cowork_adapter.schemas.campaign import CampaignRecord
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.schemas.monitor import MeterState, Monitor, Progress, Spending
from cowork_adapter.vocab import EventKind

FAKE_LAUNCHER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from datetime import datetime, timezone
    from pathlib import Path
    from cowork_adapter.schemas.manifest import RunManifest
    from cowork_adapter.schemas.monitor import MeterState, Monitor, Progress
    from cowork_adapter.schemas.record import decode

    root = Path(sys.argv[sys.argv.index("--run-root") + 1]).resolve()
    mode = os.environ.get("FAKE_MODE", "clean")

    def monitor(finished, stop):
        return Monitor(observed_at=datetime.now(timezone.utc), launcher_pid=os.getpid(), finished=finished,
                       progress=Progress(selected=2, done=1, passed=1, running=1),
                       meter=MeterState(blindness_sec=30.0, age_sec=3.0), stop_reason=stop,
                       stop_causes=[stop] if stop else [], campaign_settlement="recorded" if finished else "pending")

    def on_term(signum, frame):
        (root / "monitor.json").write_text(monitor(mode == "clean", "signal_15").to_json())
        m = decode((root / "run_manifest.json").read_text(), RunManifest)
        m.stop_reason, m.stop_causes, m.outcome, m.exit_code = "signal_15", ["signal_15"], "stopped", 3
        m.finished_at = datetime.now(timezone.utc).isoformat()
        (root / "run_manifest.json").write_text(m.to_json())
        sys.exit(3)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore" else on_term)
    if os.environ.get("FAKE_WRITE_MONITOR", "1") == "1":
        (root / "monitor.json").write_text(monitor(False, None).to_json())
    (root / "ready").write_text("1")
    while True:
        time.sleep(0.1)
    """
)


def manifest(run_root: Path, **over) -> RunManifest:
    fields = dict(
        run_root=str(run_root),
        run_label="ab" * 16,
        created_at="2026-03-01T12:00:00Z",
        updated_at="2026-03-01T12:00:00Z",
        argv=["cowork-adapter", "run"],
        adapter={"version": "0"},
    )
    fields.update(over)
    return RunManifest(**fields)


def write_monitor(run_root: Path, *, pid: int, finished: bool, stop: str | None = None) -> None:
    mon = Monitor(
        observed_at=datetime(2026, 3, 1, 12, 10, tzinfo=UTC),
        launcher_pid=pid,
        finished=finished,
        progress=Progress(selected=3, done=3, passed=2, failed=1),
        spending=Spending(run_spent_usd=1.5, campaign_remaining_usd=40.0, run_budget_usd=20.0),
        meter=MeterState(blindness_sec=30.0, age_sec=4.0),
        stop_reason=stop,
        stop_causes=[stop] if stop else [],
        campaign_settlement="recorded",
    )
    (run_root / "monitor.json").write_text(mon.to_json())


@pytest.fixture
def run_root(tmp_path) -> Path:
    root = tmp_path / "run-1"
    root.mkdir()
    (root / "run_manifest.json").write_text(manifest(root, outcome="running").to_json())
    return root


def start_fake(
    run_root: Path,
    *,
    mode: str = "clean",
    argv_root: str | None = None,
    cwd: Path | None = None,
    write_monitor: bool = True,
) -> subprocess.Popen:
    env = {**os.environ, "FAKE_MODE": mode, "FAKE_WRITE_MONITOR": "1" if write_monitor else "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_LAUNCHER, "cowork_adapter", "run", "--run-root", argv_root or str(run_root)],
        env=env,
        cwd=cwd,
    )
    deadline = time.monotonic() + 30
    while not (run_root / "ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the stand-in launcher did not start"
        time.sleep(0.05)
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


# ---------------------------------------------------------------- status


def test_status_refuses_a_directory_that_is_not_a_run_root(tmp_path, capsys):
    assert status_command(tmp_path, as_json=False) == 2
    assert "is not a run root" in capsys.readouterr().err
    assert status_command(tmp_path / "missing", as_json=True) == 2


def test_status_of_a_finished_run_says_why_it_stopped(run_root, capsys):
    (run_root / "run_manifest.json").write_text(
        manifest(
            run_root,
            outcome="stopped",
            stop_reason="run_budget",
            stop_causes=["run_budget", "signal_15"],
            exit_code=3,
            finished_at="2026-03-01T12:10:00Z",
            campaign_settlement="recorded",
        ).to_json()
    )
    write_monitor(run_root, pid=1, finished=True, stop="run_budget")  # pid 1 is no launcher
    assert status_command(run_root, as_json=False) == 0
    out = capsys.readouterr().out
    assert f"run {run_root}: finished (outcome stopped)" in out
    assert "why it stopped: stop reason run_budget (all causes: run_budget, signal_15)" in out
    assert "cleanup: proven" in out and "campaign settlement: recorded" in out and "exit code: 3 (stopped)" in out
    assert "3/3 done" in out and "$1.50 of $20.00 budget" in out

    assert status_command(run_root, as_json=True) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "finished" and status["launcher_alive"] is False and status["cleanup_proven"] is True
    assert status["progress"]["passed"] == 2 and status["stop_reason"] == "run_budget" and status["exit_code"] == 3
    assert status["elapsed_sec"] == 600.0 and status["eta_sec"] is None


def test_status_from_events_when_monitor_is_missing(run_root, capsys):
    log = EventLog(run_root / "events.jsonl")
    log.append(EventKind.RUN_ADMITTED, run_root=str(run_root), selected=4, ts="2026-03-01T12:00:00.000000Z")
    for task in ("a", "b", "c"):
        log.append(EventKind.TASK_STARTED, task=task)
    log.append(EventKind.TASK_FINISHED, task="a", status="success")
    status = build_status(read_run(run_root), now=datetime(2026, 3, 1, 12, 5, tzinfo=UTC).timestamp())
    assert status["progress_source"] == "events.jsonl"
    assert (
        status["progress"]["selected"] == 4 and status["progress"]["done"] == 1 and status["progress"]["running"] == 2
    )
    assert status["elapsed_sec"] == 300.0 and status["eta_sec"] == 900.0
    assert status["state"] == "launcher_gone"
    assert status_command(run_root, as_json=False) == 0
    assert "1/4 done, 2 running (from events.jsonl" in capsys.readouterr().out


def test_status_reads_events_through_their_schema_and_names_invalid_lines(run_root):
    log = EventLog(run_root / "events.jsonl")
    log.append(EventKind.RUN_ADMITTED, run_root=str(run_root), selected=2, ts="2026-03-01T12:00:00.000000Z")
    log.append(EventKind.TASK_STARTED, task="a")
    with open(run_root / "events.jsonl", "a") as fh:
        # Not events: a task_started without its task, and a kind no writer has.
        fh.write(
            json.dumps({"schema": "cowork_adapter.event.v1", "ts": "2026-03-01T12:01:00Z", "kind": "task_started"})
            + "\n"
        )
        fh.write(
            json.dumps({"schema": "cowork_adapter.event.v1", "ts": "2026-03-01T12:01:00Z", "kind": "made_up"}) + "\n"
        )
    files = read_run(run_root)
    assert [e.kind for e in files.events] == [EventKind.RUN_ADMITTED, EventKind.TASK_STARTED]
    assert "events.jsonl has 2 lines that are not a valid event (skipped)" in files.problems
    status = build_status(files, now=datetime(2026, 3, 1, 12, 5, tzinfo=UTC).timestamp())
    assert status["progress"]["selected"] == 2 and status["progress"]["running"] == 1


def test_status_of_a_live_launcher(run_root, procs, capsys):
    proc = start_fake(run_root)
    procs.append(proc)
    assert status_command(run_root, as_json=True) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "running" and status["launcher_alive"] is True and status["launcher_pid"] == proc.pid
    assert status["cleanup_proven"] is False


def test_a_reused_pid_is_not_taken_for_the_launcher(run_root, procs, capsys):
    other = subprocess.Popen(["sleep", "60"])
    procs.append(other)
    write_monitor(run_root, pid=other.pid, finished=False)
    assert is_launcher_of(other.pid, run_root) is False
    assert status_command(run_root, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "launcher_gone"


# ---------------------------------------------------------------- stop


def test_stop_signals_the_launcher_and_reports_the_verified_cleanup(run_root, procs, capsys):
    proc = start_fake(run_root)
    procs.append(proc)
    code = stop_command(run_root, timeout=30, poll_sec=0.1)
    out = capsys.readouterr().out
    assert code == 0, out
    assert proc.wait(timeout=10) == 3
    assert f"sent SIGTERM to the launcher (pid {proc.pid}, from monitor.json)" in out
    assert "the run stopped: outcome stopped, stop reason signal_15, cleanup proven" in out and "exit code 3" in out


def test_stop_fences_a_run_with_custody_at_once_beside_the_signal(run_root, procs, capsys):
    """Admission is refused from the operator's stop on, not only once the launcher's loop turns."""
    (run_root / "custody").mkdir()
    proc = start_fake(run_root)
    procs.append(proc)
    assert stop_command(run_root, timeout=30, poll_sec=0.1) == 0
    out = capsys.readouterr().out
    assert f"; fenced (wrote {run_root / 'custody' / 'stop'})" in out
    assert (run_root / "custody" / "stop").read_text() == "stop_requested\n"


def test_stop_does_not_make_the_custody_directory_of_a_run_without_one(run_root, procs, capsys):
    proc = start_fake(run_root)
    procs.append(proc)
    assert stop_command(run_root, timeout=30, poll_sec=0.1) == 0
    assert not (run_root / "custody").exists() and "fenced" not in capsys.readouterr().out


def test_stop_finds_a_launcher_by_a_relative_run_root_in_its_argv(run_root, procs, capsys):
    proc = start_fake(run_root, argv_root=run_root.name, cwd=run_root.parent, write_monitor=False)
    procs.append(proc)
    assert stop_command(run_root, timeout=30, poll_sec=0.1) == 0
    assert "from the process table" in capsys.readouterr().out


def test_stop_uses_the_campaign_active_run_pid_when_monitor_is_missing(run_root, procs, tmp_path, capsys):
    proc = start_fake(run_root, write_monitor=False)
    procs.append(proc)
    now = datetime.now(UTC)
    campaign = tmp_path / "campaign.json"
    campaign.write_text(
        CampaignRecord(
            fingerprint="sha256:" + "0" * 16,
            ceiling_usd=50,
            usage_baseline=0,
            prior_spend_usd=0,
            last_usage=0,
            last_usage_observed_at=now,
            created_at=now,
            active_run={
                "run_root": str(run_root),
                "run_label": "ab" * 16,
                "launcher_pid": proc.pid,
                "started_at": now,
                "host": "h",
                "usage_at_start": 0,
            },
        ).to_json()
    )
    (run_root / "run_manifest.json").write_text(
        manifest(run_root, outcome="running", campaign_file=str(campaign)).to_json()
    )
    assert stop_command(run_root, timeout=30, poll_sec=0.1) == 0
    assert "from the campaign's active_run" in capsys.readouterr().out


def test_stop_never_signals_a_launcher_of_another_run_root(run_root, tmp_path, procs, capsys):
    other_root = tmp_path / "run-2"
    other_root.mkdir()
    (other_root / "run_manifest.json").write_text(manifest(other_root, outcome="running").to_json())
    other = start_fake(other_root)
    procs.append(other)
    write_monitor(run_root, pid=other.pid, finished=False)  # a stale or forged pid pointing at another run
    code = stop_command(run_root, timeout=5, poll_sec=0.1)
    err = capsys.readouterr().err
    assert code == 1 and "nothing was signalled" in err and f"cowork-adapter clear {run_root}" in err
    time.sleep(0.3)
    assert other.poll() is None, "another run's launcher was signalled"


def test_stop_of_a_run_that_already_ended(run_root, capsys):
    (run_root / "run_manifest.json").write_text(
        manifest(run_root, outcome="completed", exit_code=0, finished_at="2026-03-01T12:10:00Z").to_json()
    )
    write_monitor(run_root, pid=1, finished=True)
    assert stop_command(run_root, timeout=5) == 0
    out = capsys.readouterr().out
    assert "the run already ended: outcome completed" in out and "exit code 0 (completed)" in out


def test_stop_when_the_launcher_is_gone_but_the_run_is_unfinished(run_root, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_monitor(run_root, pid=dead.pid, finished=False)
    assert stop_command(run_root, timeout=5) == 1
    err = capsys.readouterr().err
    assert "unfinished and no launcher of it is running" in err and f"Next: `cowork-adapter clear {run_root}" in err


def test_stop_times_out_on_a_launcher_that_does_not_finish(run_root, procs, capsys):
    proc = start_fake(run_root, mode="ignore")
    procs.append(proc)
    assert stop_command(run_root, timeout=1.5, poll_sec=0.1) == 1  # it returns: its own timeout ended the wait
    assert "is still running after 1.5s" in capsys.readouterr().err
    assert proc.poll() is None  # stop never escalates to SIGKILL: custody needs the launcher's own cleanup


def test_stop_reports_unproven_cleanup(run_root, procs, capsys):
    proc = start_fake(run_root, mode="unproven")
    procs.append(proc)
    assert stop_command(run_root, timeout=30, poll_sec=0.1) == 1
    assert "cleanup is NOT proven" in capsys.readouterr().err


def test_stop_does_not_signal_a_launcher_already_cleaning_up(run_root, procs, capsys):
    proc = start_fake(run_root, mode="ignore")
    procs.append(proc)
    EventLog(run_root / "events.jsonl").append(EventKind.RUNNER_EXITED, exit_code=0)
    os.kill(proc.pid, signal.SIGSTOP)  # a stopped process would show a delivered signal as pending
    try:
        assert stop_command(run_root, timeout=0.5, poll_sec=0.1) == 1
        assert "already stopping; not signalling it again" in capsys.readouterr().out
        pending = Path(f"/proc/{proc.pid}/status").read_text()
        shdpnd = [line for line in pending.splitlines() if line.startswith(("SigPnd", "ShdPnd"))]
        assert all(int(line.split()[1], 16) == 0 for line in shdpnd), shdpnd
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def test_stop_refuses_a_directory_that_is_not_a_run_root(tmp_path, capsys):
    assert stop_command(tmp_path, timeout=1) == 2
