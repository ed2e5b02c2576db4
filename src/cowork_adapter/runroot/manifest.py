"""Writing run_manifest.json: at admission, at each checkpoint, and finalised on every exit path."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ..fileio import replace_atomic
from ..schemas.manifest import RunManifest
from ..schemas.record import decode

MANIFEST_NAME = "run_manifest.json"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def write_manifest(run_root: Path, manifest: RunManifest) -> None:
    manifest.updated_at = utc_now()
    replace_atomic(run_root / MANIFEST_NAME, manifest.to_json())


def read_manifest(run_root: Path) -> RunManifest:
    return decode((run_root / MANIFEST_NAME).read_bytes(), RunManifest)
