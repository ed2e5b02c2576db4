"""Auditing a run root: its records and ledger read, each task's dump scanned, totals summed.

Read-only over the run root. Streams every log with bounded memory (see audit.read). Never changes
a verdict: ledger status, official status and pass are copied from result_index.jsonl as evidence.

build_audit(run_dir, workers) -> AuditReport: a pure read; raises Refusal if the directory is no run.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from ..container import safefile
from ..container.vocab import DIAGNOSTIC_LOG_PREFIX
from ..errors import Refusal
from ..runroot import layout
from ..runroot.dumps import dumps_folder_of
from ..runroot.layout import RELATIVE_DUMPS, RunRoot
from ..schemas.audit import (
    Activity,
    AuditReport,
    CapabilityOmissions,
    Cost,
    DiagnosticFact,
    Finding,
    Gap,
    LedgerTamper,
    LogRef,
    McpServerActivity,
    ReceiptFact,
    RunEvalAttempts,
    Tampering,
    TamperSeen,
    TaskAudit,
    TaskEvalAttempts,
    Totals,
)
from ..score.tampering import count_tampering
from ..score.taskdb import read_task_diff
from ..vocab import AuditGapReason, OfficialEvalStatus, TamperKind
from .forked import forked_map
from .read import Folder, UnsafeEntry, iter_blocks
from .scan import LOG_SCANNERS, TaskScan
from .taskdb import account as account_task_db
from .taskdb import bench_of, pg_servers

SMALL_JSON_LIMIT = 16 << 20  # manifests, claims and receipts are small; a bigger one is unreadable
DUMPS_DIR = RELATIVE_DUMPS
DUMP_PREFIX = "SingleUserTurn-"
# Official and diagnostic records the host reads from a task's dump (its top level only), as
# container.protocol names them (spelled here: importing it cost the audit's start-up a fifth;
# a unit test checks they agree).
RECORD_NAMES = frozenset({"eval_res.json", "ouroboros_eval_claim.json", "ouroboros_diagnostic_claim.json"})
RECORD_PREFIXES = ("ouroboros_eval_receipt-", "ouroboros_diagnostic_receipt-", "ouroboros_diagnostic_report-")
# The name the eval phase gives an official record it found before its first entry (set aside as
# evidence): container.evalphase.PLANTED_PREFIX, spelled here because importing the eval phase
# (asyncio and all) would double the audit command's start-up; a unit test checks they agree.
PLANTED_PREFIX = "planted-"
CHECKED_OUTCOMES = frozenset({"checks_passed", "checks_failed"})
NOT_RUN_OUTCOMES = frozenset({"ineligible", "unavailable"})  # diagnostics that never ran a checker


# ---------------------------------------------------------------- small readers (never raise)


def _read_small_json(path: Path | str) -> tuple[Any, str | None]:
    """(value, None) or (None, cause): 'absent', 'json_error', 'os_error:<E>', or what stood
    there instead of a regular file within the cap (a safefile kind: 'too_large', 'symlink',
    'fifo', 'device', 'socket', 'directory'...). Read through container.safefile (the last
    component not followed, no FIFO or device opened); a dump's records are read by _DumpJson."""
    return _json_of(safefile.read_bytes(os.fspath(path), cap=SMALL_JSON_LIMIT))


def _json_of(found: safefile.Read) -> tuple[Any, str | None]:
    """_read_small_json's answer for what a safefile read found."""
    if found.kind == safefile.ABSENT:
        return None, "absent"
    if found.data is None:
        return None, found.cause if found.kind == safefile.UNREADABLE and found.cause else found.kind
    try:
        return safefile.loads(found.data), None  # depth, size and encoding bounded before parsing
    except ValueError:
        return None, "json_error"


def _is_unsafe(cause: str | None) -> bool:
    return cause in safefile.UNSAFE_KINDS


def _run_record(
    root: Path, name: str, missing: AuditGapReason, run_gaps: list[Gap]
) -> tuple[dict[str, Any], str | None]:
    """A run-level JSON record as a dict ({} when it cannot be had) and _read_small_json's cause;
    an absent or unreadable record is a run gap."""
    value, cause = _read_small_json(root / name)
    if cause is not None:
        reason = missing if cause == "absent" else AuditGapReason.UNREADABLE_RECORD
        run_gaps.append(Gap(reason=reason, file=name, detail=cause))
    return (value if isinstance(value, dict) else {}), cause


def _read_first_line(path: Path, limit: int = 200) -> str | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(4096)
    except OSError:
        return None
    return data.decode("utf-8", "replace").strip().splitlines()[0][:limit] if data.strip() else ""


def _rel(path: Path, root: Path) -> str:
    """`path` relative to the run root: a string cut when it lies inside (the usual case, and
    os.path.relpath was a tenth of a large audit), relpath otherwise."""
    text, base = str(path), str(root)
    if text.startswith(base + os.sep):
        return text[len(base) + 1 :]
    return os.path.relpath(path, root)


# ---------------------------------------------------------------- run-level inputs


def _ledger_rows(root: Path, run_gaps: list[Gap]) -> Iterator[dict[str, Any]] | None:
    """Rows of result_index.jsonl as dicts, streamed; None when the file is absent."""
    path = RunRoot(root).result_index
    if not path.is_file():
        return None

    def rows() -> Iterator[dict[str, Any]]:
        scan = TaskScan()
        try:
            for block in iter_blocks(path, scan, layout.RESULT_INDEX):
                for offset, line in enumerate(block.data.split(b"\n")):
                    if not line.strip():
                        continue
                    try:
                        row = safefile.loads(line)
                    except ValueError:
                        row = None
                    if isinstance(row, dict) and isinstance(row.get("instance_id"), str):
                        yield row
                    else:
                        run_gaps.append(
                            Gap(
                                reason=AuditGapReason.MALFORMED_LINE,
                                file=layout.RESULT_INDEX,
                                line=block.first + offset,
                            )
                        )
        except OSError as exc:
            run_gaps.append(
                Gap(reason=AuditGapReason.UNREADABLE_LOG, file=layout.RESULT_INDEX, detail=type(exc).__name__)
            )
        run_gaps.extend(Gap(**g) for g in scan.gaps)  # oversized ledger lines

    return rows()


def _dump_index(root: Path, outside: list[TamperSeen] | None = None) -> dict[str, Path]:
    """instance_id -> dump path, from bench/dumps/<short>/SingleUserTurn-<task> (first wins),
    listed without following a link (a task's entry that is no directory stays in the index:
    its audit names what stands there). What the listing shows above every task's dump that is
    a link, FIFO, device or socket, or named like an official record, goes to `outside`."""
    found: dict[str, Path] = {}
    base = root / DUMPS_DIR
    kind, shorts = safefile.scan_dir(str(base))
    if kind != safefile.DIRECTORY:
        return found
    below = str(base)
    for short in shorts:
        if short.kind != safefile.DIRECTORY:
            _flag_entry(outside, root, base / short.name, short)
            continue
        _, entries = safefile.scan_dir(str(base / short.name), below=below)
        for entry in entries:
            if entry.name.startswith(DUMP_PREFIX):
                found.setdefault(entry.name[len(DUMP_PREFIX) :], base / short.name / entry.name)
            else:
                _flag_entry(outside, root, base / short.name / entry.name, entry)
    return found


def _is_record_name(name: str) -> bool:
    """A name the host reads as an official or diagnostic record of a task's dump."""
    return name in RECORD_NAMES or name.startswith(RECORD_PREFIXES)


def _flag_entry(seen: list[TamperSeen] | None, root: Path, path: Path, entry: safefile.Entry) -> None:
    """A dumps-tree entry outside any task's own dump: a link/FIFO/device/socket, or a file named
    like an official record there (no evaluator writes one there), is flagged; others pass."""
    if seen is None:
        return
    if entry.kind in safefile.UNSAFE_KINDS:
        seen.append(TamperSeen(kind=TamperKind.UNSAFE_ENTRY, file=_rel(path, root), detail=entry.kind))
    elif _is_record_name(entry.name):
        seen.append(TamperSeen(kind=TamperKind.OUTSIDE_OWN_DUMP, file=_rel(path, root), detail=entry.kind))


def _evidence_by_task(root: Path, suffix: str) -> dict[str, Path]:
    """task name -> the shim's `<runner-id><suffix>` evidence file, joined through `<runner-id>.task`."""
    evidence = RunRoot(root).evidence
    try:
        names = sorted(os.listdir(evidence))
    except OSError:
        return {}
    out: dict[str, Path] = {}
    for name in names:
        if not name.endswith(suffix):
            continue
        task_dir = _read_first_line(evidence / f"{name[: -len(suffix)]}.task", limit=4096)
        if task_dir:
            out[Path(task_dir.rstrip("/")).name] = evidence / name
    return out


def _eval_refusals(root: Path) -> dict[str, str]:
    """task name -> the shim's refusal cause for that task's eval container."""
    return {
        task: _read_first_line(path) or "unknown" for task, path in _evidence_by_task(root, ".eval_refused").items()
    }


def _eval_admissions(root: Path) -> dict[str, str]:
    """task name -> the shim's last recorded agent container state at that task's eval exec."""
    return {task: _last_agent_state(path) for task, path in _evidence_by_task(root, ".eval_admission").items()}


def _last_agent_state(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        record = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return "unknown"
    state = record.get("agent_container_state") if isinstance(record, dict) else None
    return state if isinstance(state, str) else "unknown"


def _resolve_dump(row: dict[str, Any], root: Path, dumps: dict[str, Path]) -> Path | None:
    stated = row.get("task_dump")
    if not isinstance(stated, str):
        paths = row.get("output_paths")
        stated = paths.get("task_dump") if isinstance(paths, dict) else None
    if isinstance(stated, str) and stated:
        path = Path(stated)
        if not path.is_absolute():
            base = row.get("attempt_run_root")
            path = (Path(base) if isinstance(base, str) and base else root) / path
        return path
    return dumps.get(row["instance_id"])


# ---------------------------------------------------------------- per task


class _DumpJson:
    """The dump's `*.json` files from one listing of the dump, opened once without following a
    link: read a named one, or list those with a prefix. A name the listing lacks reads as
    absent without a system call; one that is no regular file reads as its kind, never opened."""

    def __init__(self, dump: Folder) -> None:
        self.dump = dump
        self.names = sorted(name for name in dump.kinds if name.endswith(".json"))
        # ouroboros_diagnostic_log-<attempt>.log, counted from the same listing
        self.diagnostic_logs = sum(
            1 for name in dump.kinds if name.startswith(DIAGNOSTIC_LOG_PREFIX) and name.endswith(".log")
        )

    def read(self, name: str) -> tuple[Any, str | None]:
        kind = self.dump.kinds.get(name)
        if kind is None:
            return None, "absent"
        if kind != safefile.REGULAR:
            return None, kind
        return _json_of(safefile.read_at(self.dump.fd, name, cap=SMALL_JSON_LIMIT))

    def with_prefix(self, prefix: str) -> list[str]:
        return [name for name in self.names if name.startswith(prefix)]


def _record_gap(scan: TaskScan, rel: str, cause: str | None) -> None:
    """An official record that could not be had: an unsafe entry (a tampering flag) or unreadable."""
    reason = AuditGapReason.UNSAFE_ENTRY if _is_unsafe(cause) else AuditGapReason.UNREADABLE_RECORD
    scan.gap(reason, rel, detail=cause or "not_object")


def _eval_attempts(dump: Path, root: Path, scan: TaskScan, files: _DumpJson) -> TaskEvalAttempts:
    facts = TaskEvalAttempts()
    claim, cause = files.read("ouroboros_eval_claim.json")
    if cause != "absent":
        facts.claims = 1
        if cause is not None or not isinstance(claim, dict):
            _record_gap(scan, _rel(dump / "ouroboros_eval_claim.json", root), cause)
    for name in files.with_prefix("ouroboros_eval_receipt-"):
        receipt, cause = files.read(name)
        attempt = name[len("ouroboros_eval_receipt-") : -len(".json")]
        if _is_unsafe(cause):
            _record_gap(scan, _rel(dump / name, root), cause)
        if cause is not None or not isinstance(receipt, dict):
            facts.receipts.append(ReceiptFact(attempt_id=attempt, state="invalid", cause=cause or "not_object"))
            continue
        official_run = receipt.get("official_run")
        stated_cause = receipt.get("cause")
        facts.receipts.append(
            ReceiptFact(
                attempt_id=str(receipt.get("attempt_id") or attempt),
                official_run=official_run if isinstance(official_run, bool) else None,
                cause=str(stated_cause)[:200] if stated_cause is not None else None,
                state="terminal",
            )
        )
    diag = DiagnosticFact()
    diag_claim, cause = files.read("ouroboros_diagnostic_claim.json")
    diag.present = cause != "absent"
    receipts = files.with_prefix("ouroboros_diagnostic_receipt-")
    reports = files.with_prefix("ouroboros_diagnostic_report-")
    diag.receipts, diag.reports, diag.logs = len(receipts), len(reports), files.diagnostic_logs
    diag.present = diag.present or bool(receipts or reports or files.diagnostic_logs)
    final: dict[str, Any] | None = None
    for name in receipts:  # the receipt is the parent's verdict on the diagnostic
        value, cause = files.read(name)
        if _is_unsafe(cause):
            _record_gap(scan, _rel(dump / name, root), cause)
        if isinstance(value, dict):
            final = value
    if final is None:
        for name in reports:
            value, cause = files.read(name)
            if _is_unsafe(cause):
                _record_gap(scan, _rel(dump / name, root), cause)
            if isinstance(value, dict) and value.get("stage") == "final":
                final = value
    if final is not None:
        diag.outcome = str(final.get("outcome")) if final.get("outcome") is not None else None
        diag.reason = str(final.get("reason"))[:200] if final.get("reason") is not None else None
        diag.eligible = final.get("eligible") if isinstance(final.get("eligible"), bool) else None
        code = final.get("checker_exit_code")
        diag.checker_exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        diag.custody = _str_or_none(final.get("custody"))
        if isinstance(claim, dict) and final.get("attempt_id") is not None:
            diag.linked = final.get("attempt_id") == claim.get("attempt_id")
    elif diag.present:
        diag.outcome = "unknown"
    facts.diagnostic = diag
    return facts


def _scan_logs(dump: Path, root: Path, scan: TaskScan, top: Folder) -> None:
    logs = os.path.join(dump, "ouroboros")  # strings: Path arithmetic cost more than listing the dump
    rel_logs = os.path.join(_rel(dump, root), "ouroboros")
    fd, _, _ = (
        safefile.open_at(top.fd, "ouroboros", directory=True)
        if top.kinds.get("ouroboros") == safefile.DIRECTORY
        else (None, "", "")
    )
    if fd is None:  # absent, or a link/file in its place (flagged from the dump's listing)
        for name, _ in LOG_SCANNERS:
            scan.gap(AuditGapReason.MISSING_LOG, os.path.join(rel_logs, name))
        return
    try:
        folder = Folder(fd, safefile.kinds_at(fd))
        _flag_dump_entries(scan, rel_logs, folder.kinds, records_allowed=False)
        for name, scanner in LOG_SCANNERS:
            rel = os.path.join(rel_logs, name)
            if folder.kinds.get(name, safefile.DIRECTORY) == safefile.DIRECTORY:
                scan.gap(AuditGapReason.MISSING_LOG, rel)
                continue
            try:  # the listing saw what stood there; the open itself never follows a link or blocks
                scanner(os.path.join(logs, name), rel, scan, folder)
            except (FileNotFoundError, IsADirectoryError):  # raised by the open, before any byte counted
                scan.gap(AuditGapReason.MISSING_LOG, rel)
                continue
            except UnsafeEntry as exc:  # a link, FIFO, device, socket or over-cap log: never read
                scan.gap(AuditGapReason.UNSAFE_ENTRY, rel, detail=exc.detail)
                continue
            except OSError as exc:  # an unreadable log is a gap, never fatal
                scan.gap(AuditGapReason.UNREADABLE_LOG, rel, detail=type(exc).__name__)
            scan.files += 1
    finally:
        os.close(fd)


def _flag_dump_entries(scan: TaskScan, rel_dir: str, kinds: dict[str, str], *, records_allowed: bool) -> None:
    """Flags from a listing inside a task's dump: every link, FIFO, device or socket (none is
    ever read), a record the eval phase set aside as planted, and (where no evaluator writes
    one: `records_allowed` false) a file named like an official record."""
    for name, kind in sorted(kinds.items()):
        if kind in safefile.UNSAFE_KINDS:
            scan.tamper(TamperKind.UNSAFE_ENTRY, os.path.join(rel_dir, name), kind)
        elif name.startswith(PLANTED_PREFIX):
            scan.tamper(TamperKind.PLANTED_BEFORE_EVAL, os.path.join(rel_dir, name), kind)
        elif not records_allowed and _is_record_name(name):
            scan.tamper(TamperKind.OUTSIDE_OWN_DUMP, os.path.join(rel_dir, name), kind)


def _official_pass(row: dict[str, Any]) -> bool | None:
    if row.get("official_eval_status") != OfficialEvalStatus.COMPLETED.value:
        return None
    receipt = row.get("official_receipt")
    value = receipt.get("pass") if isinstance(receipt, dict) else None
    return value if isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _task_report(
    row: dict[str, Any], root: Path, dump: Path | None, scan: TaskScan, attempts: TaskEvalAttempts
) -> TaskAudit:
    servers = {
        name: McpServerActivity(calls=s[0], errors=s[1], tools=dict(sorted(s[2].items())))
        for name, s in sorted(scan.mcp_servers.items())
    }
    complete = scan.usage_records > 0 and scan.cost_unknown == 0 and not scan.events_gap
    return TaskAudit(
        instance_id=row["instance_id"],
        ledger_status=_str_or_none(row.get("status")),
        reason_code=_str_or_none(row.get("reason_code")),
        official_eval_status=_str_or_none(row.get("official_eval_status")),
        official_pass=_official_pass(row),
        task_dump=_rel(dump, root) if dump else None,
        activity=Activity(
            usage_records=scan.usage_records,
            token_bearing_usage_records=scan.token_bearing,
            prompt_tokens=scan.prompt_tokens,
            completion_tokens=scan.completion_tokens,
            cached_tokens=scan.cached_tokens,
            tool_calls=scan.tool_calls,
            mcp_calls=scan.mcp_calls,
            mcp_error_calls=scan.mcp_errors,
            mcp_by_server=servers,
        ),
        model_activity_observed=scan.token_bearing > 0,
        cost=Cost(
            known_usd=round(scan.cost_known_usd, 9),
            unknown_records=scan.cost_unknown,
            estimated_records=scan.cost_estimated,
            complete=complete,
            source=scan.usage_source,
        ),
        models=list(scan.models),
        providers=list(scan.providers),
        response_providers=list(scan.response_providers),
        response_provider_coverage="observed_subset" if scan.response_providers else "unavailable",
        capability_omissions=CapabilityOmissions(
            count=scan.omissions, references=[LogRef(file=f, line=n) for f, n in scan.omission_refs]
        ),
        findings_total=scan.findings_total,
        findings_by_reason=dict(sorted(scan.findings_by_reason.items())),
        findings=[Finding(**f) for f in scan.findings],
        gaps_total=scan.gaps_total,
        gaps_by_reason=dict(sorted(scan.gaps_by_reason.items())),
        gaps=[Gap(**g) for g in scan.gaps],
        eval_attempts=attempts,
        ledger_tampering=_ledger_tampering(row.get("tampering")),
        tampering_seen=[TamperSeen(**t) for t in scan.tampering],
        tampering_seen_by_kind=dict(sorted(Counter(scan.tamper_kinds).items())),
    )


def _ledger_tampering(value: Any) -> list[LedgerTamper] | None:
    """The row's `tampering` as the row states it (None: written before the check)."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return [
        LedgerTamper(kind=str(item.get("kind"))[:100], detail=str(item.get("detail") or "")[:200])
        if isinstance(item, dict)
        else LedgerTamper(kind="unreadable_flag", detail=str(item)[:200])
        for item in items
    ]


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
    rows = _ledger_rows(root, run_gaps)
    manifest, manifest_cause = _run_record(root, layout.MANIFEST, AuditGapReason.MISSING_MANIFEST, run_gaps)
    if manifest_cause == "absent" and rows is None:
        raise Refusal(
            "audit",
            f"{run_dir} has neither {layout.MANIFEST} nor {layout.RESULT_INDEX}, so it cannot be read as a run.",
        )
    outside: list[TamperSeen] = []
    dumps = _dump_index(root, outside)
    if rows is None:
        # No ledger: audit what the manifest selected, else every dump found (documented fallback).
        run_gaps.append(Gap(reason=AuditGapReason.MISSING_RESULT_INDEX, file=layout.RESULT_INDEX))
        selection = manifest.get("selection")
        ids = selection.get("selection_task_ids") or selection.get("task_ids") if isinstance(selection, dict) else None
        ids = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else sorted(dumps)
        rows = iter({"instance_id": i} for i in ids)

    monitor, _ = _run_record(root, layout.MONITOR, AuditGapReason.MISSING_MONITOR, run_gaps)
    refusals = _eval_refusals(root)
    admissions = _eval_admissions(root)
    ineligible: Counter = Counter()

    report = AuditReport(generated_at=datetime.now(UTC).isoformat(), run_root=str(root))
    totals = Totals()
    findings_by_reason: Counter = Counter()
    gaps_by_reason: Counter = Counter()
    outcomes: Counter = Counter()
    run_eval = RunEvalAttempts(
        cleanup_proven=monitor.get("finished") is True,
        stop_reason=_str_or_none(monitor.get("stop_reason") or manifest.get("stop_reason")),
    )
    applied = manifest.get("applied_config")
    if isinstance(applied, dict):
        flag = applied.get("diagnostic_eval_on_truncation")
        run_eval.diagnostic_enabled = flag if isinstance(flag, bool) else False
    all_complete = True
    db_evidence = _evidence_by_task(root, layout.TASKDB_SUFFIX)
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


class Scanned(NamedTuple):
    """What the run's totals need of a task's scan besides its TaskAudit (all a worker sends back)."""

    files: int
    bytes: int
    lines: int


def _open_dump(dump: Path | None) -> tuple[int | None, str]:
    """(fd of the task's dump folder or None, what stands there), no link followed below the
    `dumps` folder (see dumps.dumps_folder_of): a link in place of the dump or of its `<short>`
    folder is named, never followed."""
    if dump is None:
        return None, safefile.ABSENT
    try:
        fd, kind, _ = safefile.open_nofollow(str(dump), below=dumps_folder_of(dump))
    except (OSError, ValueError):
        return None, safefile.UNREADABLE
    if fd is not None and kind != safefile.DIRECTORY:
        os.close(fd)
        return None, kind
    return fd, kind


def audit_task_with_scan(row: dict[str, Any], root: Path, dumps: dict[str, Path]) -> tuple[TaskAudit, Scanned]:
    scan = TaskScan()
    dump = _resolve_dump(row, root, dumps)
    attempts = TaskEvalAttempts()
    fd, kind = _open_dump(dump)
    if fd is None and kind in (safefile.ABSENT, safefile.UNREADABLE):
        scan.gap(
            AuditGapReason.MISSING_TASK_DUMP,
            _rel(dump, root) if dump else None,
            detail=kind if kind == safefile.UNREADABLE else None,
        )
    elif fd is None:  # a link (to anywhere), FIFO, file...: never followed or read
        scan.gap(AuditGapReason.UNSAFE_ENTRY, _rel(dump, root) if dump else None, detail=kind)
    elif dump is not None:  # always, here: an open folder has a path
        try:
            top = Folder(fd, safefile.kinds_at(fd))
            _flag_dump_entries(scan, _rel(dump, root), top.kinds, records_allowed=True)
            _scan_logs(dump, root, scan, top)
            attempts = _eval_attempts(dump, root, scan, _DumpJson(top))
        finally:
            os.close(fd)
    return _task_report(row, root, dump, scan, attempts), Scanned(scan.files, scan.bytes, scan.lines)


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
