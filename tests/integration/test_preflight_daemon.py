"""Preflight against the real test-bed daemon: the limits fitted to its resources, and every campaign
refusal before a run root, a lock file or a container exists.

The test bed's daemon has fewer than 4 CPUs (2 here), so the old default `--cpus 4.0` crashed every
run at its first container; now the default is the smaller of 4 and the daemon's CPUs and an explicit
value above the daemon's is refused in one sentence.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest
from docker_watch import CreationWatcher

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, path_label, run_label
from cowork_adapter.demo.env import prepare, read_json
from cowork_adapter.schemas.campaign import ActiveRun, CampaignRecord, key_fingerprint


@pytest.fixture(scope="module")
def env(docker_host, tmp_path_factory):
    demo = prepare(tmp_path_factory.mktemp("preflight") / "root", docker_host)
    yield demo
    demo.meter.stop()


@pytest.fixture(scope="module")
def daemon(docker_host) -> dict:
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        return client.info()
    finally:
        client.close()


class LabelledCreations:
    """Container creations on the daemon that carry one run's label, followed while the CLI runs.

    The run's label is drawn when it starts (a per-run nonce), after this starts following: every
    creation carrying the label KEY is kept, and `seen` keeps those whose value is the label the run
    root's manifest records, or its path's label (a refused run has no manifest, so no label was
    drawn for it: the path's label is the only one it could have used)."""

    def __init__(self, docker_host: str, run_root: Path) -> None:
        self.run_root = run_root
        self._watcher = CreationWatcher(docker_host, types=("container",), label_key=RUN_LABEL_KEY)

    @property
    def seen(self) -> list[dict]:
        labels = {path_label(self.run_root)}
        if (self.run_root / "run_manifest.json").exists():
            labels.add(run_label(self.run_root))
        return [c for c in self._watcher.seen if c["attrs"].get(RUN_LABEL_KEY) in labels]

    def close(self) -> None:
        time.sleep(1)  # let the last events arrive
        self._watcher.close()


def without_limits(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--cpus", "--memory"):
            skip = True
            continue
        out.append(arg)
    return out


def one_refusal(proc, *phrases: str) -> str:
    lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("cowork-adapter: "), lines
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def run(env, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, env={**os.environ, env.key_env: env.key}, capture_output=True, timeout=900, stdin=subprocess.DEVNULL
    )


def test_an_explicit_cpus_above_the_daemon_is_refused_in_preflight(env, daemon):
    too_many = int(daemon["NCPU"]) + 2  # 4 on the 2-CPU test bed
    name = "cpus-above"
    args = without_limits(env.run_args(name, ["demo-csv-totals"], campaign="campaign-cpus.json"))
    proc = run(env, args + ["--cpus", str(too_many)])
    one_refusal(proc, f"--cpus {too_many} is more than the {daemon['NCPU']} CPUs of the Docker daemon")
    assert not env.run_root(name).exists()
    assert not (env.root / "campaign-cpus.json").exists()


def test_the_default_cpus_fit_the_daemon_and_every_container_gets_them(env, daemon):
    want = min(4.0, float(daemon["NCPU"]))
    name = "default-limits"
    run_root = env.run_root(name)
    args = without_limits(env.run_args(name, ["demo-csv-totals"], campaign="unused.json"))
    cut = args.index("--campaign-file")
    args = args[:cut] + args[cut + 3 :] + ["--probe", "inventory"]  # no model, no campaign: the containers only
    assert "--new-campaign" not in args
    watcher = LabelledCreations(env.docker_host, run_root)
    try:
        proc = run(env, args)
    finally:
        watcher.close()
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    manifest = read_json(run_root / "run_manifest.json")
    assert manifest["limits"]["cpus"] == want and manifest["applied_config"]["cpus"] == want
    assert manifest["limits"]["daemon_cpus"] == int(daemon["NCPU"])
    assert manifest["limits"]["memory_bytes"] == min(16 << 30, int(daemon["MemTotal"]))
    created = [c["inspect"] for c in watcher.seen if c["inspect"] is not None]
    assert created, "the inventory started no labelled container"
    # The build's two short probes of the base image run under small fixed limits (1 CPU); every
    # container of the inventory (the derived image, its PostgreSQL) gets the fitted default.
    build_probes = [c for c in created if c["Config"]["Image"] == env.pack_tag]
    inventory = [c for c in created if c["Config"]["Image"] != env.pack_tag]
    assert inventory, "the inventory started no labelled container"
    assert {c["HostConfig"]["NanoCpus"] for c in inventory} == {int(want * 1e9)}
    assert {c["HostConfig"]["NanoCpus"] for c in build_probes} <= {1_000_000_000}
    assert label_is_empty(env.docker_host, run_label(run_root))


def test_an_unsettled_campaign_is_refused_in_preflight_before_any_container(env):
    campaign = env.root / "campaign-unsettled.json"
    now = datetime.now(UTC)
    dead = ActiveRun(
        run_root=str(env.root / "runs" / "dead"),
        run_label="d" * 64,
        launcher_pid=2**22 - 7,
        started_at=now,
        host="gone",
        usage_at_start=5.0,
    )
    campaign.write_text(
        CampaignRecord(
            fingerprint=key_fingerprint(env.key),
            ceiling_usd=50.0,
            usage_baseline=5.0,
            prior_spend_usd=0.0,
            last_usage=5.0,
            last_usage_observed_at=now,
            created_at=now,
            active_run=dead,
        ).to_json()
    )
    _refused_before_anything(env, "unsettled", campaign, "has an unsettled active run", str(env.root / "runs" / "dead"))
    assert not campaign.with_name(campaign.name + ".lock").exists()  # read without its lock


def drop_flag(args: list[str], flag: str, with_value: bool) -> list[str]:
    at = args.index(flag)
    return args[:at] + args[at + (2 if with_value else 1) :]


@pytest.mark.parametrize(
    "flag,with_value,words",
    [
        ("--new-campaign", False, ("does not exist", "new usage baseline", "pass --new-campaign")),
        ("--budget-reserve-usd", True, ("needs --budget-reserve-usd given explicitly",)),
        ("--campaign-budget-usd", True, ("needs --campaign-budget-usd given explicitly",)),
        ("--budget-usd", True, ("needs --budget-usd given explicitly",)),
    ],
)
def test_a_new_campaign_is_never_implied_and_is_refused_in_preflight(env, flag, with_value, words):
    """Issue 21: no default money and no silent new baseline; exit 2, one sentence, nothing written."""
    name = f"implied{flag.replace('-', '_')}"
    campaign = env.root / f"campaign-{name}.json"
    run_root = env.run_root(name)
    args = drop_flag(env.run_args(name, ["demo-csv-totals"], campaign=campaign.name), flag, with_value)
    watcher = LabelledCreations(env.docker_host, run_root)
    try:
        proc = run(env, args)
    finally:
        watcher.close()
    one_refusal(proc, *words)
    assert watcher.seen == []
    assert not run_root.exists()
    assert not list(env.root.glob(f"campaign-{name}.json*"))  # neither the campaign nor its lock


def test_a_crash_after_admission_still_writes_a_row_for_every_selected_task(env, monkeypatch, capsys):
    """The old default --cpus crashed at the inventory's first container (docker APIError) and left no
    ledger. Whatever crashes after admission, the ledger answers for every selected task."""
    from cowork_adapter.config import RunConfig
    from cowork_adapter.run import launch as launcher
    from cowork_adapter.schemas.manifest import ImageIdentity

    tasks = ("demo-csv-totals", "demo-crm-postgres")
    run_root = env.run_root("crash-after-admission")

    def fake_image(cfg, pre, manifest):  # the image is not what this test is about: no build
        return ImageIdentity(tag="unbuilt:test", id="sha256:" + "0" * 64, base_image=cfg.image.base_image)

    def crash(cfg, manifest, bench_copy):
        raise docker.errors.APIError("500 Server Error: Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs")

    monkeypatch.setattr(launcher, "_image", fake_image)
    monkeypatch.setattr(launcher, "_qualify_environment", crash)
    monkeypatch.setenv(env.key_env, env.key)
    cfg = RunConfig.from_flags(
        repo_dir=env.seed,
        bench_root=env.bench,
        bench_commit=env.bench_commit,
        docker_host=env.docker_host,
        resource_root=env.storage,
        run_root=run_root,
        base_image=env.pack_tag,
        model="demo/stub-model",
        tasks=tasks,
        campaign_file=env.root / "campaign-crash.json",
        new_campaign=True,
        campaign_budget_usd=50.0,
        budget_usd=20.0,
        budget_reserve_usd=5.0,
        meter_url=env.meter.base_url,
        api_key_env=env.key_env,
        min_key_usd=0.0,
        min_free_gib=1.0,
        min_root_free_gib=1.0,
        build_image=True,
        key_in_agent=True,
    )  # the key's route is not what this test is about (the default one asks the image)
    code = launcher.execute_run(cfg, ["cowork-adapter", "run"])
    assert code == 1 and "the run crashed (APIError)" in capsys.readouterr().err
    manifest = read_json(run_root / "run_manifest.json")
    assert manifest["outcome"] == "crashed" and "Range of CPUs" in manifest["error"]["message"]
    rows = [json.loads(line) for line in (run_root / "result_index.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == list(tasks)
    assert {r["status"] for r in rows} == {"not_attempted"}


def _refused_before_anything(env, name: str, campaign: Path, *phrases: str) -> None:
    """The run is refused in one sentence with no run root and no container of its label."""
    before = campaign.read_bytes() if campaign.exists() else None
    run_root = env.run_root(name)
    watcher = LabelledCreations(env.docker_host, run_root)
    try:
        proc = run(env, env.run_args(name, ["demo-csv-totals"], campaign=campaign.name))
    finally:
        watcher.close()
    one_refusal(proc, *phrases)
    assert watcher.seen == []  # the environment probe never ran
    assert not run_root.exists()  # not even a run root marked refused
    assert (campaign.read_bytes() if campaign.exists() else None) == before


def test_a_locked_campaign_is_refused_in_preflight_before_any_container(env):
    """Another launcher holds the campaign's lock: said at once, before the environment probe."""
    import fcntl

    campaign = env.root / "campaign-locked.json"
    lock = campaign.with_name(campaign.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running launcher holds it
        _refused_before_anything(env, "locked", campaign, "is locked by another launcher")
    finally:
        os.close(fd)
    assert not campaign.exists()


def test_a_truncated_campaign_file_is_refused_in_preflight_before_any_container(env):
    campaign = env.root / "campaign-truncated.json"
    now = datetime.now(UTC)
    whole = CampaignRecord(
        fingerprint=key_fingerprint(env.key),
        ceiling_usd=50.0,
        usage_baseline=5.0,
        prior_spend_usd=0.0,
        last_usage=5.0,
        last_usage_observed_at=now,
        created_at=now,
    ).to_json()
    campaign.write_text(whole[: len(whole) // 2])  # cut mid-record, as by a full disk under a non-atomic copy
    _refused_before_anything(env, "truncated", campaign, "is not valid JSON", str(campaign))
    assert not campaign.with_name(campaign.name + ".lock").exists()
