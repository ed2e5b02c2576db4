"""`<run_root>/custody/evidence/<runner id>.taskdb-baseline.json` and `<runner id>.taskdb.json`:
the task's PostgreSQL as the host read it between the phases (issue 36).

The docker shim (custody/shim.py, with custody/taskdb_probe.py) writes both, once each, in the
evidence folder no container mounts: the baseline while the agent exec waits after preprocess
(or at the exec's start, `when`), the second at the first eval exec's start, after the reset of
what the agent left (its processes, sessions and settings). The comparison is score/taskdb.py's.
Unknown fields are kept out (forbid): the shim and this schema change together.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from .record import Record

BASELINE_SCHEMA: Final = "cowork_adapter.taskdb_baseline.v1"
EVAL_SCHEMA: Final = "cowork_adapter.taskdb_eval.v1"
# When the baseline was read: after the adapter's preprocess (its agent phase waited for it),
# before an upstream engine's own preprocess (that engine runs it), or without the agent phase's
# marker at all (read when the agent exec ended: it holds the agent's changes, so it clears nothing).
BaselineWhen = Literal["after_preprocess", "before_preprocess", "no_marker"]


class TableState(Record):
    columns: str | None = None  # digest of the column list (name, type, not null, generated)
    rows: int | None = None
    digest: str | None = None  # md5 over the sorted row digests: order-independent content
    keyed: bool = False  # row_hashes maps a primary key's digest to its row's digest
    row_hashes: list[str] | dict[str, str] | None = None  # up to taskdb_sql.ROW_BOUND rows
    read: str = "full"  # full | count_only (a column of a type the agent could define) | not_read


class Snapshot(Record):
    taken_at: float
    error: str | None = None  # a part that could not be read: this snapshot clears nothing
    database: str = ""
    user: str = ""
    objects: dict[str, str | None] = msgspec.field(default_factory=dict)  # kind:identity -> definition
    builtin: dict[str, str] = msgspec.field(default_factory=dict)  # catalog -> digest of its built-in rows
    settings: dict[str, str | None] = msgspec.field(default_factory=dict)
    db_role: list[Any] = msgspec.field(default_factory=list)  # pg_db_role_setting rows, verbatim
    tables: dict[str, TableState] = msgspec.field(default_factory=dict)


class ResetReport(Record):
    started_at: float
    ended_at: float | None = None
    killed: list[str] = msgspec.field(default_factory=list)  # "pid ppid exe" of each process ended
    server_killed: list[str] = msgspec.field(default_factory=list)  # server-binary processes the server did not own
    settings_before: dict[str, str | None] = msgspec.field(default_factory=dict)  # as the agent left them
    sessions_terminated: int | None = None
    errors: list[str] = msgspec.field(default_factory=list)


class TaskDbBaseline(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.taskdb_baseline.v1"] = BASELINE_SCHEMA
    runner_id: str
    task: str | None = None
    when: BaselineWhen
    late: bool = False  # read after the agent phase stopped waiting for it: clears nothing
    absent: bool = False  # the task has no pg container: nothing to compare
    snapshot: Snapshot | None = None


class TaskDbEval(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.taskdb_eval.v1"] = EVAL_SCHEMA
    runner_id: str
    task: str | None = None
    absent: bool = False
    reset: ResetReport | None = None
    after: Snapshot | None = None


class TableDiff(Record):
    """One table whose rows or columns differ between the baseline and the eval's start."""

    table: str
    change: str  # added | removed | changed
    rows_before: int | None = None
    rows_after: int | None = None
    added: int | None = None  # None: not known at row level (see `basis`)
    changed: int | None = None
    removed: int | None = None
    columns_changed: bool = False
    basis: str = ""  # keyed | rows | digest | count: how the numbers were found


class TaskDbDiff(Record):
    """What the agent did to its task's database, as the host can prove it."""

    when: str | None = None  # the baseline's `when`
    code: list[str] = msgspec.field(default_factory=list)  # objects that change what a query means
    settings: list[str] = msgspec.field(default_factory=list)  # role/database/system settings it changed
    processes: list[str] = msgspec.field(default_factory=list)  # processes it left running (ended)
    catalog: list[str] = msgspec.field(default_factory=list)  # other catalog changes (schemas, roles)
    tables: list[TableDiff] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)  # why the database could not be cleared
