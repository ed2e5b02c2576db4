"""task_validity.json: what `qualify` found each selected task to be in this environment.

One row per task: the official verdict of the oracle run (the ground truth placed in the
workspace) and of the nop run (nothing done), the evaluator's own words when it did not pass,
and the class that follows from the two verdicts (vocab.TaskValidityClass).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import Refusal
from ..runroot.layout import TASK_VALIDITY
from ..vocab import TaskStatus, TaskValidityClass
from .record import Record, RecordInvalid, decode

TASK_VALIDITY_SCHEMA = "cowork_adapter.task_validity.v1"


class EngineVerdict(Record):
    """One engine's ledger row for the task, reduced to what the class rests on."""

    status: TaskStatus  # the ledger row's status (passed / failed are the evaluator's verdicts)
    passed: bool | None = None  # the official verdict: a literal bool only when a receipt links it
    reason: str | None = None  # the evaluator's own words when it did not pass, else the row's reason


class TaskValidityRow(Record, rename={"class_": "class"}):
    instance_id: str
    oracle: EngineVerdict
    nop: EngineVerdict
    class_: TaskValidityClass
    reason: str | None = None  # why the class is not valid, in the evaluator's (or inventory's) words


class TaskValidity(Record, rename={"schema_": "schema"}):
    schema_: str = TASK_VALIDITY_SCHEMA
    created_at: str
    bench_commit: str
    oracle_run_root: str
    nop_run_root: str
    counts: dict[str, int]  # every TaskValidityClass value, zeros included
    tasks: list[TaskValidityRow]

    def of_class(self, klass: TaskValidityClass) -> list[str]:
        return [row.instance_id for row in self.tasks if row.class_ is klass]


def read_validity(path: Path, flag: str = "--task-validity") -> TaskValidity:
    """A task_validity.json, or a Refusal naming what is wrong with it."""
    try:
        return decode(Path(path).read_bytes(), TaskValidity)
    except OSError as exc:
        raise Refusal("flags", f"{flag} {path} cannot be read: {exc.strerror or exc}.") from None
    except RecordInvalid:
        raise Refusal("flags", f"{flag} {path} is not a {TASK_VALIDITY} written by qualify.") from None
