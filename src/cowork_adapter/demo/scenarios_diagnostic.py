"""Demo scenario `diagnostic`: the opt-in residual-state diagnostic after a truncated attempt.

demo-truncated-correct is written correctly by the stub agent in its first rounds, then the agent
runs out of rounds: the official evaluator declines at its status gate (agent_failed, unscored).
With --diagnostic-eval-on-truncation the unchanged checker then observes the state the agent left
(checks_passed), and that observation appears only in the audit's eval_attempts block. Without
the flag nothing runs and no diagnostic file exists.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..schemas.audit import launcher_audit_path
from ..vocab import ExitCode, OfficialEvalStatus, TaskStatus
from .env import Check, DemoEnv, campaign_checks, custody_checks, read_json, read_rows

TASK = "demo-truncated-correct"
FLAG = "--diagnostic-eval-on-truncation"
RUN_TIMEOUT_SEC = 1800
# What a diagnostic record would bring into a scored file (paths may contain "diagnostic" anyway).
DIAGNOSTIC_WORDS = ("ouroboros_diagnostic", "checks_passed", "checks_failed", "residual_state")


def _dump(run_root: Path) -> Path | None:
    found = sorted((run_root / "bench" / "dumps").glob(f"*/SingleUserTurn-{TASK}"))
    return found[0] if found else None


def _diagnostic_files(dump: Path | None) -> list[str]:
    return sorted(p.name for p in dump.glob("ouroboros_diagnostic*")) if dump else []


def _text(paths: list[Path]) -> str:
    return "".join(p.read_text(errors="replace") for p in paths if p.is_file())


def _official_checks(env: DemoEnv, name: str, code: int | None) -> tuple[list[Check], dict]:
    """The official verdict of the one task: declined at the status gate, agent_failed, unscored."""
    run_root = env.run_root(name)
    row = read_rows(run_root).get(TASK, {})
    receipt = row.get("official_receipt") or {}
    dump = _dump(run_root)
    eval_res = read_json(dump / "eval_res.json") if dump else {}
    checks = [
        Check(
            f"[{name}] the launcher exits 0 (a truncation is a settled agent failure)",
            code == ExitCode.OK,
            f"exit {code}",
        ),
        Check(
            f"[{name}] {TASK} is agent_failed",
            row.get("status") == TaskStatus.AGENT_FAILED.value,
            f"got {row.get('status')}",
        ),
        Check(
            f"[{name}] its official eval status is declined",
            row.get("official_eval_status") == OfficialEvalStatus.DECLINED.value,
            f"got {row.get('official_eval_status')}",
        ),
        Check(
            f"[{name}] it is never scored (no official pass)",
            receipt.get("pass") is None and eval_res.get("pass", "absent") is None,
            f"receipt pass {receipt.get('pass')!r}",
        ),
    ]
    return checks, row


def _run(env: DemoEnv, name: str, campaign: str, extra: list[str]) -> int | None:
    proc = env.launch(env.run_args(name, [TASK], campaign=campaign, extra=extra), name)
    return proc.wait(timeout=RUN_TIMEOUT_SEC)


def scenario_diagnostic(env: DemoEnv) -> list[Check]:
    checks: list[Check] = []

    name, campaign = "diagnostic-on", "campaign-diagnostic.json"
    code = _run(env, name, campaign, [FLAG])
    run_root = env.run_root(name)
    official, _row = _official_checks(env, name, code)
    checks += official
    dump = _dump(run_root)
    receipts = sorted(dump.glob("ouroboros_diagnostic_receipt-*.json")) if dump else []
    receipt = read_json(receipts[0]) if receipts else {}
    checks.append(
        Check(
            f"[{name}] the diagnostic receipt says checks_passed (the state the agent left is right)",
            receipt.get("outcome") == "checks_passed",
            f"outcome {receipt.get('outcome')!r}, reason {receipt.get('reason')!r}",
        )
    )
    checks.append(
        Check(
            f"[{name}] the checker group was proven dead and the official verdict unchanged",
            receipt.get("custody") == "group_dead" and receipt.get("official_verdict_unchanged") is True,
            f"custody {receipt.get('custody')!r}",
        )
    )
    attempts = read_json(launcher_audit_path(run_root)).get("eval_attempts") or {}
    want = {
        "diagnostic_enabled": True,
        "official_declined": 1,
        "diagnostic_eligible": 1,
        "diagnostic_checked": 1,
        "diagnostic_outcomes": {"checks_passed": 1},
        "diagnostic_without_host_absence": [],
    }
    got = {k: attempts.get(k) for k in want}
    checks.append(
        Check(
            f"[{name}] the audit's eval_attempts shows the observation (declined 1, eligible 1, checked 1)",
            got == want,
            json.dumps(got),
        )
    )
    scored = _text([run_root / "result_index.jsonl", *sorted(run_root.glob("bench/benchmark_logs/*/summary.csv"))])
    checks.append(
        Check(
            f"[{name}] result_index.jsonl and summary.csv never mention the diagnostic",
            bool(scored) and not any(word in scored for word in DIAGNOSTIC_WORDS),
        )
    )
    runner_logs = _text(sorted(run_root.glob("bench/benchmark_logs/*/*.log")))
    checks.append(
        Check(
            f"[{name}] nothing the checker printed reached the runner's log",
            bool(runner_logs) and "[PASS]" not in runner_logs and "[diagnostic]" not in runner_logs,
        )
    )
    checks += custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)

    name, campaign = "diagnostic-off", "campaign-diagnostic-off.json"
    code = _run(env, name, campaign, [])
    run_root = env.run_root(name)
    official, _row = _official_checks(env, name, code)
    checks += official
    dump = _dump(run_root)
    files = _diagnostic_files(dump)
    checks.append(
        Check(
            f"[{name}] without the flag no diagnostic file exists",
            dump is not None and not files,
            ", ".join(files) or ("no dump" if dump is None else ""),
        )
    )
    attempts = read_json(launcher_audit_path(run_root)).get("eval_attempts") or {}
    checks.append(
        Check(
            f"[{name}] the audit records the flag off and no diagnostic",
            attempts.get("diagnostic_enabled") is False and attempts.get("diagnostic_present") == 0,
            f"enabled {attempts.get('diagnostic_enabled')!r}, present {attempts.get('diagnostic_present')!r}",
        )
    )
    return checks + custody_checks(env, run_root)
