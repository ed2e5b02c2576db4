"""The upstream runner's environment and the agent containers' key file: what of the launcher's
environment reaches the runner, the watchdog and the agents (never the provider key, except in the
agent-only env file on the --key-in-agent route). Apart from run.py, which owns custody's order."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..config import RunConfig
from ..fileio import create_exclusive
from ..resolved import reached
from ..schemas.manifest import RunManifest
from ..schemas.run_config import agent_base_url, model_provider

KEY_ENV_IN_AGENT = "COWORK_PROVIDER_KEY"


AGENT_ENTRY = "cowork_entry.py"


# Variables that could carry a provider key into the runner (and from it into every container).
KEY_CARRIERS = ("LLM_API_KEY", "MODEL_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY", "OPENAI_COMPATIBLE_API_KEY")


def runner_env(cfg: RunConfig, manifest: RunManifest, custody) -> dict[str, str]:
    """The upstream runner's environment: no key anywhere, the immutable image ID, our entry."""
    # No libpq variable either: the database password (PGPASSWORD) is the launcher's, not the runner's.
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in KEY_CARRIERS and k != cfg.provider.api_key_env and not k.startswith("PG")
    }
    image = reached(manifest.image, "the run's image (the image phase)")
    base.update(
        IMAGE=reached(image.id, "the run's image ID (the image phase)"),
        AGENT_ENTRY=AGENT_ENTRY,
        AGENT_PHASE_AWARE="1",
        MODEL_PROVIDER=model_provider(cfg),
        MODEL_NAME=cfg.agent.model,
        LLM_MODEL=cfg.agent.model,
        # The benchmark's own engines read the endpoint from these (the Ouroboros server drops them).
        MODEL_API_URL=agent_base_url(cfg),
        LLM_BASE_URL=agent_base_url(cfg),
        MAX_STEPS=str(cfg.agent.max_steps),
        TASK_TIMEOUT=str(cfg.agent.task_timeout),
    )
    return custody.environment(base)


def _watchdog_env(cfg: RunConfig) -> dict[str, str]:
    """The watchdog needs no key: the launcher's environment without any variable that may carry one."""
    return {k: v for k, v in os.environ.items() if k not in KEY_CARRIERS and k != cfg.provider.api_key_env}


def write_agent_env(path: Path, key: str) -> None:
    """The key for agent containers only: 0600, outside the benchmark tree (never mounted)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    # In place: the key is never staged under a name the watchdog and `clear` do not delete.
    create_exclusive(path, f"{KEY_ENV_IN_AGENT}={key}\n", mode=0o600, in_place=True)


def delete_agent_env(path: Path) -> None:
    """Remove the key's env file; an error is said, never raised (the way out must go on)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        print(f"cowork-adapter: could not delete the key file {path}: {exc.strerror}", file=sys.stderr, flush=True)
