"""The JSON run config the launcher writes for the container entrypoint (no secrets, ever).

The entrypoint reads it with `container/runconfig.py::parse_run_config` (stdlib only); this model
is the host's typed view of the same file. The provider key reaches the agent container only
through the environment variable named by `key_env`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from msgspec import Meta
from msgspec.structs import force_setattr

from ..container.runconfig import DEFAULT_KEY_ENV, RUN_CONFIG_SCHEMA
from ..vocab import TRUNCATION_RUNTIME_REASONS, EngineKind
from .record import Positive, Record

if TYPE_CHECKING:
    from ..config import RunConfig

PROXY_PORT: Final = 8096
SERVER_PORT: Final = 8765
# Tools that reach the open web, need vision or call a second paid agent: off for every task.
ALWAYS_DISABLED_TOOLS = (
    "web_search",
    "browse_page",
    "browser_action",
    "youtube_transcript",
    "analyze_screenshot",
    "vlm_query",
    "claude_code_edit",
)
SUBAGENT_TOOL = "schedule_subagent"
# Model slots the server reads; every one is pinned so no call is routed to another model.
MODEL_SLOTS = (
    "OUROBOROS_MODEL",
    "OUROBOROS_MODEL_LIGHT",
    "OUROBOROS_MODEL_HEAVY",
    "OUROBOROS_MODEL_FALLBACKS",
    "OUROBOROS_MODEL_CONSCIOUSNESS",
    "OUROBOROS_MODEL_VISION",
    "OUROBOROS_MODEL_DEEP_SELF_REVIEW",
    "OUROBOROS_WEBSEARCH_MODEL",
    "OUROBOROS_SCOPE_REVIEW_MODEL",
    "OUROBOROS_SCOPE_REVIEW_MODELS",
)
COMPATIBLE_PREFIX = "openai-compatible::"
_PROVIDER_PREFIXES = (
    "openai::",
    "anthropic::",
    "minimax::",
    "cloudru::",
    "gigachat::",
    COMPATIBLE_PREFIX,
    "openrouter::",
)


def _secret_like(key: str) -> bool:
    upper = key.upper()
    return upper.endswith("_API_KEY") or upper.endswith("_TOKEN") or upper.endswith("_PASSWORD")


class EntrypointConfigFile(Record, frozen=True, rename={"schema_": "schema"}):  # type: ignore[misc]  # msgspec allows a frozen Struct over a mutable base; dataclasses (mypy's model) do not
    """configs/cowork_adapter_run.json, schema cowork_adapter.run_config.v1: what the launcher
    writes for the container entrypoint (which reads it as container.runconfig.EntrypointConfig)."""

    schema_: Literal["cowork_adapter.run_config.v1"] = RUN_CONFIG_SCHEMA
    engine: str
    model: str
    settings: dict[str, Any]
    disabled_tools: list[str]
    task_timeout_sec: Positive
    mcp_tool_timeout_sec: Positive
    proxy_port: Literal[8096] = PROXY_PORT
    server_port: Literal[8765] = SERVER_PORT
    truncation_reason_codes: list[str]
    diagnostic_eval_on_truncation: bool
    credential_setting: str
    key_env: Literal["COWORK_PROVIDER_KEY"] = DEFAULT_KEY_ENV
    openai_compatible_base_url: str | None = None
    agent_short_name: Annotated[str, Meta(min_length=1)]

    def _check(self) -> None:
        leaked = sorted(k for k in self.settings if _secret_like(k))
        if leaked:
            raise ValueError(f"settings must not carry credentials: {', '.join(leaked)}")
        force_setattr(self, "truncation_reason_codes", sorted(set(self.truncation_reason_codes)))


def routed_model_id(model: str, openai_compatible_base_url: str) -> str:
    """The id the server routes: `openai-compatible::<model>` when a compatible endpoint is set
    and the model carries no provider prefix; otherwise the model as given (OpenRouter)."""
    if openai_compatible_base_url and not model.startswith(_PROVIDER_PREFIXES):
        return COMPATIBLE_PREFIX + model
    return model


def model_provider(cfg: RunConfig) -> str:
    """The MODEL_PROVIDER both task containers get; with MODEL_NAME it names the dump folder."""
    if cfg.agent.engine_kind is EngineKind.OUROBOROS:
        return "ouroboros"
    if cfg.spends_nothing:
        return cfg.agent.engine  # oracle / nop: dumps under dumps/<engine>_<model>/
    return "openai" if cfg.provider.openai_compatible_base_url else "openrouter"


# The provider segment of an upstream entry that names its dumps by a fixed word, not by
# MODEL_PROVIDER: the benchmark's main_strands.py writes under dumps/strands_<model>/.
UPSTREAM_DUMP_PROVIDER = {"main_strands.py": "strands"}
# Where model calls go when no OpenAI-compatible endpoint is given (OpenRouter's chat API).
OPENROUTER_CHAT_URL = "https://openrouter.ai/api/v1"


def agent_short_name(cfg: RunConfig) -> str:
    """`<provider>/<model>`, what the benchmark's TaskConfig uses to place the task dump: the
    one the engine itself uses, so the summary, the eval phase and the ledger find its dump."""
    provider = UPSTREAM_DUMP_PROVIDER.get(cfg.agent.upstream_entry or "", model_provider(cfg))
    return f"{provider}/{cfg.agent.model}"


def agent_base_url(cfg: RunConfig) -> str:
    """The chat endpoint of the task's model, for upstream engines that read it from the env
    (MODEL_API_URL for main.py, LLM_BASE_URL for main_strands.py)."""
    return cfg.provider.openai_compatible_base_url or OPENROUTER_CHAT_URL


def disabled_tools(cfg: RunConfig) -> list[str]:
    tools = list(ALWAYS_DISABLED_TOOLS)
    if not cfg.agent.subagents:
        tools.append(SUBAGENT_TOOL)
    return tools


def _subagent_roster(cfg: RunConfig, model_id: str) -> str:
    """OUROBOROS_SUBAGENTS: one worker row and one row per review seat, all on the pinned model."""

    def row(subagent_id: str, use: str, effort: str, review: bool) -> dict[str, Any]:
        return {
            "subagent_id": subagent_id,
            "recommended_use": use,
            "route": {"kind": "api_model", "target_id": model_id},
            "effort": effort,
            "review_eligible": review,
            "delivery": "packet",
            "minted_from": "cowork-adapter",
        }

    items = [row("worker", "task work", cfg.agent.effort, False)]
    items += [
        row(f"reviewer-{n}", "review", cfg.agent.review_effort, True) for n in range(1, cfg.agent.review_slots + 1)
    ]
    return json.dumps({"enabled": True, "items": items}, sort_keys=True)


def render_ouroboros_settings(cfg: RunConfig) -> dict[str, Any]:
    """The non-secret settings.json content for the Ouroboros server, from the flags."""
    model_id = routed_model_id(cfg.agent.model, cfg.provider.openai_compatible_base_url)
    settings: dict[str, Any] = {slot: model_id for slot in MODEL_SLOTS}
    settings.update(
        {
            "OUROBOROS_REVIEW_MODELS": ",".join([model_id] * max(cfg.agent.review_slots, 1)),
            "USE_LOCAL_MAIN": False,
            "USE_LOCAL_LIGHT": False,
            "USE_LOCAL_FALLBACK": False,
            "USE_LOCAL_CONSCIOUSNESS": False,
            "USE_LOCAL_HEAVY": False,
            "OUROBOROS_SUBAGENTS": _subagent_roster(cfg, model_id),
            "OUROBOROS_TASK_REVIEW_MODE": cfg.agent.task_review_mode,
            "OUROBOROS_REVIEW_ENFORCEMENT": cfg.agent.review_enforcement,
            "OUROBOROS_REVIEW_MAX_CYCLES": cfg.agent.review_max_cycles,
            "OUROBOROS_EFFORT_TASK": cfg.agent.effort,
            "OUROBOROS_RUNTIME_MODE": cfg.agent.runtime_mode,
            "OUROBOROS_SAFETY_MODE": cfg.agent.safety_mode,
            "OUROBOROS_CONTEXT_MODE": "max",
            "OUROBOROS_CONTEXT_MODE_AUTO_LOW": "false",
            "OUROBOROS_MAX_SUBAGENT_DEPTH": cfg.agent.subagent_depth if cfg.agent.subagents else 0,
            "OUROBOROS_ALLOW_MUTATIVE_SUBAGENTS": "false",
            "OUROBOROS_MAX_WORKERS": cfg.agent.max_workers,
            "OUROBOROS_MAX_ROUNDS": cfg.agent.max_steps,
            "TOTAL_BUDGET": cfg.agent.per_task_cost_usd,
            "OUROBOROS_PER_TASK_COST_USD": cfg.agent.per_task_cost_usd,
            "OUROBOROS_POST_TASK_EVOLUTION": "false",
            "OUROBOROS_POST_TASK_EVOLUTION_CADENCE": "off",
            "OUROBOROS_MAIN_WEB_SEARCH": "off",
            "OUROBOROS_MAIN_WEB_SEARCH_MAX_TOTAL_RESULTS": 0,
            "OUROBOROS_IMAGE_INPUT_MODE": "auto",
            "OUROBOROS_RETURN_REASONING": True,
            "OUROBOROS_SUBAGENT_HARNESS": "",
            "MCP_ENABLED": True,
            "MCP_SERVERS": [],  # the entrypoint fills in one row per server the task needs
            "MCP_TOOL_TIMEOUT_SEC": cfg.agent.mcp_tool_timeout,
        }
    )
    if cfg.provider.or_provider:
        settings["OUROBOROS_OR_PROVIDER"] = cfg.provider.or_provider
    if cfg.provider.openai_compatible_base_url:
        settings["OPENAI_COMPATIBLE_BASE_URL"] = cfg.provider.openai_compatible_base_url
    return settings


def build_run_config(cfg: RunConfig) -> EntrypointConfigFile:
    """The run config file for `cfg`. An upstream engine gets no Ouroboros settings or tool list."""
    ouroboros = cfg.agent.engine_kind is EngineKind.OUROBOROS
    return EntrypointConfigFile(
        engine=cfg.agent.engine,
        model=cfg.agent.model,
        settings=render_ouroboros_settings(cfg) if ouroboros else {},
        disabled_tools=disabled_tools(cfg) if ouroboros else [],
        task_timeout_sec=cfg.agent.task_timeout,
        mcp_tool_timeout_sec=cfg.agent.mcp_tool_timeout,
        truncation_reason_codes=sorted(TRUNCATION_RUNTIME_REASONS),
        diagnostic_eval_on_truncation=cfg.agent.diagnostic_eval_on_truncation,
        credential_setting=cfg.provider.credential_setting,
        openai_compatible_base_url=cfg.provider.openai_compatible_base_url or None,
        agent_short_name=agent_short_name(cfg),
    )
