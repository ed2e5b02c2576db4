"""`cowork-adapter qualify`: which selected tasks can be passed here, and which pass by doing nothing.

It runs the selection twice under a paid run's custody but spending nothing: `--engine oracle`
(the task's ground truth placed in the workspace) into <root>/oracle, then `--engine nop`
(nothing done) into <root>/nop. Each task's class follows only from what the official evaluator
said in each run's ledger and receipts, and from the environment inventory; never from the task's
name. The result is <root>/task_validity.json, the same table for people as one self-contained
page, <root>/task_validity.html, and a table on stdout.
"""

from __future__ import annotations

import re
import sys
from html import escape
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..container import safefile
from ..errors import Refusal
from ..fileio import replace_atomic
from ..report.render import CSS
from ..runroot.dumps import dumps_folder_of
from ..runroot.layout import RunRoot
from ..runroot.manifest import read_manifest, utc_now
from ..schemas.ledger import TaskRow, read_index
from ..schemas.validity import EngineVerdict, TaskValidity, TaskValidityRow
from ..vocab import EngineKind, ExitCode, TaskStatus, TaskValidityClass
from .launch import execute_run

ENGINES = (EngineKind.ORACLE.value, EngineKind.NOP.value)
REASON_MAX = 300


# ---------------------------------------------------------------- pure: verdicts and classes


def evaluator_words(returned: Any) -> str | None:
    """The evaluator's own reason from what it returned (`failure`, else `details`): its `[FAIL] ...`
    lines when it printed any; else its error line (a database or Python error, whose last lines
    are often a caret or a traceback frame); else, when its output stops without a failing check,
    the last line it printed, said as such. Decoration lines (`====`, `^`) are never a reason."""
    if not isinstance(returned, dict):
        return None
    texts = [returned[k] for k in ("failure", "details") if isinstance(returned.get(k), str)]
    if not texts:
        return None
    text = next((t for t in texts if t.strip()), "")
    lines = [line.strip() for line in text.splitlines() if any(ch.isalnum() for ch in line)]
    if not lines:
        return "the evaluator said False and printed no reason"
    failing = [line for line in lines if line.startswith("[FAIL]")]
    errors = [line for line in lines if _ERROR_WORDS.search(line)]
    if failing:
        words = "; ".join(failing)
    elif errors:
        words = errors[-1]
    elif lines[-1].startswith("[PASS]") or len(lines) < 3 and lines[-1].isupper():
        words = f"the evaluator said False with no failing check; its output ends: {lines[-1]}"
    else:
        words = lines[-1]
    return words[:REASON_MAX]


_ERROR_WORDS = re.compile(r"error|exception|does not exist|not found|traceback", re.IGNORECASE)


def verdict_of(row: TaskRow | None, returned: Any = None) -> EngineVerdict:
    """One engine's row reduced to its verdict and, when it did not pass, the reason."""
    if row is None:
        return EngineVerdict(status=TaskStatus.NOT_ATTEMPTED, reason="no ledger row")
    passed = row.official_receipt.pass_
    if row.status is TaskStatus.PASSED:
        return EngineVerdict(status=row.status, passed=True)
    if row.status is TaskStatus.ENVIRONMENT_BLOCKED:
        return EngineVerdict(status=row.status, reason=(row.environment_blocked or row.reason_code)[:REASON_MAX])
    words = evaluator_words(returned) if row.status is TaskStatus.FAILED else None
    reason = words or f"{row.status.value}: {row.reason_code}"
    return EngineVerdict(
        status=row.status, passed=passed if isinstance(passed, bool) else None, reason=reason[:REASON_MAX]
    )


def classify(oracle: EngineVerdict, nop: EngineVerdict) -> tuple[TaskValidityClass, str | None]:
    """The class of a task from its two verdicts (see vocab.TaskValidityClass), and its reason.

    A needed server that failed the inventory blocks the task whatever else is known. The ground
    truth must pass first: when it does not (the evaluator said False, or the agent phase could not
    even prepare the task here, e.g. its preprocess failed), no agent can be relied on to pass it.
    Only then does the nop verdict matter. A run that never reached a task says nothing about it.
    """
    blocked = TaskStatus.ENVIRONMENT_BLOCKED
    if oracle.status is blocked or nop.status is blocked:
        return TaskValidityClass.ENVIRONMENT_BLOCKED, (oracle.reason if oracle.status is blocked else nop.reason)
    if oracle.status is TaskStatus.NOT_ATTEMPTED:
        return TaskValidityClass.UNDETERMINED, f"oracle: {oracle.reason}"
    if oracle.passed is not True:
        return TaskValidityClass.ORACLE_FAILS, oracle.reason
    if nop.passed is True:
        return TaskValidityClass.NOP_PASSES, "the evaluator passed the untouched workspace"
    if nop.status is TaskStatus.FAILED and nop.passed is False:
        return TaskValidityClass.VALID, None
    return TaskValidityClass.UNDETERMINED, f"nop: {nop.reason}"


# ---------------------------------------------------------------- reading two run roots


def _rows(run_root: Path) -> dict[str, TaskRow]:
    return {row.instance_id: row for row in read_index(RunRoot(run_root).result_index)}


def _returned(row: TaskRow | None) -> Any:
    """What the evaluator returned, from the receipt the row's verdict rests on."""
    if row is None or not row.official_receipt.path:
        return None
    path = Path(row.official_receipt.path)
    # The receipt lies in a task dump the agent could write: no link followed below the dumps
    # folder, no FIFO or device opened, no more than a record's cap read.
    found = safefile.read_bytes(str(path), cap=safefile.RECORD_CAP, below=dumps_folder_of(path))
    if not found.ok:
        return None
    try:
        receipt = safefile.loads(found.data)  # type: ignore[arg-type]  # found.ok: data is set
    except ValueError:
        return None
    return receipt.get("returned") if isinstance(receipt, dict) else None


def build_validity(oracle_root: Path, nop_root: Path, task_ids: list[str], bench_commit: str) -> TaskValidity:
    oracle_rows, nop_rows = _rows(oracle_root), _rows(nop_root)
    rows = []
    for task in task_ids:
        o_row, n_row = oracle_rows.get(task), nop_rows.get(task)
        oracle, nop = verdict_of(o_row, _returned(o_row)), verdict_of(n_row, _returned(n_row))
        klass, reason = classify(oracle, nop)
        rows.append(TaskValidityRow(instance_id=task, oracle=oracle, nop=nop, class_=klass, reason=reason))
    counts = {k.value: sum(1 for r in rows if r.class_ is k) for k in TaskValidityClass}
    return TaskValidity(
        created_at=utc_now(),
        bench_commit=bench_commit,
        oracle_run_root=str(oracle_root),
        nop_run_root=str(nop_root),
        counts=counts,
        tasks=rows,
    )


def render_table(validity: TaskValidity) -> str:
    """A plain table for people: task, oracle verdict, nop verdict, class, reason."""
    header = ("task", "oracle", "nop", "class", "reason")
    body = [(r.instance_id, _word(r.oracle), _word(r.nop), r.class_.value, r.reason or "") for r in validity.tasks]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(4)]
    out = []
    for line in [header, *body]:
        out.append("  ".join(str(line[i]).ljust(widths[i]) for i in range(4)) + "  " + line[4])
    counts = ", ".join(f"{n} {k}" for k, n in validity.counts.items())
    out.append(f"{len(validity.tasks)} tasks: {counts}")
    return "\n".join(line.rstrip() for line in out) + "\n"


def _word(v: EngineVerdict) -> str:
    return "pass" if v.passed is True else ("fail" if v.passed is False else v.status.value)


def render_html(validity: TaskValidity) -> str:
    """The table as one self-contained page (nothing loaded from anywhere): the count per class, then
    per task its verdicts, class and the evaluator's own reason. Every text is escaped."""

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

    counts = [[k, str(n)] for k, n in validity.counts.items()]
    rows = [[r.instance_id, _word(r.oracle), _word(r.nop), r.class_.value, r.reason or ""] for r in validity.tasks]
    return "".join(
        [
            "<!doctype html><html><head><meta charset='utf-8'><title>Task validity</title>",
            f"<style>{CSS}</style></head><body><h1>Task validity</h1>",
            f"<p>{len(validity.tasks)} selected tasks of benchmark commit {escape(validity.bench_commit)}, "
            "qualified at "
            f"{escape(validity.created_at)}: the ground truth placed in the workspace (oracle run: "
            f"{escape(validity.oracle_run_root)}) and nothing done (nop run: {escape(validity.nop_run_root)}), each "
            "graded by the task's official evaluator. A task is valid when the first passes and the second fails.</p>",
            table(["class", "tasks"], counts),
            table(["task", "oracle", "nop", "class", "reason"], rows),
            "</body></html>\n",
        ]
    )


# ---------------------------------------------------------------- the command


def qualify_configs(flags: dict[str, Any], argv: list[str]) -> tuple[Path, dict[str, RunConfig]]:
    """The root and one RunConfig per reference engine, each refused like `run` would refuse it.
    Nothing is written: the root must not exist yet."""
    root = Path(flags["run_root"]).expanduser().resolve()
    if root.exists():
        raise Refusal("run_root", f"the qualify root {root} already exists; every invocation needs a new one.")
    if not root.parent.is_dir():
        raise Refusal("run_root", f"the parent of the qualify root, {root.parent}, does not exist; create it first.")
    configs = {}
    for engine in ENGINES:
        # Environment-blocked tasks are a class here, not a reason to refuse the whole qualification.
        per_engine = {**flags, "engine": engine, "run_root": root / engine, "accept_environment_blocked": True}
        if engine == EngineKind.NOP.value:
            # Same image, same selection, minutes later: the oracle pass's inventory holds (checked again
            # when the nop pass starts: probes.reusable_inventory), so it is not probed a second time.
            per_engine["inventory_from"] = root / EngineKind.ORACLE.value
        configs[engine] = RunConfig.from_flags(argv=argv, **per_engine)
    return root, configs


def qualify_command(flags: dict[str, Any], argv: list[str]) -> int:
    root, configs = qualify_configs(flags, argv)
    root.mkdir()
    codes = {}
    for engine in ENGINES:
        print(f"cowork-adapter: qualify: --engine {engine} into {configs[engine].run_root}", flush=True)
        codes[engine] = execute_run(configs[engine], argv)
        if codes[engine] == ExitCode.REFUSED:
            if not any(root.iterdir()):
                root.rmdir()  # refused before anything was written: leave nothing behind
            return int(ExitCode.REFUSED)
        if codes[engine] == ExitCode.STOPPED:
            print(f"cowork-adapter: qualify: the {engine} run was stopped; no table is written.", file=sys.stderr)
            return int(ExitCode.STOPPED)
    oracle_cfg = configs[EngineKind.ORACLE.value]
    manifest = read_manifest(oracle_cfg.run_root)
    commit = manifest.bench.commit if manifest.bench is not None else None
    validity = build_validity(
        oracle_cfg.run_root,
        configs[EngineKind.NOP.value].run_root,
        list(manifest.selection.selection_task_ids),
        str(commit or oracle_cfg.bench_commit),
    )
    table = RunRoot(root)
    replace_atomic(table.task_validity, validity.to_json())
    replace_atomic(table.task_validity_html, render_html(validity))
    sys.stdout.write(render_table(validity))
    print(f"cowork-adapter: qualify: wrote {table.task_validity} and {table.task_validity_html}", flush=True)
    return int(ExitCode.OK)
