"""The pure parts of `clear`, `status` and `stop` on a dead run: the process proof (on a fake /proc),
the clear line, the plan's refusals, and stop's handling of an orphaned runner group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter.campaign.commands import reconcile_command
from cowork_adapter.container.procs import group_alive
from cowork_adapter.custody.liveness import ProcTable, Recorded, parse_stat, prove
from cowork_adapter.errors import Refusal
from cowork_adapter.ops.clear import clear_command, make_plan
from cowork_adapter.ops.recorded import clear_hint, clear_key_note, recorded_docker_host
from cowork_adapter.ops.run_view import read_run
from cowork_adapter.ops.stop import stop_command
from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint
from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.schemas.monitor import MeterState, Monitor, Progress

SELF = 99999  # the pid `prove` treats as the asking command in the fake tables


def stat_line(
    pid: int, comm: str = "python3", state: str = "S", ppid: int = 1, pgrp: int | None = None, start: int = 1000
) -> str:
    # Fields 3.. of /proc/<pid>/stat; field 22 (starttime) is the 20th after the command name.
    rest = [state, str(ppid), str(pgrp if pgrp is not None else pid), "0"] + ["0"] * 15 + [str(start)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(rest)


class FakeProc:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()

    def add(
        self, pid: int, argv: list[str], *, cwd: Path | None = None, environ: list[str] | None = None, **stat
    ) -> None:
        d = self.root / str(pid)
        d.mkdir()
        (d / "stat").write_text(stat_line(pid, **stat))
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        if environ is not None:  # absent: unreadable, as another user's process is
            (d / "environ").write_bytes(b"\0".join(e.encode() for e in environ) + b"\0")
        if cwd is not None:
            (d / "cwd").symlink_to(cwd)

    @property
    def table(self) -> ProcTable:
        return ProcTable(self.root)


@pytest.fixture
def proc(tmp_path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


RUN = Path("/data/runs/r1")
MARKED = {"COWORK_RUN_LABEL": "ab" * 16}  # the marker of the run `manifest` below describes
LAUNCHER_ARGV = ["python3", "-m", "cowork_adapter", "run", "--run-root", str(RUN)]


def test_parse_stat_counts_fields_after_the_last_parenthesis():
    stat = parse_stat(stat_line(42, comm="we) ird (name", state="Z", ppid=7, pgrp=40, start=123456))
    assert (stat.state, stat.ppid, stat.pgrp, stat.start_ticks) == ("Z", 7, 40, 123456)
    assert parse_stat("42 (x) S 1") is None


def test_a_recorded_launcher_is_alive_only_with_its_own_start_time(proc):
    proc.add(100, LAUNCHER_ARGV, start=5000)
    same = CustodyProcesses(launcher=ProcessIdentity(pid=100, start_ticks=5000))
    reused = CustodyProcesses(launcher=ProcessIdentity(pid=100, start_ticks=4999))
    alive = prove(RUN, Recorded(custody=same), table=proc.table, self_pid=SELF)
    assert [(h.role, h.pid, h.alive, h.source) for h in alive.holders] == [
        ("launcher", 100, True, "custody/processes.json")
    ]
    gone = prove(RUN, Recorded(custody=reused), table=proc.table, self_pid=SELF)
    # Another start time: pid 100 is another process now, so the recorded launcher is gone.
    assert gone.first("launcher").alive is False and gone.all_gone


def test_watchdog_and_runner_group_from_processes_json(proc):
    proc.add(200, ["python3", "-m", "cowork_adapter.custody.watchdog", str(RUN)], start=10)
    proc.add(300, ["bash", "run_parallel.sh", "2", "t1"], pgrp=300)
    proc.add(301, ["docker", "run", "x"], pgrp=300)
    proc.add(302, ["sleep", "1"], pgrp=300, state="Z")
    custody = CustodyProcesses(
        launcher=ProcessIdentity(pid=100, start_ticks=1),
        watchdog=ProcessIdentity(pid=200, start_ticks=10),
        runner_pgid=300,
    )
    live = prove(RUN, Recorded(custody=custody), table=proc.table, self_pid=SELF)
    assert live.first("launcher").alive is False  # no /proc entry
    assert live.first("watchdog").alive is True
    group = live.live_group()
    assert group.pid == 300 and group.members == (300, 301)  # the zombie does not keep the group
    assert "runner group 300 alive (2 processes: 300, 301)" in live.sentence()
    assert not live.all_gone


def test_fallback_pids_without_start_time_need_a_launcher_argv(proc):
    proc.add(100, ["vim", "notes.txt"])  # monitor.json's launcher pid, reused by an editor
    proc.add(300, ["bash"], pgrp=300, state="Z")  # the recorded runner group: only a zombie left
    recorded = Recorded(launcher_pids=[(100, "monitor.json")], runner_pgids=[(300, "monitor.json")])
    live = prove(RUN, recorded, table=proc.table, self_pid=SELF)
    assert live.all_gone
    assert live.sentence() == ("launcher pid 100 gone (from monitor.json); runner group 300 gone (from monitor.json)")


def test_the_scan_finds_an_unrecorded_launcher_watchdog_or_runner(proc, tmp_path):
    proc.add(110, ["python3", "-m", "cowork_adapter", "run", "--run-root", "r1"], cwd=RUN.parent)
    proc.add(120, ["python3", "-m", "cowork_adapter.custody.watchdog", "--run-root", str(RUN)])
    proc.add(130, ["bash", "run_parallel.sh", "1", "t"], cwd=RUN / "bench")
    proc.add(140, ["python3", "-m", "cowork_adapter", "run", "--run-root", str(RUN) + "-other"])
    proc.add(150, ["python3", "-m", "cowork_adapter", "status", str(RUN)])  # an operator looking
    proc.add(160, ["bash"], cwd=RUN)  # an operator's shell inside the run root
    proc.add(SELF, ["python3", "-m", "cowork_adapter", "clear", str(RUN)], ppid=170)
    proc.add(170, ["bash", "-c", f"cowork-adapter clear {RUN}"])  # the asking command's parent
    live = prove(RUN, Recorded(), table=proc.table, self_pid=SELF)
    assert [(h.role, h.pid) for h in live.alive] == [
        ("launcher", 110),
        ("process of the run", 120),
        ("process of the run", 130),
    ]
    assert all(h.source == "the process table" for h in live.alive)


def test_a_recorded_group_id_reused_by_unmarked_processes_is_not_the_runs(proc):
    marker = b"COWORK_RUN_LABEL=" + b"ab" * 16
    proc.add(300, ["sleep", "999"], pgrp=300, environ=["PATH=/bin", "HOME=/home/other"])  # someone else's now
    proc.add(301, ["sleep", "999"], pgrp=300, environ=["COWORK_RUN_LABEL=" + "cd" * 16])  # another run's
    recorded = Recorded(runner_pgids=[(300, "monitor.json")], marker=marker)
    live = prove(RUN, recorded, table=proc.table, self_pid=SELF)
    assert live.all_gone and live.sentence() == "runner group 300 gone (from monitor.json)"
    proc.add(302, ["bash", "run_parallel.sh"], pgrp=300, environ=["A=1", marker.decode()])  # one of the run's
    proc.add(303, ["docker", "ps"], pgrp=300)  # unreadable environment: not proof of another owner
    group = prove(RUN, recorded, table=proc.table, self_pid=SELF).live_group()
    assert group is not None and group.members == (302, 303)


def test_an_empty_record_proves_nothing_alive(proc):
    live = prove(RUN, Recorded(), table=proc.table, self_pid=SELF)
    assert live.all_gone and live.sentence() == "no process of the run was recorded or found"


# ---------------------------------------------------------------- the clear line and the plan


def manifest(run_root: Path, **over) -> RunManifest:
    fields = dict(
        run_root=str(run_root),
        run_label="ab" * 16,
        created_at="2026-03-01T12:00:00Z",
        updated_at="2026-03-01T12:00:00Z",
        argv=["cowork-adapter", "run"],
        adapter={"version": "0"},
        budgets={
            "meter": {"url": "http://127.0.0.1:8111/api/v1"},
            "api_key_env": "DEMO_KEY",
            "resource_root": str(run_root.parent),
        },
        docker_host="unix:///tmp/d.sock",
    )
    fields.update(over)
    return RunManifest(**fields)


def campaign_record(run_root: Path | None, key: str = "k-1") -> CampaignRecord:
    now = datetime.now(UTC)
    active = (
        None
        if run_root is None
        else {
            "run_root": str(run_root),
            "run_label": "ab" * 16,
            "launcher_pid": 1,
            "started_at": now,
            "host": "h",
            "usage_at_start": 1.0,
        }
    )
    return CampaignRecord(
        fingerprint=key_fingerprint(key),
        ceiling_usd=50,
        usage_baseline=1.0,
        prior_spend_usd=0,
        last_usage=1.0,
        last_usage_observed_at=now,
        created_at=now,
        active_run=active,
    )


@pytest.fixture
def run_root(tmp_path) -> Path:
    root = tmp_path / "run-1"
    root.mkdir()
    return root


def write(run_root: Path, m: RunManifest) -> RunManifest:
    (run_root / "run_manifest.json").write_text(m.to_json())
    return m


def test_the_clear_line_names_every_recorded_flag(run_root, tmp_path):
    campaign = tmp_path / "campaign.json"
    m = manifest(run_root, campaign_file=str(campaign))
    # Killed before the campaign existed: no campaign file and no meter are needed.
    assert (
        clear_hint(run_root, m)
        == f"cowork-adapter clear {run_root} --docker-host unix:///tmp/d.sock --operator-note '...'"
    )
    assert clear_key_note(m) == ""
    campaign.write_text(campaign_record(run_root).to_json())
    assert clear_hint(run_root, m) == (
        f"cowork-adapter clear {run_root} --campaign-file {campaign} --meter-url http://127.0.0.1:8111/api/v1 "
        "--docker-host unix:///tmp/d.sock --operator-note '...'"
    )
    assert clear_key_note(m) == " (with the provider key in $DEMO_KEY)"
    spaced = tmp_path / "with space" / "run"
    assert f"clear '{spaced}'" in clear_hint(spaced, manifest(spaced))


def test_the_docker_host_falls_back_to_the_argv(run_root):
    m = manifest(run_root, docker_host=None, argv=["cowork-adapter", "run", "--docker-host", "tcp://h:2375"])
    assert recorded_docker_host(run_root, m) == "tcp://h:2375"
    assert recorded_docker_host(run_root, manifest(run_root, docker_host=None)) is None


def plan(run_root: Path, environ=None, **flags):
    defaults = dict(campaign_file=None, meter_url=None, docker_host=None, api_key_env=None)
    defaults.update(flags)
    return make_plan(run_root, environ=environ or {}, **defaults)


def refused(fn) -> str:
    with pytest.raises(Refusal) as exc:
        fn()
    return exc.value.sentence


def test_the_plan_refuses_bad_inputs_before_anything_changes(run_root, tmp_path):
    assert "is not a directory" in refused(lambda: plan(tmp_path / "nope"))
    assert "has no run_manifest.json" in refused(lambda: plan(run_root))
    (run_root / "run_manifest.json").write_text("{not json")
    assert "is not a valid run manifest" in refused(lambda: plan(run_root))
    write(run_root, manifest(run_root, docker_host=None))
    assert "recorded no Docker host" in refused(lambda: plan(run_root))
    write(run_root, manifest(run_root))
    missing = tmp_path / "missing.json"
    assert "does not exist; omit --campaign-file" in refused(lambda: plan(run_root, campaign_file=missing))
    assert not list(tmp_path.glob("*.lock"))


def test_a_run_killed_before_its_campaign_existed_skips_the_campaign(run_root, tmp_path):
    write(run_root, manifest(run_root, campaign_file=str(tmp_path / "campaign.json")))
    p = plan(run_root)
    assert (p.campaign_file, p.campaign_state, p.key) == (None, "no_campaign_file", None)
    (run_root / "events.jsonl").write_text(
        '{"schema":"cowork_adapter.event.v1","ts":"2026-03-01T12:00:00Z","kind":"runner_started","pid":4}\n'
    )
    assert "is missing although its runner started" in refused(lambda: plan(run_root))


def test_settling_needs_the_campaigns_key(run_root, tmp_path):
    campaign = tmp_path / "campaign.json"
    campaign.write_text(campaign_record(run_root, key="k-1").to_json())
    write(run_root, manifest(run_root, campaign_file=str(campaign)))
    assert "DEMO_KEY holds no provider key" in refused(lambda: plan(run_root))
    assert "is not the campaign's key" in refused(lambda: plan(run_root, {"DEMO_KEY": "k-2"}))
    p = plan(run_root, {"DEMO_KEY": "k-1"})
    assert (p.campaign_state, p.key, p.meter_url) == ("settled", "k-1", "http://127.0.0.1:8111/api/v1")
    assert plan(run_root, {"OTHER": "k-1"}, api_key_env="OTHER").key == "k-1"
    campaign.write_text(campaign_record(tmp_path / "another-run").to_json())
    assert plan(run_root).campaign_state == "active_run_is_another_run"
    campaign.write_text(campaign_record(None).to_json())
    assert plan(run_root).campaign_state == "no_active_run"


def test_clear_refuses_while_a_process_of_the_run_lives_and_touches_nothing(run_root, proc, capsys):
    write(run_root, manifest(run_root))
    (run_root / "private").mkdir()
    (run_root / "private" / "agent.env").write_text("KEY=x\n")
    (run_root / "custody").mkdir()
    (run_root / "custody" / "processes.json").write_text(
        CustodyProcesses(launcher=ProcessIdentity(pid=100, start_ticks=7), runner_pgid=300).to_json()
    )
    proc.add(300, ["bash", "run_parallel.sh"], pgrp=300)
    before = (run_root / "run_manifest.json").read_bytes()
    code = clear_command(run_root, "checked", table=proc.table)
    err = capsys.readouterr().err
    assert code == 2 and "runner group 300 alive" in err and f"cowork-adapter stop {run_root}" in err
    assert len(err.strip().splitlines()) == 1
    assert (run_root / "private" / "agent.env").exists() and (run_root / "run_manifest.json").read_bytes() == before
    assert not (run_root / "events.jsonl").exists()


def test_clear_refuses_an_empty_note(run_root, capsys):
    write(run_root, manifest(run_root))
    assert clear_command(run_root, "  ") == 2
    assert "--operator-note" in capsys.readouterr().err


def test_reconcile_of_a_missing_campaign_creates_no_lock(run_root, tmp_path, capsys):
    campaign = tmp_path / "never.json"
    code = reconcile_command(campaign, run_root, "note", "K", docker_host="unix:///x", environ={"K": "k"})
    assert code == 2 and "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "never.json.lock").exists()


# ---------------------------------------------------------------- stop on an orphaned runner group


def test_stop_fences_and_stops_an_orphaned_runner_group(run_root, capsys):
    write(run_root, manifest(run_root, outcome="running", docker_host=None))
    # A runner in its own session that ignores SIGTERM: stop must escalate to SIGKILL.
    runner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, "
            "signal.SIG_IGN)\nopen('ready','w').close()\nwhile True: time.sleep(0.1)",
        ],
        cwd=run_root,
        start_new_session=True,
        env={**os.environ, **MARKED},
    )
    try:
        deadline = time.monotonic() + 20
        while not (run_root / "ready").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        mon = Monitor(
            observed_at=datetime.now(UTC),
            launcher_pid=dead.pid,
            runner_pid=runner.pid,
            finished=False,
            progress=Progress(selected=2, running=1),
            meter=MeterState(blindness_sec=30.0),
        )
        (run_root / "monitor.json").write_text(mon.to_json())
        code = stop_command(run_root, timeout=1.0, poll_sec=0.1)
        err = capsys.readouterr().err
        assert code == 1
        assert f"runner group {runner.pid} was still running: fenced" in err and "ended after SIGKILL" in err
        assert (run_root / "custody" / "stop").read_text() == "stop_requested\n"
        recorded = [json.loads(line) for line in (run_root / "events.jsonl").read_text().splitlines()]
        assert [(e["kind"], e["source"]) for e in recorded] == [("stop_requested", "operator_stop_without_launcher")]
        runner.wait(timeout=10)
        assert not group_alive(runner.pid)
        assert f"runner group {runner.pid} gone" in err and f"Next: `cowork-adapter clear {run_root}" in err
        assert "nothing was signalled" not in err
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


def test_stop_never_signals_a_recorded_group_whose_id_now_names_other_processes(run_root, capsys):
    """The run's group is gone and the kernel gave its id to another session (here: a process that
    carries no marker, or another run's): `stop` fences but signals nothing."""
    write(run_root, manifest(run_root, outcome="running", docker_host=None))
    for environment in ({}, {"COWORK_RUN_LABEL": "cd" * 16}):
        stranger = subprocess.Popen(
            [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"],
            start_new_session=True,
            env={**{k: v for k, v in os.environ.items() if k != "COWORK_RUN_LABEL"}, **environment},
        )
        try:
            dead = subprocess.Popen([sys.executable, "-c", "pass"])
            dead.wait()
            mon = Monitor(
                observed_at=datetime.now(UTC),
                launcher_pid=dead.pid,
                runner_pid=stranger.pid,
                finished=False,
                progress=Progress(selected=2, running=1),
                meter=MeterState(blindness_sec=30.0),
            )
            (run_root / "monitor.json").write_text(mon.to_json())
            code = stop_command(run_root, timeout=1.0, poll_sec=0.1)
            err = capsys.readouterr().err
            assert code == 1
            assert "nothing was signalled" in err and f"runner group {stranger.pid} gone" in err, err
            time.sleep(0.3)
            assert stranger.poll() is None, "stop signalled a group that is not the run's"
        finally:
            os.killpg(stranger.pid, signal.SIGKILL)
            stranger.wait()


def test_the_orphaned_group_stop_checks_the_marker_before_each_signal(run_root):
    from cowork_adapter.ops.stop import stop_orphaned_group

    write(run_root, manifest(run_root, outcome="running", docker_host=None))
    stranger = subprocess.Popen(
        ["sleep", "30"], start_new_session=True, env={k: v for k, v in os.environ.items() if k != "COWORK_RUN_LABEL"}
    )
    try:
        said = stop_orphaned_group(run_root, stranger.pid, grace_sec=1.0, poll_sec=0.1)
        assert "carries the run's marker (COWORK_RUN_LABEL), so it is not the run's" in said and "not signalled" in said
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_status_of_a_dead_run_names_processes_objects_and_the_clear_line(run_root, capsys):
    from cowork_adapter.ops.status import status_command

    write(run_root, manifest(run_root, outcome="running", docker_host=None))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mon = Monitor(
        observed_at=datetime.now(UTC),
        launcher_pid=dead.pid,
        finished=False,
        progress=Progress(selected=2, running=1),
        meter=MeterState(blindness_sec=30.0),
    )
    (run_root / "monitor.json").write_text(mon.to_json())
    assert status_command(run_root, as_json=True) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["processes"] == [
        {"role": "launcher", "pid": dead.pid, "source": "monitor.json", "alive": False, "members": []}
    ]
    assert status["labelled"]["error"] == "the run recorded no Docker host"
    assert (
        status["next_command"] == f"`cowork-adapter clear {run_root} --docker-host DOCKER_HOST --operator-note '...'`"
    )
    assert status_command(run_root, as_json=False) == 0
    text = capsys.readouterr().out
    assert f"processes: launcher pid {dead.pid} gone (from monitor.json)" in text
    assert "labelled objects: unknown (the run recorded no Docker host)" in text
    assert "its launcher is gone, so these numbers stopped there" in text
    assert f"next: `cowork-adapter clear {run_root}" in text
    assert read_run(run_root).is_run_root


def test_status_of_a_run_that_ended_cleanly_names_no_next_command(run_root, capsys):
    from cowork_adapter.ops.status import status_command

    write(
        run_root,
        manifest(run_root, outcome="completed", exit_code=0, finished_at="2026-03-01T12:10:00Z", docker_host=None),
    )
    mon = Monitor(
        observed_at=datetime.now(UTC),
        launcher_pid=1,
        finished=True,
        progress=Progress(selected=2, done=2),
        meter=MeterState(blindness_sec=30.0),
    )
    (run_root / "monitor.json").write_text(mon.to_json())
    assert status_command(run_root, as_json=True) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "finished" and status["cleanup_proven"] is True and status["next_command"] is None
    # The same run with its key file left behind: clearing it is the next step.
    (run_root / "private").mkdir()
    (run_root / "private" / "agent.env").write_text("K=v\n")
    assert status_command(run_root, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["next_command"].startswith(f"`cowork-adapter clear {run_root}")


def test_clear_with_an_unreachable_daemon_removes_nothing_but_the_key(run_root, proc, tmp_path, capsys):
    write(run_root, manifest(run_root, docker_host=f"unix://{tmp_path}/no-daemon.sock"))
    (run_root / "private").mkdir()
    (run_root / "private" / "agent.env").write_text("KEY=x\n")
    before = (run_root / "run_manifest.json").read_bytes()
    code = clear_command(run_root, "checked", table=proc.table)
    err = capsys.readouterr().err
    assert code == 1 and "cannot list the run's labelled objects, so nothing was removed" in err
    assert not (run_root / "private" / "agent.env").exists()
    assert (run_root / "run_manifest.json").read_bytes() == before  # not recorded as cleared


def test_the_next_command_waits_for_a_live_watchdog_and_stops_a_live_runner(run_root, proc):
    from cowork_adapter.ops.run_view import next_command

    write(run_root, manifest(run_root))
    files = read_run(run_root)
    proc.add(200, ["python3", "-m", "cowork_adapter.custody.watchdog"], start=3)
    proc.add(300, ["bash", "run_parallel.sh"], pgrp=300)
    custody = CustodyProcesses(
        launcher=ProcessIdentity(pid=100, start_ticks=1), watchdog=ProcessIdentity(pid=200, start_ticks=3)
    )
    only_watchdog = prove(run_root, Recorded(custody=custody), table=proc.table, self_pid=SELF)
    assert next_command(files, only_watchdog).startswith(
        "wait for the watchdog (pid 200) to finish, then `cowork-adapter clear"
    )
    with_runner = prove(run_root, Recorded(custody=custody.replace(runner_pgid=300)), table=proc.table, self_pid=SELF)
    assert next_command(files, with_runner).startswith(
        f"`cowork-adapter stop {run_root}` (to stop what still runs), then"
    )
