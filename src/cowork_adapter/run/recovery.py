"""Recovery ancestry: which tasks a --resume-from run must still do, and whether it may.

Walks every ancestor recursively through each manifest's `selection.resume_from`, refuses a
cycle, a missing or unreadable manifest, an ancestor whose task dumps are gone, and any change
of applied configuration, seed head, benchmark commit or image ID anywhere in the ancestry.
Each ancestor's settled tasks come from rebuilding its view from its manifest and dumps, where
a valid official receipt settles a task (DESIGN principle 4); its result_index.jsonl is never
read, so a stale, missing or torn ledger (a killed launcher) changes nothing. Settled results
(passed, failed, agent_failed) anywhere are never repeated. An attempt is rerun as infrastructure's
only when the host saw the cause (score/infra.py: the row's `infra_cause`); one that only its agent
called an infrastructure failure (a summary, a dead entrypoint, no traj_log.json) is agent_failed
there, so a failing agent cannot buy itself a re-roll. Refusals are one sentence, stage "recovery".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Refusal
from ..runroot.identity import identity_difference
from ..runroot.layout import RunRoot
from ..schemas.ledger import TaskRow
from ..schemas.manifest import RunManifest
from ..schemas.record import decode
from ..score.context import bench_dir
from ..score.ledger import rebuild_attempts
from ..vocab import RunOutcome, TaskStatus

MAX_RECOVERY_PASSES = 2
STAGE = "recovery"


@dataclass(frozen=True)
class RecoveryPlan:
    selection_task_ids: list[str]
    remaining: list[str]
    settled: dict[str, tuple[TaskStatus, str]]  # task -> (status, run root of the settled attempt)
    ancestors: list[str]  # every ancestor root, resolved, nearest first
    generation: int


@dataclass
class _Node:
    root: str
    manifest: RunManifest
    parents: list[str] = field(default_factory=list)
    depth: int = 0


def _load_manifest(root: str) -> RunManifest:
    path = RunRoot(root).manifest
    try:
        return decode(path.read_bytes(), RunManifest)
    except (OSError, ValueError) as exc:
        raise Refusal(
            STAGE,
            f"The ancestor manifest {path} is missing or unreadable ({type(exc).__name__}), so its "
            "tasks cannot be assumed unattempted; investigate before recovering.",
        ) from None


def _settled_attempts(root: str, manifest: RunManifest) -> dict[str, TaskRow]:
    """task → settled row of the attempts `root` itself made, rebuilt from its dumps."""
    if manifest.selection.task_ids and not bench_dir(root, manifest).is_dir():
        raise Refusal(
            STAGE,
            f"The ancestor {root} handed tasks to its runner but its benchmark working copy with the "
            "task dumps is gone, so which tasks were evaluated cannot be proven; investigate before recovering.",
        )
    try:
        rows = rebuild_attempts(root, with_usage=False)  # statuses only: no usage scan
    except (OSError, ValueError) as exc:
        raise Refusal(
            STAGE,
            f"The ancestor {root} could not be rebuilt from its manifest and dumps ({type(exc).__name__}), "
            "so its tasks cannot be assumed unattempted; investigate before recovering.",
        ) from None
    # Every final infra_failed row names the cause the host saw (score/infra.py): only those are rerun.
    return {task: row for task, row in rows.items() if row.status.settled}


def _manifest_selection(manifest: RunManifest) -> list[str]:
    return list(manifest.selection.selection_task_ids or manifest.selection.task_ids)


def _check_ids(ids: list[str], dataset_ids: list[str], what: str) -> None:
    if len(set(ids)) != len(ids):
        dup = next(t for i, t in enumerate(ids) if t in ids[:i])
        raise Refusal(STAGE, f"The {what} names task {dup!r} more than once.")
    if dataset_ids:
        known = set(dataset_ids)
        unknown = [t for t in ids if t not in known]
        if unknown:
            raise Refusal(STAGE, f"The {what} names task {unknown[0]!r}, which is not in the pinned dataset.")


def resolve_ancestry(
    resume_from: list[Path],
    *,
    current_applied_config: Mapping[str, Any],
    seed_head: str | None,
    bench_commit: str | None,
    image_id: str | None,
    explicit_selection: list[str] | None,
    dataset_ids: list[str],
    image_pending: bool = False,
) -> RecoveryPlan:
    """The recovery plan of a run resuming from `resume_from` (raises Refusal, stage recovery).

    Selection: explicit selectors win (and may widen); otherwise the union of the direct
    parents' selections, never the full dataset. Generation: 1 + the deepest direct parent;
    a `nothing_remaining` ancestor adds no depth; a plan with nothing remaining keeps the
    parents' generation; work remaining beyond two recovery passes is refused.
    `image_pending` (preflight, before the derived image is built): every check but the image's ID.
    """
    if not image_id and not image_pending:
        raise Refusal(STAGE, "Recovery needs the current immutable image ID, and none was resolved.")
    direct = [str(Path(p).resolve()) for p in resume_from]
    if not direct:
        raise Refusal(STAGE, "Recovery was asked for without any --resume-from run root.")
    nodes: dict[str, _Node] = {}
    order: list[str] = []

    def visit(root: str, path: list[str]) -> int:
        if root in path:
            raise Refusal(STAGE, f"The recovery ancestry has a cycle through {root}.")
        if root in nodes:
            return nodes[root].depth
        manifest = _load_manifest(root)
        diff = identity_difference(
            manifest,
            applied_config=current_applied_config,
            seed_head=seed_head,
            bench_commit=bench_commit,
            image_id=image_id,
            image_pending=image_pending,
        )
        if diff is not None:
            raise Refusal(
                STAGE,
                f"Ancestor {root} differs in {diff}; recovery needs the same configuration, seed, benchmark and image.",
            )
        parents = [str(Path(p).resolve()) for p in manifest.selection.resume_from]
        node = _Node(root=root, manifest=manifest, parents=parents)
        # resume_from lists every ancestor, not only direct parents; a grand-ancestor is never
        # deeper than its child, so the maximum over all of them is the direct parents' maximum.
        depths = [visit(p, path + [root]) for p in parents]
        if depths:
            # A run that handed the runner nothing (nothing_remaining) is not a recovery pass.
            ran_work = bool(manifest.selection.task_ids) and manifest.outcome != RunOutcome.NOTHING_REMAINING.value
            node.depth = max(depths) + (1 if ran_work else 0)
        if manifest.selection.resume_generation != node.depth:
            raise Refusal(
                STAGE,
                f"Ancestor {root} records recovery generation {manifest.selection.resume_generation} "
                f"but its ancestry gives {node.depth}.",
            )
        nodes[root] = node
        order.append(root)
        return node.depth

    parent_depths = [visit(root, []) for root in direct]

    if explicit_selection is not None:
        selection = list(explicit_selection)
        _check_ids(selection, dataset_ids, "explicit selection")
    else:
        selection = []
        seen: set[str] = set()
        for root in direct:
            for task in _manifest_selection(nodes[root].manifest):
                if task not in seen:
                    seen.add(task)
                    selection.append(task)
        if not selection:
            raise Refusal(
                STAGE,
                "The parent runs record no task selection, and recovery never widens to the full dataset by itself.",
            )
        _check_ids(selection, dataset_ids, "inherited selection")

    settled: dict[str, tuple[TaskStatus, str]] = {}
    # Nearest ancestors first so a task's settled attempt names the latest run that holds it.
    ancestors = sorted(order, key=lambda r: -nodes[r].depth)
    for root in ancestors:
        for task, row in _settled_attempts(root, nodes[root].manifest).items():
            settled.setdefault(task, (row.status, row.attempt_run_root or root))
    remaining = [t for t in selection if t not in settled]
    deepest = max(parent_depths)
    generation = deepest + 1 if remaining else deepest
    if remaining and generation > MAX_RECOVERY_PASSES:
        raise Refusal(
            STAGE,
            f"{len(remaining)} tasks remain after {deepest} recovery passes, "
            "and at most two recovery passes are permitted.",
        )
    return RecoveryPlan(
        selection_task_ids=selection,
        remaining=remaining,
        settled={t: settled[t] for t in selection if t in settled},
        ancestors=ancestors,
        generation=generation,
    )


# ---------------------------------------------------------------- the ancestors' campaign


@dataclass(frozen=True)
class CampaignPlace:
    """Where a run keeps its campaign: a file (resolved path) or a database and a campaign name."""

    file: str | None = None
    db: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, file: str | Path | None, db: str | None, name: str | None) -> CampaignPlace:
        if db is not None:
            return cls(db=db, name=name or "default")
        return cls(file=str(Path(file).resolve()) if file is not None else None)

    def describe(self) -> str:
        if self.db is not None:
            return f"the campaign {self.name!r} in {self.db}"
        return f"the campaign file {self.file}" if self.file is not None else "no campaign"


def _took_custody(root: str, manifest: RunManifest) -> bool:
    """The run registered in its campaign (custody/processes.json is written after start_run; a
    settlement is recorded after it): its spending may be in that campaign only."""
    return manifest.campaign_settlement is not None or RunRoot(root).custody_processes.exists()


def campaign_refusal(ancestors: list[str], here: CampaignPlace, campaign_exists: bool) -> str | None:
    """The sentence refusing a resume that does not continue its ancestors' campaign, or None.

    A resume settles the ancestry's remaining tasks under the same money record: another campaign
    (or a new one with a new baseline in the place of a vanished one) would let the ancestry's
    spending escape the ceiling. Ancestors are manifests already read by resolve_ancestry."""
    for root in ancestors:
        manifest = _load_manifest(root)
        theirs = CampaignPlace.of(manifest.campaign_file, manifest.campaign_db, manifest.campaign_name)
        if theirs != here:
            return (
                f"Ancestor {root} ran under {theirs.describe()}, but this resume names {here.describe()}; "
                "a resume must use its ancestors' campaign."
            )
        if here != CampaignPlace() and not campaign_exists and _took_custody(root, manifest):
            return (
                f"Ancestor {root} ran under {here.describe()}, which no longer exists; a resume continues "
                "its ancestors' campaign and never starts a new one."
            )
    return None
