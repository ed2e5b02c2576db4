"""What the run does when a task's dump passes a bound while it runs (runroot/dump_meter.py).

The ledger refresh meters the running tasks' dumps; for each task over a bound this stops the
task's containers (custody/task_stop.py, in a thread of its own: the refresh holds the lock the
supervisor's publish waits on, and a daemon call can take seconds) and then appends the record
the ledger flags the row from (schemas/dump_bounds.py). Siblings are not touched.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import msgspec

from ..custody.task_stop import stop_task_containers
from ..runroot.dump_meter import Over
from ..runroot.events import utc_now_iso
from ..runroot.layout import RunRoot
from ..schemas.dump_bounds import DumpOverBound


def append_record(run_root: Path, record: DumpOverBound) -> None:
    """One line, one O_APPEND write, fsynced (a torn line is skipped by the reader)."""
    path = RunRoot(run_root).dump_bounds_log
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(record) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


class DumpBoundStop:
    """The run's action on a dump over a bound: stop the task, then record it."""

    def __init__(self, run_root: Path, docker_host: str, run_label: str) -> None:
        self.run_root = Path(run_root)
        self.docker_host = docker_host
        self.run_label = run_label
        self.threads: list[threading.Thread] = []

    def __call__(self, over: Over) -> None:
        thread = threading.Thread(target=self._stop, args=(over,), name=f"dump-bound-{over.task[:40]}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _stop(self, over: Over) -> None:
        killed, error = stop_task_containers(self.docker_host, self.run_label, over.task)
        record = DumpOverBound(
            task=over.task,
            bound=over.bound,
            limit=over.limit,
            measured=over.measured,
            at=utc_now_iso(),
            containers_stopped=killed,
            stop_error=error,
        )
        try:
            append_record(self.run_root, record)
        except OSError:
            pass  # the row then lacks the flag; the task was stopped all the same

    def join(self, timeout: float = 60.0) -> None:
        for thread in self.threads:
            thread.join(timeout)
