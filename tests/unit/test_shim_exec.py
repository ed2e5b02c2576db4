"""The shim's exec evidence, creation locks and signal forwarding, against a FAKE docker (test_shim.py's Bed)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_shim import HOST, LABEL, Bed, bed  # noqa: F401 (fixture)

from cowork_adapter.custody import shim_inflight, shim_io
from cowork_adapter.custody.creations import Settled, creations_dir, settle
from cowork_adapter.custody.watchdog import RUN_MARKER_ENV
from cowork_adapter.demo.env import wait_for
from cowork_adapter.vocab import ContainerState, ShimRefusal

# ---------------------------------------------------------------- exec evidence


def test_exec_agent_records_task_dir_first_value_kept_and_never_blocks(bed):
    argv = [
        "exec",
        "agent-123-abcd0123",
        "timeout",
        "-k",
        "30",
        "1800",
        "python3",
        "-u",
        "/w/main.py",
        "--task_dir",
        "finalpool/task-a",
        "--max_steps",
        "100",
    ]
    assert bed.run(*argv).returncode == 0
    assert bed.last_argv() == argv
    assert (bed.evidence / "123-abcd0123.task").read_text() == "finalpool/task-a\n"
    assert bed.run("exec", "agent-123-abcd0123", "p", "--task_dir=other").returncode == 0
    assert (bed.evidence / "123-abcd0123.task").read_text() == "finalpool/task-a\n"


@pytest.mark.parametrize(
    "ps_names, state",
    [
        ("agent-8-12345678\n", ContainerState.PRESENT),
        ("agent-8-12345678-sidecar\nxagent-8-12345678\n", ContainerState.ABSENT),
        ("", ContainerState.ABSENT),
        ("FAIL", ContainerState.UNKNOWN),
    ],
)
def test_exec_eval_injects_agent_container_state(bed, ps_names, state):
    (bed.fake_dir / "ps_names").write_text(ps_names)
    argv = [
        "exec",
        "eval-8-12345678",
        "/opt/venv/bin/python3",
        "-u",
        "/w/main.py",
        "--task_dir",
        "t",
        "--phase",
        "eval",
    ]
    assert bed.run(*argv).returncode == 0
    probe, real = bed.calls()[-2:]
    assert probe["argv"] == ["ps", "-a", "--filter", "name=agent-8-12345678", "--format", "{{.Names}}"]
    assert probe["docker_host"] == HOST
    assert real["argv"] == ["exec", "-e", f"COWORK_AGENT_CONTAINER_STATE={state.value}", *argv[1:]]
    lines = (bed.evidence / "8-12345678.eval_admission").read_text().splitlines()
    assert [json.loads(line)["agent_container_state"] for line in lines] == [state.value]


def test_container_exec_eval_with_phase_equals_form(bed):
    (bed.fake_dir / "ps_names").write_text("agent-8-12345678\n")
    bed.run("container", "exec", "-w", "/w", "eval-8-12345678", "py", "--phase=eval")
    assert bed.last_argv() == [
        "container",
        "exec",
        "-e",
        "COWORK_AGENT_CONTAINER_STATE=present",
        "-w",
        "/w",
        "eval-8-12345678",
        "py",
        "--phase=eval",
    ]


def creation_files(bed: Bed) -> list[Path]:
    return sorted(creations_dir(bed.files.shim_config.parent.parent).iterdir())


def test_an_admitted_creation_holds_its_lock_outside_the_callers_group_until_docker_returns(bed):
    """The real docker of a creation runs in its own process group, without the run's marker (a
    stop of the runner's group or the watchdog's sweep does not cut a request the daemon would
    finish unseen) and holds the creation's lock while it runs; the file is gone once it returned.
    Other commands keep the caller's group and marker, and take no lock."""
    done = bed.run("run", "-d", "--name", "agent-1-abc", "img", env={RUN_MARKER_ENV: LABEL})
    assert done.returncode == 0
    call = bed.calls()[-1]
    assert call["locks"] == [True]  # exactly one lock, held while the docker ran
    assert call["pgid"] == call["pid"] and call["marker"] is None
    assert creation_files(bed) == []
    bed.run("network", "create", "net-1")
    assert bed.calls()[-1]["locks"] == [True] and creation_files(bed) == []
    bed.run("exec", "agent-1-abc", "true", env={RUN_MARKER_ENV: LABEL})
    call = bed.calls()[-1]
    assert call["locks"] == [] and call["pgid"] == os.getpgid(0) and call["marker"] == LABEL


def test_a_refused_creation_leaves_no_lock_and_a_lock_that_cannot_be_made_refuses(tmp_path):
    bed = Bed(tmp_path)
    bed.stop_file.write_text("")
    assert bed.run("run", "-d", "--name", "agent-1-abc", "img").returncode == 75
    assert creation_files(bed) == []
    bed.stop_file.unlink()
    directory = creations_dir(bed.files.shim_config.parent.parent)
    directory.rmdir()
    directory.write_text("")  # not a directory: no lock file can be made there
    done = bed.run("run", "-d", "--name", "agent-1-abc", "img")
    assert done.returncode == 75 and done.stderr.strip().endswith(ShimRefusal.CREATION_LOCK_FAILED.value)
    assert bed.calls() == [] and bed.creations()[-1]["cause"] == ShimRefusal.CREATION_LOCK_FAILED


def test_the_lock_outlives_a_killed_shim_while_its_docker_runs(bed):
    """SIGKILL of the shim alone (or of the runner's group) leaves the request running: its lock
    stays held, so cleanup waits for it (settle), and is taken once the docker has returned."""
    (bed.fake_dir / "sleep").write_text("3")
    # A shell leads the group and calls the wrapper, as the runner's bash does.
    proc = subprocess.Popen(
        ["sh", "-c", '"$0" run -d --name agent-2-abc img; exit $?', str(bed.files.wrapper)],
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not bed.calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bed.calls(), "the fake docker never started"
    os.killpg(proc.pid, signal.SIGKILL)  # the caller's whole group, as a stop of the runner does
    proc.wait(timeout=10)
    directory = creations_dir(bed.files.shim_config.parent.parent)
    early = settle(directory, time.monotonic() + 0.3)
    assert early == Settled(ended=0, in_flight=1)
    late = settle(directory, time.monotonic() + 20)
    assert late == Settled(ended=1, in_flight=0) and creation_files(bed) == []


def test_a_signal_to_the_shim_reaches_its_docker_and_the_exit_code_says_so(bed):
    (bed.fake_dir / "sleep").write_text("30")
    proc = subprocess.Popen(
        [str(bed.files.wrapper), "run", "-d", "--name", "agent-3-abc", "img"],
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # A SIGTERM before the shim has set its forwarding handlers (Python's start-up) kills the
    # shim itself (-15, not 143). The fake docker's call proves only that the docker runs: wait for
    # both, the handler read from the kernel's record of caught signals.
    assert wait_for(lambda: bool(bed.calls()) and catches(proc.pid, signal.SIGTERM), 20, 0.05), (
        "the shim never ran its docker with handlers set"
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert creation_files(bed) == []


def test_a_signal_before_the_docker_starts_is_forwarded_once_it_runs(tmp_path, monkeypatch):
    """The gap the handlers once left: a SIGTERM to the shim after admission but before its docker
    started ended the shim itself (-15). It is now kept and sent to the docker once it runs, and
    the exit code says the docker was terminated (143). The signal is sent from inside the start,
    in this process, where the shim's code runs (run_creation called directly)."""
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\nexec sleep 5\n")
    docker.chmod(0o755)
    (tmp_path / "creations").mkdir()
    config = {"real_docker": str(docker), "docker_host": HOST, "creations_dir": str(tmp_path / "creations")}
    lock = shim_inflight.hold_creation_lock(config)
    assert lock, "no creation lock"
    reached = []  # the signal reached a handler other than the shim's: the gap is open
    start = subprocess.Popen

    def start_after_a_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs (main thread)
        return start(*args, **kwargs)

    saved = {signum: signal.getsignal(signum) for signum in shim_io.FORWARDED_SIGNALS}
    signal.signal(signal.SIGTERM, lambda sig, _frame: reached.append(sig))
    monkeypatch.setattr(shim_inflight.subprocess, "Popen", start_after_a_signal)
    began = time.monotonic()
    try:
        code = shim_inflight.run_creation(config, ["run", "-d", "img"], lock)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert reached == []
    assert code == 128 + signal.SIGTERM and time.monotonic() - began < 4  # not the docker's own 5 s end
    assert list((tmp_path / "creations").iterdir()) == []  # the lock released once the docker ended


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (the SigCgt mask of /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return bool(mask & (1 << (signum - 1)))


def test_settle_reads_ended_and_held_locks_and_a_missing_directory(tmp_path):
    assert settle(tmp_path / "none", time.monotonic()) == Settled(0, 0)
    assert settle(None, time.monotonic()) == Settled(0, 0)
    (tmp_path / "a.lock").write_text("")  # its holder is gone: ended
    (tmp_path / "other").write_text("")  # not a lock file: ignored
    held = tmp_path / "b.lock"
    fd = os.open(held, os.O_WRONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert settle(tmp_path, time.monotonic() + 0.2) == Settled(ended=1, in_flight=1)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b.lock", "other"]
    finally:
        os.close(fd)
    assert settle(tmp_path, time.monotonic() + 5) == Settled(ended=1, in_flight=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def test_creations_are_recorded_one_line_each(bed):
    bed.run("network", "create", "net-4-00000000")
    bed.run("run", "-d", "--name=pg-4-00000000", "postgres:15")
    bed.run("run", "--rm", "img", "true")
    recs = bed.creations()
    assert [(r["subcommand"], r["name"], r["role"], r["admitted"]) for r in recs] == [
        ("network create", "net-4-00000000", "network", True),
        ("run", "pg-4-00000000", "pg", True),
        ("run", None, "other", True),
    ]
    assert all(isinstance(r["ts"], float) for r in recs)
