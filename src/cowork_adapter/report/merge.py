"""Load runs with their recovery ancestry and merge their ledgers into one scored index.

Per task: the latest settled attempt wins (passed/failed/agent_failed); otherwise the latest
infra_failed or environment_blocked row; otherwise the latest not_attempted row. Every merged
row names the run root of its attempt. Runs of different configuration, seed, benchmark or
image are never mixed (Refusal, stage "report").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..errors import Refusal
from ..runroot.events import parse_ts, read_events
from ..runroot.identity import identity_difference
from ..runroot.layout import RunRoot
from ..runroot.manifest import read_manifest
from ..schemas.audit import AuditReport, audit_path_to_read, read_launcher_audit
from ..schemas.events import MeterReading
from ..schemas.ledger import TaskRow, read_index
from ..schemas.manifest import RunManifest
from ..schemas.monitor import Monitor
from ..schemas.record import RecordInvalid, decode
from ..vocab import TaskStatus

STAGE = "report"


@dataclass
class RunRecord:
    root: str
    manifest: RunManifest
    rows: list[TaskRow]
    monitor: Monitor | None = None
    meter: list[tuple[float, float]] = field(default_factory=list)  # (unix ts, run_spent_usd)
    audit: AuditReport | None = None
    # Why the launcher's audit file exists but could not be read (disclosed, never "no findings").
    audit_unreadable: str | None = None

    @property
    def order_key(self) -> tuple[int, str]:
        return self.manifest.selection.resume_generation, self.manifest.created_at

    def run_spent_usd(self) -> float | None:
        """The run's key-meter spend: the final monitor figure, else the last meter reading."""
        if self.monitor is not None and self.monitor.spending.run_spent_usd is not None:
            return self.monitor.spending.run_spent_usd
        return self.meter[-1][1] if self.meter else None


@dataclass
class MergedRow:
    row: TaskRow
    provenance: str  # run root of the attempt this row reports


def _read_monitor(path: Path) -> Monitor | None:
    """The run's monitor.json, or None when absent or not a valid snapshot (the meter series stands in)."""
    try:
        return decode(path.read_bytes(), Monitor)
    except (OSError, RecordInvalid):
        return None


def _meter_series(root: Path, figure: str = "run_spent_usd") -> list[tuple[float, float]]:
    """(unix ts, the reading's `figure`): the run's spend, or ("usage") the key meter's own usage."""
    points: list[tuple[float, float]] = []
    events, _ = read_events(RunRoot(root).events)  # a line that is no valid event draws nothing
    for event in events:
        ts = parse_ts(event.ts)
        value = getattr(event, figure, None) if isinstance(event, MeterReading) else None
        if ts is not None and value is not None:
            points.append((ts, value))
    points.sort()
    return points


def meter_usage_series(root: str) -> list[tuple[float, float]]:
    """The key meter's usage at each accepted reading of the run (a campaign plots its delta from them)."""
    return _meter_series(Path(root), "usage")


def _read_audit(root: Path) -> tuple[AuditReport | None, str | None]:
    """(the launcher's audit of the run or None, why its file could not be read or None)."""
    try:
        return read_launcher_audit(root), None
    except OSError as exc:
        return None, f"{audit_path_to_read(root)} could not be read ({exc.strerror or type(exc).__name__})"
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, f"{audit_path_to_read(root)} is not an audit report ({exc})"


def load_run(root: str) -> RunRecord:
    path = Path(root)
    ledger = RunRoot(path).result_index
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError) as exc:
        raise Refusal(STAGE, f"The run manifest of {root} is missing or unreadable ({type(exc).__name__}).") from None
    if manifest.dry_run and not ledger.exists():
        # A dry run records its configuration and image and runs no task: there is no score to report.
        raise Refusal(
            STAGE, f"Run {root} was a dry run: no task ran and it has no ledger, so there is nothing to report."
        )
    try:
        rows = read_index(ledger)
    except OSError as exc:
        raise Refusal(
            STAGE,
            f"The ledger {ledger} cannot be read ({exc.strerror or type(exc).__name__}); "
            "a run whose launcher died gets its final ledger from `cowork-adapter clear`.",
        ) from None
    except ValueError as exc:
        raise Refusal(
            STAGE,
            f"The ledger {ledger} is not a valid ledger ({exc}); "
            "a run whose launcher died gets its final ledger from `cowork-adapter clear`.",
        ) from None
    audit, audit_unreadable = _read_audit(path)
    return RunRecord(
        root=root,
        manifest=manifest,
        rows=rows,
        monitor=_read_monitor(RunRoot(path).monitor),
        meter=_meter_series(path),
        audit=audit,
        audit_unreadable=audit_unreadable,
    )


def load_runs(roots: list[Path]) -> list[RunRecord]:
    """Every given run and every ancestor, oldest first; refuses incompatible identities."""
    pending = [str(Path(r).resolve()) for r in roots]
    runs: dict[str, RunRecord] = {}
    while pending:
        root = pending.pop(0)
        if root in runs:
            continue
        run = load_run(root)
        runs[root] = run
        pending.extend(str(Path(p).resolve()) for p in run.manifest.selection.resume_from)
    first = runs[str(Path(roots[0]).resolve())].manifest
    for root, run in runs.items():
        diff = identity_difference(
            run.manifest,
            applied_config=first.applied_config,
            seed_head=first.seed.head if first.seed else None,
            bench_commit=first.bench.commit if first.bench else None,
            image_id=first.image.id if first.image else None,
        )
        if diff is not None:
            raise Refusal(
                STAGE,
                f"Run {root} differs in {diff} from {first.run_root}, and results of different configurations are "
                "never merged.",
            )
    return sorted(runs.values(), key=lambda r: r.order_key)


def _rank(status: TaskStatus) -> int:
    if status.settled:
        return 2
    if status in (TaskStatus.INFRA_FAILED, TaskStatus.ENVIRONMENT_BLOCKED):
        return 1
    return 0


def denominator(runs: list[RunRecord]) -> list[str]:
    """The union of every run's selection, in first-seen order (newest run first)."""
    seen: dict[str, None] = {}
    for run in reversed(runs):
        sel = run.manifest.selection
        for task in sel.selection_task_ids or sel.task_ids:
            seen.setdefault(task, None)
        for row in run.rows:
            seen.setdefault(row.instance_id, None)
    return list(seen)


def merge_rows(runs: list[RunRecord]) -> dict[str, MergedRow]:
    """task → its scored row across `runs` (oldest first); later runs win within a rank."""
    position = {run.root: i for i, run in enumerate(runs)}
    best: dict[str, tuple[tuple[int, int], MergedRow]] = {}
    for i, run in enumerate(runs):
        for row in run.rows:
            origin = row.attempt_run_root or run.root
            # A carried row counts from its own attempt's run, not the run that carried it.
            when = position.get(str(Path(origin).resolve()) if row.attempt_run_root else run.root, i)
            key = (_rank(row.status), when)
            current = best.get(row.instance_id)
            if current is None or key >= current[0]:
                best[row.instance_id] = (key, MergedRow(row=row, provenance=origin))
    return {task: merged for task, (_, merged) in best.items()}


def own_attempts(run: RunRecord) -> list[TaskRow]:
    """Rows of attempts made by `run` itself (not carried from an ancestor, not unattempted)."""
    return [
        r
        for r in run.rows
        if r.status is not TaskStatus.NOT_ATTEMPTED
        and (r.attempt_run_root is None or str(Path(r.attempt_run_root).resolve()) == run.root)
    ]
