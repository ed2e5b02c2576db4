"""Live progress of a run: runner artifacts become events, the ledger and monitor.json follow.

Only what changed since the last refresh is turned into events; the ledger rebuild reuses one
IndexContext. A failed ledger or monitor write never stops the run: it is reported on stderr as
`cowork_diagnostic_write_failed`, counted, and disclosed in monitor.json.

The ledger follows task settlement, not the meter: a small refresher thread re-reads the
changed dumps every ~2 s while the run is live (a new receipt settles its row within one tick),
whatever the supervisor loop is doing, and the launcher refreshes again after the runner exits,
after cleanup and after settlement. A launcher killed at any moment therefore leaves a ledger at
most one tick behind the receipts, and recovery rebuilds from the dumps anyway.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import replace_atomic
from ..runroot import layout
from ..runroot.dump_meter import DumpMeter, Over
from ..runroot.events import EventLog
from ..runroot.layout import RunRoot
from ..schemas.ledger import TaskRow
from ..schemas.monitor import Monitor, WriteFailure
from ..score.context import IndexContext
from ..score.ledger import build_index, write_index
from ..vocab import EventKind, TaskStatus


def report_write_failure(failures: dict[str, WriteFailure], artifact: str, exc: BaseException) -> None:
    error = f"{type(exc).__name__}: {exc}"[:300]
    previous = failures.get(artifact)
    failures[artifact] = WriteFailure(count=(previous.count if previous else 0) + 1, error=error)
    print(
        json.dumps({"event": "cowork_diagnostic_write_failed", "artifact": artifact, "error": error}),
        file=sys.stderr,
        flush=True,
    )


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
    # The refresher thread and the supervisor's publish both refresh: one at a time.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _written: list[TaskRow] | None = None
    _refresher: threading.Thread | None = None
    _halt: threading.Event = field(default_factory=threading.Event, repr=False)
    # The running tasks' dumps measured against their bounds on every live refresh (a budget of
    # entries per refresh), and what the run does with a task over one (run/dump_bounds.py).
    meter: DumpMeter | None = None
    on_over: Callable[[Over], None] | None = None

    def _context(self) -> IndexContext:
        if self._ctx is None:
            self._ctx = IndexContext.load(self.run_root)
        else:
            self._ctx.refresh()
        return self._ctx

    def refresh(self, *, live: bool, interruption_cause: str) -> list[TaskRow]:
        """Emit events for newly started/finished tasks, rebuild and write the ledger.

        A final (not live) refresh also halts the refresher: no live row ever follows it."""
        with self._lock:
            if not live:
                self._halt.set()
            return self._refresh(live=live, interruption_cause=interruption_cause)

    def refresh_quietly(self, *, live: bool, interruption_cause: str) -> None:
        """refresh() that never raises: a failure is a disclosed diagnostic, never a stop."""
        try:
            self.refresh(live=live, interruption_cause=interruption_cause)
        except Exception as exc:  # noqa: BLE001 - the ledger never stops or crashes a run
            report_write_failure(self.failures, layout.RESULT_INDEX, exc)

    def _tick(self) -> None:
        with self._lock:
            if self._halt.is_set():  # a final refresh won the lock first
                return
            try:
                self._refresh(live=True, interruption_cause="in_progress")
            except Exception as exc:  # noqa: BLE001 - the ledger never stops or crashes a run
                report_write_failure(self.failures, layout.RESULT_INDEX, exc)

    def start_refresher(self, interval: float = 2.0) -> None:
        """Refresh the live ledger every `interval` seconds until stop_refresher() or a final refresh."""
        if self._refresher is not None:
            return
        self._halt.clear()

        def loop() -> None:
            while not self._halt.is_set():
                self._tick()  # the first at once: a ledger exists from the runner's start
                self._halt.wait(interval)

        self._refresher = threading.Thread(target=loop, name="ledger-refresher", daemon=True)
        self._refresher.start()

    def stop_refresher(self, timeout: float = 30.0) -> None:
        """Stop the refresher and wait for a refresh in progress, so no live row follows a final one."""
        thread, self._refresher = self._refresher, None
        if thread is None:
            return
        self._halt.set()
        thread.join(timeout)

    def _refresh(self, *, live: bool, interruption_cause: str) -> list[TaskRow]:
        self._live = live
        ctx = self._context()
        for task, source in sorted(ctx.custody.items()):
            if task not in self._started:
                self._started.add(task)
                self._event(EventKind.TASK_STARTED, task=task, runner_id=source)
        for task, row in sorted(ctx.runner_rows.items()):
            if task not in self._finished:
                self._finished.add(task)
                self._event(
                    EventKind.TASK_FINISHED,
                    task=task,
                    status=row.status,
                    eval_pass=row.eval_pass,
                    duration_s=row.duration_s,
                )
        if live and self.meter is not None:
            running = {t: ctx.dumps[t] for t in sorted(self._started - self._finished) if t in ctx.dumps}
            for over in self.meter.tick(running):
                if self.on_over is not None:
                    self.on_over(over)
        self.rows = build_index(self.run_root, live=live, interruption_cause=interruption_cause, ctx=ctx)
        if self._written is not None and _same_rows(self._written, self.rows):
            return self.rows  # unchanged evidence reuses each cached row object: nothing to write
        try:
            write_index(self.run_root, self.rows)
            self._written = self.rows
        except OSError as exc:
            report_write_failure(self.failures, layout.RESULT_INDEX, exc)
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
            replace_atomic(RunRoot(self.run_root).monitor, monitor.to_json())
        except OSError as exc:
            report_write_failure(self.failures, layout.MONITOR, exc)

    def _event(self, kind: EventKind, **payload: Any) -> None:
        record_event(self.events, self.failures, kind, **payload)


def _same_rows(a: list[TaskRow], b: list[TaskRow]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def record_event(events: EventLog, failures: dict[str, WriteFailure], kind: EventKind | str, **payload: Any) -> None:
    """Append one event; a failed append is a disclosed diagnostic, never a stop."""
    try:
        events.append(kind, **payload)
    except OSError as exc:
        report_write_failure(failures, layout.EVENTS, exc)
