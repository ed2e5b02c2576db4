"""The run's ownership label and the role label every container and network it causes carries.

The run label is the first 32 hex digits (128 bits) of the SHA-256 of the resolved run-root path:
one run root is never reused, so the label names one run; 128 bits make an accidental match with
another run's label negligible while keeping `docker ps` output readable.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

RUN_LABEL_KEY = "org.cowork-adapter.run"
ROLE_LABEL_KEY = "org.cowork-adapter.role"
RUN_LABEL_HEX_CHARS = 32

# The runner names its containers `<prefix>-<task id>`; the prefix is the role.
ROLES_BY_PREFIX = {"agent": "agent", "eval": "eval", "pg": "pg", "helper": "helper"}
ROLE_NETWORK = "network"
ROLE_OTHER = "other"


def run_label(run_root: Path) -> str:
    """The run's label value: sha256(str(run_root.resolve())) truncated to 32 hex digits."""
    return label_of_resolved_root(str(Path(run_root).resolve()))


def label_of_resolved_root(resolved: str) -> str:
    """The label of a run root already resolved (on the run's own machine, as it registered it)."""
    return hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:RUN_LABEL_HEX_CHARS]


def role_for_name(name: str | None) -> str:
    """The role of a container from its --name (`agent-…` → agent, …); no or unknown prefix → other."""
    if not name or "-" not in name:
        return ROLE_OTHER
    return ROLES_BY_PREFIX.get(name.split("-", 1)[0], ROLE_OTHER)


def label_filter(label: str) -> str:
    """The daemon-side filter value selecting exactly the run's resources (`key=value`)."""
    return f"{RUN_LABEL_KEY}={label}"
