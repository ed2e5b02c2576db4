"""A Docker daemon that restarts or vanishes mid-run stops the run as docker_daemon_lost (issue 15, item 5).

Never on the shared test-bed daemon (other tests use it): this module starts its OWN dockerd with
its own data root, exec root, socket and pid file under a tmp dir, in a network namespace of its own
(its bridges and rules never touch the host's: a second dockerd in the host's namespace removed the
shared daemon's docker0), with `--iptables=false` and a distinct address pool, loads the demo's images
into it from the shared daemon (`docker save | docker load`), and runs real paid demo runs (meter
stand-in) against it:

  - restart: SIGTERM the daemon by its pid file while demo-hang's agent runs, start it again on the
    same data root. The launcher must record the loss (daemon_lost, with the before/after pids)
    and fence (stop file) within 30 s, end with exit 3 and stop reason docker_daemon_lost, and once
    the daemon is back prove cleanup: nothing labelled left, the campaign settled.
  - frozen: SIGSTOP the daemon (it keeps its socket and pid but answers nothing; the runner's docker
    calls hang, so only the watch's silence bound can end the run), SIGCONT once the loss is
    recorded. Loss, fence and stop reason within 30 s; cleanup proven after it thaws.
  - gone: stop the daemon and keep it down past the launcher's bounded wait. Custody cannot be
    proven: exit 3, cleanup unproven, the campaign keeps its active_run (for `clear`).

The daemon is stopped and its directories removed in a finally.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import pytest

from cowork_adapter.custody.daemon_watch import RETURN_WAIT_SEC
from cowork_adapter.custody.docker_ops import label_is_empty, list_labelled
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import BYSTANDER_IMAGE, agent_started, prepare, read_json, wait_for
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.runroot.events import parse_ts
from cowork_adapter.schemas.audit import launcher_audit_path
from cowork_adapter.vocab import ExitCode, StopReason

LOST = StopReason.DOCKER_DAEMON_LOST.value
POOL = "10.213.0.0/16"  # not the shared daemon's: no fight over bridges
PG_IMAGE = "postgres:15"


class PrivateDaemon:
    """A dockerd of this test alone, started and stopped by its own pid file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.pidfile = root / "docker.pid"
        self.host = f"unix://{self.sock}"
        self.starts = 0
        # Its own network namespace: whatever it does to bridges and rules stays there.
        self.netns = root.name.replace(".", "-")

    def start(self) -> int:
        (self.root / "data").mkdir(exist_ok=True)
        (self.root / "exec").mkdir(exist_ok=True)
        self.starts += 1
        with open(
            self.root / f"dockerd-{self.starts}.log", "ab"
        ) as log:  # the child has its own copy of the descriptor
            subprocess.Popen(
                # nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroups dockerd needs.
                [
                    "nsenter",
                    f"--net=/run/netns/{self.netns}",
                    "dockerd",
                    "--data-root",
                    str(self.root / "data"),
                    "--exec-root",
                    str(self.root / "exec"),
                    "-H",
                    self.host,
                    "--pidfile",
                    str(self.pidfile),
                    "--iptables=false",
                    "--ip-masq=false",
                    "--default-address-pool",
                    f"base={POOL},size=24",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if not wait_for(self.answers, 60, 0.5):
            raise RuntimeError(f"the private dockerd did not answer; see {self.root}")
        return self.pid()

    def pid(self) -> int:
        return int(self.pidfile.read_text().strip())

    def answers(self) -> bool:
        try:
            client = docker.APIClient(base_url=self.host, timeout=5)
            try:
                return client.ping() is True
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - not answering is the answer
            return False

    def stop(self) -> None:
        """SIGTERM by pid file, wait for the process to end (SIGKILL after 40 s)."""
        try:
            pid = self.pid()
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if not wait_for(lambda: not _alive(pid), 40, 0.2):
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), 10, 0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _load_images(source_host: str, target_host: str, refs: list[str]) -> None:
    save = subprocess.Popen(
        ["docker", "save", *refs], stdout=subprocess.PIPE, env={**os.environ, "DOCKER_HOST": source_host}
    )
    load = subprocess.run(
        ["docker", "load"],
        stdin=save.stdout,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_HOST": target_host},
        timeout=900,
    )
    save.stdout.close()
    assert save.wait(timeout=60) == 0 and load.returncode == 0, load.stderr


@pytest.fixture(scope="module")
def private_daemon(docker_host):
    root = Path(tempfile.mkdtemp(prefix="cwdw.", dir="/tmp"))  # short: unix socket paths are capped
    daemon = PrivateDaemon(root)
    docker0_before = _link_exists("docker0")
    subprocess.run(["ip", "netns", "add", daemon.netns], check=True, capture_output=True)
    subprocess.run(
        ["ip", "netns", "exec", daemon.netns, "ip", "link", "set", "lo", "up"], check=True, capture_output=True
    )
    try:
        daemon.start()
        pack_tag, _ = ensure_demo_pack_image(docker_host)  # built once on the shared daemon, copied here
        _load_images(docker_host, daemon.host, [BYSTANDER_IMAGE, PG_IMAGE, pack_tag])
        yield daemon
    finally:
        daemon.stop()
        subprocess.run(["umount", "-R", "-l", str(root / "exec")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(root / "data")], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", daemon.netns], capture_output=True)
    assert _link_exists("docker0") == docker0_before, "the private daemon changed the shared daemon's docker0"


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def demo(private_daemon, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("daemonlost") / "root", private_daemon.host)
    yield env
    env.meter.stop()


def events(run_root: Path) -> list[dict]:
    path = run_root / "events.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def of_kind(run_root: Path, kind: str) -> list[dict]:
    return [e for e in events(run_root) if e.get("kind") == kind]


def start_run(demo, name: str):
    run_root = demo.run_root(name)
    campaign = f"campaign-{name}.json"
    proc = demo.launch(demo.run_args(name, ["demo-hang"], campaign=campaign), name)
    ok = wait_for(lambda: agent_started(run_root) or proc.poll() is not None, 900, 0.5)
    log = (demo.root / f"{name}.log").read_text(errors="replace")
    assert ok and proc.poll() is None, f"the run did not reach its agent; log tail:\n{log[-3000:]}"
    time.sleep(3)  # the agent container is up and the supervisor has polled at least once
    return proc, run_root, demo.root / campaign


def assert_stopped_for_lost_daemon(demo, name: str, run_root: Path, code: int, lost_at: float) -> dict:
    log = (demo.root / f"{name}.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert code == ExitCode.STOPPED, f"exit {code}; log tail:\n{log[-3000:]}"
    manifest = read_json(run_root / "run_manifest.json")
    assert manifest.get("stop_reason") == LOST, manifest.get("stop_causes")
    detected = [e for e in of_kind(run_root, "daemon_lost") if e.get("stage") == "detected"]
    assert len(detected) == 1, of_kind(run_root, "daemon_lost")
    seen_after = parse_ts(detected[0]["ts"]) - lost_at
    assert seen_after <= 30, f"the loss was recorded {seen_after:.1f} s after the daemon was stopped"
    # Fenced within the bound. The marker names the first reason it was written for: the loss, or
    # the runner's own end when the runner gave up on the vanished daemon before the watch's bound.
    stop_file = run_root / "custody" / "stop"
    assert stop_file.read_text().strip() in (LOST, StopReason.RUNNER_FINISHED.value)
    assert stop_file.stat().st_mtime - lost_at <= 30
    assert detected[0]["before_pid"] > 0
    assert [e["reason"] for e in of_kind(run_root, "stop_requested")][0] == LOST
    assert of_kind(run_root, "run_finished")[0]["exit_code"] == ExitCode.STOPPED
    assert launcher_audit_path(run_root).is_file()
    assert not (run_root / "private" / "agent.env").exists()
    return detected[0]


def test_daemon_restart_mid_run_stops_fences_and_cleanup_is_proven_after_it_returns(demo, private_daemon):
    name = "restart"
    proc, run_root, campaign = start_run(demo, name)
    old_pid = private_daemon.pid()
    try:
        lost_at = time.time()
        private_daemon.stop()
        new_pid = private_daemon.start()
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if not private_daemon.answers():
            private_daemon.start()
    detected = assert_stopped_for_lost_daemon(demo, name, run_root, code, lost_at)
    assert detected["before_pid"] == old_pid
    assert detected["reason"] in ("restarted", "exited", "unanswered")
    if detected["reason"] == "restarted":
        assert detected["after_pid"] == new_pid
    returned = [e for e in of_kind(run_root, "daemon_lost") if e.get("stage") == "returned"]
    assert returned and returned[0]["after_pid"] == new_pid
    assert of_kind(run_root, "cleanup")[-1]["proven"] is True
    assert label_is_empty(private_daemon.host, run_label(run_root))
    record = json.loads(campaign.read_text())
    assert record["active_run"] is None
    assert [r["stop_reason"] for r in record["runs"] if r["run_root"] == str(run_root)] == [LOST]


def test_daemon_frozen_mid_run_is_lost_within_30_s_and_cleanup_proven_after_it_thaws(demo, private_daemon):
    name = "frozen"
    proc, run_root, campaign = start_run(demo, name)
    pid = private_daemon.pid()
    try:
        lost_at = time.time()
        os.kill(pid, signal.SIGSTOP)
        seen = wait_for(lambda: any(e.get("stage") == "detected" for e in of_kind(run_root, "daemon_lost")), 60, 0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen
    detected = assert_stopped_for_lost_daemon(demo, name, run_root, code, lost_at)
    assert detected["reason"] == "unanswered" and detected["before_pid"] == pid
    assert (run_root / "custody" / "stop").read_text().strip() == LOST  # the watch fenced, not the runner's end
    assert of_kind(run_root, "cleanup")[-1]["proven"] is True
    assert label_is_empty(private_daemon.host, run_label(run_root))
    record = json.loads(campaign.read_text())
    assert record["active_run"] is None
    assert [r["stop_reason"] for r in record["runs"] if r["run_root"] == str(run_root)] == [LOST]


def test_daemon_gone_past_the_wait_leaves_custody_unproven_and_active_run_kept(demo, private_daemon):
    name = "gone"
    proc, run_root, campaign = start_run(demo, name)
    try:
        lost_at = time.time()
        private_daemon.stop()
        code = proc.wait(timeout=300 + RETURN_WAIT_SEC)
    finally:
        if proc.poll() is None:
            proc.kill()
        private_daemon.start()
    assert_stopped_for_lost_daemon(demo, name, run_root, code, lost_at)
    assert [e for e in of_kind(run_root, "daemon_lost") if e.get("stage") == "not_returned"]
    assert of_kind(run_root, "cleanup")[-1]["proven"] is False
    assert read_json(run_root / "run_manifest.json").get("campaign_settlement") == "unconfirmed"
    record = json.loads(campaign.read_text())  # valid JSON, this run still active for `clear`
    assert record["active_run"]["run_root"] == str(run_root)
    # The daemon is back: remove what the run left, by its exact label only (this test's own).
    label = run_label(run_root)
    leftovers = list_labelled(private_daemon.host, label)
    client = docker.APIClient(base_url=private_daemon.host, timeout=60)
    try:
        for ident, _ in leftovers.containers:
            client.remove_container(ident, force=True, v=True)
        for ident, _ in leftovers.networks:
            client.remove_network(ident)
    finally:
        client.close()
    assert label_is_empty(private_daemon.host, label)
