"""The residual-state diagnostic (reference-adapter §5.8, §7 items 44-47): eligibility, the cap,
group custody, the private log copy, and that nothing it prints reaches the runner's log."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)
from test_container_support import BENCH_PY, FakeBench

from cowork_adapter.config import RunConfig
from cowork_adapter.container import diagnostic, protocol
from cowork_adapter.container.diagnostic import checker_command, decide, run_diagnostic
from cowork_adapter.errors import Refusal
from cowork_adapter.run.recovery import resolve_ancestry
from cowork_adapter.runroot.identity import first_config_difference
from cowork_adapter.schemas.run_config import build_run_config
from cowork_adapter.score.ledger import build_index, write_index

TASK = "t-demo"
STATUS = "max_turns_reached"
MARK = "DIAGNOSTIC-OUTPUT"

# The task's checker: prints runner-like lines everywhere, rewrites --res_log_file like many
# upstream checkers do, and passes when answer.txt says 42. CHECKER_MODE adds hangs/children.
CHECKER = r"""
import argparse, os, subprocess, sys, time
print("%s import-time Status: success" % os.environ["MARK"], flush=True)
ap = argparse.ArgumentParser()
for flag in ("--res_log_file", "--agent_workspace", "--groundtruth_workspace", "--launch_time"):
    ap.add_argument(flag)
a = ap.parse_args()
mode = os.environ.get("CHECKER_MODE", "")
with open(os.environ["ARGS_OUT"], "w") as fh:
    fh.write(" ".join(sys.argv[1:]))
print("%s Pass: True" % os.environ["MARK"], flush=True)
print("%s stderr Pass: True" % os.environ["MARK"], file=sys.stderr, flush=True)
subprocess.run([sys.executable, "-c", "import os; print(os.environ['MARK'] + ' grandchild Pass: True'); raise SystemExit('grandchild traceback Status: failed')"])
with open(a.res_log_file, "w") as fh:
    fh.write('{"total_passed": 1}')
if mode == "hang":
    # a grandchild that ignores SIGTERM: only SIGKILL of the whole group ends it
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
    time.sleep(120)
with open(os.path.join(a.agent_workspace, "answer.txt")) as fh:
    sys.exit(0 if fh.read().strip() == "42" else 1)
"""


class Dump:
    """A benchmark cwd with one task dump after a status-gate decline (the eligible case)."""

    def __init__(self, tmp: Path):
        self.bench = tmp / "bench"
        self.root = self.bench / "dumps" / "ouroboros_m" / f"SingleUserTurn-{TASK}"
        self.workspace = self.root / "workspace"
        self.workspace.mkdir(parents=True)
        (self.workspace / "answer.txt").write_text("42\n")
        checker = self.bench / "tasks" / "finalpool" / TASK / "evaluation" / "main.py"
        checker.parent.mkdir(parents=True)
        checker.write_text(CHECKER)
        self.args_out = tmp / "checker_args.txt"
        self.log = self.root / "traj_log.json"
        self.config = {
            "task_dir": TASK,
            "single_turn_mode": True,
            "log_file": str(self.log),
            "agent_workspace": str(self.workspace),
            "launch_time": "2026-01-02 03:04:05 Friday",
            "evaluation": {"evaluation_command": f"{BENCH_PY} {checker}", "groundtruth_workspace": "gt"},
        }
        self.log.write_text(json.dumps({"config": self.config, "status": STATUS}))
        self.summary = {
            "task": TASK,
            "bench_status": STATUS,
            "infra_failed": False,
            "task_submission_started": True,
            "reason_code": "round_limit",
            "model_activity_observed": True,
        }
        self.write_summary()
        self.claim = self.publish_official()

    def write_summary(self, **changes) -> None:
        (self.root / "ouroboros_summary.json").write_text(json.dumps({**self.summary, **changes}))

    def publish_official(self, state="absent", returned=None, raised=None) -> dict:
        bind = {"task_dir": TASK, "task_root": str(self.root), "log": protocol.file_facts(str(self.log))}
        claim = protocol.new_claim(bind, agent_container_state=state, prior_result={}, eval_host="h", pid=1)
        # The digest the docker shim took of the summary when the agent exec ended (a host fact).
        claim["evidence"]["agent_summary_sha256"] = protocol.file_facts(str(self.root / "ouroboros_summary.json"))[
            "sha256"
        ]
        (self.root / protocol.CLAIM_NAME).write_bytes(protocol.dump_record(claim))
        returned = returned or {"pass": None, "details": protocol.GATE_TEXT.format(status=STATUS)}
        (self.root / "eval_res.json").write_text(json.dumps(returned))
        receipt = protocol.new_receipt(
            claim,
            official_run=True,
            cause="evaluated",
            raised=raised,
            returned=returned,
            result_file=protocol.file_facts(str(self.root / "eval_res.json")),
        )
        Path(protocol.receipt_path(str(self.root), claim["attempt_id"])).write_bytes(protocol.dump_record(receipt))
        return claim

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COWORK_", "CHECKER_"))}
        return {**env, "MARK": MARK, "ARGS_OUT": str(self.args_out), **{k: str(v) for k, v in extra.items()}}

    def run(self, **extra):
        return run_diagnostic(str(self.root), self.claim, env=self.env(**extra), cwd=str(self.bench))

    def files(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("ouroboros_diagnostic*"))


@pytest.fixture()
def dump(tmp_path) -> Dump:
    return Dump(tmp_path)


# ---------------------------------------------------------------- a full run


def test_eligible_decline_runs_the_checker_once_and_changes_nothing_official(dump):
    before = {name: (dump.root / name).read_bytes() for name in ("traj_log.json", "eval_res.json")}
    receipt = dump.run()
    attempt = dump.claim["attempt_id"]
    assert receipt["outcome"] == "checks_passed" and receipt["eligible"] is True
    assert receipt["custody"] == "group_dead" and receipt["checker_exit_code"] == 0
    assert receipt["official_verdict_unchanged"] is True and receipt["cap_sec"] == 900
    assert dump.files() == sorted(
        [
            f"ouroboros_diagnostic_log-{attempt}.log",
            "ouroboros_diagnostic_claim.json",
            f"ouroboros_diagnostic_receipt-{attempt}.json",
            f"ouroboros_diagnostic_report-{attempt}.json",
        ]
    )
    on_disk = json.loads((dump.root / f"ouroboros_diagnostic_receipt-{attempt}.json").read_text())
    assert on_disk["outcome"] == "checks_passed" and on_disk["kind"] == "diagnostic"
    # The checker rewrote its --res_log_file: a private copy, never the bound log or eval_res.json.
    assert {name: (dump.root / name).read_bytes() for name in before} == before
    assert receipt["res_log_copy"]["rewritten_by_checker"] is True
    args = dump.args_out.read_text()
    assert "--res_log_file" in args and str(dump.log) not in args
    assert f"--agent_workspace {dump.workspace} --groundtruth_workspace gt --launch_time 2026-01-02 03:04:05" in args
    assert not Path(args.split()[1]).exists()  # the private copy is gone
    log = (dump.root / f"ouroboros_diagnostic_log-{attempt}.log").read_text()
    for text in ("import-time", "stderr Pass", "grandchild Pass", "grandchild traceback"):
        assert text in log


def test_a_wrong_state_is_checks_failed(dump):
    (dump.workspace / "answer.txt").write_text("41\n")
    receipt = dump.run()
    assert receipt["outcome"] == "checks_failed" and receipt["checker_exit_code"] == 1


def test_an_existing_diagnostic_claim_means_do_nothing(dump):
    (dump.root / "ouroboros_diagnostic_claim.json").write_text("{}")
    assert dump.run() is None
    assert dump.files() == ["ouroboros_diagnostic_claim.json"] and not dump.args_out.exists()


def test_a_boolean_official_verdict_records_nothing(tmp_path):
    dump = Dump(tmp_path)
    dump.log.write_text(json.dumps({"config": dump.config, "status": "success"}))
    dump.claim = dump.publish_official(returned={"pass": False, "failure": "x"})
    assert dump.run() is None and dump.files() == []


# ---------------------------------------------------------------- eligibility: each rule alone


def _facts(dump: Dump) -> dict:
    receipt, _ = protocol.read_json_record(protocol.receipt_path(str(dump.root), dump.claim["attempt_id"]))
    return {
        "claim": dict(dump.claim),
        "receipt": receipt,
        "log_facts": protocol.file_facts(str(dump.log)),
        "log_status": STATUS,
        "eval_res": (dump.root / "eval_res.json").read_bytes(),
        "summary": dict(dump.summary),
        "summary_sha256": dump.claim["evidence"]["agent_summary_sha256"],
    }


def _with(facts: dict, path: str, value) -> dict:
    out = json.loads(json.dumps({k: v for k, v in facts.items() if k != "eval_res"}))
    out["eval_res"] = facts["eval_res"]
    *parents, last = path.split(".")
    target = out
    for key in parents:
        target = target[key]
    if value is _DROP:
        target.pop(last)
    else:
        target[last] = value
    return out


_DROP = object()
GATE = {"pass": None, "details": protocol.GATE_TEXT.format(status=STATUS)}

RULES = [
    ("receipt.attempt_id", "b" * 32, "unavailable", "official_claim_not_linked"),
    ("receipt", None, "unavailable", "official_claim_not_linked"),
    ("receipt.official_run", False, "ineligible", "official_not_completed"),
    ("receipt.raised", "RuntimeError", "ineligible", "official_not_completed"),
    ("log_facts.sha256", "0" * 64, "ineligible", "log_changed_or_unreadable"),
    ("log_facts.state", "absent", "ineligible", "log_changed_or_unreadable"),
    ("eval_res", json.dumps(GATE, indent=1).encode(), "ineligible", "not_same_attempt_status_gate_decline"),
    ("eval_res", None, "ineligible", "not_same_attempt_status_gate_decline"),
    ("receipt.returned", {"pass": None, "details": "other"}, "ineligible", "not_same_attempt_status_gate_decline"),
    ("log_status", "failed", "ineligible", "not_same_attempt_status_gate_decline"),
    ("summary", None, "ineligible", "adapter_summary_unavailable"),
    ("summary.task", "other-task", "ineligible", "adapter_summary_not_linked"),
    ("summary.bench_status", "failed", "ineligible", "adapter_summary_not_linked"),
    ("summary.infra_failed", True, "ineligible", "infrastructure_outcome"),
    ("summary.infra_failed", None, "ineligible", "infrastructure_outcome"),
    ("summary.task_submission_started", False, "ineligible", "no_task_submission"),
    ("summary.reason_code", "owner_requested_finalization", "ineligible", "stop_reason_not_eligible"),
    ("summary.reason_code", "children_unabsorbed", "ineligible", "stop_reason_not_eligible"),
    ("summary.reason_code", "finalization_grace", "ineligible", "stop_reason_not_eligible"),
    ("summary.reason_code", "final_message", "ineligible", "stop_reason_not_eligible"),
    ("summary.model_activity_observed", False, "ineligible", "no_agent_activity"),
    ("summary.model_activity_observed", None, "ineligible", "agent_activity_unknown"),
    ("summary.model_activity_observed", _DROP, "ineligible", "agent_activity_unknown"),
    ("summary_sha256", "0" * 64, "ineligible", "adapter_summary_changed_after_agent_phase"),
    ("summary_sha256", None, "ineligible", "adapter_summary_changed_after_agent_phase"),
    ("claim.evidence.agent_summary_sha256", None, "ineligible", "adapter_summary_changed_after_agent_phase"),
    ("claim.evidence.agent_container_state", "present", "ineligible", "agent_termination_unproven"),
    ("claim.evidence.agent_container_state", "unknown", "ineligible", "agent_termination_unproven"),
]


def test_the_base_case_is_eligible_for_every_stop_rail(dump):
    facts = _facts(dump)
    assert decide(**facts).eligible
    for code in ("deadline_local", "wall_clock_timeout", "round_limit", "budget_exhausted"):
        assert decide(**_with(facts, "summary.reason_code", code)).eligible, code


@pytest.mark.parametrize("path,value,outcome,reason", RULES, ids=[f"{r[0]}={r[1]!r:.20}" for r in RULES])
def test_each_rule_failing_alone_makes_it_not_eligible(dump, path, value, outcome, reason):
    decision = decide(**_with(_facts(dump), path, value))
    assert (decision.eligible, decision.outcome, decision.reason) == (False, outcome, reason)


def test_an_ineligible_attempt_records_why_and_runs_nothing(dump):
    # The agent rewrites its summary after the agent exec ended (to look eligible): the host's
    # digest no longer matches, so nothing in the summary is believed and nothing runs.
    dump.write_summary(reason_code="round_limit", model_activity_observed=True, note="rewritten")
    receipt = dump.run()
    attempt = dump.claim["attempt_id"]
    assert (receipt["outcome"], receipt["reason"], receipt["eligible"]) == (
        "ineligible",
        "adapter_summary_changed_after_agent_phase",
        False,
    )
    assert dump.files() == sorted(["ouroboros_diagnostic_claim.json", f"ouroboros_diagnostic_receipt-{attempt}.json"])
    assert not dump.args_out.exists()


def test_container_state_unproven_on_disk_is_ineligible(tmp_path):
    dump = Dump(tmp_path)
    dump.claim = dump.publish_official(state="unknown")
    assert dump.run()["reason"] == "agent_termination_unproven" and not dump.args_out.exists()


# ---------------------------------------------------------------- the command


def test_no_command_is_unavailable_never_a_pass(dump):
    config = {**dump.config, "evaluation": {"evaluation_command": None, "groundtruth_workspace": None}}
    dump.log.write_text(json.dumps({"config": config, "status": STATUS}))
    dump.claim = dump.publish_official()
    # The child's fallback imports the benchmark's Evaluation.build from the tree: give it one that finds nothing.
    utils = dump.bench / "utils" / "data_structures"
    utils.mkdir(parents=True)
    (dump.bench / "utils" / "__init__.py").write_text("")
    (utils / "__init__.py").write_text("")
    (utils / "task_config.py").write_text(
        "class Evaluation:\n    evaluation_command = None\n    groundtruth_workspace = None\n"
        "    @classmethod\n    def build(cls, task_dir):\n        return cls()\n"
    )
    receipt = dump.run()
    assert (receipt["outcome"], receipt["reason"]) == ("unavailable", "no_eval_command")
    assert not dump.args_out.exists()


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"single_turn_mode": False}, "saved_config_unsupported"),
        ({"task_dir": "other"}, "saved_config_not_linked"),
        ({"log_file": "/elsewhere/traj_log.json"}, "saved_config_not_linked"),
    ],
)
def test_saved_config_must_be_supported_and_linked(dump, change, reason):
    saved = {"config": {**dump.config, **change}}
    assert checker_command(saved, task_dir=TASK, log_file=str(dump.log), res_log_file="/c") == (None, reason)


def test_the_command_is_upstreams_with_the_copy_as_res_log_file(dump):
    calls = []
    saved = {"config": {**dump.config, "evaluation": {"evaluation_command": None, "groundtruth_workspace": None}}}
    command, _ = checker_command(
        saved,
        task_dir=TASK,
        log_file=str(dump.log),
        res_log_file="/p/copy.json",
        rebuild=lambda t: calls.append(t) or ("py -m x", "tasks/finalpool/t/gt"),
    )
    assert calls == [TASK]
    assert command == (
        f"py -m x --res_log_file /p/copy.json --agent_workspace {dump.workspace} "
        f'--groundtruth_workspace tasks/finalpool/t/gt --launch_time "2026-01-02 03:04:05"'
    )


# ---------------------------------------------------------------- the cap and group custody


def test_cap_reached_kills_the_whole_group_and_says_timeout(dump):
    # The hanging checker is ended by the cap (the receipt says so, and that its group is dead); no
    # bound in seconds: without the cap the run would not return at all.
    receipt = dump.run(CHECKER_MODE="hang", COWORK_DIAGNOSTIC_CAP_SEC="2")
    assert (receipt["outcome"], receipt["reason"]) == ("timeout", "diagnostic_cap_reached")
    assert receipt["custody"] == "group_dead" and receipt["cap_sec"] == 2


def test_the_env_knob_can_only_lower_the_cap():
    assert diagnostic.cap_seconds({}) == 900
    assert diagnostic.cap_seconds({"COWORK_DIAGNOSTIC_CAP_SEC": "5000"}) == 900
    assert diagnostic.cap_seconds({"COWORK_DIAGNOSTIC_CAP_SEC": "nan"}) == 900
    assert diagnostic.cap_seconds({"COWORK_DIAGNOSTIC_CAP_SEC": "-1"}) == 900
    assert diagnostic.cap_seconds({"COWORK_DIAGNOSTIC_CAP_SEC": "3"}) == 3


def test_unproven_group_death_is_unknown_not_timeout(dump, monkeypatch):
    monkeypatch.setattr(diagnostic, "group_alive", lambda pgid: True)
    monkeypatch.setattr(diagnostic, "GRACE_SEC", 0.2)
    receipt = dump.run(CHECKER_MODE="hang", COWORK_DIAGNOSTIC_CAP_SEC="1")
    assert (receipt["outcome"], receipt["reason"], receipt["custody"]) == (
        "unknown",
        "process_group_death_unconfirmed",
        "unconfirmed",
    )


def test_group_alive_sees_a_live_group_and_proves_a_dead_one():
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert diagnostic.group_alive(proc.pid)
    finally:
        assert diagnostic.stop_group(proc, grace=5)
    assert not diagnostic.group_alive(proc.pid)


# ---------------------------------------------------------------- through the eval phase


def _fake_bench_with_checker(tmp_path, flag: bool) -> FakeBench:
    from test_container_support import run_config

    bench = FakeBench(tmp_path, servers=(), config=run_config(diagnostic_eval_on_truncation=flag))
    # The fake tree's TaskConfig has no evaluation section: the upstream fallback resolves it.
    checker = bench.root / "tasks" / "finalpool" / "demo-task" / "evaluation" / "main.py"
    checker.parent.mkdir(parents=True)
    checker.write_text(CHECKER)
    with open(bench.root / "utils" / "data_structures" / "task_config.py", "a") as fh:
        fh.write(
            f"\n\nclass Evaluation:\n    def __init__(self):\n"
            f"        self.evaluation_command = {BENCH_PY + ' ' + str(checker)!r}\n"
            f"        self.groundtruth_workspace = 'gt'\n"
            f"    @classmethod\n    def build(cls, task_dir):\n        return cls()\n"
        )
    return bench


def _runner_log(proc) -> str:
    return proc.stdout + proc.stderr


def test_nothing_the_diagnostic_prints_reaches_the_runners_log(tmp_path):
    bench = _fake_bench_with_checker(tmp_path, flag=True)
    agent = bench.run("agent", FAKE_OURO_SCENARIO="round_limit")
    assert "====== Status: max_turns_reached ======" in agent.stdout, agent.stderr
    (bench.task_root / "workspace" / "answer.txt").write_text("42")
    # As the docker shim passes it: the summary's digest when the agent exec ended.
    held = protocol.file_facts(str(bench.task_root / "ouroboros_summary.json"))["sha256"]
    proc = bench.run(
        "eval", MARK=MARK, ARGS_OUT=tmp_path / "args.txt", COWORK_AGENT_SUMMARY_SHA256=held, COWORK_EVAL_ENTRY="first"
    )
    assert proc.returncode == 1  # the official exit code of a decline, unchanged
    assert [ln for ln in proc.stdout.splitlines() if ln.strip()] == [
        "Pass:    None",
        f"Details: {protocol.GATE_TEXT.format(status=STATUS)}",
    ]
    assert MARK not in _runner_log(proc) and "Traceback" not in _runner_log(proc)
    [receipt_file] = bench.task_root.glob("ouroboros_diagnostic_receipt-*.json")
    receipt = json.loads(receipt_file.read_text())
    assert receipt["outcome"] == "checks_passed", receipt
    log = next(bench.task_root.glob("ouroboros_diagnostic_log-*.log")).read_text()
    assert "grandchild Pass: True" in log and "grandchild traceback" in log
    eval_res = json.loads((bench.task_root / "eval_res.json").read_text())
    assert eval_res == {"pass": None, "details": protocol.GATE_TEXT.format(status=STATUS)}


def test_with_the_flag_off_nothing_runs(tmp_path):
    bench = _fake_bench_with_checker(tmp_path, flag=False)
    bench.run("agent", FAKE_OURO_SCENARIO="round_limit")
    proc = bench.run("eval", MARK=MARK, ARGS_OUT=tmp_path / "args.txt")
    assert proc.returncode == 1 and "Pass:    None" in proc.stdout
    assert list(bench.task_root.glob("ouroboros_diagnostic*")) == []
    assert not (tmp_path / "args.txt").exists()


# ---------------------------------------------------------------- the flag in the applied config


def test_the_flag_is_recorded_even_when_false_and_recovery_refuses_a_change(tmp_path):
    flags = {
        "repo_dir": tmp_path / "seed",
        "bench_root": tmp_path / "bench",
        "run_root": tmp_path / "s" / "run-1",
        "docker_host": "unix:///var/run/docker.sock",
        "campaign_file": tmp_path / "s" / "campaign.json",
    }
    off, on = RunConfig.from_flags(**flags), RunConfig.from_flags(**flags, diagnostic_eval_on_truncation=True)
    assert off.applied_config()["diagnostic_eval_on_truncation"] is False
    assert build_run_config(off).diagnostic_eval_on_truncation is False
    assert build_run_config(on).diagnostic_eval_on_truncation is True
    assert first_config_difference(off.applied_config(), on.applied_config()) == "diagnostic_eval_on_truncation"
    parent = tmp_path / "parent"
    synth.write_manifest(parent, ["a"], task_ids=["a"], applied_config=off.applied_config())
    write_index(parent, build_index(parent, live=False, interruption_cause="runner_exited"))
    with pytest.raises(Refusal, match="diagnostic_eval_on_truncation"):
        resolve_ancestry(
            [parent],
            current_applied_config=on.applied_config(),
            seed_head=synth.SEED_HEAD,
            bench_commit=synth.BENCH_COMMIT,
            image_id=synth.IMAGE_ID,
            explicit_selection=None,
            dataset_ids=["a"],
        )


# ---------------------------------------------------------------- the audit reads the records


def test_the_audit_counts_declined_eligible_checked_and_joins_host_evidence(tmp_path):
    from cowork_adapter.audit import build_audit

    run = tmp_path / "run"
    dumps = run / "bench" / "dumps" / "ouroboros_m"
    rows = []
    for task, outcome, reason, eligible in (
        ("t-ok", "checks_passed", "checker_exit_0", True),
        ("t-owner", "ineligible", "stop_reason_not_eligible", False),
        ("t-off", None, None, None),
    ):
        dump = dumps / f"SingleUserTurn-{task}"
        dump.mkdir(parents=True)
        (dump / "ouroboros_eval_claim.json").write_text(json.dumps({"attempt_id": "a" * 32}))
        if outcome:
            (dump / "ouroboros_diagnostic_claim.json").write_text(json.dumps({"attempt_id": "a" * 32}))
            (dump / f"ouroboros_diagnostic_receipt-{'a' * 32}.json").write_text(
                json.dumps(
                    {
                        "attempt_id": "a" * 32,
                        "outcome": outcome,
                        "reason": reason,
                        "eligible": eligible,
                        "checker_exit_code": 0 if eligible else None,
                        "custody": "group_dead" if eligible else "not_started",
                    }
                )
            )
        rows.append(
            {"instance_id": task, "status": "agent_failed", "official_eval_status": "declined", "task_dump": str(dump)}
        )
    (run / "run_manifest.json").write_text(json.dumps({"applied_config": {"diagnostic_eval_on_truncation": True}}))
    (run / "result_index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evidence = run / "custody" / "evidence"
    evidence.mkdir(parents=True)
    (evidence / "1-aa.task").write_text("t-ok\n")
    (evidence / "1-aa.eval_admission").write_text(json.dumps({"ts": 1, "agent_container_state": "absent"}) + "\n")
    report = build_audit(run)
    block = report.eval_attempts
    assert (block.official_declined, block.diagnostic_present, block.diagnostic_eligible, block.diagnostic_checked) == (
        3,
        2,
        1,
        1,
    )
    assert block.diagnostic_outcomes == {"checks_passed": 1, "ineligible": 1}
    assert block.diagnostic_ineligible_reasons == {"stop_reason_not_eligible": 1}
    assert block.diagnostic_without_host_absence == []
    ok = next(t for t in report.tasks if t.instance_id == "t-ok").eval_attempts.diagnostic
    assert (ok.host_agent_container_state, ok.custody, ok.checker_exit_code, ok.linked) == (
        "absent",
        "group_dead",
        0,
        True,
    )
    # Verdicts are copied, never changed: the observation is nowhere near a score.
    assert all(t.official_pass is None and t.ledger_status == "agent_failed" for t in report.tasks)
    (evidence / "1-aa.eval_admission").write_text(json.dumps({"ts": 1, "agent_container_state": "present"}) + "\n")
    assert build_audit(run).eval_attempts.diagnostic_without_host_absence == ["t-ok"]
