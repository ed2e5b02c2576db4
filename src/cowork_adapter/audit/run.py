"""Auditing a run root: its records and ledger read, each task's dump scanned, totals summed.

Read-only over the run root. Streams every log with bounded memory (see audit.read). Never changes
a verdict: ledger status, official status and pass are copied from result_index.jsonl as evidence.

build_audit(run_dir, workers) -> AuditReport: a pure read; raises Refusal if the directory is no run.
Its inputs (records, ledger, dumps, the shim's evidence) are read by audit/inputs.py, each task by
audit/task.py; here the tasks are handed to forked workers in ledger order and summed.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import Refusal
from ..runroot import layout
from ..schemas.audit import (
    AuditReport,
    Gap,
    RunEvalAttempts,
    Tampering,
    TamperSeen,
    TaskAudit,
    Totals,
)
from ..score.tampering import count_tampering
from ..score.taskdb import read_task_diff
from ..vocab import AuditGapReason, OfficialEvalStatus
from .forked import forked_map
from .inputs import dump_index, eval_admissions, eval_refusals, evidence_by_task, ledger_rows, run_record
from .scan import LOG_SCANNERS
from .task import Scanned, audit_task_with_scan, str_or_none
from .taskdb import account as account_task_db
from .taskdb import bench_of, pg_servers

CHECKED_OUTCOMES = frozenset({"checks_passed", "checks_failed"})
NOT_RUN_OUTCOMES = frozenset({"ineligible", "unavailable"})  # diagnostics that never ran a checker


# ---------------------------------------------------------------- the run


def build_audit(run_dir: Path, workers: int | None = None) -> AuditReport:
    """Audit a run root without writing anything. Refusal when it is not a run at all.

    `workers` processes scan task dumps in parallel (None: os.cpu_count()); the report is the
    same for any count. Small runs are scanned in this process (see PARALLEL_MIN_BYTES).
    """
    root = Path(run_dir).resolve()
    run_gaps: list[Gap] = []
    if not root.is_dir():
        raise Refusal("audit", f"{run_dir} is not a directory, so there is no run to audit.")
    rows = ledger_rows(root, run_gaps)
    manifest, manifest_cause = run_record(root, layout.MANIFEST, AuditGapReason.MISSING_MANIFEST, run_gaps)
    if manifest_cause == "absent" and rows is None:
        raise Refusal(
            "audit",
            f"{run_dir} has neither {layout.MANIFEST} nor {layout.RESULT_INDEX}, so it cannot be read as a run.",
        )
    outside: list[TamperSeen] = []
    dumps = dump_index(root, outside)
    if rows is None:
        # No ledger: audit what the manifest selected, else every dump found (documented fallback).
        run_gaps.append(Gap(reason=AuditGapReason.MISSING_RESULT_INDEX, file=layout.RESULT_INDEX))
        selection = manifest.get("selection")
        ids = selection.get("selection_task_ids") or selection.get("task_ids") if isinstance(selection, dict) else None
        ids = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else sorted(dumps)
        rows = iter({"instance_id": i} for i in ids)

    monitor, _ = run_record(root, layout.MONITOR, AuditGapReason.MISSING_MONITOR, run_gaps)
    refusals = eval_refusals(root)
    admissions = eval_admissions(root)
    ineligible: Counter = Counter()

    report = AuditReport(generated_at=datetime.now(UTC).isoformat(), run_root=str(root))
    totals = Totals()
    findings_by_reason: Counter = Counter()
    gaps_by_reason: Counter = Counter()
    outcomes: Counter = Counter()
    run_eval = RunEvalAttempts(
        cleanup_proven=monitor.get("finished") is True,
        stop_reason=str_or_none(monitor.get("stop_reason") or manifest.get("stop_reason")),
    )
    applied = manifest.get("applied_config")
    if isinstance(applied, dict):
        flag = applied.get("diagnostic_eval_on_truncation")
        run_eval.diagnostic_enabled = flag if isinstance(flag, bool) else False
    all_complete = True
    db_evidence = evidence_by_task(root, layout.TASKDB_SUFFIX)
    pg = pg_servers(bench_of(root, manifest)) if db_evidence else None
    ledger_flags: list[tuple[str, list[str] | None]] = []
    seen_flags: list[tuple[str, list[str]]] = []
    for task, scan in _audit_tasks(rows, root, dumps, _effective_workers(workers, dumps)):
        task.eval_attempts.eval_refusal = refusals.get(task.instance_id)
        if task.eval_attempts.eval_refusal is not None:
            run_eval.eval_refusals[task.instance_id] = task.eval_attempts.eval_refusal
        report.tasks.append(task)
        if task.instance_id in db_evidence:  # the task database between the phases (audit/taskdb.py)
            diff = read_task_diff(root, db_evidence[task.instance_id].name[: -len(layout.TASKDB_SUFFIX)])
            if diff is not None:
                task.task_db = account_task_db(diff, task.activity.mcp_by_server, task.findings_by_reason, pg)
                if task.task_db.for_review:
                    report.task_db_for_review.append(task.instance_id)
        ledger_flags.append(
            (task.instance_id, None if task.ledger_tampering is None else [t.kind for t in task.ledger_tampering])
        )
        seen_flags.append((task.instance_id, [k for k, n in task.tampering_seen_by_kind.items() for _ in range(n)]))
        _add_totals(totals, task, scan, findings_by_reason, gaps_by_reason)
        all_complete = all_complete and task.cost.complete
        if task.official_eval_status == OfficialEvalStatus.COMPLETED.value:
            run_eval.official_completed += 1
        elif task.official_eval_status == OfficialEvalStatus.DECLINED.value:
            run_eval.official_declined += 1
        diag = task.eval_attempts.diagnostic
        diag.host_agent_container_state = admissions.get(task.instance_id)
        if diag.present:
            run_eval.diagnostic_present += 1
            outcomes[diag.outcome or "unknown"] += 1
            run_eval.diagnostic_eligible += diag.eligible is True
            run_eval.diagnostic_checked += diag.outcome in CHECKED_OUTCOMES
            if diag.outcome in NOT_RUN_OUTCOMES:
                ineligible[diag.reason or "unknown"] += 1
            if diag.eligible is True and diag.host_agent_container_state != "absent":
                run_eval.diagnostic_without_host_absence.append(task.instance_id)
    totals.findings_by_reason = dict(sorted(findings_by_reason.items()))
    totals.gaps_by_reason = dict(sorted(gaps_by_reason.items()))
    totals.cost_known_usd = round(totals.cost_known_usd, 9)
    totals.cost_complete = bool(report.tasks) and all_complete
    run_eval.diagnostic_outcomes = dict(sorted(outcomes.items()))
    run_eval.diagnostic_ineligible_reasons = dict(sorted(ineligible.items()))
    report.task_count = len(report.tasks)
    report.totals = totals
    report.run_gaps = run_gaps
    report.eval_attempts = run_eval
    report.tampering = Tampering(
        ledger=count_tampering(ledger_flags), seen=count_tampering(seen_flags), outside_task_dumps=outside
    )
    return report


# ---------------------------------------------------------------- parallel scanning

PARALLEL_MIN_BYTES = 32 << 20  # below this much agent log, starting worker processes costs more


def _dump_log_bytes(dumps: dict[str, Path], stop_at: int) -> int:
    """Bytes of the dumps' agent logs, counted until `stop_at` is reached (a size estimate)."""
    total = 0
    for dump in dumps.values():
        for name, _ in LOG_SCANNERS:
            try:  # lstat: a link's target is never looked at
                total += os.lstat(os.path.join(dump, "ouroboros", name)).st_size
            except OSError:
                continue
        if total >= stop_at:
            break
    return total


def _effective_workers(workers: int | None, dumps: dict[str, Path]) -> int:
    """How many processes scan: 1 for small runs and inside a process with other threads.

    Workers are forked. Forking a threaded process (the end-of-run audit inside `run`) could copy
    a lock another thread holds, and spawning would re-run the CLI (its __main__ is unguarded).
    """
    wanted = (os.cpu_count() or 1) if workers is None else workers
    if wanted <= 1 or len(dumps) < 2 or threading.active_count() > 1:
        return 1
    if _dump_log_bytes(dumps, PARALLEL_MIN_BYTES) < PARALLEL_MIN_BYTES:
        return 1
    return min(wanted, len(dumps))


def _audit_batch(job: tuple[list[dict[str, Any]], Path, dict[str, Path]]) -> list[tuple[TaskAudit, Scanned]]:
    rows, root, dumps = job
    return [audit_task_with_scan(row, root, dumps) for row in rows]


def _handoffs(rows: list[Any], workers: int) -> Iterator[list[Any]]:
    """The rows in consecutive batches, each half the remaining work's share per worker (at least
    one row): few results to send early, small batches at the end so no worker waits long for
    another."""
    start = 0
    while start < len(rows):
        size = max(1, (len(rows) - start) // (2 * workers))
        yield rows[start : start + size]
        start += size


def _audit_tasks(
    rows: Iterator[dict[str, Any]], root: Path, dumps: dict[str, Path], workers: int
) -> Iterator[tuple[TaskAudit, Scanned]]:
    """(TaskAudit, Scanned) per ledger row, in ledger order, scanned by `workers` processes."""
    if workers <= 1:
        for row in rows:
            yield audit_task_with_scan(row, root, dumps)
        return
    jobs = [(batch, root, dumps) for batch in _handoffs(list(rows), workers)]
    for results in forked_map(_audit_batch, jobs, workers):  # single-threaded here: see _effective_workers
        yield from results


def _add_totals(totals: Totals, task: TaskAudit, scan: Scanned, findings: Counter, gaps: Counter) -> None:
    activity = task.activity
    totals.usage_records += activity.usage_records
    totals.token_bearing_usage_records += activity.token_bearing_usage_records
    totals.prompt_tokens += activity.prompt_tokens
    totals.completion_tokens += activity.completion_tokens
    totals.cached_tokens += activity.cached_tokens
    totals.tool_calls += activity.tool_calls
    totals.mcp_calls += activity.mcp_calls
    totals.mcp_error_calls += activity.mcp_error_calls
    totals.cost_known_usd += task.cost.known_usd
    totals.findings += task.findings_total
    totals.tasks_with_findings += task.findings_total > 0
    totals.gaps += task.gaps_total
    totals.tasks_with_gaps += task.gaps_total > 0
    totals.files_scanned += scan.files
    totals.bytes_scanned += scan.bytes
    totals.lines_scanned += scan.lines
    gaps.update(task.gaps_by_reason)
    findings.update(task.findings_by_reason)
