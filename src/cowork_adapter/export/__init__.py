"""`cowork-adapter export RUN_ROOT... --format inspect --output-dir DIR`: runs as Inspect AI logs.

  transcript   one task's engine logs (or traj.json) as model turns and tool calls (safefile reads)
  run          the run's report, merged rows and transcripts, ready to map (no inspect_ai)
  inspect_log  the mapping to inspect_ai's EvalLog, written with its write_eval_log (imports inspect_ai)

  status       the log's status from the runs' outcomes, each sample's error (no inspect_ai)
  groups       which run roots make one log: the trials of one configuration (no inspect_ai)

Read-only over the run roots. One `.eval` per group of trials (one run root alone is a group), named
after its folder; an existing file is refused before anything is read, and a file that appears meanwhile
is never replaced.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ..custody.labels import run_label
from ..errors import Refusal
from ..runroot import layout
from ..runroot.layout import RunRoot
from ..vocab import ExitCode
from .groups import ExportGroup, export_groups
from .run import ExportRun, load_export, not_started

FORMATS = ("inspect",)
EXTRA_HINT = "pip install 'cowork-adapter[inspect]'"


def log_name(root: Path) -> str:
    """The log's file name for a run root: its folder's name and the start of its run label (the label
    its manifest recorded, unique per run, so two roots of one name differ). Refusal when the manifest
    cannot be read."""
    try:
        label = run_label(root)
    except OSError as exc:
        raise Refusal(
            "export",
            f"{root} has no readable {layout.MANIFEST} ({exc.strerror or type(exc).__name__}), "
            "so it is not a run root to export.",
        ) from None
    except ValueError as exc:
        raise Refusal("export", f"{RunRoot(root).manifest} is not a run manifest ({str(exc)[:200]}).") from None
    return f"{root.name}-{label[:8]}.eval"


def _require_inspect() -> None:
    if importlib.util.find_spec("inspect_ai") is None:
        raise Refusal(
            "export", f"Writing an Inspect log needs the inspect_ai package, which is not installed ({EXTRA_HINT})."
        )


def inspect_log_names(roots: list[Path]) -> tuple[str, ...]:
    """The .eval file name of each log the run roots make (one per group of trials: export.groups);
    Refusal when inspect_ai is missing or a root is given twice (decided before any file is written)."""
    _require_inspect()
    return tuple(group_log_name(group) for group in _groups(roots))


def group_log_name(group: ExportGroup) -> str:
    """One run root's log keeps its name (log_name); a group of trials is named after the group, with the
    start of its first trial's run label."""
    if not group.roots:
        raise Refusal("export", f"{group.name} has no trial that started, so there is nothing to export yet.")
    first = group.roots[0]
    if len(group.roots) == 1:
        return log_name(first)
    return f"{group.name}-{log_name(first).removeprefix(first.name + '-')}"


def _groups(roots: list[Path]) -> list[ExportGroup]:
    resolved = [str(root.resolve()) for root in roots]
    for i, root in enumerate(resolved):
        if root in resolved[:i]:
            raise Refusal("export", f"{roots[i]} is given twice; each run root is exported once.")
    groups = export_groups(roots)
    names = [group_log_name(group) for group in groups]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise Refusal(
                "export",
                f"{groups[i].roots[0]} would be written as {name}, as another run root given; export it apart.",
            )
    return groups


def planned_outputs(groups: list[ExportGroup], output_dir: Path) -> list[tuple[ExportGroup, Path]]:
    """Each log to write, with its file; Refusal when one already exists."""
    _require_inspect()
    planned = [(group, output_dir / group_log_name(group)) for group in groups]
    for _, path in planned:
        if os.path.lexists(path):
            raise Refusal(
                "export", f"{path} already exists, and an export never overwrites a file; choose another --output-dir."
            )
    return planned


def export_inspect(roots: list[Path], output_dir: Path, workers: int | None = None) -> list[Path]:
    """Write one .eval per group of trials (export.groups) into `output_dir` (created if needed); Refusal
    on bad input."""
    _require_inspect()
    return write_groups(_groups(roots), output_dir, workers)


def write_groups(groups: list[ExportGroup], output_dir: Path, workers: int | None = None) -> list[Path]:
    """Write one .eval per group (its trials the log's epochs, each trial's shards merged); Refusal on bad input."""
    planned = planned_outputs(groups, output_dir)
    from .inspect_log import write_log

    # Every root read before anything is written.
    loaded = [_load_group(group, workers) for group, _ in planned]
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for trials, (group, path) in zip(loaded, planned, strict=True):
        try:
            written.append(write_log(trials, path, group.name))
        except FileExistsError:
            raise Refusal(
                "export",
                f"{path} appeared while the export ran, and an export never overwrites a file; nothing was replaced.",
            ) from None
    return written


def _load_group(group: ExportGroup, workers: int | None) -> list[ExportRun]:
    """The group's trials ready to map; a trial with no run root (not started) is every task not attempted."""
    loaded: list[ExportRun | None] = [load_export(list(trial), workers) if trial else None for trial in group.trials]
    first = next((run for run in loaded if run is not None), None)
    if first is None:
        raise Refusal("export", f"{group.name} has no trial that started, so there is nothing to export yet.")
    return [run or not_started(first, f"trial-{i}") for i, run in enumerate(loaded, 1)]


def run_export_command(roots: list[Path], output_dir: Path, fmt: str, workers: int | None = None) -> int:
    if fmt not in FORMATS:
        print(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    if workers is not None and workers < 1:
        print(f"--workers must be at least 1, not {workers}.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    try:
        written = export_inspect(roots, output_dir, workers)
    except Refusal as refusal:
        print(f"cowork-adapter export refused ({refusal.stage}): {refusal.sentence}", file=sys.stderr)
        return int(ExitCode.REFUSED)
    except OSError as exc:
        print(
            f"The export could not be written ({exc.strerror or type(exc).__name__}: {exc.filename}).", file=sys.stderr
        )
        return int(ExitCode.REFUSED)
    for path in written:
        print(f"wrote {path}")
    print(f"open with: inspect view --log-dir {output_dir}")
    return int(ExitCode.OK)
