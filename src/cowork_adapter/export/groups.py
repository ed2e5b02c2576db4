"""Which run roots make one Inspect log: groups of trials, each trial one or more run roots (shards).

One log per group: the trials of one configuration are Inspect's epochs of one eval (each task a sample
once per trial), so the viewer and inspect_ai's reducers see them as one result. The groups are the ones
`report` and `compare` see: runroot/trials.py's `expand_run_roots` is the one reader of the CLI's run-root
arguments (trial-set folders written by `run --trials K`, plain run roots, or both), and this module only
maps its groups to what export/ writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..runroot.trials import expand_run_roots

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
    """The CLI's run roots and trial sets as groups of trials (runroot/trials.py's rules). A trial with no
    shards has not started: it is an epoch of tasks not attempted (export.run.not_started)."""
    return [
        ExportGroup(name=g.name if g.trial_set else group_name(g.roots), trials=tuple(t.shards for t in g.trials))
        for g in expand_run_roots(roots)
    ]
