"""Recovery through the real CLI: `cowork-adapter run --resume-from ...` (reference §5.9, §7 48-53).

Ancestor run roots are synthesised from a real dry run's manifest (so applied config, seed head,
benchmark commit and image ID are exactly what the current invocation computes) plus task dumps
whose files give each task its status (a settled verdict is a claim + completed receipt) and,
unless a case removes it, a ledger written with the typed TaskRow. Recovery reads the dumps, not
the ledger. The invocation under test is a dry run, which resolves the recovery plan before it
would start anything. A control resume is admitted, so every refusal below is caused by the one
thing each case changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.container import protocol
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed
from cowork_adapter.schemas.ledger import LEDGER_NAME, TaskRow
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.schemas.record import decode

SEL = ["demo-csv-totals", "demo-wrong-answer", "demo-hang"]
CLI_TIMEOUT_S = 600
ROW_EVAL = {
    "passed": "completed",
    "failed": "completed",
    "agent_failed": "declined",
    "infra_failed": "unreported",
    "not_attempted": "unreported",
}


@pytest.fixture(scope="module")
def world(docker_host, tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery-cli")
    bench = root / "bench"
    commit = materialize_bench(bench)
    seed = root / "seed"
    make_stub_seed(seed)
    pack_tag, _ = ensure_demo_pack_image(docker_host)
    (root / "runs").mkdir()
    w = {"root": root, "bench": bench, "commit": commit, "seed": seed, "pack": pack_tag, "docker_host": docker_host}
    out = run_cli(w, "probe", tasks=SEL)
    assert out.returncode == 0, out.stderr
    w["template"] = decode((root / "runs" / "probe" / "run_manifest.json").read_bytes(), RunManifest)
    return w


def run_cli(
    w: dict, name: str, *, tasks=(), resume_from=(), extra=(), dry_run=True, env_extra=None
) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "run",
        "--repo-dir",
        str(w["seed"]),
        "--bench-root",
        str(w["bench"]),
        "--bench-commit",
        w["commit"],
        "--docker-host",
        w["docker_host"],
        "--resource-root",
        str(w["root"]),
        "--run-root",
        str(w["root"] / "runs" / name),
        "--base-image",
        w["pack"],
        "--build-image",
        "--model",
        "demo/stub-model",
        *(["--dry-run"] if dry_run else []),
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--cpus",
        "1",
        "--memory",
        "2g",
        "--task-timeout",
        "120",
    ]
    for task in tasks:
        args += ["--task", task]
    for parent in resume_from:
        args += ["--resume-from", str(parent)]
    env = {**{k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}, **(env_extra or {})}
    return subprocess.run(
        args + list(extra), env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def write_dump(root: Path, task: str, status: str) -> None:
    """The files a real attempt of `task` ending as `status` leaves in its dump."""
    if status == "not_attempted":
        return
    dump = synth.dump_dir(root, task)
    synth.write_start_evidence(dump)
    if status in ("passed", "failed"):
        synth.write_summary(dump, synth.summary("success"))
        synth.write_traj_log(dump, "success")
        synth.write_eval(dump, {"pass": status == "passed"})
    elif status == "agent_failed":
        synth.write_summary(dump, synth.summary("max_turns_reached", reason_code="round_limit", truncated=True))
        synth.write_traj_log(dump, "max_turns_reached")
        synth.write_eval(dump, {"pass": None, "details": protocol.GATE_TEXT.format(status="max_turns_reached")})


def ancestor(
    w: dict,
    name: str,
    rows: dict[str, str] | None,
    *,
    ran=None,
    parents=(),
    generation=0,
    outcome="stopped",
    ledger=True,
    **identity,
) -> Path:
    """A finished run root: the probe's manifest re-pointed, dumps giving `rows`, and a ledger of
    the same rows (`ledger=False`: none, as after a launcher killed before its first refresh).

    identity may override applied_config (a dict merged in), seed_head, bench_commit, image_id.
    """
    root = w["root"] / "runs" / name
    root.mkdir()
    m = copy.deepcopy(w["template"])
    m.run_root = str(root)
    m.bench.working_copy = str(root / "bench")
    (root / "bench").mkdir()
    m.outcome = outcome
    m.dry_run = False
    m.selection.task_ids = list(SEL if ran is None else ran)
    m.selection.selection_task_ids = list(SEL)
    m.selection.resume_from = [str(p) for p in parents]
    m.selection.resume_generation = generation
    if "applied_config" in identity:
        m.applied_config = {**m.applied_config, **identity["applied_config"]}
    if "seed_head" in identity:
        m.seed.head = identity["seed_head"]
    if "bench_commit" in identity:
        m.bench.commit = identity["bench_commit"]
    if "image_id" in identity:
        m.image.id = identity["image_id"]
    (root / "run_manifest.json").write_text(m.to_json())
    for task, status in (rows or {}).items():
        write_dump(root, task, status)
    if rows is not None and ledger:
        lines = [
            TaskRow(
                ts="2026-01-01T00:00:00Z",
                instance_id=task,
                status=status,
                reason_code="synthetic",
                official_eval_status=ROW_EVAL[status],
                attempt_run_root=str(root),
            ).to_line()
            for task, status in rows.items()
        ]
        (root / LEDGER_NAME).write_text("".join(lines))
    return root


def manifest(w: dict, name: str) -> dict:
    return json.loads((w["root"] / "runs" / name / "run_manifest.json").read_text())


def assert_refused(out: subprocess.CompletedProcess, *phrases: str) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert len(lines) == 1, out.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    # Every recovery refusal is decided in preflight: no run root is created (none marked refused).
    run_root = Path(out.args[out.args.index("--run-root") + 1])
    assert not run_root.exists(), f"the refused resume left {run_root}"
    return lines[0]


def first_pass(w: dict, prefix: str) -> Path:
    return ancestor(
        w, f"{prefix}-r0", {"demo-csv-totals": "passed", "demo-wrong-answer": "failed", "demo-hang": "infra_failed"}
    )


def test_control_resume_runs_only_unsettled_work_and_keeps_the_selection(world):
    r0 = first_pass(world, "control")
    out = run_cli(world, "control-r1", resume_from=[r0])
    assert out.returncode == 0, out.stderr
    sel = manifest(world, "control-r1")["selection"]
    assert sel["task_ids"] == ["demo-hang"]  # infra is retried; the genuine failure is not
    assert sel["selection_task_ids"] == SEL and sel["resume_generation"] == 1
    assert sorted(sel["settled_elsewhere"]) == ["demo-csv-totals", "demo-wrong-answer"]


def test_explicit_selection_widens_without_repeating_settled_work(world):
    r0 = first_pass(world, "widen")
    out = run_cli(world, "widen-r1", resume_from=[r0], tasks=SEL + ["demo-crm-postgres"])
    assert out.returncode == 0, out.stderr
    assert manifest(world, "widen-r1")["selection"]["task_ids"] == ["demo-hang", "demo-crm-postgres"]


def _under_campaign(root: Path, campaign: Path) -> Path:
    """The ancestor ran under `campaign` and registered in it (custody/processes.json follows that)."""
    m = decode((root / "run_manifest.json").read_bytes(), RunManifest)
    (root / "run_manifest.json").write_text(m.replace(campaign_file=str(campaign)).to_json())
    (root / "custody").mkdir(exist_ok=True)
    (root / "custody" / "processes.json").write_text("{}")
    return root


def test_a_resume_continues_its_ancestors_campaign_or_is_refused(world):
    campaign = world["root"] / "campaign-resumed.json"
    r0 = _under_campaign(first_pass(world, "campaign"), campaign)
    out = run_cli(world, "campaign-same-r1", resume_from=[r0], extra=["--campaign-file", str(campaign)])
    assert out.returncode == 0, out.stderr  # the control: the ancestors' campaign is admitted
    assert manifest(world, "campaign-same-r1")["campaign_file"] == str(campaign)
    other = world["root"] / "campaign-other.json"
    assert_refused(
        run_cli(world, "campaign-other-r1", resume_from=[r0], extra=["--campaign-file", str(other)]),
        f"Ancestor {r0} ran under the campaign file {campaign}, but this resume names the campaign file "
        f"{other}; a resume must use its ancestors' campaign.",
    )
    assert_refused(run_cli(world, "campaign-none-r1", resume_from=[r0]), "names no campaign")


def test_a_paid_resume_never_starts_a_new_baseline_where_its_ancestors_campaign_was(world):
    from cowork_adapter.demo.meter_standin import MeterStandin

    campaign = world["root"] / "campaign-vanished.json"  # the ancestor registered in it; it is gone now
    r0 = _under_campaign(first_pass(world, "vanished"), campaign)
    key = "sk-or-v1-fake-resume-campaign-key-0001"
    with MeterStandin(key, usage=3.0, max_delay_sec=5.0) as meter:
        out = run_cli(
            world,
            "vanished-r1",
            resume_from=[r0],
            dry_run=False,
            env_extra={"RESUME_TEST_KEY": key},
            extra=[
                "--campaign-file",
                str(campaign),
                "--new-campaign",
                "--campaign-budget-usd",
                "50",
                "--budget-usd",
                "10",
                "--budget-reserve-usd",
                "1",
                "--api-key-env",
                "RESUME_TEST_KEY",
                "--meter-url",
                meter.base_url,
            ],
        )
    assert_refused(
        out,
        f"Ancestor {r0} ran under the campaign file {campaign}, which no longer exists; a resume "
        "continues its ancestors' campaign and never starts a new one.",
    )
    assert not campaign.exists() and not Path(str(campaign) + ".lock").exists()


CHANGES = {
    "config": ({"applied_config": {"max_steps": 7}}, "applied_config"),
    "seed": ({"seed_head": "0" * 40}, "seed head"),
    "bench": ({"bench_commit": "1" * 40}, "benchmark commit"),
    "image": ({"image_id": "sha256:" + "2" * 64}, "image ID"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_change_in_an_older_ancestor_is_refused(world, what):
    change, phrase = CHANGES[what]
    r0 = ancestor(world, f"old-{what}-r0", {"demo-csv-totals": "passed", "demo-hang": "infra_failed"}, **change)
    r1 = ancestor(
        world,
        f"old-{what}-r1",
        {"demo-hang": "infra_failed"},
        ran=["demo-wrong-answer", "demo-hang"],
        parents=[r0],
        generation=1,
    )
    out = run_cli(world, f"old-{what}-r2", resume_from=[r1])
    sentence = assert_refused(out, phrase, str(r0))
    assert str(r1) not in sentence  # the parent itself matches: the older ancestor is named


def test_a_changed_config_in_the_parent_is_refused(world):
    r0 = ancestor(world, "cfg-parent-r0", {"demo-hang": "infra_failed"}, applied_config={"task_timeout": 999})
    assert_refused(run_cli(world, "cfg-parent-r1", resume_from=[r0]), "applied_config", "task_timeout")


def test_a_changed_invocation_config_is_refused(world):
    r0 = first_pass(world, "cfg-now")
    assert_refused(run_cli(world, "cfg-now-r1", resume_from=[r0], extra=["--max-steps", "3"]), "max_steps")


def _two_passes(world: dict, prefix: str, last_rows: dict[str, str]) -> Path:
    r0 = first_pass(world, prefix)
    r1 = ancestor(world, f"{prefix}-r1", {"demo-hang": "infra_failed"}, ran=["demo-hang"], parents=[r0], generation=1)
    return ancestor(world, f"{prefix}-r2", last_rows, ran=["demo-hang"], parents=[r1, r0], generation=2)


def test_a_third_pass_with_work_remaining_is_refused(world):
    r2 = _two_passes(world, "third", {"demo-hang": "infra_failed"})
    assert_refused(run_cli(world, "third-r3", resume_from=[r2]), "at most two recovery passes")


def test_a_third_pass_with_nothing_remaining_is_a_noop(world):
    r2 = _two_passes(world, "noop", {"demo-hang": "agent_failed"})
    out = run_cli(world, "noop-r3", resume_from=[r2])
    assert out.returncode == 0, out.stderr
    m = manifest(world, "noop-r3")
    assert m["outcome"] == "nothing_remaining" and m["selection"]["task_ids"] == []
    assert m["selection"]["resume_generation"] == 2
    assert not (world["root"] / "runs" / "noop-r3" / "bench" / "benchmark_logs").exists()  # the runner never ran


def test_a_parent_without_a_ledger_is_recovered_from_its_dumps(world):
    r0 = ancestor(
        world,
        "noledger-r0",
        {"demo-csv-totals": "passed", "demo-wrong-answer": "failed", "demo-hang": "infra_failed"},
        ledger=False,
    )
    out = run_cli(world, "noledger-r1", resume_from=[r0])
    assert out.returncode == 0, out.stderr
    sel = manifest(world, "noledger-r1")["selection"]
    assert sel["task_ids"] == ["demo-hang"]
    assert sorted(sel["settled_elsewhere"]) == ["demo-csv-totals", "demo-wrong-answer"]


def test_an_older_ancestor_without_a_ledger_is_recovered_from_its_dumps(world):
    r0 = ancestor(world, "noledger-old-r0", {"demo-csv-totals": "passed", "demo-hang": "infra_failed"}, ledger=False)
    r1 = ancestor(
        world,
        "noledger-old-r1",
        {"demo-hang": "infra_failed"},
        ran=["demo-wrong-answer", "demo-hang"],
        parents=[r0],
        generation=1,
    )
    out = run_cli(world, "noledger-old-r2", resume_from=[r1])
    assert out.returncode == 0, out.stderr
    assert manifest(world, "noledger-old-r2")["selection"]["task_ids"] == ["demo-wrong-answer", "demo-hang"]


def test_a_stale_parent_ledger_does_not_rerun_receipted_tasks(world):
    r0 = ancestor(
        world, "stale-r0", {"demo-csv-totals": "passed", "demo-wrong-answer": "failed", "demo-hang": "infra_failed"}
    )
    stale = [
        TaskRow(
            ts="2026-01-01T00:00:00Z",
            instance_id=t,
            status="infra_failed",
            reason_code="missing_adapter_summary",
            provisional=True,
            official_eval_status="unreported",
            attempt_run_root=str(r0),
        ).to_line()
        for t in SEL
    ]
    (r0 / LEDGER_NAME).write_text("".join(stale))
    out = run_cli(world, "stale-r1", resume_from=[r0])
    assert out.returncode == 0, out.stderr
    assert manifest(world, "stale-r1")["selection"]["task_ids"] == ["demo-hang"]


def test_a_parent_without_a_manifest_is_refused(world):
    r0 = first_pass(world, "nomanifest")
    (r0 / "run_manifest.json").unlink()
    assert_refused(run_cli(world, "nomanifest-r1", resume_from=[r0]), "manifest", "missing or unreadable", str(r0))


def _tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every path under root with its content digest (files), mode and mtime in ns."""
    out = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        out[str(path.relative_to(root))] = (content, st.st_mode, st.st_mtime_ns)
    return out


def test_a_resume_and_a_new_run_leave_every_older_run_root_untouched(world):
    """Issue 21 item 8: recovery only reads its ancestors, and a new run writes only its own root."""
    r0 = first_pass(world, "untouched")
    r1 = ancestor(world, "untouched-r1", {"demo-hang": "infra_failed"}, ran=["demo-hang"], parents=[r0], generation=1)
    older = [r0, r1, world["root"] / "runs" / "probe"]  # the probe is a real dry run's root
    before = {str(r): _tree(r) for r in older}
    time.sleep(0.05)  # a same-bytes rewrite would still move an mtime
    out = run_cli(world, "untouched-r2", resume_from=[r1])
    assert out.returncode == 0, out.stderr
    assert manifest(world, "untouched-r2")["selection"]["task_ids"] == ["demo-hang"]
    out = run_cli(world, "untouched-new", tasks=SEL)
    assert out.returncode == 0, out.stderr
    assert {str(r): _tree(r) for r in older} == before


def test_multiple_parents_union_their_selections_and_never_widen_to_the_dataset(world):
    a = ancestor(world, "union-a", {"demo-csv-totals": "passed"}, ran=["demo-csv-totals"])
    m = json.loads((a / "run_manifest.json").read_text())
    m["selection"]["selection_task_ids"] = ["demo-csv-totals"]
    (a / "run_manifest.json").write_text(json.dumps(m))
    b = ancestor(world, "union-b", {"demo-hang": "infra_failed"}, ran=["demo-hang"])
    m = json.loads((b / "run_manifest.json").read_text())
    m["selection"]["selection_task_ids"] = ["demo-hang"]
    (b / "run_manifest.json").write_text(json.dumps(m))
    out = run_cli(world, "union-r1", resume_from=[a, b])
    assert out.returncode == 0, out.stderr
    sel = manifest(world, "union-r1")["selection"]
    assert sel["selection_task_ids"] == ["demo-csv-totals", "demo-hang"] and sel["task_ids"] == ["demo-hang"]


def test_reconcile_removes_a_killed_runs_key_file(tmp_path):
    """A launcher killed by SIGKILL never reaches the finally that deletes private/agent.env; the
    operator's reconcile is the run's end, so it must leave no copy of the key in the run root."""
    import socket

    from cowork_adapter.campaign.commands import reconcile_command
    from cowork_adapter.campaign.meter import MeterReading
    from cowork_adapter.campaign.store import JsonFileCampaignStore, open_campaign
    from cowork_adapter.schemas.campaign import key_fingerprint

    key = "fake-key-" + "0" * 24
    run_root = tmp_path / "killed"
    (run_root / "private").mkdir(parents=True)
    key_file = run_root / "private" / "agent.env"
    key_file.write_text(f"COWORK_PROVIDER_KEY={key}\n")
    gone_pid = subprocess.Popen(["true"])
    gone_pid.wait()
    campaign_file = tmp_path / "campaign.json"
    with open_campaign(
        JsonFileCampaignStore(campaign_file),
        key_fingerprint=key_fingerprint(key),
        ceiling=50.0,
        startup_usage=1.0,
        create_if_missing=True,
    ) as campaign:
        campaign.start_run(
            run_root=str(run_root), run_label="0" * 32, launcher_pid=gone_pid.pid, host=socket.gethostname()
        )
    code = reconcile_command(
        campaign_file,
        run_root,
        "launcher SIGKILLed; checked ps and docker",
        "FAKE_KEY_ENV",
        docker_host="unix:///nonexistent.sock",
        label_is_empty=lambda host, label: True,
        read_meter=lambda timeout: MeterReading(
            usage=1.5, limit=None, limit_remaining=None, requested_at_monotonic=time.monotonic()
        ),
        environ={"FAKE_KEY_ENV": key},
    )
    assert code == 0
    assert not key_file.exists(), "reconcile left the provider key in <run_root>/private/agent.env"
