"""Writing run_manifest.json: at admission, at each checkpoint, and finalised on every exit path."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path

from .schemas.manifest import RunManifest

MANIFEST_NAME = "run_manifest.json"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Write via a same-directory temp file, fsync and rename: readers see old or new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_manifest(run_root: Path, manifest: RunManifest) -> None:
    manifest.updated_at = utc_now()
    atomic_write_text(run_root / MANIFEST_NAME, manifest.to_json())


def read_manifest(run_root: Path) -> RunManifest:
    return RunManifest.model_validate_json((run_root / MANIFEST_NAME).read_text(encoding="utf-8"))
