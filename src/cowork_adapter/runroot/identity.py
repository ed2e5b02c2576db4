"""Whether two runs ran under the same conditions: the one comparison `--resume-from` (run/recovery.py)
and the readers of finished runs (report/merge.py, report/campaign.py) share.

A run's identity is its manifest's `applied_config` (RunConfig.applied_config: every condition that
changes the agent's world or its money: the model and engine settings, the container limits, the key's
route, the gateway's caps), its seed head, its benchmark commit and its image ID. Results are merged and
a task is never repeated only across runs whose identities agree. It lives here, below run/ and report/,
because both read finished run roots and neither should need the other's machinery.

Which RunConfig fields enter `applied_config` and which are exempt (where the run is, how much it may
spend, which tasks) is listed once, in config/identity.py's IDENTITY_EXEMPT; tests/unit/test_identity.py walks
every field of RunConfig and fails on one that is in neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..schemas.manifest import RunManifest

DIAGNOSTIC_FLAG = "diagnostic_eval_on_truncation"
# Keys a manifest written before they were recorded lacks, with the value that manifest's run had.
# The diagnostic flag's absence meant "off"; nothing else is assumed: a run from before the key route or
# the gateway's caps were recorded differs from every run after, so it is never merged with one or resumed
# by one (what it ran under cannot be told from its manifest).
ASSUMED_WHEN_ABSENT: dict[str, Any] = {DIAGNOSTIC_FLAG: False}
_MISSING = object()


def normalized_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The applied config as the comparison sees it: each key of ASSUMED_WHEN_ABSENT filled in when absent."""
    out = dict(config or {})
    for key, value in ASSUMED_WHEN_ABSENT.items():
        out.setdefault(key, value)
    return out


def first_config_difference(current: Mapping[str, Any], other: Mapping[str, Any]) -> str | None:
    """The first (sorted) key whose value differs between two normalised configs, or None."""
    a, b = normalized_config(current), normalized_config(other)
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            return key
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def identity_difference(
    manifest: RunManifest,
    *,
    applied_config: Mapping[str, Any],
    seed_head: str | None,
    bench_commit: str | None,
    image_id: str | None,
    image_pending: bool = False,
) -> str | None:
    """A phrase naming the first identity difference of `manifest` from the current run, or None.

    `image_pending`: the current image is built later (preflight), so only an ancestor that
    recorded no image can be told apart now: any image built later has an ID."""
    key = first_config_difference(applied_config, manifest.applied_config)
    if key is not None:
        theirs = normalized_config(manifest.applied_config).get(key, "<absent>")
        ours = normalized_config(applied_config).get(key, "<absent>")
        return f"applied_config key {key!r} ({_short(theirs)} there, {_short(ours)} now)"
    their_seed = manifest.seed.head if manifest.seed else None
    if their_seed != seed_head:
        return f"seed head ({their_seed} there, {seed_head} now)"
    their_bench = manifest.bench.commit if manifest.bench else None
    if their_bench != bench_commit:
        return f"benchmark commit ({their_bench} there, {bench_commit} now)"
    their_image = manifest.image.id if manifest.image else None
    if image_pending:
        return "image ID (none recorded there; the image to be built will have one)" if their_image is None else None
    if their_image != image_id:
        return f"image ID ({their_image} there, {image_id} now)"
    return None
