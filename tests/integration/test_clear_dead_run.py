"""`cowork-adapter clear` on real dead runs of the demo benchmark (real Docker, meter stand-in).

(a) A paid run SIGKILLed during its environment inventory, before its campaign file existed: the
    probe's labelled PostgreSQL/box containers and network remain. `status` names them and the
    clear line (no campaign file in it); `clear` removes them and a labelled volume, proves none
    remain, creates no campaign file and no lock, and leaves bystanders alone.
(b) A paid run whose launcher is SIGKILLed while a task's agent runs: the runner's group goes on.
    `status` names the dead launcher, the live runner group and the exact commands; `clear`
    refuses while the group lives; `stop` fences and stops the group; with the meter unreachable
    `clear` removes everything but keeps the campaign's active run; then `clear` settles it
    (spend = the meter's delta) and writes the ledger; a second `clear` is a no-op exit 0.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import stat
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from cowork_adapter.container.procs import group_alive
from cowork_adapter.custody.docker_ops import label_is_empty, list_labelled
from cowork_adapter.custody.labels import RUN_LABEL_KEY, path_label, run_label
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

pytestmark = pytest.mark.docker


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def events(run_root: Path) -> list[dict]:
    path = run_root / "events.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]


def named_container(docker_host: str, label: str, prefix: str) -> bool:
    try:
        listed = list_labelled(docker_host, label, timeout=10)
    except Exception:  # noqa: BLE001 - the daemon is busy building: not there yet
        return False
    return any(name.startswith(prefix) for _, name in listed.containers)


class MoreBystanders:
    """An unlabelled `agent-*` container and a volume with a near-identical label."""

    def __init__(self, docker_host: str, label: str) -> None:
        self.client = docker.DockerClient(base_url=docker_host, timeout=60)
        suffix = secrets.token_hex(4)
        self.container = self.client.containers.run(
            BYSTANDER_IMAGE, ["sleep", "3600"], detach=True, name=f"agent-{suffix}"
        )
        near = label[:-1] + ("0" if label[-1] != "0" else "1")
        self.volume = self.client.volumes.create(f"bystander-{suffix}", labels={RUN_LABEL_KEY: near})

    def alive(self) -> bool:
        try:
            running = self.client.containers.get(self.container.id).status == "running"
            self.client.volumes.get(self.volume.name)
            return running
        except docker.errors.NotFound:
            return False

    def remove(self) -> None:
        for action in (lambda: self.container.remove(force=True), lambda: self.volume.remove(force=True)):
            try:
                action()
            except docker.errors.NotFound:
                pass
        self.client.close()


def labelled_volume(docker_host: str, label: str) -> str:
    """A volume with the run's exact label (as a runner's named volume would carry it)."""
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        return client.volumes.create(f"run-vol-{label[:12]}", labels={RUN_LABEL_KEY: label}).name
    finally:
        client.close()


@pytest.fixture(scope="module")
def env(docker_host, tmp_path_factory):
    demo = prepare(tmp_path_factory.mktemp("clear") / "root", docker_host)
    yield demo
    demo.meter.stop()


def test_clear_after_a_kill_during_the_preflight_probe(env, docker_host):
    name = "probe-kill"
    run_root = env.run_root(name)
    campaign = env.root / "campaign-probe.json"
    # The run's label is drawn at its start: the bystanders carry its path's label and near ones.
    bystanders = make_bystanders(docker_host, path_label(run_root))
    more = MoreBystanders(docker_host, path_label(run_root))
    proc = None
    try:
        proc = env.launch(env.run_args(name, ["demo-csv-totals"], campaign=campaign.name), name)
        assert wait_for(lambda: (run_root / "run_manifest.json").exists() or proc.poll() is not None, 600, 0.1)
        label = run_label(run_root)
        # The image is built first (minutes on a cold daemon), then the inventory's sandbox starts.
        assert wait_for(lambda: named_container(docker_host, label, "pg-probe-") or proc.poll() is not None, 1200, 0.5)
        assert proc.poll() is None, (env.root / f"{name}.log").read_text()[-3000:]
        proc.kill()  # SIGKILL: no cleanup code of the launcher runs
        proc.wait(timeout=30)
        volume = labelled_volume(docker_host, label)
        left = list_labelled(docker_host, label)
        assert any(n.startswith("pg-probe-") for _, n in left.containers) and left.networks, left

        status = cli("status", str(run_root), "--json")
        assert status.returncode == 0, status.stderr
        view = json.loads(status.stdout)
        assert view["state"] == "launcher_gone"
        assert not any(p["alive"] for p in view["processes"]), view["processes"]
        assert any(o.startswith("container pg-probe-") for o in view["labelled"]["objects"]), view["labelled"]
        assert f"volume {volume}" in view["labelled"]["objects"]
        hint = view["next_command"]
        assert hint.startswith(f"`cowork-adapter clear {run_root} --docker-host {docker_host}"), hint
        assert "--campaign-file" not in hint and "stop" not in hint  # the campaign was never created
        text = cli("status", str(run_root)).stdout
        assert "labelled objects on" in text and "pg-probe-" in text and "next: `cowork-adapter clear" in text

        stop = cli("stop", str(run_root), "--timeout", "5")
        assert stop.returncode == 1 and "nothing was signalled" in stop.stderr
        assert f"cowork-adapter clear {run_root}" in stop.stderr and "pg-probe-" in stop.stderr

        assert not campaign.exists()
        cleared = cli("clear", str(run_root), "--operator-note", "launcher SIGKILLed by the test during the probe")
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        assert label_is_empty(docker_host, label)
        assert not campaign.exists() and not Path(str(campaign) + ".lock").exists()
        assert not list(env.root.glob("*.lock"))
        assert bystanders_alive(docker_host, bystanders) and more.alive()
        manifest = read_json(run_root / "run_manifest.json")
        record = manifest["cleared"]
        assert record["campaign"] == "no_campaign_file" and record["label_empty"] is True
        assert any(n.startswith("pg-probe-") for n in record["removed_containers"])
        assert record["removed_networks"] and record["removed_volumes"] == [volume]
        assert manifest["outcome"] == "stopped" and manifest["stop_reason"] == "launcher_died"
        assert [e for e in events(run_root) if e["kind"] == "dead_run_cleared"]

        again = cli("clear", str(run_root), "--operator-note", "second time")
        assert again.returncode == 0 and "already cleared" in again.stdout, again.stdout + again.stderr
        assert len([e for e in events(run_root) if e["kind"] == "dead_run_cleared"]) == 1
        # `campaign reconcile` on the never-created campaign refuses and leaves no lock behind either.
        rec = cli(
            "campaign",
            "reconcile",
            "--campaign-file",
            str(campaign),
            "--run-root",
            str(run_root),
            "--operator-note",
            "x",
            "--docker-host",
            docker_host,
            "--api-key-env",
            env.key_env,
            env={env.key_env: env.key},
        )
        assert rec.returncode == 2 and "does not exist" in rec.stderr
        assert not Path(str(campaign) + ".lock").exists()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        remove_bystanders(docker_host, bystanders)
        more.remove()


def runner_pgid(run_root: Path) -> int | None:
    for event in events(run_root):
        if event.get("kind") == "runner_started" and event.get("pid"):
            return int(event["pid"])
    return None


def plant_what_an_agent_leaves(run_root: Path) -> dict[str, Path]:
    """A 10,000-deep tree in the run's staging copy, a device node, a set-uid file and a file nested
    300,000 deep in the task's dump (as root, as an agent with CAP_MKNOD would)."""
    manifest = read_json(run_root / "run_manifest.json")
    tmpdir = Path(manifest["budgets"]["resource_root"]).resolve() / f"tmp-{manifest['run_label'][:12]}"
    tmpdir.mkdir(exist_ok=True)
    fd = os.open(tmpdir, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(10_000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    dump = next((run_root / "bench" / "dumps").glob("*/SingleUserTurn-demo-hang"))
    (dump / "eval_res.json").write_bytes(b"[" * 300_000 + b"]" * 300_000)
    os.mknod(dump / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    (dump / "su").write_bytes(b"#!/bin/sh\n")
    os.chmod(dump / "su", 0o4755)
    (dump / "kept.txt").write_text("evidence")
    return {"tmpdir": tmpdir, "device": dump / "zero", "setuid": dump / "su", "kept": dump / "kept.txt"}


def test_clear_after_a_kill_mid_run(env, docker_host):
    name = "paid-kill"
    run_root = env.run_root(name)
    campaign = env.root / "campaign-paid.json"
    bystanders = make_bystanders(docker_host, path_label(run_root))  # its own label is drawn at its start
    proc = None
    pgid = None
    try:
        proc = env.launch(env.run_args(name, ["demo-hang"], campaign=campaign.name), name)
        assert wait_for(lambda: (run_root / "run_manifest.json").exists() or proc.poll() is not None, 600, 0.1)
        label = run_label(run_root)
        assert wait_for(lambda: agent_started(run_root) or proc.poll() is not None, 1200, 0.5)
        assert proc.poll() is None, (env.root / f"{name}.log").read_text()[-3000:]
        assert wait_for(lambda: named_container(docker_host, label, "agent-"), 120, 0.5)
        pgid = runner_pgid(run_root)
        assert pgid and group_alive(pgid)
        # The launcher's watchdog would stop the runner group and delete the key itself; this case
        # is the one it cannot cover: both die (one OOM kill, an operator's kill -9 of both).
        processes = read_json(run_root / "custody" / "processes.json")
        os.kill(processes["watchdog"]["pid"], signal.SIGKILL)
        proc.kill()  # the launcher: the runner is in its own session and goes on
        proc.wait(timeout=30)
        assert group_alive(pgid)
        assert (run_root / "private" / "agent.env").exists()

        status = json.loads(cli("status", str(run_root), "--json").stdout)
        roles = {(p["role"], p["alive"]) for p in status["processes"]}
        assert ("launcher", False) in roles and ("runner group", True) in roles, status["processes"]
        assert any(o.startswith("container agent-") for o in status["labelled"]["objects"]), status["labelled"]
        hint = status["next_command"]
        assert hint.startswith(f"`cowork-adapter stop {run_root}`"), hint
        meter_url = read_json(run_root / "run_manifest.json")["budgets"]["meter"]["url"]
        assert (
            f"`cowork-adapter clear {run_root} --campaign-file {campaign} --meter-url {meter_url} "
            f"--docker-host {docker_host} --operator-note '...'` (with the provider key in ${env.key_env})"
        ) in hint

        refused = cli("clear", str(run_root), "--operator-note", "too early", env={env.key_env: env.key})
        assert refused.returncode == 2 and f"runner group {pgid} alive" in refused.stderr, refused.stderr
        assert "cowork-adapter stop" in refused.stderr
        assert not label_is_empty(docker_host, label) and (run_root / "private" / "agent.env").exists()

        stop = cli("stop", str(run_root), "--timeout", "20")
        assert stop.returncode == 1, stop.stdout + stop.stderr
        assert f"runner group {pgid} was still running" in stop.stderr and "fenced" in stop.stderr, stop.stderr
        assert (run_root / "custody" / "stop").exists()
        assert wait_for(lambda: not group_alive(pgid), 10, 0.2)
        # The fast stop without a launcher (issue 28): SIGKILL to the group, and the run's labelled
        # objects removed by `stop` itself, proven by a fresh listing; bystanders untouched.
        assert "proven by a fresh listing" in stop.stderr and "after SIGKILL" in stop.stderr, stop.stderr
        assert label_is_empty(docker_host, label) and bystanders_alive(docker_host, bystanders)
        cleared_by_stop = [e for e in events(run_root) if e["kind"] == "stop_cleared"]
        assert len(cleared_by_stop) == 1 and cleared_by_stop[0]["proven"] is True, cleared_by_stop
        assert cleared_by_stop[0]["removed"] >= 1

        env.meter.set_rate(0.0)
        env.meter.add_usage(0.75)
        final_usage = env.meter.state()["usage"]
        active = read_json(campaign)["active_run"]
        assert active and active["run_root"] == str(run_root)

        planted = plant_what_an_agent_leaves(run_root)
        blind = cli(
            "clear",
            str(run_root),
            "--operator-note",
            "meter down",
            "--meter-url",
            "http://127.0.0.1:9",
            env={env.key_env: env.key},
            timeout=180,
        )
        assert blind.returncode == 2 and "key meter gave no acceptable reading" in blind.stderr, blind.stderr
        # Issue 37: clear removed a 10,000-deep staging tree and the dump's device node and set-uid
        # file (the rest of the dump stays), and a 300,000-deep eval_res.json stopped nothing.
        assert not planted["tmpdir"].exists() and not os.path.lexists(planted["device"]), blind.stderr
        assert not os.path.lexists(planted["setuid"]) and planted["kept"].exists()
        assert "device node(s) or set-id file(s)" in blind.stdout + blind.stderr
        assert label_is_empty(docker_host, label) and not (run_root / "private" / "agent.env").exists()
        assert read_json(campaign)["active_run"] == active  # nothing settled, nothing lost
        partial = read_json(run_root / "run_manifest.json")["cleared"]
        assert partial["campaign"] == "unsettled"
        pending = json.loads(cli("status", str(run_root), "--json").stdout)
        assert f"cowork-adapter clear {run_root} --campaign-file {campaign}" in pending["next_command"]

        cleared = cli(
            "clear",
            str(run_root),
            "--operator-note",
            "launcher and runner group killed by the test",
            env={env.key_env: env.key},
        )
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        record = read_json(campaign)
        assert record["active_run"] is None
        assert record["last_usage"] == pytest.approx(final_usage)
        assert record["runs"][-1]["outcome"] == "reconciled"
        assert record["runs"][-1]["spent_usd"] == pytest.approx(final_usage - active["usage_at_start"])
        assert label_is_empty(docker_host, label) and bystanders_alive(docker_host, bystanders)
        rows = [json.loads(line) for line in (run_root / "result_index.jsonl").read_text().splitlines() if line]
        assert [r["instance_id"] for r in rows] == ["demo-hang"]
        manifest = read_json(run_root / "run_manifest.json")
        assert manifest["cleared"]["campaign"] == "settled" and manifest["campaign_settlement"] == "reconciled"
        assert (
            manifest["cleared"]["removed_containers"][: len(partial["removed_containers"])]
            == partial["removed_containers"]
        )
        assert manifest["cleared"]["agent_env_removed"] is True  # by the interrupted clear, still on record

        again = cli("clear", str(run_root), "--operator-note", "again", env={env.key_env: env.key})
        assert again.returncode == 0 and "already cleared" in again.stdout, again.stdout + again.stderr
        assert read_json(campaign) == record
        after = json.loads(cli("status", str(run_root), "--json").stdout)
        assert after["state"] == "finished" and after["next_command"] is None and after["labelled"]["objects"] == []
        assert after["cleanup_proven"] is True
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if pgid and group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
        remove_bystanders(docker_host, bystanders)
