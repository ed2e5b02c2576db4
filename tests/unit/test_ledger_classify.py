"""Ledger classification: the pure decision order as a table, then the same cases from real dumps.

Covers reference-adapter §7 items 33-37 plus the adapter's own cases (environment-blocked,
declined gate after a success summary, non-boolean pass, changed result file).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.container import protocol
from cowork_adapter.schemas.ledger import read_index
from cowork_adapter.score import infra
from cowork_adapter.score.context import IndexContext
from cowork_adapter.score.ledger import build_index, classify_task, write_index
from cowork_adapter.score.row import TaskFacts, classify
from cowork_adapter.score.verdict import assess_official
from cowork_adapter.vocab import InfraCause, PaidActivity, TamperKind
from cowork_adapter.vocab import OfficialEvalStatus as E
from cowork_adapter.vocab import TaskStatus as S

OK = {"bench_status": "success", "infra_failed": False, "reason_code": None}
TRUNC = {"bench_status": "max_turns_reached", "infra_failed": False, "reason_code": "round_limit", "truncated": True}


def F(**kw):
    return TaskFacts(instance_id="t", **kw)


# (id, facts, live, expected (status, reason, provisional))
TABLE = [
    ("pg_fail", F(runner_status="pg_fail"), False, (S.INFRA_FAILED, "pg_fail", False)),
    (
        "pg_fail beats a summary",
        F(runner_status="pg_fail", summary_state="present", summary=OK, official_status=E.DECLINED),
        False,
        (S.INFRA_FAILED, "pg_fail", False),
    ),
    (
        "environment blocked",
        F(environment_blocked="mcp_server_failed:pptx"),
        False,
        (S.ENVIRONMENT_BLOCKED, "mcp_server_failed:pptx", False),
    ),
    ("nothing at all", F(), False, (S.NOT_ATTEMPTED, "missing_result", False)),
    ("nothing at all, live", F(), True, (S.NOT_ATTEMPTED, "missing_result", True)),
    ("runner row only", F(runner_status="unknown"), False, (S.INFRA_FAILED, "interrupted:runner_exited", False)),
    (
        "started, no summary, live",
        F(start_evidence=("ouroboros",)),
        True,
        (S.INFRA_FAILED, "missing_adapter_summary", True),
    ),
    (
        "started, no summary, after",
        F(start_evidence=("ouroboros",)),
        False,
        (S.INFRA_FAILED, "interrupted:runner_exited", False),
    ),
    (
        "custody only, after",
        F(start_evidence=("custody:x.task",)),
        False,
        (S.INFRA_FAILED, "interrupted:runner_exited", False),
    ),
    (
        "summary unreadable",
        F(summary_state="unreadable", start_evidence=("ouroboros",)),
        False,
        (S.INFRA_FAILED, "adapter_summary_unreadable", False),
    ),
    (
        "summary infra",
        F(summary_state="present", summary={**OK, "infra_failed": True, "reason_code": "server_died"}),
        False,
        (S.INFRA_FAILED, "server_died", False),
    ),
    (
        "summary infra without reason",
        F(summary_state="present", summary={**OK, "infra_failed": True}),
        False,
        (S.INFRA_FAILED, "infra_failed", False),
    ),
    (
        "provider error beats truncation",
        F(summary_state="present", summary={**TRUNC, "reason_code": "llm_api_error"}),
        False,
        (S.INFRA_FAILED, "llm_api_error", False),
    ),
    (
        "infra flag not a bool",
        F(summary_state="present", summary={**OK, "infra_failed": "false"}),
        False,
        (S.INFRA_FAILED, "adapter_summary_invalid", False),
    ),
    (
        "truncated",
        F(summary_state="present", summary=TRUNC, official_status=E.DECLINED),
        False,
        (S.AGENT_FAILED, "round_limit", False),
    ),
    (
        "agent timeout",
        F(summary_state="present", summary={**OK, "bench_status": "failed", "reason_code": "wall_clock_timeout"}),
        False,
        (S.AGENT_FAILED, "wall_clock_timeout", False),
    ),
    (
        "agent failed without reason",
        F(summary_state="present", summary={**OK, "bench_status": "failed"}),
        False,
        (S.AGENT_FAILED, "agent_not_finished", False),
    ),
    (
        "passed",
        F(summary_state="present", summary=OK, official_status=E.COMPLETED, official_pass=True),
        False,
        (S.PASSED, "passed", False),
    ),
    (
        "failed",
        F(summary_state="present", summary=OK, official_status=E.COMPLETED, official_pass=False),
        False,
        (S.FAILED, "verifier_failed", False),
    ),
    (
        "success, no eval_res",
        F(summary_state="present", summary=OK, official_status=E.UNREPORTED),
        False,
        (S.INFRA_FAILED, "missing_eval_result", False),
    ),
    (
        "success, no eval_res, live",
        F(summary_state="present", summary=OK, official_status=E.UNREPORTED),
        True,
        (S.INFRA_FAILED, "missing_eval_result", True),
    ),
    (
        "success, not run",
        F(summary_state="present", summary=OK, official_status=E.NOT_RUN),
        False,
        (S.INFRA_FAILED, "official_eval_not_run", False),
    ),
    (
        "success, unknown",
        F(summary_state="present", summary=OK, official_status=E.UNKNOWN),
        False,
        (S.INFRA_FAILED, "official_eval_unknown", False),
    ),
    (
        "success, invalid pass",
        F(summary_state="present", summary=OK, official_status=E.INVALID),
        False,
        (S.INFRA_FAILED, "official_eval_invalid", False),
    ),
    # A gate decline needs a non-success log status; with a success summary the evidence
    # contradicts itself, so it is infrastructure to investigate (retried), never agent_failed.
    (
        "success, declined gate",
        F(summary_state="present", summary=OK, official_status=E.DECLINED),
        False,
        (S.INFRA_FAILED, "official_eval_declined", False),
    ),
    (
        "completed but non-bool pass never passes",
        F(summary_state="present", summary=OK, official_status=E.COMPLETED, official_pass="true"),
        False,
        (S.INFRA_FAILED, "official_eval_invalid", False),
    ),
]


@pytest.mark.parametrize("facts,live,expected", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_classify_table(facts, live, expected):
    assert classify(facts, live=live, interruption_cause="runner_exited") == expected


# classify()'s infra_failed is a claim (issue 36): each final infra row of the table, settled by the
# infra rule (score/infra.py) with no cause the host saw, is agent_failed, flagged; only an eval
# that gave no verdict after a summary of success stays infrastructure's.
FINAL_INFRA = [t for t in TABLE if t[3][0] is S.INFRA_FAILED and not t[3][2]]


@pytest.mark.parametrize("facts,live,expected", [t[1:] for t in FINAL_INFRA], ids=[t[0] for t in FINAL_INFRA])
def test_classify_infra_rows_need_a_host_seen_cause(facts, live, expected):
    status, reason, provisional = classify(facts, live=live, interruption_cause="runner_exited")
    # An agent exec began and ended: a pg_fail row then is not the runner's alone.
    nothing = infra.HostFacts(
        recorded=True,
        exec_started=True,
        exec_ended=True,
        exec_exit=0,
        gateway=True,
        model_answers=1,
        runner_pg_fail=facts.runner_status == "pg_fail",
    )
    got = infra.settle(
        status, reason, provisional, host=nothing, summary_state=facts.summary_state, summary=facts.summary, findings=()
    )
    if infra.agent_finished(facts.summary_state, facts.summary) and not nothing.runner_pg_fail:
        assert (got.status, got.cause) == (S.INFRA_FAILED, InfraCause.EVAL_NO_VERDICT)
    else:
        assert (got.status, got.reason) == (S.AGENT_FAILED, f"unverified_infra:{reason}")
        assert [f.kind for f in got.found] == [TamperKind.UNVERIFIED_INFRA_CLAIM]
    seen = replace(nothing, stop="signal_15")  # a cause the host saw keeps it, named
    assert (
        infra.settle(
            status,
            reason,
            provisional,
            host=seen,
            summary_state=facts.summary_state,
            summary=facts.summary,
            findings=(),
        ).cause
        is InfraCause.RUN_STOPPED
    )


# A verdict linked by a valid official receipt settles the row whatever else holds: the run's
# state (live or not), the interruption cause, and every other file (DESIGN principle 4).
OTHER_FACTS = {
    "no summary, started": dict(start_evidence=("ouroboros",)),
    "no summary, custody only": dict(start_evidence=("custody:x.task",)),
    "no evidence at all": dict(),
    "runner row only": dict(runner_status="unknown"),
    "summary unreadable": dict(summary_state="unreadable", start_evidence=("ouroboros",)),
    "summary success": dict(summary_state="present", summary=OK),
    "summary infra": dict(summary_state="present", summary={**OK, "infra_failed": True, "reason_code": "server_died"}),
    "summary provider error": dict(summary_state="present", summary={**OK, "reason_code": "llm_api_error"}),
    "summary invalid": dict(summary_state="present", summary={**OK, "infra_failed": "false"}),
    "summary agent failed": dict(summary_state="present", summary=TRUNC),
    "runner pg_fail": dict(runner_status="pg_fail", summary_state="present", summary=OK),
    "environment blocked": dict(environment_blocked="mcp_server_failed:pptx"),
}
CAUSES = ["in_progress", "runner_exited", "signal_15", "signal_9", "budget_meter_unavailable", "cleanup_unproven"]
RECEIPT_TABLE = [
    (
        f"{name}, live={live}, {cause}, pass={verdict}",
        F(official_status=E.COMPLETED, official_pass=verdict, **kw),
        live,
        cause,
        (S.PASSED, "passed", False) if verdict else (S.FAILED, "verifier_failed", False),
    )
    for name, kw in OTHER_FACTS.items()
    for live in (True, False)
    for cause in CAUSES
    for verdict in (True, False)
]


@pytest.mark.parametrize("facts,live,cause,expected", [t[1:] for t in RECEIPT_TABLE], ids=[t[0] for t in RECEIPT_TABLE])
def test_a_receipt_verdict_settles_the_row_under_every_state_and_cause(facts, live, cause, expected):
    assert classify(facts, live=live, interruption_cause=cause) == expected


@pytest.mark.parametrize("official", [E.UNKNOWN, E.NOT_RUN, E.INVALID, E.UNREPORTED, E.DECLINED])
@pytest.mark.parametrize("live", [True, False])
def test_without_a_linked_verdict_a_started_task_without_summary_is_never_settled(official, live):
    status, _, provisional = classify(
        F(start_evidence=("ouroboros",), official_status=official), live=live, interruption_cause="signal_15"
    )
    assert status is S.INFRA_FAILED and provisional is live


def test_interruption_cause_is_named():
    facts = F(start_evidence=("preprocess.log",))
    assert classify(facts, live=False, interruption_cause="signal_15")[1] == "interrupted:signal_15"


# ---------------------------------------------------------------- assess_official (pure)


def A(**kw):
    base = dict(
        claim_state="present",
        receipt_state="present",
        receipt={
            "official_run": True,
            "raised": None,
            "returned": {"pass": True},
            "result_file": {"state": "present", "sha256": "s"},
        },
        eval_status=E.COMPLETED,
        eval_cause="evaluated",
        eval_pass=True,
        eval_sha256="s",
        eval_value_matches=True,
    )
    base.update(kw)
    return assess_official(**base)


def test_assess_linked_completed_receipt_scores():
    assert A() == (E.COMPLETED, "evaluated", True)


@pytest.mark.parametrize(
    "kw,status,cause",
    [
        (dict(claim_state="absent", receipt_state="absent", receipt=None), E.UNKNOWN, "no_attempt_record"),
        (
            dict(
                claim_state="absent",
                receipt_state="absent",
                receipt=None,
                eval_status=E.UNREPORTED,
                eval_cause="file_absent",
                eval_pass=None,
                eval_sha256=None,
            ),
            E.UNREPORTED,
            "file_absent",
        ),
        (dict(claim_state="invalid"), E.UNKNOWN, "claim_unreadable"),
        (dict(receipt_state="absent", receipt=None), E.UNKNOWN, "claim_without_terminal_receipt"),
        (dict(receipt_state="invalid", receipt=None), E.UNKNOWN, "receipt_unreadable"),
        (dict(receipt={"official_run": False, "cause": "unclaimed_prior_result"}), E.NOT_RUN, "unclaimed_prior_result"),
        (
            dict(receipt={"official_run": True, "raised": "RuntimeError", "returned": None}),
            E.UNKNOWN,
            "raised:RuntimeError",
        ),
        (
            dict(
                receipt={
                    "official_run": True,
                    "raised": None,
                    "returned": {"pass": False},
                    "result_file": {"state": "absent"},
                }
            ),
            E.UNKNOWN,
            "returned_without_result_file",
        ),
        (dict(eval_sha256="other"), E.UNKNOWN, "result_file_changed"),
        (dict(eval_value_matches=False), E.UNKNOWN, "result_file_changed"),
        (
            dict(eval_status=E.INVALID, eval_cause="pass_not_boolean:str", eval_pass="true"),
            E.INVALID,
            "pass_not_boolean:str",
        ),
    ],
)
def test_assess_without_a_linked_verdict(kw, status, cause):
    verdict = A(**kw)
    assert (verdict.status, verdict.cause, verdict.passed) == (status, cause, None)


# ---------------------------------------------------------------- the same cases from dumps


def _run(tmp_path: Path, tasks: list[str], **kw) -> Path:
    root = tmp_path / "run"
    synth.write_manifest(root, tasks, **kw)
    return root


def _row(root: Path, task: str, live: bool = False, cause: str = "runner_exited"):
    ctx = IndexContext.load(root)
    return classify_task(ctx, task, live=live, interruption_cause=cause)


def test_predcreated_dump_and_bare_files_are_not_start_evidence(tmp_path):
    root = _run(tmp_path, ["a"])
    dump = synth.dump_dir(root, "a")
    (dump / "workspace").mkdir()
    synth.write_traj_log(dump, "success")
    (dump / "eval_res.json").write_text(json.dumps({"pass": True}))
    row = _row(root, "a")
    assert (row.status, row.reason_code, row.start_evidence) == (S.NOT_ATTEMPTED, "missing_result", [])
    assert row.official_receipt.pass_ is None
    assert row.eval_result.pass_value is True  # disclosed, not scored


def test_started_without_summary_live_then_after(tmp_path):
    root = _run(tmp_path, ["a"])
    synth.write_start_evidence(synth.dump_dir(root, "a"))
    live = _row(root, "a", live=True)
    assert (live.status, live.reason_code, live.provisional) == (S.INFRA_FAILED, "missing_adapter_summary", True)
    after = _row(root, "a", cause="signal_15")
    assert (after.status, after.reason_code, after.provisional) == (S.INFRA_FAILED, "interrupted:signal_15", False)
    assert after.paid_activity is PaidActivity.UNKNOWN


def test_paid_activity_observed_only_from_token_bearing_usage(tmp_path):
    root = _run(tmp_path, ["a", "b"])
    synth.write_start_evidence(synth.dump_dir(root, "a"), usage_rows=1, tokens=10)
    synth.write_start_evidence(synth.dump_dir(root, "b"), usage_rows=3, tokens=0)
    assert _row(root, "a").paid_activity is PaidActivity.OBSERVED
    assert _row(root, "b").paid_activity is PaidActivity.UNKNOWN


def test_custody_task_file_is_start_evidence(tmp_path):
    root = _run(tmp_path, ["a"])
    (root / "custody" / "evidence").mkdir(parents=True)
    (root / "custody" / "evidence" / "123-abcd.task").write_text("a\n")
    row = _row(root, "a")
    assert (row.status, row.reason_code) == (S.INFRA_FAILED, "interrupted:runner_exited")
    assert row.start_evidence == ["custody:123-abcd.task"]


def _success(root: Path, task: str) -> Path:
    dump = synth.dump_dir(root, task)
    synth.write_start_evidence(dump, usage_rows=2)
    synth.write_summary(dump, synth.summary("success"))
    synth.write_traj_log(dump, "success")
    return dump


@pytest.mark.parametrize(
    "result,mode,status,reason,official,receipt_pass",
    [
        ({"pass": True, "details": "ok"}, "completed", S.PASSED, "passed", E.COMPLETED, True),
        ({"pass": False, "failure": "x"}, "completed", S.FAILED, "verifier_failed", E.COMPLETED, False),
        (None, "none", S.INFRA_FAILED, "missing_eval_result", E.UNREPORTED, None),
        ({"pass": True}, "unclaimed_prior", S.INFRA_FAILED, "official_eval_not_run", E.NOT_RUN, None),
        ({"pass": True}, "claimed_unfinished", S.INFRA_FAILED, "official_eval_unknown", E.UNKNOWN, None),
        ({"pass": True}, "raised", S.INFRA_FAILED, "official_eval_unknown", E.UNKNOWN, None),
        ({"pass": True}, "none", S.INFRA_FAILED, "official_eval_unknown", E.UNKNOWN, None),
        ({"pass": False}, "changed", S.INFRA_FAILED, "official_eval_unknown", E.UNKNOWN, None),
        ({"pass": "true"}, "completed", S.INFRA_FAILED, "official_eval_invalid", E.INVALID, None),
        ({"pass": 1}, "completed", S.INFRA_FAILED, "official_eval_invalid", E.INVALID, None),
    ],
)
def test_success_summary_verdicts_from_dumps(tmp_path, result, mode, status, reason, official, receipt_pass):
    root = _run(tmp_path, ["a"])
    synth.write_eval(_success(root, "a"), result, mode=mode)
    row = _row(root, "a")
    assert (row.status, row.reason_code, row.official_eval_status, row.official_receipt.pass_) == (
        status,
        reason,
        official,
        receipt_pass,
    )


def test_unclaimed_prior_pass_true_is_disclosed_byte_for_byte_not_scored(tmp_path):
    root = _run(tmp_path, ["a"])
    dump = _success(root, "a")
    raw = b'{"pass": true, "details": "left over"}'
    synth.write_eval(dump, None, mode="unclaimed_prior", raw=raw)
    row = _row(root, "a")
    assert row.status is S.INFRA_FAILED and row.official_receipt.pass_ is None
    assert row.eval_result.pass_value is True and row.eval_result.bytes == len(raw)
    assert (dump / "eval_res.json").read_bytes() == raw


def test_duplicate_keys_make_eval_res_unreadable(tmp_path):
    root = _run(tmp_path, ["a"])
    synth.write_eval(_success(root, "a"), None, mode="none", raw=b'{"pass": false, "pass": true}')
    row = _row(root, "a")
    assert (row.official_eval_status, row.reason_code) == (E.UNREADABLE, "official_eval_unreadable")


def test_truncated_summary_with_gate_decline_is_agent_failed(tmp_path):
    root = _run(tmp_path, ["a"])
    dump = synth.dump_dir(root, "a")
    synth.write_start_evidence(dump, usage_rows=1)
    synth.write_summary(dump, synth.summary("max_turns_reached", reason_code="round_limit", truncated=True))
    synth.write_traj_log(dump, "max_turns_reached")
    synth.write_eval(dump, {"pass": None, "details": protocol.GATE_TEXT.format(status="max_turns_reached")})
    row = _row(root, "a")
    assert (row.status, row.reason_code, row.official_eval_status) == (S.AGENT_FAILED, "round_limit", E.DECLINED)
    assert (row.truncated, row.truncation_reason) == (True, "round_limit")


def test_runner_pg_fail_and_environment_block(tmp_path):
    inventory = {"servers": {"pptx": {"health": "failed", "reason": "no chromium"}, "excel": {"health": "repaired"}}}
    root = _run(tmp_path, ["a", "b", "c"], inventory=inventory)
    synth.write_runner_rows(root, [("a", "pg_fail", "null", 300.0)])
    synth.write_task_config(root, "b", ["pptx", "excel"])
    synth.write_task_config(root, "c", ["excel"])
    rows = {r.instance_id: r for r in build_index(root, live=False, interruption_cause="runner_exited")}
    assert (rows["a"].status, rows["a"].reason_code) == (S.INFRA_FAILED, "pg_fail")
    assert (rows["b"].status, rows["b"].environment_blocked) == (S.ENVIRONMENT_BLOCKED, "mcp_server_failed:pptx")
    assert rows["c"].status is S.NOT_ATTEMPTED


def test_every_selected_task_gets_a_row_and_index_round_trips(tmp_path):
    tasks = ["a", "b", "c", "d"]
    root = _run(tmp_path, tasks)
    synth.write_eval(_success(root, "b"), {"pass": True})
    rows = build_index(root, live=False, interruption_cause="runner_exited")
    assert [r.instance_id for r in rows] == tasks
    write_index(root, rows)
    again = read_index(root / "result_index.jsonl")
    assert again == rows
    assert not list(root.glob(".result_index.jsonl.*"))  # no temp file left behind


def test_recovery_run_carries_settled_rows_with_provenance(tmp_path):
    parent = tmp_path / "p"
    synth.write_manifest(parent, ["a", "b"])
    dump = synth.dump_dir(parent, "a")
    synth.write_start_evidence(dump)
    synth.write_summary(dump, synth.summary("success"))
    synth.write_traj_log(dump, "success")
    synth.write_eval(dump, {"pass": True})
    write_index(parent, build_index(parent, live=False, interruption_cause="runner_exited"))
    child = tmp_path / "c"
    synth.write_manifest(child, ["a", "b"], task_ids=["b"], resume_from=[str(parent)], generation=1)
    rows = {r.instance_id: r for r in build_index(child, live=False, interruption_cause="runner_exited")}
    assert rows["a"].status is S.PASSED and rows["a"].attempt_run_root == str(parent)
    assert rows["b"].status is S.NOT_ATTEMPTED


def test_incremental_refresh_reuses_unchanged_rows_and_sees_new_evidence(tmp_path):
    root = _run(tmp_path, ["a", "b"])
    synth.write_start_evidence(synth.dump_dir(root, "a"))
    ctx = IndexContext.load(root)
    first = build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    assert first[0].reason_code == "missing_adapter_summary"
    dump = _success(root, "a")
    synth.write_eval(dump, {"pass": True})
    ctx.refresh()
    second = build_index(root, live=True, interruption_cause="in_progress", ctx=ctx)
    assert second[0].status is S.PASSED
    assert second[1] is first[1]  # task b: nothing changed, the cached row object is reused
