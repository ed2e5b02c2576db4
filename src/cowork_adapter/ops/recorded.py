"""What a run root recorded about where it ran (its daemon, meter, key variable, TMPDIR), and the
`cowork-adapter clear` line that finishes it: read by `clear` itself and by `status` / `stop`."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..custody.shim_config import ShimConfig
from ..defaults import flag_value
from ..runroot.layout import RunRoot
from ..schemas.manifest import RunManifest
from ..schemas.record import RecordInvalid, decode


def recorded_docker_host(run_root: Path, manifest: RunManifest | None) -> str | None:
    """The daemon the run used: the manifest's field, else the shim's config, else its argv."""
    if manifest is not None and manifest.docker_host:
        return manifest.docker_host
    try:
        text = RunRoot(run_root).shim_config.read_text(encoding="utf-8")
        return decode(text, ShimConfig).docker_host
    except (OSError, RecordInvalid):
        pass
    return flag_value(manifest.argv if manifest is not None else [], "--docker-host")


def recorded_meter_url(manifest: RunManifest | None) -> str | None:
    meter = manifest.budgets.meter if manifest is not None else None
    return (meter.url or None) if meter is not None else None


def recorded_key_env(manifest: RunManifest | None) -> str | None:
    return (manifest.budgets.api_key_env or None) if manifest is not None else None


def run_tmpdir(manifest: RunManifest) -> Path | None:
    """The runner's run-scoped TMPDIR (<resource_root>/tmp-<label[:12]>, as run/run.py makes it)."""
    root = manifest.budgets.resource_root
    if not root:
        return None
    return Path(root).resolve() / f"tmp-{manifest.run_label[:12]}"


def clear_hint(run_root: Path, manifest: RunManifest | None) -> str:
    """The exact `cowork-adapter clear` line for this run, every recorded flag spelled out.

    The campaign file (and the meter that settles it) is named only when the file exists: a run
    killed before creating it has nothing to settle, and `clear` refuses a named campaign file
    that is missing.
    """
    parts = ["cowork-adapter", "clear", str(run_root)]
    campaign = manifest.campaign_file if manifest is not None else None
    meter = recorded_meter_url(manifest)
    if campaign and Path(campaign).is_file():
        parts += ["--campaign-file", campaign] + (["--meter-url", meter] if meter else [])
    host = recorded_docker_host(run_root, manifest)
    parts += ["--docker-host", host] if host else ["--docker-host", "DOCKER_HOST"]
    return " ".join(shlex.quote(p) for p in parts) + " --operator-note '...'"


def clear_key_note(manifest: RunManifest | None) -> str:
    """` (with the provider key in $X)` when clearing will settle a campaign, else empty."""
    campaign = manifest.campaign_file if manifest is not None else None
    key_env = recorded_key_env(manifest)
    return f" (with the provider key in ${key_env})" if campaign and Path(campaign).is_file() and key_env else ""
