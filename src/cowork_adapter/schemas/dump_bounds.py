"""`<run_root>/custody/evidence/dump_bounds.jsonl`: the task dumps the launcher's meter found over a
bound while their task ran (runroot/dump_meter.py), one line each, appended once per task.

Written by the launcher only (the evidence folder is never mounted into a container); read by the
ledger, which flags the task's row (`dump_over_bound`) and makes it agent_failed unless a sealed
verdict stands. A torn last line (the launcher killed mid-write) loses only itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

import msgspec

from ..container import safefile
from ..vocab import DumpBound

DUMP_BOUND_SCHEMA: Final = "cowork_adapter.dump_over_bound.v1"
LOG_CAP = 4 * 1024 * 1024  # one short line per task: far above any selection


class DumpOverBound(msgspec.Struct, frozen=True, kw_only=True, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.dump_over_bound.v1"] = DUMP_BOUND_SCHEMA
    task: str
    bound: DumpBound
    limit: int
    measured: int  # at least this much when the walk stopped (a walk stops at the first bound passed)
    at: str
    containers_stopped: int = 0
    stop_error: str | None = None

    def detail(self) -> str:
        return f"{self.bound.value} {self.measured:,} over the bound {self.limit:,}"


def read_over_bound(path: Path | str) -> dict[str, DumpOverBound]:
    """task -> its first over-bound record (missing, unreadable or torn lines count for nothing)."""
    got = safefile.read_bytes(str(path), cap=LOG_CAP)
    out: dict[str, DumpOverBound] = {}
    for line in (got.data or b"").splitlines():
        try:
            record = msgspec.json.decode(line, type=DumpOverBound)
        except (msgspec.DecodeError, RecursionError):
            continue
        out.setdefault(record.task, record)
    return out
