"""The run config the host writes (JSON, no secrets) and the in-image paths (env-overridable)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .vocab import REFERENCE_ENGINES

RUN_CONFIG_SCHEMA: Final = "cowork_adapter.run_config.v1"
DEFAULT_RUN_CONFIG = "/workspace/configs/cowork_adapter_run.json"
DEFAULT_KEY_ENV: Final = "COWORK_PROVIDER_KEY"


class ConfigError(ValueError):
    """The run config is missing or invalid (summary reason config_invalid)."""


@dataclass(frozen=True)
class EntrypointConfig:
    """The entrypoint's checked view of the run config file (written from schemas.run_config.EntrypointConfigFile)."""

    engine: str
    model: str
    settings: dict
    disabled_tools: list
    task_timeout_sec: float
    mcp_tool_timeout_sec: float
    proxy_port: int
    server_port: int
    truncation_reason_codes: list
    diagnostic_eval_on_truncation: bool
    credential_setting: str
    key_env: str
    openai_compatible_base_url: str | None
    agent_short_name: str
    path: str = ""

    @property
    def reference_engine(self) -> bool:
        """oracle or nop: an agent phase without a model (see vocab.EngineKind)."""
        return self.engine in REFERENCE_ENGINES

    @property
    def upstream_entry(self) -> str | None:
        """The entry file of an `upstream:<entry>` engine, else None."""
        return self.engine.split(":", 1)[1] if self.engine.startswith("upstream:") else None


def run_config_path(env: Mapping[str, str]) -> str:
    return env.get("COWORK_RUN_CONFIG") or DEFAULT_RUN_CONFIG


def _need(raw: Mapping, key: str, kind: Any, what: str) -> Any:
    if key not in raw:
        raise ConfigError(f"run config lacks {key}")
    value = raw[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"run config {key} must be {what}")
    return value


def _positive(raw: Mapping, key: str) -> float:
    value = _need(raw, key, (int, float), "a number")
    # NaN fails `value > 0` already; math.isnan says so where a reader looks for it (a JSON reader
    # that accepts NaN, as Python's does, must not yield a NaN timeout).
    if not value > 0 or math.isnan(value) or math.isinf(value):
        raise ConfigError(f"run config {key} must be a positive finite number")
    return float(value)


def _port(raw: Mapping, key: str) -> int:
    value = _need(raw, key, int, "an integer")
    if not 0 < value < 65536:
        raise ConfigError(f"run config {key} must be a TCP port")
    return value


def parse_run_config(raw: Any, path: str = "") -> EntrypointConfig:
    """Validate a decoded run config; raises ConfigError with one sentence on the first problem."""
    if not isinstance(raw, dict):
        raise ConfigError("run config is not a JSON object")
    if raw.get("schema") != RUN_CONFIG_SCHEMA:
        raise ConfigError(f"run config schema is not {RUN_CONFIG_SCHEMA}")
    engine = _need(raw, "engine", str, "a string")
    if engine not in ("ouroboros", *REFERENCE_ENGINES) and not (
        engine.startswith("upstream:") and len(engine) > 9 and "/" not in engine[9:] and not engine[9:].startswith(".")
    ):
        raise ConfigError("run config engine must be ouroboros, oracle, nop or upstream:<entry file>")
    model = _need(raw, "model", str, "a string")
    if not model.strip():
        raise ConfigError("run config model is empty")
    settings = _need(raw, "settings", dict, "an object")
    disabled = _need(raw, "disabled_tools", list, "a list")
    if not all(isinstance(t, str) for t in disabled):
        raise ConfigError("run config disabled_tools must be strings")
    codes = _need(raw, "truncation_reason_codes", list, "a list")
    if not all(isinstance(c, str) for c in codes):
        raise ConfigError("run config truncation_reason_codes must be strings")
    base_url = raw.get("openai_compatible_base_url")
    if base_url is not None and not isinstance(base_url, str):
        raise ConfigError("run config openai_compatible_base_url must be a string or null")
    short = _need(raw, "agent_short_name", str, "a string")
    if not short.strip():
        raise ConfigError("run config agent_short_name is empty")
    return EntrypointConfig(
        engine=engine,
        model=model,
        settings=dict(settings),
        disabled_tools=list(disabled),
        task_timeout_sec=_positive(raw, "task_timeout_sec"),
        mcp_tool_timeout_sec=_positive(raw, "mcp_tool_timeout_sec"),
        proxy_port=_port(raw, "proxy_port"),
        server_port=_port(raw, "server_port"),
        truncation_reason_codes=list(codes),
        diagnostic_eval_on_truncation=_need(raw, "diagnostic_eval_on_truncation", bool, "a boolean"),
        credential_setting=_need(raw, "credential_setting", str, "a string"),
        key_env=_need(raw, "key_env", str, "a string"),
        openai_compatible_base_url=base_url or None,
        agent_short_name=short,
        path=path,
    )


def load_run_config(path: str) -> tuple[EntrypointConfig | None, Any, str]:
    """(config, raw JSON or None, error sentence or ""). Never raises."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        return None, None, f"run config {path} unreadable: {type(exc).__name__}"
    try:
        return parse_run_config(raw, path), raw, ""
    except ConfigError as exc:
        return None, raw, str(exc)


@dataclass(frozen=True)
class ImagePaths:
    """Where the adapter's parts live inside the image; each has an env override for tests."""

    seed_dir: str = "/opt/ouroboros-src"
    seed_python: str = "/opt/ouroboros-venv/bin/python"
    mcp_proxy: str = "/opt/mcp-proxy-venv/bin/mcp-proxy"
    data_dir: str = "/opt/ouroboros-data"
    runtime_dir: str = "/opt/cowork-runtime"
    app_root: str = "/opt/ouroboros-app"
    bench_python: str = "/opt/venv/bin/python3"
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ImagePaths:
        d = cls()
        return cls(
            seed_dir=env.get("COWORK_SEED_DIR") or d.seed_dir,
            seed_python=env.get("COWORK_SEED_PYTHON") or d.seed_python,
            mcp_proxy=env.get("COWORK_MCP_PROXY") or d.mcp_proxy,
            data_dir=env.get("COWORK_DATA_DIR") or d.data_dir,
            runtime_dir=env.get("COWORK_RUNTIME_DIR") or d.runtime_dir,
            app_root=env.get("COWORK_APP_ROOT") or d.app_root,
            bench_python=env.get("COWORK_BENCH_PYTHON") or d.bench_python,
        )


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds from env (a test knob), else the default."""
    try:
        value = float(env.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default
