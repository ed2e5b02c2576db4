"""result_index.jsonl: each selected task's files read at the edge, its row decided, the index written.

The ledger in layers, pure in the middle:

* `IndexContext` (score/context.py) holds what every row of one run root shares;
* `read_task()` reads one task's files into a `TaskRecord`, every read bounded (score/taskread.py,
  score/dumpread.py, container/safefile.py) and nothing decided;
* `task_row()` (score/row.py, pure) decides its row: the official verdict and the host's seal
  (score/verdict.py), the row decision order (`classify()`), the infra rule (score/infra.py);
* `classify_task()` does one task (its row reused while its evidence is unchanged), `build_index()`
  every selected task, `write_index()` replaces the file atomically.

progress.RunProgress keeps one `IndexContext`, refreshes it every ~2 s (and at each meter poll)
and re-classifies only the tasks that changed; the final index is a full `build_index()`.
Rows are always rebuilt from the dumps: a valid official receipt settles its task, and rows a
recovery run carries are rebuilt from the ancestors' dumps, never read from their ledgers
(`rebuild_attempts()`); `rebuild_final()` writes a dead run's final ledger.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..container import protocol
from ..fileio import replace_atomic
from ..runroot.events import utc_now_iso
from ..runroot.layout import ENGINE_EVENTS, RunRoot, dumps_of
from ..schemas.ledger import GatewaySpend, TaskRow
from ..vocab import OfficialEvalStatus, PaidActivity, TaskStatus
from .context import IndexContext
from .dumpread import DUMP_NAMES, SUMMARY_NAME, named_kinds, signature
from .resources import NOT_TIED
from .row import TaskRecord, task_row
from .taskdb import read_task_diff
from .taskread import attempt_records, canonical, classify_eval_result, file_digest, late_seal, read_json, scan_usage
from .unreadable import over_bound_row, unreadable_row
from .verdict import DumpDigests

# ================================================================ one task's files, read at the edge


def held_summary_path(ctx: IndexContext, task: str) -> Path | None:
    runner = ctx.runner_ids.get(task) if ctx.sealing else None
    return RunRoot(ctx.run_root).held_summary(runner) if runner else None


def held_summary(ctx: IndexContext, task: str) -> tuple[str, Any] | None:
    """(state, value) of the summary copy the shim took when the task's agent exec ended, or None
    when there is none (a run from before it, or an agent exec that never ended)."""
    path = held_summary_path(ctx, task)
    if path is None:
        return None
    state, value = read_json(path)
    return None if state == "absent" else (state, value)


def read_task(ctx: IndexContext, task: str, *, with_usage: bool = True) -> TaskRecord:
    """Everything one task's row is decided from, read now: its dump's named records (bounded reads,
    no listing of the dump), the host's seal and held summary, and its share of `ctx`'s facts."""
    dump = ctx.dumps.get(task)
    sealed = ctx.seals.get(task) if ctx.sealing else None
    record = TaskRecord(
        instance_id=task,
        ts=utc_now_iso(),
        run_root=ctx.run_root,
        dump=dump,
        runner=ctx.runner_rows.get(task),
        custody=ctx.custody.get(task),
        blocked=ctx.blocked.get(task),
        refused_mounts=ctx.refused_mounts.get(task),
        host=ctx.host.get(task),
        sealing=ctx.sealing,
        gateway=ctx.gateway is not None,
        use=ctx.resources.get(task, NOT_TIED),
        head=sealed.head if sealed else None,
    )
    if dump is None:
        return record
    kinds = named_kinds(dump, DUMP_NAMES, below=str(dumps_of(ctx.bench)))  # the names read, not a listing
    summary_state, summary, summary_changed = "absent", None, False
    held = held_summary(ctx, task)
    if held is not None:  # the summary as the agent exec left it (custody/shim.py): the agent
        summary_state, summary = held  # cannot rewrite this copy; a changed dump copy is flagged
        summary_changed = file_digest(dump / SUMMARY_NAME)[1] != file_digest(held_summary_path(ctx, task))[1]
    elif SUMMARY_NAME in kinds:
        summary_state, summary = read_json(dump / SUMMARY_NAME)
    eval_path = dump / protocol.EVAL_RES_NAME
    eval_read = classify_eval_result(eval_path, dump / protocol.LOG_NAME)
    sha = eval_read[4]
    claim_state, receipt_state, receipt, receipt_path = attempt_records(dump)
    matches = False
    if receipt is not None and sha is not None:
        _, current = read_json(eval_path)
        matches = canonical(current) == canonical(receipt.get("returned"))
    seal, digests, diff = None, None, None
    if ctx.sealing:
        seal = sealed.seal if sealed else None
        if seal is None and sealed is not None and sealed.head is not None and receipt_state == "present":
            seal = late_seal(ctx.run_root, sealed.head, dump, dumps_of(ctx.bench))
        digests = DumpDigests(
            claim=file_digest(dump / protocol.CLAIM_NAME)[1],
            receipt=file_digest(receipt_path)[1],
            eval_res=sha,
            summary=file_digest(dump / SUMMARY_NAME)[1],
        )
        runner_id = ctx.runner_ids.get(task)
        diff = read_task_diff(ctx.run_root, runner_id) if runner_id else None
    return dataclasses.replace(
        record,
        kinds=kinds,
        summary_state=summary_state,
        summary=summary,
        summary_changed=summary_changed,
        eval_read=eval_read,
        claim_state=claim_state,
        receipt_state=receipt_state,
        receipt=receipt,
        receipt_path=receipt_path,
        receipt_digest=file_digest(receipt_path),
        eval_value_matches=matches,
        seal=seal,
        digests=digests,
        task_diff=diff,
        usage=scan_usage(dump / "ouroboros" / ENGINE_EVENTS) if with_usage and "ouroboros" in kinds else None,
    )


# ================================================================ one task's row


def _signature(ctx: IndexContext, task: str, live: bool, cause: str) -> tuple[Any, ...]:
    """What a task's row depends on: its dump's entries (name, size, mtime), the runner row,
    custody evidence and the run state; equal signatures give equal rows."""
    dump = ctx.dumps.get(task)
    entries = signature(dump, DUMP_NAMES, below=str(dumps_of(ctx.bench))) if dump is not None else ()
    return (
        str(dump),
        entries,
        ctx.runner_rows.get(task),
        ctx.custody.get(task),
        repr(ctx.resources.get(task)),
        ctx.blocked.get(task),
        live,
        cause,
        repr(ctx.seals.get(task)),
        ctx.refused_mounts.get(task),
        ctx.host.get(task),
        ctx.over_bound.get(task),
    )


def classify_task(ctx: IndexContext, task: str, *, live: bool, interruption_cause: str) -> TaskRow:
    """The row of one task of `ctx`'s run (the incremental unit: unchanged evidence is reused)."""
    try:  # one task's files never stop the rows of the others (score/unreadable.py)
        sig = _signature(ctx, task, live, interruption_cause)
        cached = ctx.cache.get(task)
        if cached is not None and cached[0] == sig:
            return cached[1]
        row = over_bound_row(
            _classify_task_uncached(ctx, task, live=live, interruption_cause=interruption_cause),
            ctx.over_bound.get(task),
        )
    except Exception as exc:  # noqa: BLE001 - whatever the dump made a reader raise
        return unreadable_row(task, exc, live=live, dump=ctx.dumps.get(task))
    ctx.cache[task] = (sig, row)
    return row


def _classify_or_flag(ctx: IndexContext, task: str, **kw: Any) -> TaskRow:
    try:
        return over_bound_row(_classify_task_uncached(ctx, task, **kw), ctx.over_bound.get(task))
    except Exception as exc:  # noqa: BLE001 - as classify_task
        return unreadable_row(task, exc, live=kw.get("live", False), dump=ctx.dumps.get(task))


def _classify_task_uncached(
    ctx: IndexContext, task: str, *, live: bool, interruption_cause: str, with_usage: bool = True
) -> TaskRow:
    return task_row(read_task(ctx, task, with_usage=with_usage), live=live, interruption_cause=interruption_cause)


# ================================================================ index of a whole run


def rebuild_attempts(
    run_root: Path | str, tasks: Iterable[str] | None = None, *, with_usage: bool = True
) -> dict[str, TaskRow]:
    """Final rows of the tasks `run_root` itself handed its runner, rebuilt from its manifest and
    dumps (receipts first), never from its result_index.jsonl, which may be stale or absent.

    `tasks` narrows the rebuild (an ancestor's other tasks are not read). `with_usage=False`
    skips the usage scan of each dump's events (most of the cost): statuses do not depend on it,
    rows then carry no usage facts. Raises OSError or ValueError when the manifest is missing
    or invalid.
    """
    ctx = IndexContext.load(run_root)
    cause = ctx.manifest.stop_reason or "runner_exited"
    wanted = ctx.invoked() if tasks is None else ctx.invoked() & set(tasks)
    return {
        task: _classify_or_flag(ctx, task, live=False, interruption_cause=cause, with_usage=with_usage)
        for task in ctx.selection()
        if task in wanted
    }


def settled_attempts(run_root: Path | str, tasks: set[str]) -> dict[str, TaskRow]:
    """The campaign's settling reader (campaign.shared.AttemptsReader): statuses only, no usage scan."""
    return rebuild_attempts(run_root, tasks, with_usage=False)


def _carried_rows(ctx: IndexContext, tasks: set[str]) -> dict[str, TaskRow]:
    """Settled rows of `tasks` rebuilt from the ancestors' dumps, nearest ancestor first.

    The same view recovery planned from (recovery.resolve_ancestry), so a task it skipped as
    settled carries that attempt's row. An ancestor that cannot be rebuilt carries nothing.
    """
    out: dict[str, TaskRow] = {}
    for root in ctx.manifest.selection.resume_from:
        needed = tasks - set(out)
        if not needed:
            break
        try:
            rows = rebuild_attempts(root, needed)
        except (OSError, ValueError):
            continue
        for task, row in rows.items():
            if row.status.settled:
                out[task] = row
    return out


def build_index(
    run_root: Path | str, *, live: bool, interruption_cause: str, ctx: IndexContext | None = None
) -> list[TaskRow]:
    """One row per selected task, in selection order.

    Tasks this invocation ran are classified from their dumps. Tasks a recovery run skipped
    because an ancestor settled them carry that ancestor's row, rebuilt from its dumps (its
    `attempt_run_root`); if no ancestor can be rebuilt to a settled row any more they are
    `not_attempted/ancestor_row_unavailable`.
    """
    ctx = ctx or IndexContext.load(run_root)
    invoked = ctx.invoked()
    selection = ctx.selection()
    if ctx.carried is None:
        ctx.carried = _carried_rows(ctx, {t for t in selection if t not in invoked})
    carried = ctx.carried
    rows: list[TaskRow] = []
    for task in selection:
        if task in invoked or task in ctx.blocked:  # a blocked task is classified even when not run
            row = classify_task(ctx, task, live=live, interruption_cause=interruption_cause)
            if ctx.gateway is not None:  # the log grows on its own: never taken from the row cache
                row = row.replace(gateway=ctx.gateway.get(task, GatewaySpend()))
            rows.append(row)
        elif task in carried:
            rows.append(carried[task])
        else:
            rows.append(
                TaskRow(
                    ts=utc_now_iso(),
                    instance_id=task,
                    status=TaskStatus.NOT_ATTEMPTED,
                    reason_code="ancestor_row_unavailable",
                    official_eval_status=OfficialEvalStatus.UNREPORTED,
                    paid_activity=PaidActivity.NONE,
                )
            )
    return rows


def write_index(run_root: Path | str, rows: Iterable[TaskRow]) -> Path:
    """Replace <run_root>/result_index.jsonl atomically; raises OSError on a failed write."""
    path = RunRoot(run_root).result_index
    replace_atomic(path, "".join(row.to_line() for row in rows))
    return path


def rebuild_final(run_root: Path | str, cause: str) -> list[TaskRow]:
    """Rebuild a finished or dead run's final ledger from its manifest and dumps and write it.

    For commands that end a run the launcher could not (e.g. clearing a killed run): every
    task with a valid official receipt is settled from it, everything else is final under
    `interrupted:<cause>`. Raises OSError or ValueError when the manifest is missing or
    invalid, OSError when result_index.jsonl cannot be written (the old file is then intact).
    """
    rows = build_index(run_root, live=False, interruption_cause=cause)
    write_index(run_root, rows)
    return rows
