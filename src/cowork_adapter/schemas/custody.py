"""custody/processes.json: which processes hold a run's custody, so a later command can prove them gone.

Written atomically by the launcher as each process appears (itself at custody install, the watchdog
once spawned, the runner's process group right after it starts). A pid alone is not an identity:
pids are reused, so each is paired with its start time in clock ticks since boot (field 22 of
/proc/<pid>/stat). A reader treats a pid whose start time differs as gone.
"""

from __future__ import annotations

from .record import NonNegative, Positive, Record

CUSTODY_PROCESSES_SCHEMA = "cowork_adapter.custody_processes.v1"


class ProcessIdentity(Record, frozen=True):  # type: ignore[misc]  # msgspec allows a frozen Struct over a mutable base; dataclasses (mypy's model) do not
    pid: Positive
    start_ticks: NonNegative | None = None  # None when /proc could not be read


class CustodyProcesses(Record, rename={"schema_": "schema"}):
    schema_: str = CUSTODY_PROCESSES_SCHEMA
    launcher: ProcessIdentity
    watchdog: ProcessIdentity | None = None
    runner_pgid: Positive | None = None  # the runner's session and process group leader
