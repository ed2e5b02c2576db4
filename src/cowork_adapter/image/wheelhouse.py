"""A wheelhouse for a container's Python, resolved on the host with `pip download`.

Containers here cannot reach the package index, so images install with `pip install --no-index`
from wheels downloaded on the host for the container's Python version and platform. Every wheel
is recorded with its SHA-256 and size. Downloads are cached under
`<cache_dir>/<hash of the inputs>/` (default ~/.cache/cowork-adapter/wheelhouse, or
$COWORK_ADAPTER_CACHE/wheelhouse), so the same inputs never download twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

RECORDS_FILE = "wheelhouse.json"  # written last: its presence marks a complete cache entry
DEFAULT_TIMEOUT_S = 900
_SCHEMA = "cowork_adapter.wheelhouse.v1"


@dataclass(frozen=True)
class WheelRecord:
    filename: str
    sha256: str
    size: int


def default_cache_dir() -> Path:
    root = os.environ.get("COWORK_ADAPTER_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "cowork-adapter"
    return base / "wheelhouse"


def inputs_key(
    requirements: Sequence[str],
    *,
    python_version: str,
    platforms: Sequence[str],
    implementation: str = "cp",
    pip_args: Sequence[str] = (),
) -> str:
    """Content hash of everything that decides which wheels pip picks."""
    payload = {
        "schema": _SCHEMA,
        "requirements": list(requirements),
        "python_version": python_version,
        "platforms": list(platforms),
        "implementation": implementation,
        "pip_args": list(pip_args),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def hash_wheels(folder: Path) -> list[WheelRecord]:
    """A record for every *.whl in folder, sorted by file name."""
    records = []
    for path in sorted(Path(folder).glob("*.whl")):
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        records.append(WheelRecord(path.name, digest.hexdigest(), path.stat().st_size))
    return records


def _download(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str,
    platforms: Sequence[str],
    implementation: str,
    pip_args: Sequence[str],
    timeout: float,
) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "-q"]
    cmd += ["--only-binary=:all:", "--python-version", python_version, "--implementation", implementation]
    for platform in platforms:
        cmd += ["--platform", platform]
    cmd += ["-d", str(dest), *pip_args, *requirements]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"pip download did not finish within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"pip download failed (exit {proc.returncode}):\n{tail}")


def build_wheelhouse(
    requirements: list[str],
    dest: Path,
    *,
    python_version: str,
    platforms: list[str],
    implementation: str = "cp",
    pip_args: Sequence[str] = (),
    cache_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[WheelRecord]:
    """Binary wheels for requirements (and their dependencies) copied into dest; their records.

    python_version is like "3.11"; platforms are pip platform tags (several manylinux tags).
    pip_args are extra pip options (e.g. --find-links); they are part of the cache key.
    Raises RuntimeError when pip fails or times out. dest is created if needed.
    """
    key = inputs_key(
        requirements,
        python_version=python_version,
        platforms=platforms,
        implementation=implementation,
        pip_args=pip_args,
    )
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = cache / key
    if not (entry / RECORDS_FILE).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        try:
            _download(
                requirements,
                staging,
                python_version=python_version,
                platforms=platforms,
                implementation=implementation,
                pip_args=pip_args,
                timeout=timeout,
            )
            records = hash_wheels(staging)
            (staging / RECORDS_FILE).write_text(
                json.dumps({"schema": _SCHEMA, "key": key, "wheels": [asdict(r) for r in records]}, indent=2)
            )
            if entry.exists():  # a concurrent builder finished first; its copy is as good
                shutil.rmtree(staging)
            else:
                staging.rename(entry)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    records = _verified_records(entry)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for record in records:
        shutil.copyfile(entry / record.filename, dest / record.filename)
    return records


def _verified_records(entry: Path) -> list[WheelRecord]:
    """The cache entry's records, checked against the wheels on disk (a damaged entry raises)."""
    saved = json.loads((entry / RECORDS_FILE).read_text())
    expected = [WheelRecord(**item) for item in saved["wheels"]]
    if hash_wheels(entry) != expected:
        raise RuntimeError(f"wheelhouse cache entry {entry} does not match its records; delete it")
    return expected


def records_json(records: Sequence[WheelRecord]) -> str:
    """A stable JSON text of the records (for image labels and manifests)."""
    return json.dumps([asdict(r) for r in records], sort_keys=True, separators=(",", ":"))
