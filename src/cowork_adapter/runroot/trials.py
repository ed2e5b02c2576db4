"""The one reader of trials: the run-root arguments of `report`, `export` and `compare` as groups of trials.

`expand_run_roots(paths)` takes what the operator named (trial-set folders written by `run --trials K`, plain
run roots, or both) and returns one TrialGroup per configuration. Inside a group:

- a trial-set folder's trials are its `trials.json`'s run roots, in order (a trial not started yet has none:
  every task of it counts as not attempted, METHODOLOGY.md §trials);
- plain run roots of one configuration identity (runroot/identity.py) over the same tasks are trials of each
  other, in the order they were created; run roots over disjoint task sets are shards of one trial (today's
  merge), and shards are matched into trials in creation order when each task set has the same number of roots;
- a run root that another named root resumes (its ancestry) is not a trial of its own: the report follows
  ancestry from the newest run, as it always has;
- run roots whose task sets overlap without being equal are one trial, merged as `report` merged them before
  trials existed.

Nothing here reads a ledger: the manifests and trials.json are enough to group, and the readers load rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Refusal
from ..schemas.manifest import RunManifest
from ..schemas.record import RecordInvalid
from ..schemas.trials import TrialSet, read_trial_set
from .identity import identity_difference
from .layout import TRIALS, RunRoot
from .manifest import read_manifest

STAGE = "report"


@dataclass(frozen=True)
class Trial:
    """One trial: the run roots whose rows together answer for its tasks (one, or several shards); none when
    the trial set's trial has not started."""

    name: str
    shards: tuple[Path, ...]


@dataclass(frozen=True)
class TrialGroup:
    """The trials of one configuration. `trial_set`: the folder when the group is a trial set."""

    name: str
    trials: tuple[Trial, ...]
    trial_set: Path | None = None
    record: TrialSet | None = field(default=None, compare=False)

    @property
    def k(self) -> int:
        return len(self.trials)

    @property
    def roots(self) -> list[Path]:
        return [root for trial in self.trials for root in trial.shards]


def is_trial_set(path: Path) -> bool:
    """A folder with trials.json (a regular file, never through a link)."""
    target = Path(path) / TRIALS
    return target.is_file() and not target.is_symlink()


def _trial_set_group(folder: Path) -> TrialGroup:
    try:
        record = read_trial_set(folder)
    except OSError as exc:
        raise Refusal(STAGE, f"{folder / TRIALS} cannot be read ({exc.strerror or type(exc).__name__}).") from None
    except RecordInvalid as exc:
        raise Refusal(STAGE, f"{folder / TRIALS} is not a trial set written by `run --trials` ({exc}).") from None
    trials = []
    for name in record.run_roots:
        root = folder / name
        started = root.is_dir() and not root.is_symlink() and RunRoot(root).manifest.is_file()
        trials.append(Trial(name=name, shards=(root.resolve(),) if started else ()))
    return TrialGroup(name=folder.resolve().name, trials=tuple(trials), trial_set=folder.resolve(), record=record)


def _manifest(root: Path) -> RunManifest:
    try:
        return read_manifest(root)
    except (OSError, ValueError) as exc:
        raise Refusal(STAGE, f"The run manifest of {root} is missing or unreadable ({type(exc).__name__}).") from None


def _tasks(manifest: RunManifest) -> frozenset[str]:
    sel = manifest.selection
    return frozenset(sel.selection_task_ids or sel.task_ids)


def same_identity(a: RunManifest, b: RunManifest) -> str | None:
    """The first identity difference of `a` from `b` (runroot/identity.py), or None."""
    return identity_difference(
        a,
        applied_config=b.applied_config,
        seed_head=b.seed.head if b.seed else None,
        bench_commit=b.bench.commit if b.bench else None,
        image_id=b.image.id if b.image else None,
    )


def _plain_trials(roots: list[tuple[Path, RunManifest]]) -> tuple[Trial, ...]:
    """Trials of plain run roots of one identity (see the module's rules)."""
    by_tasks: dict[frozenset[str], list[tuple[Path, RunManifest]]] = {}
    for root, manifest in roots:
        by_tasks.setdefault(_tasks(manifest), []).append((root, manifest))
    sets = list(by_tasks)
    disjoint = all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    if not disjoint:
        # Overlapping selections: one trial, merged as the report always merged (latest settled attempt wins).
        return (Trial(name="trial-1", shards=tuple(root for root, _ in roots)),)
    counts = {len(members) for members in by_tasks.values()}
    if len(counts) != 1:
        listing = ", ".join(f"{len(m)} over {len(s)} tasks" for s, m in by_tasks.items())
        raise Refusal(
            STAGE,
            f"The run roots of one configuration cover their task sets unevenly ({listing}), so they cannot be "
            "told apart into trials; name the run roots of each trial, or a trial set.",
        )
    for members in by_tasks.values():
        members.sort(key=lambda item: (item[1].created_at, str(item[0])))
    k = counts.pop()
    return tuple(
        Trial(name=f"trial-{i + 1}", shards=tuple(members[i][0] for members in by_tasks.values())) for i in range(k)
    )


def expand_run_roots(paths: Sequence[Path | str]) -> list[TrialGroup]:
    """The named run roots and trial-set folders as groups of trials, one group per configuration identity,
    in the order first named (Refusal, stage "report": an unreadable manifest or trials.json, shards that
    cannot be matched into trials)."""
    groups: list[TrialGroup] = []
    plain: list[tuple[Path, RunManifest]] = []
    for raw in paths:
        path = Path(raw)
        if is_trial_set(path):
            groups.append(_trial_set_group(path))
        else:
            resolved = path.resolve()
            if all(resolved != p for p, _ in plain):
                plain.append((resolved, _manifest(resolved)))
    ancestors = {str(Path(a).resolve()) for _, m in plain for a in m.selection.resume_from}
    plain = [(root, m) for root, m in plain if str(root) not in ancestors]
    identities: list[list[tuple[Path, RunManifest]]] = []
    for root, manifest in plain:
        for members in identities:
            if same_identity(manifest, members[0][1]) is None:
                members.append((root, manifest))
                break
        else:
            identities.append([(root, manifest)])
    for members in identities:
        groups.append(TrialGroup(name=members[0][0].name, trials=_plain_trials(members)))
    return groups
