"""Writing the audit: the report created exclusively, never over an existing file, and the command.

- audit_run(run_dir) -> AuditReport          build, then write the launcher's audit file
                                             (schemas.audit.launcher_audit_path; else <stem>-<n>.json)
- run_audit_command(run_dir, output) -> int  `cowork-adapter audit` (exit 0, or 2 with one sentence)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import Refusal
from ..fileio import create_exclusive
from ..schemas.audit import AuditReport, launcher_audit_path
from ..vocab import ExitCode
from .run import build_audit


def write_exclusive(path: Path, text: str) -> None:
    """Create `path` holding `text` (fileio.create_exclusive); FileExistsError if it exists (left untouched)."""
    create_exclusive(path, text)


def audit_run(run_dir: Path, workers: int | None = None) -> AuditReport:
    """Audit a run and write launcher_audit_path(run) exclusively, or the first free <stem>-<n>.json."""
    report = build_audit(run_dir, workers)
    text = report.to_json()
    root = Path(run_dir)
    first = launcher_audit_path(root)
    candidates = [first] + [root / f"{first.stem}-{n}{first.suffix}" for n in range(1, 10_000)]
    for path in candidates:
        try:
            write_exclusive(path, text)
            return report
        except FileExistsError:
            continue
    raise Refusal("audit", f"{root} already holds 10000 audit reports; none was overwritten.")


def run_audit_command(run_dir: Path, output: Path | None, workers: int | None = None) -> int:
    """The `audit` command: report to stdout, or to a new file. 0, or 2 with one sentence.

    `workers`: scanning processes (None: os.cpu_count(); below 1 is refused)."""
    if output is not None and os.path.lexists(output):
        print(f"{output} already exists; the audit never overwrites a report.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    if workers is not None and workers < 1:
        print(f"--workers must be at least 1, not {workers}.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    try:
        report = build_audit(Path(run_dir), workers)
    except Refusal as refusal:
        print(refusal.sentence, file=sys.stderr)
        return int(refusal.exit_code)
    text = report.to_json()
    if output is None:
        sys.stdout.write(text)
        return int(ExitCode.OK)
    try:
        write_exclusive(Path(output), text)
    except FileExistsError:
        print(f"{output} already exists; the audit never overwrites a report.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    except OSError as exc:
        print(f"Cannot create {output}: {exc.strerror or type(exc).__name__}.", file=sys.stderr)
        return int(ExitCode.REFUSED)
    return int(ExitCode.OK)
