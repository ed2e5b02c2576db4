"""A process named by pid and start time, and found by an environment marker, from /proc."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

from cowork_adapter.container.procs import pgid_of, pids_with_env, process_alive, start_ticks


def test_start_ticks_names_one_process():
    me = os.getpid()
    ticks = start_ticks(me)
    assert isinstance(ticks, int) and ticks >= 0
    assert start_ticks(me) == ticks  # stable for the life of the process
    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            assert start_ticks(child.pid) >= ticks  # started later
            assert process_alive(child.pid, start_ticks(child.pid))
            assert not process_alive(child.pid, start_ticks(child.pid) + 1)  # another start: another process
            child.kill()
            # Exited, not reaped: a fixed pause could end before the killed child ran again to die.
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            assert not process_alive(child.pid, None)  # a zombie runs no code
        finally:
            child.kill()
    assert start_ticks(child.pid) is None and not process_alive(child.pid, None)


def _wait_exec(*pids: int) -> None:
    """Until each child runs `sleep`: between fork and exec its environment is still ours (a loaded
    machine can stretch that gap past the first look)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if all(Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep") for pid in pids):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"children {pids} did not exec sleep within 10 s")


def test_pids_with_env_finds_the_marker_exactly_and_pgid_of():
    value = secrets.token_hex(8)
    marked = subprocess.Popen(["sleep", "30"], env={"COWORK_RUN_LABEL": value}, start_new_session=True)
    near = subprocess.Popen(["sleep", "30"], env={"COWORK_RUN_LABEL": value + "0"})
    try:
        _wait_exec(marked.pid, near.pid)
        found = pids_with_env("COWORK_RUN_LABEL", value)
        assert marked.pid in found and near.pid not in found and os.getpid() not in found
        assert pgid_of(marked.pid) == marked.pid and pgid_of(near.pid) == os.getpgid(0)
    finally:
        for proc in (marked, near):
            proc.kill()
            proc.wait()
    assert pids_with_env("COWORK_RUN_LABEL", value) == [] and pgid_of(marked.pid) is None


def test_a_group_is_signalled_only_while_a_member_carries_the_marker(tmp_path):
    import signal

    from cowork_adapter.container.procs import marked_members, signal_marked_group

    value = secrets.token_hex(8)
    ours = subprocess.Popen(["sleep", "30"], env={"COWORK_RUN_LABEL": value}, start_new_session=True)
    stranger = subprocess.Popen(["sleep", "30"], env={"COWORK_RUN_LABEL": value + "0"}, start_new_session=True)
    try:
        _wait_exec(ours.pid, stranger.pid)
        assert marked_members(ours.pid, "COWORK_RUN_LABEL", value) == [ours.pid]
        assert marked_members(stranger.pid, "COWORK_RUN_LABEL", value) == []
        assert signal_marked_group(stranger.pid, signal.SIGTERM, "COWORK_RUN_LABEL", value) is False
        assert signal_marked_group(ours.pid, signal.SIGTERM, "COWORK_RUN_LABEL", value) is True
        assert ours.wait(timeout=10) == -signal.SIGTERM
        time.sleep(0.2)
        assert stranger.poll() is None  # never signalled
        # The run's group is gone: its id names nothing of the run's any more.
        assert signal_marked_group(ours.pid, signal.SIGKILL, "COWORK_RUN_LABEL", value) is False
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()


def test_the_watchdog_never_targets_a_recorded_group_without_the_marker(tmp_path):
    from cowork_adapter.custody.watchdog import Watch, write_processes
    from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity

    value = secrets.token_hex(8)
    (tmp_path / "custody").mkdir()
    stranger = subprocess.Popen(["sleep", "30"], env={"PATH": "/bin"}, start_new_session=True)
    marked = subprocess.Popen(["sleep", "30"], env={"COWORK_RUN_LABEL": value}, start_new_session=True)
    try:
        _wait_exec(stranger.pid, marked.pid)
        # processes.json still names the run's runner group, whose id another session holds by now.
        write_processes(
            tmp_path, CustodyProcesses(launcher=ProcessIdentity(pid=1, start_ticks=None), runner_pgid=stranger.pid)
        )
        watch = Watch(tmp_path, value, "unix:///nonexistent.sock", 1, None, 1.0, 1.0, None)
        groups, pids = watch.targets()
        assert stranger.pid not in groups and stranger.pid not in pids
        assert marked.pid in groups and marked.pid in pids
    finally:
        for proc in (stranger, marked):
            proc.kill()
            proc.wait()
