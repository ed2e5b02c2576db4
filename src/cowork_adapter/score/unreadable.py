"""Rows the reading edge of the ledger flags: a task whose files cannot be read, a dump over a bound.

One task's dump never stops the ledger.

The ledger reads each task's dump on its own (classify_task). Every reader below it is bounded
(container/safefile.py: no link, no FIFO or device, a byte cap, JSON depth bounded before
parsing), but a reader is code, and the dump is the agent's: should reading one task still raise
(an error no reader foresaw, a file system that fails on one folder), that task gets this row,
flagged, and every sibling is classified as if it were not there. Before, one RecursionError in
one dump stopped every refresh: siblings that passed later never got a row, and `clear` and
`--resume-from` stopped with it.
"""

from __future__ import annotations

from pathlib import Path

from ..runroot.events import utc_now_iso
from ..schemas.dump_bounds import DumpOverBound
from ..schemas.ledger import TamperFinding, TaskRow
from ..vocab import OfficialEvalStatus, TamperKind, TaskStatus

REASON = "dump_unreadable"
DETAIL_MAX = 300


def unreadable_row(task: str, exc: BaseException, *, live: bool, dump: Path | None) -> TaskRow:
    """A row for `task`, flagged `unreadable_dump` with the error's type and first words: while the run
    lives, provisional infra_failed (a later refresh may read it); once it has ended, agent_failed and
    settled, since the dump is the agent's and no host fact makes it infrastructure's (score/infra.py):
    an agent cannot buy a re-roll by leaving files no reader can take."""
    detail = f"{type(exc).__name__}: {str(exc)[:DETAIL_MAX]}"
    return TaskRow(
        ts=utc_now_iso(),
        instance_id=task,
        status=TaskStatus.INFRA_FAILED if live else TaskStatus.AGENT_FAILED,
        reason_code=REASON,
        provisional=live,
        official_eval_status=OfficialEvalStatus.UNREADABLE,
        task_dump=str(dump) if dump is not None else None,
        tampering=[TamperFinding(kind=TamperKind.UNREADABLE_DUMP, detail=detail)],
    )


def over_bound_row(row: TaskRow, record: DumpOverBound | None) -> TaskRow:
    """`row` flagged `dump_over_bound` when the run's meter found the task's dump over a bound
    while it ran (its containers were then stopped): agent_failed, its reason naming the bound.
    Passing a bound of the run is the agent's failure whatever an evaluator said afterwards of
    what it left; the official receipt and eval facts stay on the row as they were read."""
    if record is None:
        return row
    finding = TamperFinding(kind=TamperKind.DUMP_OVER_BOUND, detail=record.detail())
    tampering = [*(row.tampering or []), finding]
    return row.replace(
        status=TaskStatus.AGENT_FAILED,
        reason_code=f"dump_over_bound:{record.bound.value}",
        provisional=False,
        tampering=tampering,
    )
