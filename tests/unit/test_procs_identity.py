"""A process named by pid and start time, and found by an environment marker, from /proc."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

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
            time.sleep(0.2)
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
            if all(open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"sleep") for pid in pids):
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
