"""What an export reads of one run root: the report's merge of its ledger rows, and each task's transcript.

No inspect_ai here. The rows, the denominator, pass@1, the costs and durations and the disclosures
are the report's own (report.build), so the log and the report can never disagree; the transcripts
come from the dumps through export.transcript (safefile reads only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..audit.forked import forked_map
from ..container import safefile
from ..report.build import build_report, row_cost, row_duration
from ..report.merge import RunRecord, denominator, load_runs, merge_rows
from ..runroot.layout import RELATIVE_DUMPS
from ..schemas.audit import TaskAudit
from ..schemas.ledger import TaskRow
from ..schemas.manifest import RunManifest
from .transcript import ARGUMENTS_CAP, MAX_TURNS, TOOL_OUTPUT_CAP, Transcript, read_transcript

DUMPS = RELATIVE_DUMPS
DUMP_PREFIX = "SingleUserTurn-"
CAP_NOTE = (
    "Each sample's messages and events are the engine's own logs (Ouroboros' chat, progress, events "
    "and tools logs, or an upstream engine's traj.json). Tool outputs are the engine's result "
    f"previews, each cut at {TOOL_OUTPUT_CAP} characters (as Ouroboros logs them); tool arguments longer "
    f"than {ARGUMENTS_CAP} characters of JSON are kept as their first characters; a sample keeps its "
    f"first {MAX_TURNS} model turns. The engine does not log what each model call was sent: model "
    "events carry the model's output and usage only."
)
PARALLEL_MIN_TASKS = 64  # below this many dumps, forking workers costs more than it saves


@dataclass
class TaskExport:
    instance_id: str
    run_label: str
    row: TaskRow | None
    provenance: str | None  # the run root of the attempt
    transcript: Transcript
    audit: TaskAudit | None = None

    @property
    def tokens(self) -> tuple[int, int, int | None]:
        """(prompt, completion, cached) as the ledger has them: the gateway's exact figures, else the
        usage records of the engine's log, else the adapter summary's; 0 for a task never run."""
        row = self.row
        if row is None:
            return 0, 0, None
        if row.gateway is not None:
            return row.gateway.prompt_tokens, row.gateway.completion_tokens, None
        if row.usage is not None and not row.usage.unreadable:
            return row.usage.prompt_tokens, row.usage.completion_tokens, None
        s = row.adapter_summary
        if s is not None and s.prompt_tokens is not None and s.completion_tokens is not None:
            return int(s.prompt_tokens), int(s.completion_tokens), None
        return 0, 0, None

    @property
    def cost_usd(self) -> float | None:
        return row_cost(self.row) if self.row is not None else 0.0

    @property
    def duration_s(self) -> float | None:
        return row_duration(self.row) if self.row is not None else None

    @property
    def working_s(self) -> float | None:
        s = self.row.adapter_summary if self.row is not None else None
        return s.elapsed_sec if s is not None else None

    def metadata(self) -> dict[str, Any]:
        row = self.row
        t = self.transcript
        out: dict[str, Any] = {
            "status": row.status.value if row else "not_attempted",
            "reason_code": row.reason_code if row else "missing_row",
            "official_eval_status": row.official_eval_status.value if row else "unreported",
            "paid_activity": row.paid_activity.value if row else "none",
            "truncated": row.truncated if row else None,
            "provisional": row.provisional if row else False,
            "attempt_run_root": self.provenance,
            "task_dump": row.task_dump if row else None,
            "cost_usd": self.cost_usd,
            "tampering": [f.to_dict() for f in row.tampering] if row and row.tampering is not None else None,
            "gateway": row.gateway.to_dict() if row and row.gateway is not None else None,
            "transcript_source": t.source,
            "transcript_tool_calls": t.tool_calls,
            "transcript_outputs_cut": t.cut_outputs,
            "transcript_tool_output_cap_chars": TOOL_OUTPUT_CAP,
            "transcript_notes": t.notes,
        }
        if self.audit is not None:
            a = self.audit
            out["audit"] = {
                "findings_total": a.findings_total,
                "findings_by_reason": a.findings_by_reason,
                "findings": msgspec.to_builtins(a.findings),
                "gaps_total": a.gaps_total,
                "gaps_by_reason": a.gaps_by_reason,
                "tool_calls": a.activity.tool_calls,
                "cost_complete": a.cost.complete,
            }
        return out


@dataclass
class ExportRun:
    root: str
    manifest: RunManifest
    report: dict[str, Any]
    # The manifests of the run roots given for this trial (its shards' last runs, not their ancestors).
    ended: list[RunManifest] = field(default_factory=list)
    started: bool = True  # False: a trial set's trial with no run root yet (not_started)
    tasks: list[TaskExport] = field(default_factory=list)

    @property
    def model(self) -> str:
        model = self.manifest.applied_config.get("model")
        return model if isinstance(model, str) and model else "unknown"

    def eval_metadata(self) -> dict[str, Any]:
        m, r = self.manifest, self.report
        if not self.started:
            return {"trial": self.root, "started": False, "pass_at_1": r["pass_at_1"], "disclosures": r["disclosures"]}
        return {
            "run_root": self.root,
            "run_roots": [e.run_root for e in self.ended] or [self.root],
            "run_label": m.run_label,
            "engine": m.engine,
            "model": self.model,
            "image_id": m.image.id if m.image else None,
            "image_tag": m.image.tag if m.image else None,
            "seed_commit": m.seed.head if m.seed else None,
            "seed_reportable": m.seed.reportable if m.seed else None,
            "bench_commit": m.bench.commit if m.bench else None,
            "bench_expected_commit": m.bench.expected_commit if m.bench else None,
            "limits": m.limits.to_dict() if m.limits else None,
            "applied_config": m.applied_config,
            "outcome": m.outcome,
            "stop_reason": m.stop_reason,
            "runs_merged": [x["run_root"] for x in r["runs"]],
            "pass_at_1": r["pass_at_1"],
            "wilson95": r["wilson95"],
            "denominator": r["denominator"],
            "counts": r["counts"],
            "cost": {k: v for k, v in r["cost"].items() if k != "gateway"},
            "disclosures": r["disclosures"],
            "audit": r["audit"],
            "transcripts": CAP_NOTE,
        }


def _dump_of(row: TaskRow | None, provenance: str | None, task: str) -> tuple[str | None, str | None]:
    """(the task's dump folder, the dumps folder it must lie below), found in the attempt's run root
    (which may have been copied since: the row's path is used for its last two names only)."""
    if provenance is None:
        return None, None
    below = str(Path(provenance) / DUMPS)
    if row is not None and row.task_dump:
        stated = Path(row.task_dump)
        return os.path.join(below, stated.parent.name, stated.name), below
    for short in safefile.scan_dir(below)[1]:
        if short.kind == safefile.DIRECTORY:
            candidate = os.path.join(below, short.name, DUMP_PREFIX + task)
            if safefile.kind_at(candidate, below=below) == safefile.DIRECTORY:
                return candidate, below
    return None, None


def _transcripts(jobs: list[tuple[str | None, str | None]], workers: int) -> list[Transcript]:
    if workers <= 1 or len(jobs) < PARALLEL_MIN_TASKS:
        return [read_transcript(dump, below) for dump, below in jobs]
    return list(forked_map(_read_job, jobs, workers))


def _read_job(job: tuple[str | None, str | None]) -> Transcript:
    return read_transcript(*job)


def load_export(roots: Path | Sequence[Path], workers: int | None = None) -> ExportRun:
    """One trial ready to map: the run root `roots` or the shards `roots` (each with its recovery ancestry),
    merged as the report merges them; Refusal when they cannot be read."""
    given = [Path(roots)] if isinstance(roots, Path) else [Path(r) for r in roots]
    runs: list[RunRecord] = load_runs(given)
    report = build_report(runs, concurrency=1)
    merged = merge_rows(runs)
    tasks = denominator(runs)
    resolved = str(given[0].resolve())
    by_root = {r.root: r for r in runs}
    this = by_root[resolved]
    ended = [by_root[str(p.resolve())].manifest for p in given]  # the trial's last runs: their outcome is its end
    audits: dict[tuple[str, str], TaskAudit] = {}
    for run in runs:
        for audit in run.audit.tasks if run.audit is not None else ():
            audits[(run.root, audit.instance_id)] = audit
    jobs, picked = [], []
    for task in tasks:
        m = merged.get(task)
        provenance = str(Path(m.provenance).resolve()) if m else None
        if m is not None and m.row.status.value == "not_attempted" and m.row.task_dump is None:
            provenance = None  # never started: no dump to look for
        picked.append((task, m.row if m else None, provenance))
        jobs.append(_dump_of(m.row if m else None, provenance, task))
    wanted = (os.cpu_count() or 1) if workers is None else workers
    transcripts = _transcripts(jobs, wanted)
    out = ExportRun(root=resolved, manifest=this.manifest, report=report, ended=ended)
    for (task, row, provenance), transcript in zip(picked, transcripts, strict=True):
        attempt = by_root.get(provenance) if provenance else None
        out.tasks.append(
            TaskExport(
                instance_id=task,
                run_label=(attempt or this).manifest.run_label,
                row=row,
                provenance=provenance,
                transcript=transcript,
                audit=audits.get((provenance, task)) if provenance else None,
            )
        )
    return out


def not_started(first: ExportRun, name: str) -> ExportRun:
    """A trial of a trial set that has not started (no run root yet): an epoch whose every task of `first`
    (a started trial of the same group) is not attempted, with no row (METHODOLOGY.md §denominator: it
    stays in the denominator, not passed). It records no end, so it leaves the log's status to the others."""
    n = len(first.tasks)
    report = {
        **first.report,
        "runs": [],
        "pass_at_1": 0.0 if n else None,
        "passed": 0,
        "counts": {"not_attempted": n},
        "disclosures": [f"Trial {name} has not started: every task is not attempted."],
    }
    out = ExportRun(root=name, manifest=first.manifest, report=report, ended=[], started=False)
    for task in first.tasks:
        out.tasks.append(
            TaskExport(
                instance_id=task.instance_id,
                run_label=f"{name}-not-started",
                row=None,
                provenance=None,
                transcript=read_transcript(None, None),
            )
        )
    return out
