"""One task's audit: its dump's logs scanned, its official and diagnostic records read, its row's facts.

`audit_task_with_scan(row, root, dumps)` is the unit the run's workers call (audit/run.py): it opens the
task's dump once without following a link, flags what the listing shows (links, FIFOs, devices, planted
records), scans the engine's logs (audit/scan.py) and reads the eval attempts' records, and answers the
TaskAudit with what the run's totals need of the scan. It never raises for what the agent left.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from ..container import safefile
from ..container.vocab import DIAGNOSTIC_LOG_PREFIX
from ..runroot.dumps import dumps_folder_of
from ..schemas.audit import (
    Activity,
    CapabilityOmissions,
    Cost,
    DiagnosticFact,
    Finding,
    Gap,
    LedgerTamper,
    LogRef,
    McpServerActivity,
    ReceiptFact,
    TamperSeen,
    TaskAudit,
    TaskEvalAttempts,
)
from ..vocab import AuditGapReason, OfficialEvalStatus, TamperKind
from .inputs import SMALL_JSON_LIMIT, is_record_name, is_unsafe, json_of, rel_path, resolve_dump
from .read import Folder, UnsafeEntry
from .scan import LOG_SCANNERS, TaskScan

# The name the eval phase gives an official record it found before its first entry (set aside as
# evidence): container.evalphase.PLANTED_PREFIX, spelled here because importing the eval phase
# (asyncio and all) would double the audit command's start-up; a unit test checks they agree.
PLANTED_PREFIX = "planted-"


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
        return json_of(safefile.read_at(self.dump.fd, name, cap=SMALL_JSON_LIMIT))

    def with_prefix(self, prefix: str) -> list[str]:
        return [name for name in self.names if name.startswith(prefix)]


def _record_gap(scan: TaskScan, rel: str, cause: str | None) -> None:
    """An official record that could not be had: an unsafe entry (a tampering flag) or unreadable."""
    reason = AuditGapReason.UNSAFE_ENTRY if is_unsafe(cause) else AuditGapReason.UNREADABLE_RECORD
    scan.gap(reason, rel, detail=cause or "not_object")


def _eval_attempts(dump: Path, root: Path, scan: TaskScan, files: _DumpJson) -> TaskEvalAttempts:
    facts = TaskEvalAttempts()
    claim, cause = files.read("ouroboros_eval_claim.json")
    if cause != "absent":
        facts.claims = 1
        if cause is not None or not isinstance(claim, dict):
            _record_gap(scan, rel_path(dump / "ouroboros_eval_claim.json", root), cause)
    for name in files.with_prefix("ouroboros_eval_receipt-"):
        receipt, cause = files.read(name)
        attempt = name[len("ouroboros_eval_receipt-") : -len(".json")]
        if is_unsafe(cause):
            _record_gap(scan, rel_path(dump / name, root), cause)
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
        if is_unsafe(cause):
            _record_gap(scan, rel_path(dump / name, root), cause)
        if isinstance(value, dict):
            final = value
    if final is None:
        for name in reports:
            value, cause = files.read(name)
            if is_unsafe(cause):
                _record_gap(scan, rel_path(dump / name, root), cause)
            if isinstance(value, dict) and value.get("stage") == "final":
                final = value
    if final is not None:
        diag.outcome = str(final.get("outcome")) if final.get("outcome") is not None else None
        diag.reason = str(final.get("reason"))[:200] if final.get("reason") is not None else None
        diag.eligible = final.get("eligible") if isinstance(final.get("eligible"), bool) else None
        code = final.get("checker_exit_code")
        diag.checker_exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        diag.custody = str_or_none(final.get("custody"))
        if isinstance(claim, dict) and final.get("attempt_id") is not None:
            diag.linked = final.get("attempt_id") == claim.get("attempt_id")
    elif diag.present:
        diag.outcome = "unknown"
    facts.diagnostic = diag
    return facts


def _scan_logs(dump: Path, root: Path, scan: TaskScan, top: Folder) -> None:
    logs = os.path.join(dump, "ouroboros")  # strings: Path arithmetic cost more than listing the dump
    rel_logs = os.path.join(rel_path(dump, root), "ouroboros")
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
        elif not records_allowed and is_record_name(name):
            scan.tamper(TamperKind.OUTSIDE_OWN_DUMP, os.path.join(rel_dir, name), kind)


def _official_pass(row: dict[str, Any]) -> bool | None:
    if row.get("official_eval_status") != OfficialEvalStatus.COMPLETED.value:
        return None
    receipt = row.get("official_receipt")
    value = receipt.get("pass") if isinstance(receipt, dict) else None
    return value if isinstance(value, bool) else None


def str_or_none(value: Any) -> str | None:
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
        ledger_status=str_or_none(row.get("status")),
        reason_code=str_or_none(row.get("reason_code")),
        official_eval_status=str_or_none(row.get("official_eval_status")),
        official_pass=_official_pass(row),
        task_dump=rel_path(dump, root) if dump else None,
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
    dump = resolve_dump(row, root, dumps)
    attempts = TaskEvalAttempts()
    fd, kind = _open_dump(dump)
    if fd is None and kind in (safefile.ABSENT, safefile.UNREADABLE):
        scan.gap(
            AuditGapReason.MISSING_TASK_DUMP,
            rel_path(dump, root) if dump else None,
            detail=kind if kind == safefile.UNREADABLE else None,
        )
    elif fd is None:  # a link (to anywhere), FIFO, file...: never followed or read
        scan.gap(AuditGapReason.UNSAFE_ENTRY, rel_path(dump, root) if dump else None, detail=kind)
    elif dump is not None:  # always, here: an open folder has a path
        try:
            top = Folder(fd, safefile.kinds_at(fd))
            _flag_dump_entries(scan, rel_path(dump, root), top.kinds, records_allowed=True)
            _scan_logs(dump, root, scan, top)
            attempts = _eval_attempts(dump, root, scan, _DumpJson(top))
        finally:
            os.close(fd)
    return _task_report(row, root, dump, scan, attempts), Scanned(scan.files, scan.bytes, scan.lines)
