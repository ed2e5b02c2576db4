"""custody/processes.json: which processes hold a run's custody, so a later command can prove them gone.

Written atomically by the launcher as each process appears (itself at custody install, the watchdog
once spawned, the runner's process group right after it starts). A pid alone is not an identity:
pids are reused, so each is paired with its start time in clock ticks since boot (field 22 of
/proc/<pid>/stat). A reader treats a pid whose start time differs as gone.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

CUSTODY_PROCESSES_SCHEMA = "cowork_adapter.custody_processes.v1"
CUSTODY_PROCESSES_NAME = "processes.json"  # under <run_root>/custody/


class ProcessIdentity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int = Field(gt=0)
    start_ticks: int | None = Field(default=None, ge=0)  # None when /proc could not be read


class CustodyProcesses(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=CUSTODY_PROCESSES_SCHEMA, alias="schema")
    launcher: ProcessIdentity
    watchdog: ProcessIdentity | None = None
    runner_pgid: int | None = Field(default=None, gt=0)  # the runner's session and process group leader

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"
