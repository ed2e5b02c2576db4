"""Host side of the environment inventory without Docker: a fake sandbox stands in for the
containers and writes what the in-container probe would; the composition, the culprit search,
the repair verdicts, the refusal and the acceptance are real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cowork_adapter.run.probes as probes
from cowork_adapter.config import RunConfig
from cowork_adapter.errors import Refusal
from cowork_adapter.image.repairs import label_value, plan_repairs
from cowork_adapter.runroot.manifest import read_manifest, write_manifest
from cowork_adapter.schemas.inventory import Inventory
from cowork_adapter.schemas.manifest import ImageIdentity, RunManifest, Selection
from cowork_adapter.schemas.record import convert
from cowork_adapter.vocab import ExitCode, ServerHealth

TASK_SERVERS = {"t-files": ["files"], "t-quotes": ["quotes", "files"], "t-crm": ["crm"]}


def make_bench(root: Path) -> Path:
    for task, servers in TASK_SERVERS.items():
        folder = root / "tasks" / "finalpool" / task
        folder.mkdir(parents=True)
        (folder / "task_config.json").write_text(json.dumps({"needed_mcp_servers": servers}))
    (root / "configs").mkdir()
    return root


def make_manifest(run_root: Path, labels: dict | None = None) -> RunManifest:
    image = ImageIdentity(tag="t", id="sha256:" + "1" * 64, base_image="b", labels=labels or {})
    return RunManifest(
        run_root=str(run_root),
        run_label="cd" * 16,
        created_at="2026-03-01T12:00:00Z",
        updated_at="2026-03-01T12:00:00Z",
        argv=["cowork-adapter", "run"],
        adapter={"version": "0"},
        image=image,
        selection=Selection(task_ids=list(TASK_SERVERS), selection_task_ids=list(TASK_SERVERS)),
    )


def make_cfg(tmp_path: Path, run_root: Path, **over) -> RunConfig:
    (tmp_path / "seed").mkdir(exist_ok=True)
    (tmp_path / "benchroot").mkdir(exist_ok=True)
    fields = dict(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "benchroot",
        docker_host="unix:///nonexistent.sock",
        run_root=run_root,
        base_image="cowork-pack:x",
        dry_run=True,
        min_free_gib=0,
        min_root_free_gib=0,
    )
    fields.update(over)
    return RunConfig.from_flags(**fields)


class FakeSandbox:
    """Writes the reports the in-container probe would: `broken` servers crash (and take the joint
    proxy down with them); records every call so the test can see the culprit search."""

    broken: set = set()
    garbled: set = set()  # servers whose report is not a mapping (the joint listing fails with them too)
    detection: dict = {"servers": [], "chromium": []}
    calls: list = []
    stateful_ok = True

    def __init__(self, cfg, manifest, bench_copy, probe_root):
        self.out = Path(probe_root) / "out"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        FakeSandbox.calls.append(("cleanup",))

    def entry(self, phase, task, out_sub, env=None):
        FakeSandbox.calls.append((phase, task))
        folder = self.out / out_sub
        folder.mkdir(parents=True, exist_ok=True)
        config = json.loads((self.out.parent / "tasks" / "finalpool" / task / "task_config.json").read_text())
        names = config["needed_mcp_servers"]
        if phase == "stateful":
            spec = json.loads(env["COWORK_STATEFUL_PROBE"])
            sessions = [{"tool": c["name"], "session_id": None, "text": "x"} for c in spec["calls"]]
            (folder / "stateful.json").write_text(
                json.dumps(
                    {"ok": self.stateful_ok, "sessions": sessions, "error": None if self.stateful_ok else "lost"}
                )
            )
            return 0 if self.stateful_ok else 1
        joint_down = any(n in self.broken or n in self.garbled for n in names)
        report = {}
        for name in names:
            if joint_down:
                report[name] = {"ok": False, "tool_count": 0, "tools": [], "error": "mcp-proxy exited"}
                if name in self.broken:
                    (folder / f"{name}.stderr.log").write_text(
                        "Traceback (most recent call last):\n"
                        "AttributeError: 'Server' object has no attribute 'list_tools'\n"
                    )
            else:
                report[name] = {"ok": True, "tool_count": 2, "tools": ["a", "b"], "error": None}
        report.update({name: ["not", "a", "mapping"] for name in names if name in self.garbled})
        (folder / "inventory.json").write_text(json.dumps(report))
        return 1 if joint_down else 0

    def detect(self):
        FakeSandbox.calls.append(("detect",))
        return self.detection


@pytest.fixture
def fake(monkeypatch):
    FakeSandbox.broken, FakeSandbox.garbled, FakeSandbox.calls, FakeSandbox.stateful_ok = set(), set(), [], True
    FakeSandbox.detection = {"servers": [], "chromium": []}
    monkeypatch.setattr(probes, "ProbeSandbox", FakeSandbox)
    return FakeSandbox


@pytest.fixture
def run(tmp_path):
    bench = make_bench(tmp_path / "bench")
    run_root = tmp_path / "run"
    run_root.mkdir()
    return bench, run_root


def test_needed_servers_and_blocked_by(tmp_path):
    bench = make_bench(tmp_path / "bench")
    needs = probes.needed_servers(bench, ["t-files", "t-quotes", "t-missing"])
    assert needs == {"files": ["t-files", "t-quotes"], "quotes": ["t-quotes"]}
    assert probes.blocked_by(needs, {"quotes"}) == {"t-quotes": "mcp_server_failed:quotes"}
    assert probes.blocked_by(needs, {"quotes", "files"}) == {
        "t-files": "mcp_server_failed:files",
        "t-quotes": "mcp_server_failed:files,quotes",
    }
    assert probes.blocked_by(needs, set()) == {}


@pytest.mark.parametrize(
    "report, repairs, health",
    [
        ({"ok": True, "tool_count": 3}, [], ServerHealth.OK),
        ({"ok": True, "tool_count": 0}, [], ServerHealth.FAILED),  # ok only with at least one tool
        ({"ok": False, "tool_count": 0, "error": "mcp-proxy exited"}, [], ServerHealth.FAILED),
        (None, [], ServerHealth.FAILED),
        (
            {"ok": True, "tool_count": 1},
            [{"server": "s", "fault": "mcp_sdk_2x", "before": "2.3.0", "after": "1.26.0", "took": True}],
            ServerHealth.REPAIRED,
        ),
        (
            {"ok": True, "tool_count": 1},
            [{"server": "s", "fault": "chromium_missing", "before": None, "after": None, "took": False}],
            ServerHealth.FAILED,
        ),
        (
            {"ok": False, "tool_count": 0},
            [{"server": "s", "fault": "mcp_sdk_2x", "before": "2.3.0", "after": "1.26.0", "took": True}],
            ServerHealth.FAILED,
        ),
        ({"ok": True, "tool_count": 1}, [{"server": "other", "fault": "mcp_sdk_2x", "took": True}], ServerHealth.OK),
    ],
)
def test_server_inventory_table(report, repairs, health):
    entry = probes.server_inventory("s", report, ["t"], repairs, None, "AttributeError: x")
    assert entry.health is health
    if health is ServerHealth.FAILED:
        assert entry.error
    else:
        assert entry.error is None


def test_healthy_environment_is_listed_jointly_once(fake, run, tmp_path):
    bench, run_root = run
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), make_manifest(run_root), bench, list(TASK_SERVERS))
    assert [c for c in fake.calls if c[0] == "inventory"] == [("inventory", probes.ALL_SERVERS_TASK)]
    assert {n: s.health for n, s in inv.servers.items()} == {"crm": "ok", "files": "ok", "quotes": "ok"}
    assert inv.blocked_tasks == {} and inv.servers["files"].tasks == ["t-files", "t-quotes"]
    assert fake.calls[-1] == ("cleanup",)


def test_a_broken_server_is_named_by_listing_each_alone(fake, run, tmp_path):
    bench, run_root = run
    fake.broken = {"quotes"}
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), make_manifest(run_root), bench, list(TASK_SERVERS))
    assert [c[1] for c in fake.calls if c[0] == "inventory"] == [
        probes.ALL_SERVERS_TASK,
        "cowork-probe-crm",
        "cowork-probe-files",
        "cowork-probe-quotes",
    ]
    assert inv.servers["quotes"].health is ServerHealth.FAILED
    assert "no attribute 'list_tools'" in inv.servers["quotes"].error
    assert inv.servers["quotes"].log.endswith("cowork-probe-quotes/quotes.stderr.log")
    assert inv.servers["files"].health is ServerHealth.OK and inv.servers["crm"].health is ServerHealth.OK
    assert inv.blocked_tasks == {"t-quotes": "mcp_server_failed:quotes"}


def test_a_server_report_that_is_not_a_mapping_fails_that_server_instead_of_the_probe(fake, run, tmp_path):
    # Found by the type checker: the one-by-one listing passed a report of any JSON type on, and a list
    # or a string there ended the probe with an AttributeError instead of naming the server.
    bench, run_root = run
    fake.garbled = {"crm"}
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), make_manifest(run_root), bench, list(TASK_SERVERS))
    assert inv.servers["crm"].health is ServerHealth.FAILED
    assert "the probe wrote no report for this server" in inv.servers["crm"].error
    assert inv.servers["files"].health is ServerHealth.OK and inv.servers["quotes"].health is ServerHealth.OK
    assert inv.blocked_tasks == {"t-crm": "mcp_server_failed:crm"}


def test_a_detected_repair_is_measured_and_disclosed(fake, run, tmp_path):
    bench, run_root = run
    repairs, checks = plan_repairs({"servers": [{"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "2.3.0"}]})
    manifest = make_manifest(run_root, {"org.cowork-adapter.repairs": label_value(repairs, checks)})
    fake.detection = {
        "servers": [{"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "1.26.0"}],
        "chromium": [],
    }
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), manifest, bench, list(TASK_SERVERS))
    assert ("detect",) in fake.calls
    assert inv.servers["quotes"].health is ServerHealth.REPAIRED
    assert inv.servers["quotes"].repair == "mcp_sdk_2x: 2.3.0 -> 1.26.0"
    assert [r.to_dict() for r in inv.repairs] == [
        {
            "server": "quotes",
            "fault": "mcp_sdk_2x",
            "requirement": "mcp==1.26.0",
            "before": "2.3.0",
            "after": "1.26.0",
            "took": True,
        }
    ]
    assert inv.checks == checks


def test_nothing_needed_starts_no_container(fake, run, tmp_path):
    bench, run_root = run
    manifest = make_manifest(run_root)
    manifest.selection = Selection(task_ids=[])
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), manifest, bench, [])
    assert fake.calls == [] and inv.servers == {}


def test_inventory_for_run_keeps_the_inventory_in_the_manifest(fake, run, tmp_path):
    bench, run_root = run
    fake.broken = {"crm"}
    manifest = make_manifest(run_root)
    write_manifest(run_root, manifest)
    inventory = probes.inventory_for_run(make_cfg(tmp_path, run_root), manifest, bench)
    stored = read_manifest(run_root).inventory
    assert stored == inventory and convert(stored, Inventory).blocked_tasks == {"t-crm": "mcp_server_failed:crm"}
    assert stored["schema"] == "cowork_adapter.inventory.v1"


def test_a_second_pass_reuses_the_first_inventory_only_when_it_holds(fake, run, tmp_path):
    """qualify's nop pass: the oracle pass's inventory (same image, same servers) is taken as it is,
    disclosed by `reused_from`, and nothing is probed; any mismatch probes anew."""
    bench, first = run
    fake.broken = {"crm"}
    write_manifest(first, make_manifest(first))
    recorded = probes.inventory_for_run(make_cfg(tmp_path, first), read_manifest(first), bench)
    probes.enforce_inventory(make_cfg(tmp_path, first, accept_environment_blocked=True), read_manifest(first), recorded)
    fake.calls.clear()
    second = tmp_path / "second"
    second.mkdir()
    manifest = make_manifest(second)
    reused = probes.inventory_for_run(make_cfg(tmp_path, second, inventory_from=first), manifest, bench)
    assert fake.calls == []  # no sandbox, no probe container
    assert reused["reused_from"] == str(first) and reused["accepted_blocked"] is False
    assert reused["servers"] == recorded["servers"] and reused["blocked_tasks"] == {"t-crm": "mcp_server_failed:crm"}
    assert read_manifest(second).inventory == reused
    # Another image, or a selection needing other servers: the recorded inventory does not hold.
    needs = probes.needed_servers(bench, list(TASK_SERVERS))
    assert probes.reusable_inventory(first, "sha256:" + "2" * 64, needs) is None
    assert probes.reusable_inventory(first, manifest.image.id, {"files": ["t-files"]}) is None
    assert probes.reusable_inventory(tmp_path / "nowhere", manifest.image.id, needs) is None
    third = tmp_path / "third"
    third.mkdir()
    other = make_manifest(third).replace(image=manifest.image.replace(id="sha256:" + "3" * 64))
    fresh = probes.inventory_for_run(make_cfg(tmp_path, third, inventory_from=first), other, bench)
    assert fresh["reused_from"] is None and fake.calls  # probed anew


def test_enforce_refuses_naming_the_tasks_then_accepts_with_the_flag(fake, run, tmp_path):
    bench, run_root = run
    fake.broken = {"quotes"}
    manifest = make_manifest(run_root)
    inventory = probes.inventory_for_run(make_cfg(tmp_path, run_root), manifest, bench)
    with pytest.raises(Refusal) as caught:
        probes.enforce_inventory(make_cfg(tmp_path, run_root), manifest, inventory)
    sentence = caught.value.sentence
    assert caught.value.stage == "inventory"
    assert "tasks t-quotes need" in sentence and ": quotes" in sentence and "t-files" not in sentence
    assert sentence.endswith("pass --accept-environment-blocked to run them as environment-blocked.")
    assert read_manifest(run_root).inventory.get("accepted_blocked") is False
    probes.enforce_inventory(make_cfg(tmp_path, run_root, accept_environment_blocked=True), manifest, inventory)
    assert read_manifest(run_root).inventory["accepted_blocked"] is True


def test_enforce_is_silent_when_nothing_is_blocked(tmp_path):
    cfg = make_cfg(tmp_path, tmp_path / "r")
    probes.enforce_inventory(cfg, make_manifest(tmp_path / "r"), {"servers": {}, "blocked_tasks": {}})


def test_run_probe_exit_codes_and_outcome(fake, run, tmp_path):
    bench, run_root = run
    manifest = make_manifest(run_root)
    assert (
        probes.run_probe(make_cfg(tmp_path, run_root, probe="inventory", dry_run=False), manifest, bench) == ExitCode.OK
    )
    assert read_manifest(run_root).outcome == "probe"
    fake.broken = {"files"}
    assert (
        probes.run_probe(make_cfg(tmp_path, run_root, probe="inventory", dry_run=False), manifest, bench)
        == ExitCode.FAILED
    )


def test_stateful_probe_runs_the_deck_spec_in_fresh_sessions(fake, tmp_path):
    bench = tmp_path / "bench"
    (bench / "tasks" / "finalpool" / "t-deck").mkdir(parents=True)
    (bench / "tasks" / "finalpool" / "t-deck" / "task_config.json").write_text('{"needed_mcp_servers": ["deck"]}')
    run_root = tmp_path / "run"
    run_root.mkdir()
    manifest = make_manifest(run_root)
    manifest.selection = Selection(task_ids=["t-deck"])
    cfg = make_cfg(tmp_path, run_root, probe="stateful", dry_run=False)
    assert probes.run_probe(cfg, manifest, bench) == ExitCode.OK
    assert ("stateful", "cowork-probe-deck") in fake.calls
    (check,) = [c for c in read_manifest(run_root).inventory["checks"] if c["check"] == "stateful"]
    assert check["result"]["deck"]["ok"] is True and check["result"]["deck"]["sessions"] == 4
    fake.stateful_ok = False
    run_root2 = tmp_path / "run2"
    run_root2.mkdir()
    manifest2 = make_manifest(run_root2)
    manifest2.selection = Selection(task_ids=["t-deck"])
    assert (
        probes.run_probe(make_cfg(tmp_path, run_root2, probe="stateful", dry_run=False), manifest2, bench)
        == ExitCode.FAILED
    )


def test_only_repairs_of_needed_servers_that_took_are_disclosed(fake, run, tmp_path):
    """The image plans repairs for every server in it (here: quotes, a browser server and an unused
    one); a run selecting t-files and t-quotes discloses quotes' repair only, and a browser repair
    of a server no selected task uses is neither measured nor disclosed."""
    bench, run_root = run
    servers = [
        {"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "2.3.0"},
        {"server": "unused", "venv": "/u", "python": "3.11", "mcp": "2.0.0"},
        {"server": "playwright-mcp", "browser": True},
    ]
    repairs, checks = plan_repairs({"servers": servers, "chromium": [], "system_chromium": ["/usr/bin/chromium"]})
    assert {r.server for r in repairs} == {"quotes", "unused", "playwright-mcp"}
    manifest = make_manifest(run_root, {"org.cowork-adapter.repairs": label_value(repairs, checks)})
    fake.detection = {
        "servers": [
            {"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "1.26.0"},
            {"server": "unused", "venv": "/u", "python": "3.11", "mcp": "2.0.0"},
        ],
        "chromium": [],
        "chromium_env": None,
    }
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), manifest, bench, ["t-files", "t-quotes"])
    assert [(r.server, r.took) for r in inv.repairs] == [("quotes", True)]
    assert not [c for c in inv.checks if c.get("result") == "did_not_take"]


def test_a_needed_repair_that_did_not_take_fails_its_server_and_is_not_disclosed_as_a_repair(fake, run, tmp_path):
    bench, run_root = run
    repairs, checks = plan_repairs({"servers": [{"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "2.3.0"}]})
    manifest = make_manifest(run_root, {"org.cowork-adapter.repairs": label_value(repairs, checks)})
    fake.detection = {"servers": [{"server": "quotes", "venv": "/v", "python": "3.11", "mcp": "2.3.0"}], "chromium": []}
    inv = probes.collect_inventory(make_cfg(tmp_path, run_root), manifest, bench, ["t-quotes"])
    assert inv.repairs == []
    assert inv.servers["quotes"].health is ServerHealth.FAILED and "did not take" in inv.servers["quotes"].error
    assert {"check": "repair", "result": "did_not_take", "detail": "quotes: mcp_sdk_2x -> mcp==1.26.0"} in inv.checks
