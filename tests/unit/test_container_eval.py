"""The eval phase's claim/receipt protocol, run as the runner runs it (a subprocess per entry)."""

from __future__ import annotations

import json
import subprocess

from test_container_support import SHORT, TASK, FakeBench


def _agent_done(tmp_path, status="success") -> FakeBench:
    bench = FakeBench(tmp_path, servers=())
    root = bench.task_root
    root.mkdir(parents=True)
    (root / "traj_log.json").write_text(json.dumps({"config": {"task_dir": TASK}, "status": status}))
    return bench


def _pass_lines(stdout: str) -> list:
    return [ln for ln in stdout.splitlines() if ln.startswith(("Pass:", "Details:"))]


def _receipts(bench):
    return sorted(bench.task_root.glob("ouroboros_eval_receipt-*.json"))


def test_first_entry_evaluates_and_reentry_replays(tmp_path):
    bench = _agent_done(tmp_path)
    first = bench.run("eval")
    assert first.returncode == 0, first.stderr
    assert _pass_lines(first.stdout) == ["Pass:    True", "Details: checked"]
    claim = json.loads((bench.task_root / "ouroboros_eval_claim.json").read_text())
    assert (
        claim["schema"] == "cowork_adapter.eval_attempt.v1" and claim["evidence"]["agent_container_state"] == "absent"
    )
    [receipt_path] = _receipts(bench)
    receipt = json.loads(receipt_path.read_text())
    assert receipt["attempt_id"] == claim["attempt_id"] and receipt["official_run"] is True
    assert receipt["returned"] == {"pass": True, "details": "checked"} and receipt["result_file"]["state"] == "present"
    second = bench.run("eval")
    assert second.returncode == 0 and _pass_lines(second.stdout) == _pass_lines(first.stdout)
    assert bench.eval_calls() == 1


def test_two_concurrent_entries_evaluate_once(tmp_path):
    bench = _agent_done(tmp_path)
    procs = [
        subprocess.Popen(
            bench.argv("eval"),
            cwd=bench.root,
            env=bench.env(FAKE_EVAL_SLEEP="2"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert bench.eval_calls() == 1
    verdicts = [o for o in outs if "Pass:    True" in o]
    refusals = [o for o in outs if "unfinished_claim" in o]
    assert len(verdicts) == 1 and len(refusals) == 1, outs
    assert "Pass:" not in refusals[0] and "Status:" not in refusals[0]


def test_prior_eval_res_is_preserved_and_not_run(tmp_path):
    bench = _agent_done(tmp_path)
    prior = b'{"pass": true, "details": "planted"}  \n'
    (bench.task_root / "eval_res.json").write_bytes(prior)
    proc = bench.run("eval")
    assert proc.returncode == 1 and "unclaimed_prior_result" in proc.stdout and "Pass:" not in proc.stdout
    assert (bench.task_root / "eval_res.json").read_bytes() == prior
    assert bench.eval_calls() == 0
    receipt = json.loads(_receipts(bench)[0].read_text())
    assert receipt["official_run"] is False and receipt["cause"] == "unclaimed_prior_result"


def test_changed_log_is_binding_mismatch(tmp_path):
    bench = _agent_done(tmp_path)
    assert bench.run("eval").returncode == 0
    (bench.task_root / "traj_log.json").write_text(json.dumps({"config": {}, "status": "success", "x": 1}))
    proc = bench.run("eval")
    assert proc.returncode == 1 and "binding_mismatch" in proc.stdout and bench.eval_calls() == 1


def test_checker_overwriting_the_log_still_replays(tmp_path):
    bench = _agent_done(tmp_path)
    first = bench.run("eval", FAKE_EVAL_OVERWRITE_LOG="1")
    second = bench.run("eval")
    assert second.returncode == 0 and _pass_lines(second.stdout) == _pass_lines(first.stdout)
    assert bench.eval_calls() == 1


def test_crash_after_claim_blocks_reentry(tmp_path):
    bench = _agent_done(tmp_path)
    crashed = bench.run("eval", FAKE_EVAL_CRASH="1")
    assert crashed.returncode == 9 and (bench.task_root / "ouroboros_eval_claim.json").exists()
    assert _receipts(bench) == []
    again = bench.run("eval")
    assert again.returncode == 1 and "unfinished_claim" in again.stdout and bench.eval_calls() == 1


def test_non_boolean_pass_is_never_coerced(tmp_path):
    bench = _agent_done(tmp_path)
    proc = bench.run("eval", FAKE_EVAL_PASS='"True"')
    assert proc.returncode == 1 and "Pass:" not in proc.stdout and "no_verdict" in proc.stdout


def test_status_gate_prints_none(tmp_path):
    bench = _agent_done(tmp_path, status="max_turns_reached")
    proc = bench.run("eval")
    assert proc.returncode == 1 and _pass_lines(proc.stdout)[0] == "Pass:    None"


def test_unreadable_claim_is_refused(tmp_path):
    bench = _agent_done(tmp_path)
    (bench.task_root / "ouroboros_eval_claim.json").write_text("{")
    proc = bench.run("eval")
    assert proc.returncode == 1 and "claim_unreadable" in proc.stdout and bench.eval_calls() == 0


def test_phase_all_runs_agent_then_eval(tmp_path):
    bench = FakeBench(tmp_path, servers=())
    proc = bench.run("all", FAKE_OURO_SCENARIO="round_limit")
    assert "====== Status: max_turns_reached ======" in proc.stdout
    assert "Pass:    None" in proc.stdout and proc.returncode == 1
    assert bench.eval_calls() == 1 and SHORT
