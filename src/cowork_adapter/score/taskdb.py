"""The task database's diff between the phases, and what the ledger makes of it (issue 36).

Pure comparison of the two snapshots the shim wrote (schemas/taskdb.py), plus their reader. What
a caller must know:
- code: every object the server did not ship that changes what a query means (functions,
  operators, casts, rules and views, triggers, event triggers, row-security policies, languages,
  extensions), added, removed or redefined; a relation whose kind changed (a view where a table
  stood); a new relation named like one in another schema (search_path shadowing); a built-in
  catalog row rewritten; the database itself replaced. Each is a TamperKind.TASK_DB_CODE naming it.
- settings: role-, database- and system-level settings as the agent left them (read before the
  reset) or as they still are after it, compared with the baseline: also TASK_DB_CODE.
- problems: no baseline, a baseline read too late or unreadable, a reset step or the eval-time
  snapshot that failed: TamperKind.TASK_DB_UNCHECKED. Either kind keeps the task from `passed`.
- tables: rows added / changed / removed per table, as audit evidence, never a verdict.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from ..container import safefile
from ..runroot.layout import TASKDB_BASELINE_SUFFIX, TASKDB_SUFFIX, RunRoot
from ..schemas.ledger import TamperFinding
from ..schemas.record import RecordInvalid, decode
from ..schemas.taskdb import (
    Snapshot,
    TableDiff,
    TableState,
    TaskDbBaseline,
    TaskDbDiff,
    TaskDbEval,
)
from ..vocab import TamperKind

# kind:identity prefixes of objects whose presence alone changes what some query means.
CODE_KINDS = ("function", "operator", "cast", "rule", "trigger", "event_trigger", "policy", "extension", "language")
# Objects the benchmark's own MCP servers create in the task database while the agent uses them
# (identity -> the exact definition the probe reads): the pinned clickhouse server (146 tasks) adds
# a ClickHouse-compatible round() on its first connection. Only that definition is sanctioned; the
# same name with any other body is the agent's code. Disclosed in the diff's catalog list.
SANCTIONED = {
    "function:public.round(double precision, integer)": "f|sql|1202935be6a8c0f05e9cda7f12aaff30|false",
}
DETAIL_CAP = 200
EVIDENCE_CAP = 64 << 20  # a snapshot with ROW_BOUND digests for each of TABLE_CAP tables fits


def _kind(key: str) -> str:
    return key.split(":", 1)[0]


def _name(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


def code_changes(before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """(code changes, other catalog changes) between two snapshots' objects and built-in digests."""
    code: list[str] = []
    other: list[str] = []
    old, new = before.objects, after.objects
    for key in sorted(set(old) | set(new)):
        kind = _kind(key)
        if key in old and key in new and old[key] == new[key]:
            continue
        what = "added" if key not in old else ("removed" if key not in new else "changed")
        if what == "added" and SANCTIONED.get(key, "") == new[key]:
            other.append(f"added {key} (by the benchmark's own MCP server)")
        elif kind in CODE_KINDS:
            code.append(f"{what} {key}")
        elif kind == "relation":
            if what == "changed" and (old[key] or "")[:1] != (new[key] or "")[:1]:
                code.append(f"{key} kind {(old[key] or '?')[:1]} -> {(new[key] or '?')[:1]}")
            elif what == "changed":
                code.append(f"{key} row security {old[key]} -> {new[key]}")
            elif what == "added" and _shadows(_name(key), old):
                code.append(f"added {key} shadowing a relation of the same name")
            elif what == "removed" or (what == "added" and (new[key] or "")[:1] not in ("r", "p")):
                # a view or other non-table relation added is the agent's query text: code
                (code if what == "added" else other).append(f"{what} {key}")
        elif kind == "database" and key == f"database:{after.database}":
            code.append(f"{what} {key} (the database was replaced)")
        else:
            other.append(f"{what} {key}")
    for name in sorted(set(before.builtin) | set(after.builtin)):
        if before.builtin.get(name) != after.builtin.get(name):
            code.append(f"built-in rows of {name} rewritten")
    return code, other


def _shadows(name: str, old: dict[str, str | None]) -> bool:
    """Whether a new relation can capture an unqualified name that meant another schema's relation
    on the default search_path (`"$user", public`, restored by the reset): it stands in `public`
    or in a schema named like a role, and a relation of its name stands in another schema."""
    schema, _, relname = name.partition(".")
    first = schema == "public" or f"role:{schema}" in old
    return first and any(
        _kind(k) == "relation" and _name(k).split(".", 1)[-1] == relname and _name(k).split(".", 1)[0] != schema
        for k in old
    )


def settings_changes(baseline: dict[str, str | None], left: dict[str, str | None], label: str) -> list[str]:
    """The settings in `left` that differ from the baseline's, each `label name`."""
    return [f"{label} {key}" for key in sorted(set(baseline) | set(left)) if baseline.get(key) != left.get(key)]


def table_changes(before: dict[str, TableState], after: dict[str, TableState]) -> list[TableDiff]:
    """Rows added / changed / removed per table: by primary key when both sides have row digests
    keyed, as a multiset of row digests without a key (a changed row is one removed and one added),
    and past the row bound only the counts and whether the content digest moved."""
    out: list[TableDiff] = []
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table), after.get(table)
        if old is None or new is None:
            state = new or old
            assert state is not None
            n = state.rows
            out.append(
                TableDiff(
                    table=table,
                    change="added" if old is None else "removed",
                    rows_before=None if old is None else n,
                    rows_after=n if old is None else None,
                    added=n if old is None else 0,
                    removed=n if new is None else 0,
                    changed=0,
                    basis="count",
                )
            )
            continue
        columns = old.columns != new.columns
        if not columns and old.rows == new.rows and old.digest == new.digest:
            continue
        diff = TableDiff(
            table=table, change="changed", rows_before=old.rows, rows_after=new.rows, columns_changed=columns
        )
        a, b = old.row_hashes, new.row_hashes
        if isinstance(a, dict) and isinstance(b, dict):
            diff.added = len(b.keys() - a.keys())
            diff.removed = len(a.keys() - b.keys())
            diff.changed = sum(1 for k in a.keys() & b.keys() if a[k] != b[k])
            diff.basis = "keyed"
        elif isinstance(a, list) and isinstance(b, list):
            ca, cb = Counter(a), Counter(b)
            diff.added, diff.removed, diff.changed = sum((cb - ca).values()), sum((ca - cb).values()), None
            diff.basis = "rows"
        else:
            diff.basis = "digest" if old.digest and new.digest else "count"
        if diff.basis in ("keyed", "rows") and not columns and not (diff.added or diff.removed or diff.changed):
            continue  # same rows (an unkeyed table's digest list is the content itself)
        out.append(diff)
    return out


def compare(baseline: TaskDbBaseline | None, evaluated: TaskDbEval | None) -> TaskDbDiff | None:
    """The diff of one task; None when the task has no database (no pg container) or no eval ran."""
    if evaluated is None or (evaluated.absent and (baseline is None or baseline.absent)):
        return None
    diff = TaskDbDiff(when=baseline.when if baseline else None)
    reset = evaluated.reset
    if reset is not None:
        diff.processes = list(reset.killed)
        # A server-binary process the server did not list is killed too, but not counted as the
        # agent's: an autovacuum worker started between the listing and the sweep looks the same.
        diff.catalog += [f"server process not listed by the server, killed: {p}" for p in reset.server_killed]
        diff.problems += [f"reset: {e}"[:DETAIL_CAP] for e in reset.errors]
    if evaluated.absent:
        diff.problems.append("the task's database container was gone at the eval's start")
        return diff
    if baseline is None or baseline.snapshot is None:
        diff.problems.append("no baseline of the task's database was read before the agent ran")
    elif baseline.absent:
        diff.problems.append("the task's database container appeared after the agent phase started")
    elif baseline.when == "no_marker" or baseline.late:
        diff.problems.append(
            "the baseline was read after the agent could act (" + ("late" if baseline.late else "no marker") + ")"
        )
    elif baseline.snapshot.error:
        diff.problems.append(f"baseline unreadable: {baseline.snapshot.error}"[:DETAIL_CAP])
    after = evaluated.after
    if after is None or after.error:
        diff.problems.append(f"eval-time snapshot unreadable: {after.error if after else 'not taken'}"[:DETAIL_CAP])
    if baseline is None or baseline.snapshot is None or after is None:
        return diff
    base = baseline.snapshot
    diff.code, other = code_changes(base, after)
    diff.catalog += other
    if reset is not None:
        diff.settings = settings_changes(base.settings, reset.settings_before, "left by the agent:")
    diff.settings += settings_changes(base.settings, after.settings, "still after the reset:")
    diff.tables = table_changes(base.tables, after.tables)
    return diff


def findings(diff: TaskDbDiff | None) -> list[TamperFinding]:
    """The ledger's tampering flags for one task's diff (either keeps it from `passed`)."""
    if diff is None:
        return []
    out = []
    named = [*diff.code, *diff.settings]
    if diff.processes:
        named.append(f"{len(diff.processes)} process(es) left running: " + "; ".join(diff.processes[:3]))
    if named:
        out.append(TamperFinding(kind=TamperKind.TASK_DB_CODE, detail="; ".join(named)[:DETAIL_CAP]))
    if diff.problems:
        out.append(TamperFinding(kind=TamperKind.TASK_DB_UNCHECKED, detail="; ".join(diff.problems)[:DETAIL_CAP]))
    return out


def _read(path: Path, kind: type) -> object | None:
    got = safefile.read_bytes(str(path), cap=EVIDENCE_CAP)
    if not got.ok:
        return None
    try:
        return decode(got.data or b"", kind)
    except RecordInvalid:
        return None


def read_task_diff(run_root: Path | str, runner_id: str) -> TaskDbDiff | None:
    """The diff of `runner_id`'s task from its evidence files; None when no eval-time file exists
    (a run from before this check, a task with no eval exec). An unreadable file is a problem."""
    evidence = RunRoot(run_root).evidence
    eval_path = evidence / (runner_id + TASKDB_SUFFIX)
    if not os.path.lexists(eval_path):
        return None
    evaluated = _read(eval_path, TaskDbEval)
    if evaluated is None:
        return TaskDbDiff(problems=["the eval-time evidence of the task's database is unreadable"])
    baseline_path = evidence / (runner_id + TASKDB_BASELINE_SUFFIX)
    baseline = _read(baseline_path, TaskDbBaseline) if os.path.lexists(baseline_path) else None
    return compare(
        baseline if isinstance(baseline, TaskDbBaseline) else None,
        evaluated if isinstance(evaluated, TaskDbEval) else None,
    )
