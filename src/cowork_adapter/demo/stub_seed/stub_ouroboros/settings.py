"""Where the stand-in keeps its files and what its settings say (pure parsing, plus reading files).

Precedence follows both real releases for keys that are set: a non-empty value in settings.json
wins over the process environment, and the environment fills keys the file lacks or leaves "".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

CREDENTIAL_KEYS = ("OPENROUTER_API_KEY", "OPENAI_COMPATIBLE_API_KEY")

# Keys the stand-in reads; only these (and STUB_*) are taken from the environment.
KNOWN_KEYS = (
    "OUROBOROS_MODEL",
    "OUROBOROS_MAX_ROUNDS",
    "OUROBOROS_MAX_WORKERS",
    "OUROBOROS_PER_TASK_COST_USD",
    "TOTAL_BUDGET",
    "OUROBOROS_RUNTIME_MODE",
    "OUROBOROS_CONTEXT_MODE",
    "OUROBOROS_CONTEXT_MODE_AUTO_LOW",
    "OUROBOROS_SAFETY_MODE",
    "MCP_ENABLED",
    "MCP_SERVERS",
    "MCP_TOOL_TIMEOUT_SEC",
    "OPENAI_COMPATIBLE_BASE_URL",
) + CREDENTIAL_KEYS

ENDING_WORDS = ("finish", "round_limit", "provider_error", "hang")


def as_bool(value: Any, default: bool = False) -> bool:
    """Settings booleans arrive as JSON booleans or as strings like "true"/"1"."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def as_float(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def as_int(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class Paths:
    """Every path the stand-in writes, resolved from OUROBOROS_* variables once at start."""

    data_dir: Path
    settings_path: Path
    port_file: Path
    pid_file: Path | None
    repo_dir: Path

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "state"

    @property
    def results_dir(self) -> Path:
        return self.data_dir / "task_results"

    @property
    def default_port_file(self) -> Path:
        # 6.97 always writes here and ignores OUROBOROS_PORT_FILE; the stand-in writes both.
        return self.state_dir / "server_port"


def resolve_paths(environ: Mapping[str, str], repo_dir: Path) -> Paths:
    data_dir = Path(environ.get("OUROBOROS_DATA_DIR") or Path.home() / "Ouroboros" / "data")
    settings = environ.get("OUROBOROS_SETTINGS_PATH") or str(data_dir / "settings.json")
    port_file = environ.get("OUROBOROS_PORT_FILE") or str(data_dir / "state" / "server_port")
    pid_file = environ.get("OUROBOROS_PID_FILE") or None
    repo = environ.get("OUROBOROS_REPO_DIR") or str(repo_dir)
    return Paths(
        data_dir=data_dir,
        settings_path=Path(settings),
        port_file=Path(port_file),
        pid_file=Path(pid_file) if pid_file else None,
        repo_dir=Path(repo),
    )


def read_settings_file(path: Path) -> dict:
    """The settings file's object; a missing file is {} (the real server never requires it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return value


def merge_settings(file_values: Mapping[str, Any], environ: Mapping[str, str]) -> dict:
    """File values that are set win; the environment fills known keys the file lacks or blanks."""
    merged = {k: v for k, v in file_values.items() if v is not None and v != ""}
    for key, value in environ.items():
        wanted = key in KNOWN_KEYS or key.startswith("STUB_")
        if wanted and key not in merged and value != "":
            merged[key] = value
    return merged


def parse_mcp_servers(value: Any) -> list[dict]:
    """Enabled streamable-HTTP rows of MCP_SERVERS (a list, or a JSON string of one)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    rows, seen = [], set()
    for row in value:
        if not isinstance(row, dict) or not as_bool(row.get("enabled"), False):
            continue  # both releases default `enabled` to false
        ident = str(row.get("id") or row.get("slug") or row.get("name") or "")
        url = str(row.get("url") or "")
        transport = str(row.get("transport") or "streamable_http")
        if not ident or ident in seen or transport != "streamable_http":
            continue
        if not url.startswith(("http://", "https://")):
            continue
        seen.add(ident)  # duplicate ids: the first row wins
        rows.append({"id": ident, "name": str(row.get("name") or ident), "url": url})
    return rows


@dataclass(frozen=True)
class StubConfig:
    """The boot-time configuration; the settings file is read once, at start."""

    model: str = "stub-model"
    max_rounds: int = 200
    max_workers: int = 2
    per_task_cost_usd: float = 20.0
    total_budget: float = 10.0
    runtime_mode: str = "advanced"
    context_mode: str = "max"
    safety_mode: str = "full"
    mcp_enabled: bool = False
    mcp_servers: tuple = ()
    mcp_tool_timeout_sec: float = 60.0
    credential_key: str = ""
    credential: str = field(default="", repr=False)
    base_url: str = ""
    # Fault switches and pacing of the stand-in (STUB_*; see README.md).
    start_delay_sec: float = 0.0
    never_ready: bool = False
    zero_workers: bool = False
    exit_during_start: bool = False
    exit_mid_task: int = 0  # 0 = off, N = exit right after round N of a task
    create_503: bool = False
    seconds_per_round: float = 0.2
    cost_per_round_usd: float = 0.001
    cost_final_delay_sec: float = 0.5  # negative: cost never becomes final
    artifact_delay_sec: float = 0.3
    echo_secret: bool = False
    require_git_workspace: bool = False
    cost_schema: str = "newest"  # "newest" (7.x fields) or "legacy" (6.97 fields)
    extra_plans: dict = field(default_factory=dict)

    @property
    def provider(self) -> str:
        if self.model.startswith("openai-compatible::") or (
            self.credential_key == "OPENAI_COMPATIBLE_API_KEY"
        ):
            return "openai-compatible"
        return "openrouter"

    def supervisor_error(self) -> str | None:
        if not self.credential:
            return "no provider configured: set OPENROUTER_API_KEY or OPENAI_COMPATIBLE_API_KEY"
        return None


def parse_exit_mid_task(value: Any) -> int:
    """`true` means after round 1; a number N means after round N; false/0 means never."""
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on"):
        return 1
    if isinstance(value, bool):
        return 1 if value else 0
    return max(0, as_int(value, 0))


def parse_extra_plans(value: Any) -> dict:
    """STUB_EXTRA_PLANS: {tag: {steps:[{server,tool,arguments}], ending, final_answer}} (test hook)."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, dict):
        raise ValueError("STUB_EXTRA_PLANS must be a JSON object")
    for tag, plan in value.items():
        if not isinstance(plan, dict) or not isinstance(plan.get("steps", []), list):
            raise ValueError(f"STUB_EXTRA_PLANS[{tag!r}] must be an object with a steps list")
        if plan.get("ending", "finish") not in ENDING_WORDS:
            raise ValueError(f"STUB_EXTRA_PLANS[{tag!r}].ending must be one of {ENDING_WORDS}")
    return value


def config_from_settings(s: Mapping[str, Any]) -> StubConfig:
    credential_key, credential = "", ""
    for key in CREDENTIAL_KEYS:
        if str(s.get(key) or "").strip():
            credential_key, credential = key, str(s[key])
            break
    cost_schema = str(s.get("STUB_COST_SCHEMA") or "newest")
    if cost_schema not in ("newest", "legacy"):
        raise ValueError("STUB_COST_SCHEMA must be 'newest' or 'legacy'")
    return StubConfig(
        model=str(s.get("OUROBOROS_MODEL") or "stub-model"),
        max_rounds=max(1, as_int(s.get("OUROBOROS_MAX_ROUNDS"), 200)),
        max_workers=max(1, as_int(s.get("OUROBOROS_MAX_WORKERS"), 2)),
        per_task_cost_usd=as_float(s.get("OUROBOROS_PER_TASK_COST_USD"), 20.0),
        total_budget=as_float(s.get("TOTAL_BUDGET"), 10.0),
        runtime_mode=str(s.get("OUROBOROS_RUNTIME_MODE") or "advanced"),
        context_mode=str(s.get("OUROBOROS_CONTEXT_MODE") or "max"),
        safety_mode=str(s.get("OUROBOROS_SAFETY_MODE") or "full"),
        mcp_enabled=as_bool(s.get("MCP_ENABLED"), False),
        mcp_servers=tuple(parse_mcp_servers(s.get("MCP_SERVERS"))),
        mcp_tool_timeout_sec=max(1.0, as_float(s.get("MCP_TOOL_TIMEOUT_SEC"), 60.0)),
        credential_key=credential_key,
        credential=credential,
        base_url=str(s.get("OPENAI_COMPATIBLE_BASE_URL") or ""),
        start_delay_sec=max(0.0, as_float(s.get("STUB_START_DELAY_SEC"), 0.0)),
        never_ready=as_bool(s.get("STUB_NEVER_READY")),
        zero_workers=as_bool(s.get("STUB_ZERO_WORKERS")),
        exit_during_start=as_bool(s.get("STUB_EXIT_DURING_START")),
        exit_mid_task=parse_exit_mid_task(s.get("STUB_EXIT_MID_TASK")),
        create_503=as_bool(s.get("STUB_CREATE_503")),
        seconds_per_round=max(0.0, as_float(s.get("STUB_SECONDS_PER_ROUND"), 0.2)),
        cost_per_round_usd=max(0.0, as_float(s.get("STUB_COST_PER_ROUND_USD"), 0.001)),
        cost_final_delay_sec=as_float(s.get("STUB_COST_FINAL_DELAY_SEC"), 0.5),
        artifact_delay_sec=max(0.0, as_float(s.get("STUB_ARTIFACT_DELAY_SEC"), 0.3)),
        echo_secret=as_bool(s.get("STUB_ECHO_SECRET")),
        require_git_workspace=as_bool(s.get("STUB_REQUIRE_GIT_WORKSPACE")),
        cost_schema=cost_schema,
        extra_plans=parse_extra_plans(s.get("STUB_EXTRA_PLANS") or {}),
    )


def load_config(paths: Paths, environ: Mapping[str, str]) -> StubConfig:
    return config_from_settings(merge_settings(read_settings_file(paths.settings_path), environ))

