"""The run's ownership label and the role label every container and network it causes carries.

The run label is the first 32 hex digits (128 bits) of the SHA-256 of the resolved run-root path
and a random nonce drawn when the run starts (`new_run_label`), recorded in the manifest
(`run_nonce` beside `run_label`) and, for a shared campaign, in its host run. The path alone would
name two runs alike when two hosts use the same path on one daemon, and each would clean up the
other's containers. A run root from before the nonce has none and keeps its path-only label.

Readers never recompute a label from the path: they read the one the run recorded (`run_label`
here, the manifest's `run_label`, the campaign's `active_run.run_label`, the host run's).
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

from ..runroot.layout import RunRoot
from ..schemas.manifest import RunManifest
from ..schemas.record import decode

RUN_LABEL_KEY = "org.cowork-adapter.run"
ROLE_LABEL_KEY = "org.cowork-adapter.role"
RUN_LABEL_HEX_CHARS = 32
NONCE_BYTES = 16

# The runner names its containers `<prefix>-<task id>`; the prefix is the role.
ROLES_BY_PREFIX = {"agent": "agent", "eval": "eval", "pg": "pg", "helper": "helper"}
ROLE_NETWORK = "network"
# The network a run makes for its model gateway to listen on (gateway/listen.py); no container joins it.
ROLE_GATEWAY = "gateway"
ROLE_OTHER = "other"


def label_of_resolved_root(resolved: str, nonce: str | None = None) -> str:
    """The label of a run root already resolved (on the run's own machine, as it registered it) and
    its nonce; without a nonce, the path-only label of a run from before the nonce."""
    text = resolved if nonce is None else f"{resolved}\0{nonce}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:RUN_LABEL_HEX_CHARS]


def path_label(root: Path) -> str:
    """The path-only label (runs from before the nonce; a label for something that is not a run)."""
    return label_of_resolved_root(str(Path(root).resolve()))


def new_run_label(run_root: Path) -> tuple[str, str]:
    """(label, nonce) for a run starting now: unique per run, even for a path used before or elsewhere."""
    nonce = secrets.token_hex(NONCE_BYTES)
    return label_of_resolved_root(str(Path(run_root).resolve()), nonce), nonce


def run_label(run_root: Path) -> str:
    """The label an existing run root recorded (its manifest's `run_label`). Raises OSError when the
    run root has no manifest and ValueError when it cannot be read: a label is never guessed."""
    return decode(RunRoot(run_root).manifest.read_bytes(), RunManifest).run_label


def role_for_name(name: str | None) -> str:
    """The role of a container from its --name (`agent-…` → agent, …); no or unknown prefix → other."""
    if not name or "-" not in name:
        return ROLE_OTHER
    return ROLES_BY_PREFIX.get(name.split("-", 1)[0], ROLE_OTHER)


def label_filter(label: str) -> str:
    """The daemon-side filter value selecting exactly the run's resources (`key=value`)."""
    return f"{RUN_LABEL_KEY}={label}"
