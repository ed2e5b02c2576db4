"""A full disk under the campaign file never crashes a paid run (issue 15, item 4).

The campaign file lives on its own tiny tmpfs; the run root does not. The disk is filled to the
brim at three moments of a real demo run on the real Docker engine:
  - settlement: by this test, the moment events.jsonl shows the runner's exit (the meter stand-in
    answers every read 2 s late, so the final reading is always still in flight then);
  - registration (`Campaign.start_run`), the runner's pgid (`Campaign.set_runner_pgid`) and a meter
    reading (`Campaign.record_usage`: the first poll of a new campaign, or the startup reading an
    existing campaign saves when it is opened): by a hook in the launcher process that fills the same
    tmpfs just before that save runs.
Each must end with exit 3 and stop reason campaign_persistence_failed, cleanup proven (nothing
labelled left), run_finished and audit.launcher.json written, and the campaign file valid JSON and
byte-for-byte what it was when the disk filled (so a registered run's active_run is kept).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from datetime import UTC
from pathlib import Path

import pytest

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import prepare, read_json, wait_for
from cowork_adapter.schemas.audit import launcher_audit_path
from cowork_adapter.vocab import ExitCode, StopReason

TASKS = ["demo-csv-totals"]
CPF = StopReason.CAMPAIGN_PERSISTENCE_FAILED.value

# Runs in the launcher process: fill the campaign's tmpfs right before one Campaign save.
HOOK = r"""
import errno, os, runpy, sys
from cowork_adapter.campaign import store

def fill(directory):
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)

target = os.environ["COWORK_TEST_FILL_AT"]
original = getattr(store.Campaign, target)

def full_disk_first(self, *args, **kwargs):
    fill(os.environ["COWORK_TEST_FILL_DIR"])
    with open(os.environ["COWORK_TEST_FILL_DIR"] + "-snapshot", "wb") as fh:  # outside the tmpfs
        fh.write(open(self.location, "rb").read())
    return original(self, *args, **kwargs)

setattr(store.Campaign, target, full_disk_first)
sys.argv = ["cowork-adapter", *sys.argv[1:]]
runpy.run_module("cowork_adapter", run_name="__main__")
"""


def fill(directory: Path) -> None:
    """Write zeros until the filesystem refuses even one byte."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)


def events(run_root: Path) -> list[dict]:
    path = run_root / "events.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def kinds(run_root: Path) -> list[str]:
    return [e.get("kind") for e in events(run_root)]


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("diskfull") / "root", docker_host)
    env.meter.set_delay(2.0)  # every read answers 2 s late: settlement's final read is always in flight
    yield env
    env.meter.stop()


@pytest.fixture
def campaign_disk(demo, request):
    disk = demo.root / f"cdisk-{request.node.name[-24:].strip('[]-')}"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def launch(demo, name: str, campaign: Path, fill_at: str | None) -> subprocess.Popen:
    args = demo.run_args(name, TASKS, campaign=str(campaign.relative_to(demo.root)))
    env = {**os.environ, demo.key_env: demo.key}
    if fill_at:
        args[1:3] = ["-c", HOOK]
        env.update(COWORK_TEST_FILL_AT=fill_at, COWORK_TEST_FILL_DIR=str(campaign.parent))
    with open(demo.root / f"{name}.log", "ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def launched_to_persistence_failure(demo, name: str, campaign: Path, fill_at: str) -> dict:
    """Launch a run whose campaign disk fills at `fill_at`, wait for it, and check its ending."""
    proc = launch(demo, name, campaign, fill_at)
    try:
        code = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    return assert_ended_as_persistence_failure(demo, name, code)


def assert_ended_as_persistence_failure(demo, name: str, code: int) -> dict:
    run_root = demo.run_root(name)
    log = (demo.root / f"{name}.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert code == ExitCode.STOPPED, f"exit {code}; log tail:\n{log[-3000:]}"
    manifest = read_json(run_root / "run_manifest.json")
    assert manifest.get("stop_reason") == CPF, manifest.get("stop_reason")
    assert CPF in manifest.get("stop_causes", [])
    assert manifest.get("exit_code") == ExitCode.STOPPED
    assert manifest.get("campaign_settlement") == "unconfirmed"
    finished = [e for e in events(run_root) if e.get("kind") == "run_finished"]
    assert len(finished) == 1 and finished[0]["exit_code"] == 3 and finished[0]["stop_reason"] == CPF
    cleanup = [e for e in events(run_root) if e.get("kind") == "cleanup"]
    assert cleanup and cleanup[-1]["proven"] is True
    assert launcher_audit_path(run_root).is_file()
    assert read_json(run_root / "monitor.json").get("campaign_settlement") == "unconfirmed"
    assert label_is_empty(demo.docker_host, run_label(run_root))
    assert not (run_root / "private" / "agent.env").exists()
    return manifest


def test_full_disk_at_settlement_stops_with_exit_3_and_keeps_active_run(demo, campaign_disk):
    name = "settle"
    campaign = campaign_disk / "campaign.json"
    run_root = demo.run_root(name)
    proc = launch(demo, name, campaign, None)
    try:
        assert wait_for(lambda: "runner_exited" in kinds(run_root) or proc.poll() is not None, 900, 0.05)
        assert proc.poll() is None, "the launcher ended before the test could fill the disk"
        fill(campaign_disk)
        at_fill = campaign.read_bytes()
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_ended_as_persistence_failure(demo, name, code)
    # The campaign file is what it was when the disk filled: valid JSON, this run still active.
    assert campaign.read_bytes() == at_fill
    record = json.loads(at_fill)
    assert record["active_run"]["run_root"] == str(run_root)
    assert record["active_run"]["runner_pgid"] > 0
    assert str(run_root) not in [r["run_root"] for r in record.get("runs", [])]


@pytest.mark.parametrize("fill_at", ["start_run", "set_runner_pgid"])
def test_full_disk_at_registration_or_pgid_stops_with_exit_3(demo, campaign_disk, fill_at):
    name = f"fill-{fill_at}"
    campaign = campaign_disk / "campaign.json"
    run_root = demo.run_root(name)
    manifest = launched_to_persistence_failure(demo, name, campaign, fill_at)
    doing = {"start_run": "registering the run", "set_runner_pgid": "recording the runner's process group"}[fill_at]
    assert manifest["error"]["type"] == CPF and manifest["error"]["message"].startswith(doing), manifest["error"]
    snapshot = Path(str(campaign_disk) + "-snapshot").read_bytes()
    assert campaign.read_bytes() == snapshot  # the failed save changed nothing
    record = json.loads(snapshot)
    if fill_at == "start_run":
        # Never registered: nothing started, and the campaign holds no run of it.
        assert record.get("active_run") is None
        assert "runner_started" not in kinds(run_root)
    else:
        # Registered, the runner started, its pgid could not be saved: active_run is kept for clear.
        assert record["active_run"]["run_root"] == str(run_root)
        assert "runner_pgid" not in record["active_run"] or record["active_run"]["runner_pgid"] is None
        assert "runner_started" in kinds(run_root)


@pytest.mark.parametrize("existing", [False, True], ids=["poll-reading", "opening-existing"])
def test_full_disk_at_a_meter_reading_stops_with_exit_3(demo, campaign_disk, existing):
    """Issue 21 item 2: a reading that cannot be saved (at a poll, or when an existing campaign is
    opened) ends as campaign_persistence_failed, never as a crash or a supervisor error."""
    from datetime import datetime

    from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint

    name = "fill-reading-" + ("existing" if existing else "poll")
    campaign = campaign_disk / "campaign.json"
    run_root = demo.run_root(name)
    if existing:
        now = datetime.now(UTC)
        usage = float(demo.meter.state()["usage"])
        campaign.write_text(
            CampaignRecord(
                fingerprint=key_fingerprint(demo.key),
                ceiling_usd=50.0,
                usage_baseline=usage,
                prior_spend_usd=0.0,
                last_usage=usage,
                last_usage_observed_at=now,
                created_at=now,
                reserve_usd=5.0,
                run_budget_usd=20.0,
            ).to_json()
        )
    manifest = launched_to_persistence_failure(demo, name, campaign, "record_usage")
    doing = "opening the campaign" if existing else "saving a meter reading"
    assert manifest["error"]["type"] == CPF and manifest["error"]["message"].startswith(doing), manifest["error"]
    snapshot = Path(str(campaign_disk) + "-snapshot").read_bytes()
    assert campaign.read_bytes() == snapshot  # the failed save changed nothing
    record = json.loads(snapshot)
    if existing:
        assert record.get("active_run") is None and "runner_started" not in kinds(run_root)
    else:
        assert record["active_run"]["run_root"] == str(run_root)  # registered: kept for clear
