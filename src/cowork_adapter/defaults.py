"""The run flags' defaults and choices, and the few value checks the command line itself runs.

Kept apart from config/ (and free of msgspec) so that the command line can declare its flags
without importing the validation machinery every command would then pay for at start-up; a default is
imported from here, never through config/. Every check of a `run` flag lives in config/; the three
here are the ones the CLI must run before any command is chosen (the key on the command line, in
`main`) or for commands that build no RunConfig (`clear`, `campaign reconcile`: --api-key-env,
--meter-url), where importing config/ would load msgspec on their refused paths
(tests/unit/test_cli_startup_imports.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import Refusal

PINNED_BENCH_COMMIT = "d943e75bc0fc8e3b27141979300cd8cbcd1e890d"
DEFAULT_MODEL = "moonshotai/kimi-k3"
DEFAULT_API_KEY_ENV = "OPENROUTER_API_KEY"
DEFAULT_METER_URL = "https://openrouter.ai/api/v1"
# --campaign-name: the campaign's row in --campaign-db when none is named.
DEFAULT_CAMPAIGN_NAME = "default"
# Upstream agent containers run `sleep 7200`; a longer agent phase outlives its own container.
AGENT_CONTAINER_SLEEP_SEC = 7200
TASK_TIMEOUT_WARN_SEC = 7100
# Docker refuses a memory limit below 6 MiB at container creation; refuse it here instead.
DOCKER_MIN_MEMORY_BYTES = 6 * 1024 * 1024
# The per-container limits when --cpus / --memory are not given, each capped at what the daemon has
# (Docker refuses a CPU quota above the daemon's CPU count at container creation).
DEFAULT_CPUS = 4.0
DEFAULT_MEMORY_BYTES = 16 << 30
# A substring check on argv is only meaningful for a key long enough not to match by chance.
MIN_KEY_LEN_FOR_SUBSTRING = 8

# Admission by load (host/admission.py applies them; how each default was measured is in its docstring).
GIB = 2**30
DEFAULT_MAX_LOAD_PER_CPU = 7.0
DEFAULT_MIN_MEM_AVAILABLE_BYTES = 2 * GIB
DEFAULT_MAX_DAEMON_PING_SEC = 2.0

SAFETY_MODES = ("full", "light", "off")
TASK_REVIEW_MODES = ("off", "auto", "required")
REVIEW_ENFORCEMENTS = ("advisory", "blocking")
RUNTIME_MODES = ("light", "advanced", "pro")
PROBE_CHOICES = ("none", "inventory", "stateful")

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
# An upstream engine entry is a file directly under /workspace (e.g. main_strands.py).
UPSTREAM_ENTRY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
WORD = re.compile(r"[A-Za-z0-9_.-]+")


class InvalidFlag(ValueError):
    """A flag value or combination is wrong; carries the refusal stage and sentence."""

    def __init__(self, sentence: str, stage: str = "flags") -> None:
        super().__init__(sentence)
        self.stage = stage
        self.sentence = sentence


@dataclass(frozen=True)
class AdmissionLimits:
    """The three admission flags as one value: config builds it, host/admission.py's `decide` applies it."""

    max_load_per_cpu: float = DEFAULT_MAX_LOAD_PER_CPU
    min_mem_available_bytes: int = DEFAULT_MIN_MEM_AVAILABLE_BYTES
    max_daemon_ping_sec: float = DEFAULT_MAX_DAEMON_PING_SEC

    def __post_init__(self) -> None:
        # Flags are checked where they are parsed; this guards the arithmetic against NaN/inf.
        for name in ("max_load_per_cpu", "max_daemon_ping_sec"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number greater than 0 (got {value})")
        if self.min_mem_available_bytes < 0:
            raise ValueError(f"min_mem_available_bytes must be >= 0 (got {self.min_mem_available_bytes})")


def flag_name(field: str) -> str:
    """The command-line spelling of a RunConfig field (`max_steps` -> `--max-steps`)."""
    return "--" + field.replace("_", "-")


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `flag` on a command line read without parsing it (`--flag V` or `--flag=V`; the
    first one given): the key variable's name before parsing, a run's daemon from its recorded argv."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def check_env_name(flag: str, value: str) -> str:
    if ENV_NAME.fullmatch(value) is None:
        raise InvalidFlag(f"{flag} {value!r} is not a valid environment variable name.")
    return value


def check_http_url(flag: str, value: str) -> str:
    """An http(s) URL with a host, without a trailing slash (so paths can be appended)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise InvalidFlag(f"{flag} {value!r} is not an http(s) URL with a host and no credentials.")
    return value.rstrip("/")


def refuse_key_on_command_line(argv: Sequence[str], environ: Mapping[str, str], api_key_env: str) -> None:
    """Refuse when the provider key (the value of `api_key_env`, or of the default key variable)
    appears in argv, as a whole element or inside one."""
    names = {api_key_env, DEFAULT_API_KEY_ENV}
    keys = [environ.get(name, "") for name in names]
    for key in filter(None, keys):
        for element in argv:
            if element == key or (len(key) >= MIN_KEY_LEN_FOR_SUBSTRING and key in element):
                raise Refusal("credential", "the provider key must not appear on the command line.")


# The model gateway's caps (gateway/policy.py applies them; the flags --llm-gateway-max-tokens and
# --llm-gateway-unknown-cost-usd change them). Output tokens one request may ask for (clamped to it):
DEFAULT_GATEWAY_MAX_TOKENS = 32768
# What a forwarded request whose answer carries no `usage.cost` is counted at (docs/security.md, the model
# gateway): DEFAULT_GATEWAY_MAX_TOKENS output tokens at $75 per million ($2.46) plus 160k prompt tokens at
# $15 per million ($2.40), the list prices of the dearest mainstream models (Claude Opus class), rounded up.
DEFAULT_GATEWAY_UNKNOWN_COST_USD = 5.0
