"""The audit's inputs from a run root: its records and ledger, where each task's dump is, the shim's evidence.

The small readers here never raise: a record that cannot be had is a gap (`run_record`), a ledger line
that is no row is a gap at its line (`ledger_rows`), and what the listing of the dumps tree shows outside
every task's own dump is flagged (`dump_index`). Every read goes through container/safefile.py or
audit/read.py (no link followed, bounded).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..container import safefile
from ..runroot import layout
from ..runroot.layout import RELATIVE_DUMPS, RunRoot
from ..schemas.audit import Gap, TamperSeen
from ..score.resources import EVIDENCE_CAP, evidence_lines
from ..vocab import AuditGapReason, TamperKind
from .read import iter_blocks
from .scan import TaskScan

SMALL_JSON_LIMIT = 16 << 20  # manifests, claims and receipts are small; a bigger one is unreadable
DUMPS_DIR = RELATIVE_DUMPS
DUMP_PREFIX = "SingleUserTurn-"
# Official and diagnostic records the host reads from a task's dump (its top level only), as
# container.protocol names them (spelled here: importing it cost the audit's start-up a fifth;
# a unit test checks they agree).
RECORD_NAMES = frozenset({"eval_res.json", "ouroboros_eval_claim.json", "ouroboros_diagnostic_claim.json"})
RECORD_PREFIXES = ("ouroboros_eval_receipt-", "ouroboros_diagnostic_receipt-", "ouroboros_diagnostic_report-")


# ---------------------------------------------------------------- small readers (never raise)


def read_small_json(path: Path | str) -> tuple[Any, str | None]:
    """(value, None) or (None, cause): 'absent', 'json_error', 'os_error:<E>', or what stood
    there instead of a regular file within the cap (a safefile kind: 'too_large', 'symlink',
    'fifo', 'device', 'socket', 'directory'...). Read through container.safefile (the last
    component not followed, no FIFO or device opened); a dump's records are read by _DumpJson."""
    return json_of(safefile.read_bytes(os.fspath(path), cap=SMALL_JSON_LIMIT))


def json_of(found: safefile.Read) -> tuple[Any, str | None]:
    """read_small_json's answer for what a safefile read found."""
    if found.kind == safefile.ABSENT:
        return None, "absent"
    if found.data is None:
        return None, found.cause if found.kind == safefile.UNREADABLE and found.cause else found.kind
    try:
        return safefile.loads(found.data), None  # depth, size and encoding bounded before parsing
    except ValueError:
        return None, "json_error"


def is_unsafe(cause: str | None) -> bool:
    return cause in safefile.UNSAFE_KINDS


def run_record(
    root: Path, name: str, missing: AuditGapReason, run_gaps: list[Gap]
) -> tuple[dict[str, Any], str | None]:
    """A run-level JSON record as a dict ({} when it cannot be had) and read_small_json's cause;
    an absent or unreadable record is a run gap."""
    value, cause = read_small_json(root / name)
    if cause is not None:
        reason = missing if cause == "absent" else AuditGapReason.UNREADABLE_RECORD
        run_gaps.append(Gap(reason=reason, file=name, detail=cause))
    return (value if isinstance(value, dict) else {}), cause


def read_first_line(path: Path, limit: int = 200) -> str | None:
    """The first line of one of the shim's small evidence files, or None when it cannot be had.
    Read through container.safefile like every evidence file (score.resources' cap): a link, a FIFO,
    a device or a file over the cap stands in the run root's evidence folder, which the runner's
    processes can reach, and is never followed, waited on or read whole."""
    got = safefile.read_bytes(os.fspath(path), cap=EVIDENCE_CAP)
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return None
    # stripped as text, then tested: bytes.strip() keeps what str.strip() removes (b"\x1c"), and the
    # first line of an all-blank text would not exist
    text = got.data[:4096].decode("utf-8", "replace").strip()
    return text.splitlines()[0][:limit] if text else ""


def rel_path(path: Path, root: Path) -> str:
    """`path` relative to the run root: a string cut when it lies inside (the usual case, and
    os.path.relpath was a tenth of a large audit), relpath otherwise."""
    text, base = str(path), str(root)
    if text.startswith(base + os.sep):
        return text[len(base) + 1 :]
    return os.path.relpath(path, root)


# ---------------------------------------------------------------- run-level inputs


def ledger_rows(root: Path, run_gaps: list[Gap]) -> Iterator[dict[str, Any]] | None:
    """Rows of result_index.jsonl as dicts, streamed; None when the file is absent."""
    path = RunRoot(root).result_index
    if not path.is_file():
        return None

    def rows() -> Iterator[dict[str, Any]]:
        scan = TaskScan()
        try:
            for block in iter_blocks(path, scan, layout.RESULT_INDEX):
                for offset, line in enumerate(block.data.split(b"\n")):
                    if not line.strip():
                        continue
                    try:
                        row = safefile.loads(line)
                    except ValueError:
                        row = None
                    if isinstance(row, dict) and isinstance(row.get("instance_id"), str):
                        yield row
                    else:
                        run_gaps.append(
                            Gap(
                                reason=AuditGapReason.MALFORMED_LINE,
                                file=layout.RESULT_INDEX,
                                line=block.first + offset,
                            )
                        )
        except OSError as exc:
            run_gaps.append(
                Gap(reason=AuditGapReason.UNREADABLE_LOG, file=layout.RESULT_INDEX, detail=type(exc).__name__)
            )
        run_gaps.extend(Gap(**g) for g in scan.gaps)  # oversized ledger lines

    return rows()


def dump_index(root: Path, outside: list[TamperSeen] | None = None) -> dict[str, Path]:
    """instance_id -> dump path, from bench/dumps/<short>/SingleUserTurn-<task> (first wins),
    listed without following a link (a task's entry that is no directory stays in the index:
    its audit names what stands there). What the listing shows above every task's dump that is
    a link, FIFO, device or socket, or named like an official record, goes to `outside`."""
    found: dict[str, Path] = {}
    base = root / DUMPS_DIR
    kind, shorts = safefile.scan_dir(str(base))
    if kind != safefile.DIRECTORY:
        return found
    below = str(base)
    for short in shorts:
        if short.kind != safefile.DIRECTORY:
            _flag_entry(outside, root, base / short.name, short)
            continue
        _, entries = safefile.scan_dir(str(base / short.name), below=below)
        for entry in entries:
            if entry.name.startswith(DUMP_PREFIX):
                found.setdefault(entry.name[len(DUMP_PREFIX) :], base / short.name / entry.name)
            else:
                _flag_entry(outside, root, base / short.name / entry.name, entry)
    return found


def is_record_name(name: str) -> bool:
    """A name the host reads as an official or diagnostic record of a task's dump."""
    return name in RECORD_NAMES or name.startswith(RECORD_PREFIXES)


def _flag_entry(seen: list[TamperSeen] | None, root: Path, path: Path, entry: safefile.Entry) -> None:
    """A dumps-tree entry outside any task's own dump: a link/FIFO/device/socket, or a file named
    like an official record there (no evaluator writes one there), is flagged; others pass."""
    if seen is None:
        return
    if entry.kind in safefile.UNSAFE_KINDS:
        seen.append(TamperSeen(kind=TamperKind.UNSAFE_ENTRY, file=rel_path(path, root), detail=entry.kind))
    elif is_record_name(entry.name):
        seen.append(TamperSeen(kind=TamperKind.OUTSIDE_OWN_DUMP, file=rel_path(path, root), detail=entry.kind))


def evidence_by_task(root: Path, suffix: str) -> dict[str, Path]:
    """task name -> the shim's `<runner-id><suffix>` evidence file, joined through `<runner-id>.task`."""
    evidence = RunRoot(root).evidence
    try:
        names = sorted(os.listdir(evidence))
    except OSError:
        return {}
    out: dict[str, Path] = {}
    for name in names:
        if not name.endswith(suffix):
            continue
        task_dir = read_first_line(evidence / f"{name[: -len(suffix)]}.task", limit=4096)
        if task_dir:
            out[Path(task_dir.rstrip("/")).name] = evidence / name
    return out


def eval_refusals(root: Path) -> dict[str, str]:
    """task name -> the shim's refusal cause for that task's eval container."""
    return {task: read_first_line(path) or "unknown" for task, path in evidence_by_task(root, ".eval_refused").items()}


def eval_admissions(root: Path) -> dict[str, str]:
    """task name -> the shim's last recorded agent container state at that task's eval exec."""
    return {task: _last_agent_state(path) for task, path in evidence_by_task(root, ".eval_admission").items()}


def _last_agent_state(path: Path) -> str:
    """The last record's agent state, read by the ledger's one bounded evidence reader (no link,
    FIFO or over-cap file read; a torn line skipped); "unknown" when there is none."""
    records = evidence_lines(path)
    state = records[-1].get("agent_container_state") if records else None
    return state if isinstance(state, str) else "unknown"


def resolve_dump(row: dict[str, Any], root: Path, dumps: dict[str, Path]) -> Path | None:
    stated = row.get("task_dump")
    if not isinstance(stated, str):
        paths = row.get("output_paths")
        stated = paths.get("task_dump") if isinstance(paths, dict) else None
    if isinstance(stated, str) and stated:
        path = Path(stated)
        if not path.is_absolute():
            base = row.get("attempt_run_root")
            path = (Path(base) if isinstance(base, str) and base else root) / path
        return path
    return dumps.get(row["instance_id"])
