"""A checked RunConfig for tests that need only a few of its fields (engine, model, endpoint, ...).

Built through `RunConfig.from_flags` like a real run's, so every value a test gives is validated;
the locations are placeholders that nothing reads, and a dry run needs no campaign.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cowork_adapter.config import RunConfig

_NOWHERE = Path("/nonexistent/cowork-test")


def config_for(**fields: Any) -> RunConfig:
    flags = {
        "repo_dir": _NOWHERE / "seed",
        "bench_root": _NOWHERE / "bench",
        "run_root": _NOWHERE / "runs" / "r",
        "docker_host": "unix:///nonexistent/docker.sock",
        "dry_run": True,
    }
    return RunConfig.from_flags(**{**flags, **fields})
