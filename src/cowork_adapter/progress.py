"""Live progress of a run: runner artifacts become events, the ledger and monitor.json follow.

Only what changed since the last refresh is turned into events; the ledger rebuild reuses one
IndexContext. A failed ledger or monitor write never stops the run: it is reported on stderr as
`cowork_diagnostic_write_failed`, counted, and disclosed in monitor.json.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import EventLog
from .ledger import IndexContext, build_index, write_index
from .manifest import atomic_write_text
from .schemas.ledger import TaskRow
from .schemas.monitor import Monitor, WriteFailure
from .vocab import EventKind, TaskStatus


def report_write_failure(failures: dict[str, WriteFailure], artifact: str, exc: BaseException) -> None:
    error = f"{type(exc).__name__}: {exc}"[:300]
    previous = failures.get(artifact)
    failures[artifact] = WriteFailure(count=(previous.count if previous else 0) + 1, error=error)
    print(json.dumps({"event": "cowork_diagnostic_write_failed", "artifact": artifact, "error": error}),
          file=sys.stderr, flush=True)


@dataclass
class RunProgress:
    run_root: Path
    events: EventLog
    failures: dict[str, WriteFailure] = field(default_factory=dict)
    rows: list[TaskRow] = field(default_factory=list)
    _ctx: IndexContext | None = None
    _started: set[str] = field(default_factory=set)
    _finished: set[str] = field(default_factory=set)
    _live: bool = True

    def _context(self) -> IndexContext:
        if self._ctx is None:
            self._ctx = IndexContext.load(self.run_root)
        else:
            self._ctx.refresh()
        return self._ctx

    def refresh(self, *, live: bool, interruption_cause: str) -> list[TaskRow]:
        """Emit events for newly started/finished tasks, rebuild and write the ledger."""
        self._live = live
        ctx = self._context()
        for task, source in sorted(ctx.custody.items()):
            if task not in self._started:
                self._started.add(task)
                self._event(EventKind.TASK_STARTED, task=task, runner_id=source)
        for task, row in sorted(ctx.runner_rows.items()):
            if task not in self._finished:
                self._finished.add(task)
                self._event(EventKind.TASK_FINISHED, task=task, status=row.status, eval_pass=row.eval_pass,
                            duration_s=row.duration_s)
        self.rows = build_index(self.run_root, live=live, interruption_cause=interruption_cause, ctx=ctx)
        try:
            write_index(self.run_root, self.rows)
        except OSError as exc:
            report_write_failure(self.failures, "result_index.jsonl", exc)
        return self.rows

    def counts(self) -> dict[str, int]:
        """Tallies for monitor.json. A provisional row (a task in flight, or waiting for its verdict)
        is not yet a failure: it counts as running until its row settles."""
        final = Counter(row.status.value for row in self.rows if not row.provisional)
        return {
            "selected": len(self.rows),
            "done": len(self._finished),
            "passed": final[TaskStatus.PASSED.value],
            "failed": final[TaskStatus.FAILED.value],
            "agent_failed": final[TaskStatus.AGENT_FAILED.value],
            "infra_failed": final[TaskStatus.INFRA_FAILED.value],
            "not_attempted": final[TaskStatus.NOT_ATTEMPTED.value],
            "environment_blocked": final[TaskStatus.ENVIRONMENT_BLOCKED.value],
            # After the run nothing is running: a started task without a runner row is interrupted.
            "running": max(0, len(self._started) - len(self._finished)) if self._live else 0,
        }

    def write_monitor(self, monitor: Monitor) -> None:
        monitor.diagnostic_write_failures = dict(self.failures)
        try:
            atomic_write_text(self.run_root / "monitor.json", monitor.model_dump_json(by_alias=True, indent=2) + "\n")
        except OSError as exc:
            report_write_failure(self.failures, "monitor.json", exc)

    def _event(self, kind: EventKind, **payload: Any) -> None:
        record_event(self.events, self.failures, kind, **payload)


def record_event(events: EventLog, failures: dict[str, WriteFailure], kind: EventKind | str, **payload: Any) -> None:
    """Append one event; a failed append is a disclosed diagnostic, never a stop."""
    try:
        events.append(kind, **payload)
    except OSError as exc:
        report_write_failure(failures, "events.jsonl", exc)

