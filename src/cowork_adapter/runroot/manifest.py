"""Writing run_manifest.json: at admission, at each checkpoint, and finalised on every exit path."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..fileio import replace_atomic
from ..schemas.manifest import RunManifest
from ..schemas.record import decode
from .layout import MANIFEST, RunRoot

MANIFEST_NAME = MANIFEST  # RunRoot.manifest


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def write_manifest(run_root: Path, manifest: RunManifest) -> None:
    manifest.updated_at = utc_now()
    replace_atomic(RunRoot(run_root).manifest, manifest.to_json())


def read_manifest(run_root: Path) -> RunManifest:
    return decode(RunRoot(run_root).manifest.read_bytes(), RunManifest)
