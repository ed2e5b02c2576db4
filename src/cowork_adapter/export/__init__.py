"""`cowork-adapter export RUN_ROOT... --format inspect --output-dir DIR`: each run as an Inspect AI log.

  transcript   one task's engine logs (or traj.json) as model turns and tool calls (safefile reads)
  run          the run's report, merged rows and transcripts, ready to map (no inspect_ai)
  inspect_log  the mapping to inspect_ai's EvalLog, written with its write_eval_log (imports inspect_ai)

Read-only over the run roots. One `.eval` per run root, named after its folder; an existing file
is refused before anything is read, and a file that appears meanwhile is never replaced.
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
from .run import load_export

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
    """The .eval file name of each run root; Refusal when inspect_ai is missing or a root is given twice
    (decided before any file is written)."""
    _require_inspect()
    names = tuple(log_name(root) for root in roots)
    for i, name in enumerate(names):
        if name in names[:i]:
            raise Refusal("export", f"{roots[i]} is given twice; each run root is exported once.")
    return names


def planned_outputs(roots: list[Path], output_dir: Path) -> list[Path]:
    """The file each run root is written to; Refusal when one already exists."""
    paths = [output_dir / name for name in inspect_log_names(roots)]
    for path in paths:
        if os.path.lexists(path):
            raise Refusal(
                "export", f"{path} already exists, and an export never overwrites a file; choose another --output-dir."
            )
    return paths


def export_inspect(roots: list[Path], output_dir: Path, workers: int | None = None) -> list[Path]:
    """Write one .eval per run root into `output_dir` (created if needed); Refusal on bad input."""
    paths = planned_outputs(roots, output_dir)
    from .inspect_log import write_log

    runs = [load_export(root, workers) for root in roots]  # every root read before anything is written
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for run, path in zip(runs, paths, strict=True):
        try:
            written.append(write_log(run, path))
        except FileExistsError:
            raise Refusal(
                "export",
                f"{path} appeared while the export ran, and an export never overwrites a file; nothing was replaced.",
            ) from None
    return written


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
