"""Environment qualification end to end: real Docker, real PostgreSQL, real mcp SDKs, real mcp-proxy.

The demo pack image ships a deliberately broken server (`quotes`: its own environment resolves
the mcp 2.x SDK). Two derived images are built from it: one as the benchmark gives it (repairs
off) and one with the detected repairs. `cowork-adapter run --probe inventory` must find the
broken server in the first and find it repaired in the second; a paid selection needing it is
refused (naming the task) unless accepted, and then the task is environment-blocked in the
ledger and the report. The inventory step reads no meter, calls no model and charges nothing.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from cowork_adapter.config import RunConfig
from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import new_run_label, run_label
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.meter_standin import MeterStandin
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed
from cowork_adapter.errors import Refusal
from cowork_adapter.image.derived import ImageRequest, build_derived_image, label_mismatch
from cowork_adapter.image.repairs import LABEL_REPAIRS, VENDORED_MCP_PIN
from cowork_adapter.report.build import build_report
from cowork_adapter.report.merge import load_runs
from cowork_adapter.run.probes import enforce_inventory, inventory_for_run
from cowork_adapter.runroot.manifest import read_manifest, write_manifest
from cowork_adapter.score.ledger import build_index, write_index

TASKS = ["demo-broken-sdk", "demo-csv-totals"]
RUN_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    """Bench, seed, pack image and the two derived images (removed afterwards: we made them)."""
    root = Path(tmp_path_factory.mktemp("inventory"))
    bench = root / "bench-src"
    commit = materialize_bench(bench)
    seed = root / "seed"
    seed_head = make_stub_seed(seed)
    pack_tag, _ = ensure_demo_pack_image(docker_host)
    suffix = secrets.token_hex(4)
    tags = {"broken": f"cowork-inventory-test:broken-{suffix}", "repaired": f"cowork-inventory-test:repaired-{suffix}"}
    demo = {
        "root": root,
        "bench": bench,
        "commit": commit,
        "seed": seed,
        "seed_head": seed_head,
        "pack": pack_tag,
        "tags": tags,
        "host": docker_host,
        "builds": 0,
    }
    try:
        for kind in tags:
            _build(demo, kind)
        yield demo
    finally:
        client = docker.DockerClient(base_url=docker_host, timeout=120)
        for tag in tags.values():
            try:
                client.images.remove(tag, force=True)
            except docker.errors.ImageNotFound:
                pass
        client.close()


def _build(demo, kind: str) -> None:
    """(Re)build one derived image from the current tree: repairs on for "repaired", off for "broken"."""
    demo["builds"] += 1
    ctx = demo["root"] / f"ctx-{kind}-{demo['builds']}"
    req = ImageRequest(
        tag=demo["tags"][kind],
        base_image=demo["pack"],
        seed_dir=demo["seed"],
        seed_head=demo["seed_head"],
        bench_commit=demo["commit"],
    )
    build_derived_image(
        demo["host"],
        req,
        ctx,
        demo["root"] / f"build-{kind}.log",
        "inventory-test-build",
        lambda: None,
        repair=(kind == "repaired"),
    )
    assert label_is_empty(demo["host"], "inventory-test-build")


def _current(demo, kind: str) -> None:
    """Rebuild when the in-container code changed since the build (the launcher refuses a stale image)."""
    req = ImageRequest(
        tag=demo["tags"][kind],
        base_image=demo["pack"],
        seed_dir=demo["seed"],
        seed_head=demo["seed_head"],
        bench_commit=demo["commit"],
    )
    labels = docker.DockerClient(base_url=demo["host"], timeout=60).images.get(demo["tags"][kind]).labels
    if label_mismatch(demo["tags"][kind], labels, req):
        _build(demo, kind)


def _probe(demo, name: str, kind: str, probe: str = "inventory", tasks: list[str] = TASKS) -> tuple[int, Path, str]:
    _current(demo, kind)
    run_root = demo["root"] / "runs" / name
    run_root.parent.mkdir(exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "run",
        "--repo-dir",
        str(demo["seed"]),
        "--bench-root",
        str(demo["bench"]),
        "--bench-commit",
        demo["commit"],
        "--docker-host",
        demo["host"],
        "--run-root",
        str(run_root),
        "--base-image",
        demo["pack"],
        "--image",
        demo["tags"][kind],
        "--probe",
        probe,
        "--cpus",
        "1",
        "--memory",
        "2g",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
    ]
    for task in tasks:
        args += ["--task", task]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return proc.returncode, run_root, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def broken_probe(demo):
    return _probe(demo, "probe-broken", "broken")


def test_inventory_finds_the_broken_server_with_its_log(demo, broken_probe):
    code, run_root, output = broken_probe
    assert code == 1, output
    inventory = read_manifest(run_root).inventory
    quotes, files = inventory["servers"]["quotes"], inventory["servers"]["files"]
    assert quotes["health"] == "failed" and quotes["tool_count"] == 0
    assert "object has no attribute" in quotes["error"], quotes["error"]
    assert quotes["log"] and "no attribute" in Path(quotes["log"]).read_text()
    assert files["health"] == "ok" and files["tool_count"] >= 3
    assert inventory["blocked_tasks"] == {"demo-broken-sdk": "mcp_server_failed:quotes"}
    assert inventory["repairs"] == []  # built without repairs: nothing is claimed
    assert label_is_empty(demo["host"], run_label(run_root))


def test_detected_repair_fixes_the_server_and_is_disclosed(demo):
    labels = docker.DockerClient(base_url=demo["host"], timeout=60).images.get(demo["tags"]["repaired"]).labels
    planned = json.loads(labels[LABEL_REPAIRS])
    assert [(r["server"], r["fault"], r["before"]) for r in planned["repairs"]] == [("quotes", "mcp_sdk_2x", "2.3.0")]
    assert planned["checks"] == [
        {"check": "chromium", "result": "not_applicable", "detail": "no playwright server in the image"}
    ]

    code, run_root, output = _probe(demo, "probe-repaired", "repaired")
    assert code == 0, output
    inventory = read_manifest(run_root).inventory
    quotes = inventory["servers"]["quotes"]
    assert quotes["health"] == "repaired" and quotes["tool_count"] == 1 and quotes["tools"] == ["get_quote"]
    assert inventory["repairs"] == [
        {
            "server": "quotes",
            "fault": "mcp_sdk_2x",
            "requirement": VENDORED_MCP_PIN,
            "before": "2.3.0",
            "after": "1.26.0",
            "took": True,
        }
    ]
    assert inventory["blocked_tasks"] == {}
    write_index(run_root, build_index(run_root, live=False, interruption_cause="probe"))  # a report needs a ledger
    report = build_report(load_runs([run_root]), concurrency=1)
    assert any("repaired: MCP server quotes" in note for note in report["disclosures"]), report["disclosures"]
    assert label_is_empty(demo["host"], run_label(run_root))


def _paid_config(demo, run_root: Path, meter_url: str, campaign: Path, accept: bool) -> RunConfig:
    return RunConfig.from_flags(
        repo_dir=demo["seed"],
        bench_root=demo["bench"],
        bench_commit=demo["commit"],
        docker_host=demo["host"],
        run_root=run_root,
        base_image=demo["pack"],
        image=demo["tags"]["broken"],
        tasks=TASKS,
        campaign_file=campaign,
        new_campaign=True,
        campaign_budget_usd=50.0,
        budget_usd=20.0,
        budget_reserve_usd=5.0,
        meter_url=meter_url,
        cpus=1,
        memory="2g",
        min_free_gib=1,
        min_root_free_gib=1,
        accept_environment_blocked=accept,
    )


def _paid_root(demo, broken_probe, name: str) -> tuple[Path, object]:
    """A fresh run root holding the probe run's manifest re-labelled as this run's (the launcher's state
    just before run_in_custody: bench cloned, image resolved, selection made)."""
    _, probe_root, _ = broken_probe
    run_root = demo["root"] / "runs" / name
    run_root.mkdir()
    manifest = read_manifest(probe_root)
    label, nonce = new_run_label(run_root)  # as the launcher draws it
    manifest = manifest.replace(
        **{
            "run_root": str(run_root),
            "run_label": label,
            "run_nonce": nonce,
            "inventory": None,
            "probe": None,
            "outcome": "running",
        }
    )
    write_manifest(run_root, manifest)
    return run_root, manifest


def test_inventory_makes_no_model_call_and_no_charge(demo, broken_probe):
    _, probe_root, _ = broken_probe
    campaign = demo["root"] / "campaign.json"
    campaign.write_text(json.dumps({"schema": "cowork_adapter.campaign.v1", "spent_usd": 0}))
    before = (campaign.read_bytes(), campaign.stat().st_mtime_ns)
    run_root, manifest = _paid_root(demo, broken_probe, "paid-no-charge")
    with MeterStandin("inventory-fake-key-" + secrets.token_hex(4), usage=5.0) as meter:
        cfg = _paid_config(demo, run_root, meter.base_url, campaign, accept=True)
        inventory = inventory_for_run(cfg, manifest, probe_root / "bench")
        assert meter.requests == []  # no /key reading, no model-side request of any kind
    assert inventory["servers"]["quotes"]["health"] == "failed"
    assert (campaign.read_bytes(), campaign.stat().st_mtime_ns) == before
    hits = [str(p) for p in run_root.rglob("*") if p.is_file() and b"llm_usage" in p.read_bytes()]
    assert hits == []
    assert not (run_root / "events.jsonl").exists() and not (run_root / "private").exists()
    assert label_is_empty(demo["host"], run_label(run_root))


def test_paid_selection_needing_a_broken_server_is_refused_unless_accepted(demo, broken_probe):
    _, probe_root, _ = broken_probe
    inventory = read_manifest(probe_root).inventory
    campaign = demo["root"] / "campaign-refusal.json"
    refused_root, manifest = _paid_root(demo, broken_probe, "paid-refused")
    cfg = _paid_config(demo, refused_root, "http://127.0.0.1:9/", campaign, accept=False)
    with pytest.raises(Refusal) as caught:
        enforce_inventory(cfg, manifest, inventory)
    assert caught.value.stage == "inventory"
    assert "demo-broken-sdk" in caught.value.sentence and "quotes" in caught.value.sentence
    assert "demo-csv-totals" not in caught.value.sentence and "--accept-environment-blocked" in caught.value.sentence

    accepted_root, manifest = _paid_root(demo, broken_probe, "paid-accepted")
    manifest.inventory = inventory
    cfg = _paid_config(demo, accepted_root, "http://127.0.0.1:9/", campaign, accept=True)
    enforce_inventory(cfg, manifest, inventory)
    assert read_manifest(accepted_root).inventory["accepted_blocked"] is True
    index = build_index(accepted_root, live=False, interruption_cause="test")
    write_index(accepted_root, index)
    rows = {row.instance_id: row for row in index}
    assert rows["demo-broken-sdk"].status.value == "environment_blocked"
    assert rows["demo-broken-sdk"].reason_code == "mcp_server_failed:quotes"
    assert rows["demo-csv-totals"].status.value != "environment_blocked"
    report = build_report(load_runs([accepted_root]), concurrency=1)
    assert report["denominator"] == 2 and report["counts"]["environment_blocked"] == 1  # still counted
    assert any("blocked by a failed MCP server" in note for note in report["disclosures"]), report["disclosures"]
    assert any(
        "MCP server quotes in run" in note and "failed its environment check" in note for note in report["disclosures"]
    ), report["disclosures"]


def test_stateful_probe_proves_state_survives_separate_http_sessions(demo):
    code, run_root, output = _probe(demo, "probe-stateful", "repaired", "stateful", ["demo-deck-stateful"])
    assert code == 0, output
    inventory = read_manifest(run_root).inventory
    (check,) = [c for c in inventory["checks"] if c["check"] == "stateful"]
    deck = check["result"]["deck"]
    assert deck["ok"] is True and deck["sessions"] == 4 and deck["error"] is None
    # The last call could only answer "saved 2 slides" if the deck made in the first session survived.
    report = json.loads((run_root / "probes" / "out" / "stateful-deck" / "stateful.json").read_text())
    assert "saved 2 slides" in report["sessions"][-1]["text"]
    assert "state survived separate HTTP sessions" in output
    assert label_is_empty(demo["host"], run_label(run_root))
