"""No spending without a living supervisor: real demo paid runs whose launcher is SIGKILLed.

Each case starts `cowork-adapter run` (demo benchmark, stub engine, meter stand-in, concurrency 2,
more tasks than slots) in a session of its own, waits for a moment of the run, and SIGKILLs the
launcher, by its pid or by its whole process group. The daemon's create events for the run's
exact label are followed from before the launch. Then, with no code of the launcher running:

  - within 5 s the stop file says launcher_died (the shim refuses every creation from then on),
    and no container of the run is created later than 5 s after the kill;
  - within the meter-blindness bound (30 s) the runner's process group is gone, no container of
    the run is left, and the key's env file is deleted;
  - events.jsonl holds the watchdog's account; the campaign keeps the run as its active_run
    (the watchdog never settles); bystanders (a near-identical label, an unlabelled `agent-*`)
    are untouched.

One case SIGKILLs the watchdog first and then the launcher's group: the runner goes on, and the
shim alone refuses its next creation (launcher_dead). A last case lets a run finish normally and
checks its watchdog ended with it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import docker
import pytest

from cowork_adapter.container.procs import group_alive, process_alive
from cowork_adapter.custody.docker_ops import cleanup_run, list_labelled
from cowork_adapter.custody.labels import path_label, run_label
from cowork_adapter.custody.watchdog import custody_paths, read_processes
from cowork_adapter.demo.chaos_watch import CreateEvents, events_of
from cowork_adapter.demo.env import (
    BYSTANDER_IMAGE,
    agent_started,
    bystanders_alive,
    make_bystanders,
    prepare,
    read_json,
    remove_bystanders,
    wait_for,
)

# Two slots, five tasks: when the launcher dies, some tasks are still to start.
TASKS = ["demo-hang", "demo-csv-totals", "demo-crm-postgres", "demo-wrong-answer", "demo-deck-stateful"]
FENCE_SEC = 5.0
BLINDNESS_SEC = 30.0  # the demo run's --meter-blindness-sec default


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("launcher-kill") / "root", docker_host)
    yield env
    env.meter.stop()


def launch(env, name: str, tasks: list[str]) -> subprocess.Popen:
    """The launcher in a session of its own, so a kill of its process group spares pytest."""
    args = env.run_args(name, tasks, campaign=f"campaign-{name}.json", extra=["--task-timeout", "90"])
    with open(env.root / f"{name}.log", "ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            args,
            env={**os.environ, env.key_env: env.key},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def runner_started(run_root: Path) -> bool:
    return any(e.get("kind") == "runner_started" for e in events_of(run_root))


MOMENTS = {
    # The runner was just started: the launcher may not even have recorded its group yet.
    "runner_start": lambda run_root: runner_started(run_root),
    # Agents are at work and tasks are still waiting for a slot.
    "in_flight": lambda run_root: agent_started(run_root),
}


def containers_of(docker_host: str, label: str) -> list:
    return list_labelled(docker_host, label).containers


# Both moments and both ways of killing, each once: test_kill_matrix.py crosses every phase with
# both ways; this test adds the watchdog's own record (its events in order, the campaign untouched).
@pytest.mark.parametrize("moment, how", [("runner_start", "pid"), ("in_flight", "group")])
def test_a_killed_launcher_spends_nothing_more(demo, docker_host, moment, how):
    name = f"kill-{moment}-{how}"
    run_root = demo.run_root(name)
    paths = custody_paths(run_root)
    bystanders = make_bystanders(docker_host, path_label(run_root))  # the run's own label is drawn at its start
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    unlabelled = client.containers.run(
        BYSTANDER_IMAGE, ["sleep", "3600"], detach=True, name=f"agent-{os.getpid()}-{secrets.token_hex(4)}"
    )
    creates = CreateEvents(docker_host, run_root)
    launcher = launch(demo, name, TASKS)
    try:
        reached = wait_for(lambda: MOMENTS[moment](run_root) or launcher.poll() is not None, 600, 0.05)
        assert reached and launcher.poll() is None, f"the launcher ended before {moment} (see {name}.log)"
        label = run_label(run_root)  # recorded in the manifest before any container of the run
        if moment == "in_flight":
            time.sleep(2)  # let the agents work a little
        killed_at = time.time()
        if how == "pid":
            os.kill(launcher.pid, signal.SIGKILL)
        else:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)

        assert wait_for(lambda: paths["stop"].exists(), FENCE_SEC, 0.05), "no stop file within 5 s of the kill"
        assert paths["stop"].read_text().strip() in ("launcher_died",)

        def contained() -> bool:
            # The runner's group as processes.json names it, else as the runner_started event does (a kill
            # right after the start can land before processes.json names it). Without one, the watchdog's
            # key deletion alone would pass for containment while the runner is still in its SIGTERM grace.
            procs = read_processes(run_root)
            started = [int(e["pid"]) for e in events_of(run_root) if e.get("kind") == "runner_started"]
            pgid = procs.runner_pgid if procs and procs.runner_pgid else (started[0] if started else None)
            return (
                not paths["agent_env"].exists()
                and not containers_of(docker_host, label)
                and (pgid is None or not group_alive(pgid))
            )

        assert wait_for(contained, BLINDNESS_SEC - (time.time() - killed_at), 0.2), (
            f"not contained within {BLINDNESS_SEC} s of the kill"
        )
        processes = read_processes(run_root)
        assert processes is not None and processes.watchdog is not None
        started = next(int(e["pid"]) for e in events_of(run_root) if e.get("kind") == "runner_started")
        assert not group_alive(started), "the runner's process group outlived the bound"
        assert wait_for(lambda: not process_alive(processes.watchdog.pid, processes.watchdog.start_ticks), 15, 0.2)

        time.sleep(3)  # a late creation would show in the event stream now
        late = [(round(t - killed_at, 2), n) for t, n in creates.times if t > killed_at + FENCE_SEC]
        assert not late, f"containers of the run created more than 5 s after the kill: {late}"
        assert not containers_of(docker_host, label)

        kinds = [e["kind"] for e in events_of(run_root) if str(e.get("kind", "")).startswith("watchdog_")]
        assert kinds == [
            "watchdog_started",
            "watchdog_fenced",
            "watchdog_runner_stopped",
            "watchdog_cleanup",
            "watchdog_exited",
        ], kinds
        by_kind = {e["kind"]: e for e in events_of(run_root)}
        assert by_kind["watchdog_fenced"]["reason"] == "launcher_died"
        assert by_kind["watchdog_runner_stopped"]["gone"] is True
        assert by_kind["watchdog_cleanup"]["proven"] is True
        assert by_kind["watchdog_exited"]["reason"] == "custody_finished"
        assert "settlement" not in by_kind and "run_finished" not in by_kind

        campaign = read_json(demo.root / f"campaign-{name}.json")
        assert (campaign.get("active_run") or {}).get("run_root") == str(run_root), "the watchdog must not settle"

        assert bystanders_alive(docker_host, bystanders)
        assert client.containers.get(unlabelled.id).status == "running"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        creates.close()
        remove_bystanders(docker_host, bystanders)
        unlabelled.remove(force=True)
        client.close()


def creations(run_root: Path) -> list[dict]:
    path = run_root / "custody" / "evidence" / "creations.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_with_the_watchdog_killed_too_the_shim_alone_refuses_every_creation(demo, docker_host):
    """Defense in depth: watchdog and launcher both SIGKILLed; the runner goes on, the shim refuses."""
    name = "kill-watchdog-first"
    run_root = demo.run_root(name)
    creates = CreateEvents(docker_host, run_root)
    launcher = launch(demo, name, TASKS)
    pgid = None
    try:
        assert wait_for(lambda: agent_started(run_root) or launcher.poll() is not None, 600, 0.1)
        assert launcher.poll() is None
        processes = read_processes(run_root)
        pgid = processes.runner_pgid
        os.kill(processes.watchdog.pid, signal.SIGKILL)
        killed_at = time.time()
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        # The runner lives on and starts the next task when a slot frees: that creation is refused.
        refused = wait_for(lambda: any(c["cause"] == "launcher_dead" for c in creations(run_root)), 240, 0.5)
        assert refused, "the runner tried no creation after the kill, or the shim admitted it"
        admitted_late = [c for c in creations(run_root) if c["admitted"] and c["ts"] > killed_at + FENCE_SEC]
        assert not admitted_late, admitted_late
        late = [(round(t - killed_at, 2), n) for t, n in creates.times if t > killed_at + FENCE_SEC]
        assert not late, f"containers of the run created more than 5 s after the kill: {late}"
        assert not custody_paths(run_root)["stop"].exists()  # no watchdog fenced: the shim did it alone
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        creates.close()
        # What the watchdog would have done: stop the runner group, exact-label cleanup.
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_for(lambda: not group_alive(pgid), 15, 0.2)
        cleanup_run(docker_host, run_label(run_root), lambda entry: None)
        custody_paths(run_root)["agent_env"].unlink(missing_ok=True)


def test_a_run_that_finishes_normally_leaves_no_watchdog(demo, docker_host):
    name = "normal"
    run_root = demo.run_root(name)
    launcher = launch(demo, name, ["demo-csv-totals"])
    code = launcher.wait(timeout=900)
    assert code == 0, f"exit {code} (see {name}.log)"
    processes = read_processes(run_root)
    assert processes is not None and processes.watchdog is not None and processes.runner_pgid
    assert not process_alive(processes.watchdog.pid, processes.watchdog.start_ticks)
    lingering = [
        p
        for p in os.listdir("/proc")
        if p.isdigit()
        and "cowork_adapter.custody.watchdog" in _cmdline(p)
        and str(run_root) in _cmdline(p)
        and process_alive(int(p), None)
    ]
    assert not lingering, f"watchdog processes of the run still alive: {lingering}"
    kinds = [e["kind"] for e in events_of(run_root)]
    assert kinds.count("watchdog_started") == 1
    exited = [e for e in events_of(run_root) if e["kind"] == "watchdog_exited"]
    assert [e["reason"] for e in exited] == ["launcher_done"]
    # The watchdog ended with custody: after the launcher's cleanup, before the settlement.
    assert kinds.index("cleanup") < kinds.index("watchdog_exited") < kinds.index("settlement")
    assert "watchdog_fenced" not in kinds
    assert custody_paths(run_root)["stop"].read_text().strip() != "launcher_died"
    assert read_json(demo.root / f"campaign-{name}.json").get("active_run") is None


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""
