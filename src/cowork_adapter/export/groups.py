"""Which run roots make one Inspect log: groups of trials, each trial one or more run roots (shards).

One log per group: the trials of one configuration are Inspect's epochs of one eval (each task a sample
once per trial), so the viewer and inspect_ai's reducers see them as one result. `export_groups` is the
one place the CLI's run-root arguments become groups; when runroot/trials.py's `expand_run_roots` (the
trial-set reader: `R/trials.json`, `R/trial-1..K`) is on main, this function becomes a call to it
mapped to ExportGroup, and nothing else in export/ changes.

Until then, run roots are grouped by what they are (no inspect_ai here):
- one run root is one group of one trial;
- run roots with the same configuration identity (runroot/identity.py: the applied config, seed head,
  benchmark commit, image ID) and the same selected tasks are the trials of one group, in the order given;
- a run root in another given root's recovery ancestry is never that root's trial (the ancestry is merged
  into its descendant's trial), so it makes a group of its own, as it did before trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import Refusal
from ..runroot.identity import identity_difference
from ..runroot.layout import RunRoot
from ..runroot.manifest import read_manifest
from ..schemas.manifest import RunManifest

STAGE = "export"
NAME_CAP = 80  # characters of a log's run name made of several roots' names


@dataclass(frozen=True)
class ExportGroup:
    """The run roots of one log: `trials[i]` are trial i+1's run roots (shards over disjoint tasks; the
    recovery ancestry of each is found from its manifest; none: not started yet). `name` is the run's name
    the log carries."""

    name: str
    trials: tuple[tuple[Path, ...], ...]

    @property
    def roots(self) -> tuple[Path, ...]:
        return tuple(root for trial in self.trials for root in trial)


def _manifest(root: Path) -> RunManifest:
    try:
        return read_manifest(root)
    except OSError as exc:
        raise Refusal(
            STAGE, f"{root} has no readable {RunRoot(root).manifest.name} ({exc.strerror or type(exc).__name__})."
        ) from None
    except ValueError as exc:
        raise Refusal(STAGE, f"{RunRoot(root).manifest} is not a run manifest ({str(exc)[:200]}).") from None


def _ancestry(root: Path, manifest: RunManifest) -> set[str]:
    """Every ancestor's resolved path (the `--resume-from` chain), read from the manifests; a root whose
    manifest cannot be read ends the walk there (the report's reader refuses it later, in one sentence)."""
    seen: set[str] = set()
    pending = [Path(p) for p in manifest.selection.resume_from]
    while pending:
        path = pending.pop()
        key = str(path.resolve())
        if key in seen:
            continue
        seen.add(key)
        try:
            pending.extend(Path(p) for p in read_manifest(path).selection.resume_from)
        except (OSError, ValueError):
            continue
    return seen


def _same_configuration(a: RunManifest, b: RunManifest) -> bool:
    return (
        identity_difference(
            a,
            applied_config=b.applied_config,
            seed_head=b.seed.head if b.seed else None,
            bench_commit=b.bench.commit if b.bench else None,
            image_id=b.image.id if b.image else None,
        )
        is None
        and a.engine == b.engine
    )


def _selection(m: RunManifest) -> frozenset[str]:
    return frozenset(m.selection.selection_task_ids or m.selection.task_ids)


def group_name(trials: list[Path]) -> str:
    """A trial set's name: its folder's when every trial lies in one folder (R/trial-1..K), else the roots'
    names joined; one root's own name."""
    if len(trials) == 1:
        return trials[0].name
    parents = {p.resolve().parent for p in trials}
    if len(parents) == 1:
        return next(iter(parents)).name
    joined = "+".join(p.name for p in trials)
    return joined if len(joined) <= NAME_CAP else joined[: NAME_CAP - 3] + "..."


def export_groups(roots: list[Path]) -> list[ExportGroup]:
    """The CLI's run roots as groups of trials, in the order first given (see the module's rules).

    When runroot/trials.py is on main, this body becomes (a trial with no shards, not started yet, is an
    epoch of tasks not attempted: export.run.not_started):
        return [ExportGroup(name=g.name, trials=tuple(t.shards for t in g.trials)) for g in expand_run_roots(roots)]
    """
    manifests = [_manifest(root) for root in roots]
    resolved = [str(root.resolve()) for root in roots]
    ancestries = [_ancestry(root, m) for root, m in zip(roots, manifests, strict=True)]
    groups: list[list[int]] = []
    for i, manifest in enumerate(manifests):
        for group in groups:
            first = manifests[group[0]]
            related = any(resolved[j] in ancestries[i] or resolved[i] in ancestries[j] for j in group)
            if not related and _selection(first) == _selection(manifest) and _same_configuration(manifest, first):
                group.append(i)
                break
        else:
            groups.append([i])
    return [
        ExportGroup(name=group_name([roots[i] for i in group]), trials=tuple((roots[i],) for i in group))
        for group in groups
    ]
