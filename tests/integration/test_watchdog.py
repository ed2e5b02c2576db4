"""The watchdog process on its own: a stand-in launcher (a real process that calls start_watchdog,
as run/run.py does) with a stand-in runner group, a real SIGKILL, and the real Docker daemon for the
exact-label cleanup. The full paid run under a launcher kill is tests/chaos/test_launcher_kill.py.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import docker
import pytest

from cowork_adapter.container.procs import group_alive, process_alive
from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.custody.watchdog import WatchdogError, custody_paths, read_processes, start_watchdog
from cowork_adapter.runroot import layout
from cowork_adapter.runroot.events import read_all
from cowork_adapter.vocab import EventKind

IMAGE = "cowork-testbed/base:bookworm"
PRIVATE_SECRETS = (layout.GATEWAY_SECRET, layout.PROVIDER_LEAF_KEY, "agent-1-0123abcd.env")

LAUNCHER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from pathlib import Path
    from cowork_adapter.container.procs import start_ticks
    from cowork_adapter.custody.watchdog import RUN_MARKER_ENV, start_watchdog, write_processes
    from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity

    run_root, label, host, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    handle = start_watchdog(run_root=run_root, run_label=label, docker_host=host, env=dict(os.environ),
                            bound_sec=20.0, grace_sec=2.0)
    me = ProcessIdentity(pid=os.getpid(), start_ticks=start_ticks(os.getpid()))
    processes = CustodyProcesses(launcher=me, watchdog=handle.identity)
    write_processes(run_root, processes)
    body = "trap '' TERM; sleep 300 & wait" if "stubborn" in mode else "sleep 300 & wait"
    runner = subprocess.Popen(["bash", "-c", body], env={**os.environ, RUN_MARKER_ENV: label},
                              start_new_session=True)
    # A marked process in a session of its own, which the launcher never recorded.
    stray = subprocess.Popen(["sleep", "300"], env={**os.environ, RUN_MARKER_ENV: label}, start_new_session=True)
    if "unrecorded" not in mode:
        write_processes(run_root, processes.replace(runner_pgid=runner.pid))
    if "forked" in mode and os.fork() == 0:
        time.sleep(120)  # a fork without exec keeps the pipe's write end: only the pidfd tells
        os._exit(0)
    print(json.dumps({"watchdog": handle.identity.pid, "runner": runner.pid, "stray": stray.pid}), flush=True)
    if "done" in mode:
        for proc in (runner, stray):
            proc.kill()
            proc.wait()
        handle.end()
        print(json.dumps({"watchdog_exit": handle.proc.returncode}), flush=True)
        sys.exit(0)
    time.sleep(600)
""")


def make_root(tmp_path: Path) -> tuple[Path, str]:
    run_root = tmp_path / "run"
    (run_root / "custody").mkdir(parents=True)
    (run_root / "private").mkdir()
    (run_root / "private" / "agent.env").write_text("COWORK_PROVIDER_KEY=not-a-key\n")
    # The other secrets a run keeps there: the gateway's, a task's token file, the default route's TLS key.
    for name in PRIVATE_SECRETS:
        (run_root / "private" / name).write_text("not-a-secret\n")
    return run_root, secrets.token_hex(16)


def launch(run_root: Path, label: str, host: str, mode: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(run_root), label, host, mode],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline()
    assert line, "the stand-in launcher said nothing"
    return proc, json.loads(line)


def wait_until(check, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def kinds(run_root: Path) -> list[dict]:
    return [e for e in read_all(run_root / "events.jsonl") if str(e.get("kind", "")).startswith("watchdog_")]


@pytest.fixture
def containers(docker_host):
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    made: list = []

    def make(labels: dict[str, str], name: str | None = None):
        made.append(client.containers.run(IMAGE, ["sleep", "600"], detach=True, labels=labels, name=name))
        return made[-1]

    yield make
    for container in made:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
    client.close()


@pytest.mark.parametrize("mode", ["plain", "stubborn-unrecorded"])
def test_a_killed_launcher_is_contained_by_its_watchdog(tmp_path, docker_host, containers, mode):
    run_root, label = make_root(tmp_path)
    ours = containers({RUN_LABEL_KEY: label})
    near = containers({RUN_LABEL_KEY: label[:-1] + ("0" if label[-1] != "0" else "1")})
    unlabelled = containers({}, name=f"agent-1-{secrets.token_hex(4)}")
    launcher, pids = launch(run_root, label, docker_host, mode)
    paths = custody_paths(run_root)
    assert not paths["stop"].exists()
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    fenced = wait_until(lambda: paths["stop"].exists(), 5.0)
    assert fenced is not None, "no stop file within 5 s of the launcher's death"
    assert paths["stop"].read_text() == "launcher_died\n"
    assert wait_until(lambda: not process_alive(pids["watchdog"], None), 30.0) is not None, "the watchdog lingers"
    assert not paths["agent_env"].exists()
    assert [n for n in PRIVATE_SECRETS if (run_root / "private" / n).exists()] == []
    assert not group_alive(pids["runner"]) and not process_alive(pids["stray"], None)
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(ours.id)
        assert client.containers.get(near.id).status == "running"
        assert client.containers.get(unlabelled.id).status == "running"
    finally:
        client.close()
    events = kinds(run_root)
    assert [e["kind"] for e in events] == [
        EventKind.WATCHDOG_FENCED,
        EventKind.WATCHDOG_RUNNER_STOPPED,
        EventKind.WATCHDOG_CLEANUP,
        EventKind.WATCHDOG_EXITED,
    ]
    fenced_event, stopped, cleanup, exited = events
    assert fenced_event["reason"] == "launcher_died" and fenced_event["key_deleted"] is True
    assert stopped["gone"] is True and pids["runner"] in stopped["pgids"] and pids["stray"] in stopped["marked_pids"]
    assert stopped["killed"] is ("stubborn" in mode)  # a runner that ignores SIGTERM gets SIGKILL after the grace
    assert cleanup["proven"] is True and cleanup["removed"] >= 1
    assert exited["reason"] == "custody_finished"
    if "unrecorded" in mode:
        assert read_processes(run_root).runner_pgid is None  # found by its environment marker alone


def test_the_pidfd_sees_the_death_when_a_fork_still_holds_the_pipe(tmp_path, docker_host):
    run_root, label = make_root(tmp_path)
    launcher, pids = launch(run_root, label, docker_host, "forked")
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    try:
        assert wait_until(lambda: custody_paths(run_root)["stop"].exists(), 5.0) is not None
        assert wait_until(lambda: not process_alive(pids["watchdog"], None), 30.0) is not None
        fenced = kinds(run_root)[0]
        assert fenced["kind"] == EventKind.WATCHDOG_FENCED and fenced["seen_by"] == "pidfd"
    finally:
        # The fork is in the launcher's session (not the run's): kill what is left of that group.
        try:
            os.killpg(launcher.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_launcher_that_says_done_ends_its_watchdog_without_fencing(tmp_path, docker_host):
    run_root, label = make_root(tmp_path)
    launcher, pids = launch(run_root, label, docker_host, "done")
    end = json.loads(launcher.stdout.readline())
    assert launcher.wait(timeout=30) == 0
    assert end["watchdog_exit"] == 0
    assert not process_alive(pids["watchdog"], None)
    paths = custody_paths(run_root)
    assert not paths["stop"].exists() and paths["agent_env"].exists()
    assert [(e["kind"], e["reason"]) for e in kinds(run_root)] == [(EventKind.WATCHDOG_EXITED, "launcher_done")]


def test_a_watchdog_that_cannot_arm_is_an_error(tmp_path):
    run_root, label = make_root(tmp_path)
    with pytest.raises(WatchdogError, match="exited"):
        start_watchdog(
            run_root=run_root,
            run_label=label,
            docker_host="unix:///nonexistent.sock",
            env=dict(os.environ),
            bound_sec=5.0,
            python="/bin/false",
            ready_timeout=10.0,
        )
    assert not custody_paths(run_root)["stop"].exists()


def test_the_runner_does_not_inherit_the_pipe_write_end(tmp_path):
    """The supervisor's runner Popen (close_fds): no descriptor of the pipe reaches the runner."""
    from cowork_adapter.run.supervisor import Supervisor

    class Meter:
        def observe(self, deadline):
            return time.monotonic(), None

    run_root, label = make_root(tmp_path)
    handle = start_watchdog(
        run_root=run_root, run_label=label, docker_host="unix:///nonexistent.sock", env=dict(os.environ), bound_sec=5.0
    )
    try:
        target = os.readlink(f"/proc/self/fd/{handle.life_fd}")
        console = tmp_path / "console.log"
        sup = Supervisor(
            runner_argv=["bash", "-c", "for f in /proc/$$/fd/*; do readlink $f; done; true"],
            runner_env=dict(os.environ),
            runner_cwd=tmp_path,
            console_log=console,
            stop_file=tmp_path / "stop",
            blindness_sec=30.0,
            meter=Meter(),
            disk_check=lambda: None,
            publish=lambda live: None,
            on_event=lambda k, d: None,
            poll_sec=0.1,
        )
        assert sup.run(time.monotonic()).runner_exit_code == 0
        seen = console.read_text().split()
        assert target.startswith("pipe:") and seen and target not in seen
    finally:
        assert handle.end() == 0
