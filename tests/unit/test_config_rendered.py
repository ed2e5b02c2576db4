"""RunConfig's applied_config, warnings, limits against the daemon and the run config file it renders."""

from __future__ import annotations

import json

import pytest
from test_config import base, build  # noqa: F401 (fixture)

from cowork_adapter.container.runconfig import parse_run_config
from cowork_adapter.defaults import PINNED_BENCH_COMMIT
from cowork_adapter.errors import Refusal
from cowork_adapter.schemas.run_config import ALWAYS_DISABLED_TOOLS, EntrypointConfigFile, build_run_config
from cowork_adapter.vocab import TRUNCATION_RUNTIME_REASONS

# ---- applied_config ----------------------------------------------------------------------------


def test_applied_config_excludes_paths_budgets_and_selection(base, tmp_path):
    cfg = build(base, tasks=["a"])
    applied = cfg.applied_config()
    for absent in (
        "repo_dir",
        "bench_root",
        "run_root",
        "resource_root",
        "campaign_file",
        "task_file",
        "tasks",
        "selection",
        "resume_from",
        "budget_usd",
        "campaign_budget_usd",
        "prior_spend_usd",
        "budget_reserve_usd",
        "min_key_usd",
        "min_free_gib",
        "concurrency",
        "docker_host",
        "dry_run",
        "api_key_env",
        "meter_url",
        "image",
    ):
        assert absent not in applied, absent
    assert applied["memory_bytes"] == 16 * 1024**3 and applied["bench_commit"] == PINNED_BENCH_COMMIT
    json.dumps(applied, allow_nan=False)  # JSON-clean, as the manifest needs


def test_applied_config_unchanged_by_where_and_how_much(base, tmp_path):
    one = build(base).applied_config()
    two = build(
        base,
        run_root=tmp_path / "elsewhere" / "r2",
        budget_usd=10.0,
        concurrency=4,
        campaign_budget_usd=500.0,
        budget_reserve_usd=0.0,
        tasks=["z"],
        min_free_gib=1.0,
        resume_from=[tmp_path / "storage" / "run-1"],
    ).applied_config()
    assert one == two


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other/model"},
        {"max_steps": 50},
        {"task_timeout": 1800},
        {"mcp_tool_timeout": 60},
        {"effort": "low"},
        {"review_slots": 1},
        {"safety_mode": "full"},
        {"subagents": True},
        {"per_task_cost_usd": 5.0},
        {"diagnostic_eval_on_truncation": True},
        {"memory": "8g"},
        {"cpus": 2.0},
        {"pids_limit": 256},
        {"or_provider": "resilience"},
        {"engine": "upstream:main.py"},
    ],
)
def test_applied_config_sees_agent_changes(base, change):
    assert build(base).applied_config() != build(base, **change).applied_config()


# ---- warnings ----------------------------------------------------------------------------------


def test_long_timeout_warns(base):
    assert build(base).warnings() == []
    assert build(base, task_timeout=7100).warnings() == []
    (note,) = build(base, task_timeout=7101).warnings()
    assert "7200" in note


# ---- the rendered run config file ----------------------------------------------------------------


def test_run_config_file_renders_flags(base):
    cfg = build(base, max_steps=42, per_task_cost_usd=7.5, or_provider="resilience", safety_mode="light")
    rc = build_run_config(cfg)
    s = rc.settings
    assert rc.schema_ == "cowork_adapter.run_config.v1"
    assert (rc.proxy_port, rc.server_port, rc.key_env) == (8096, 8765, "COWORK_PROVIDER_KEY")
    assert rc.truncation_reason_codes == sorted(TRUNCATION_RUNTIME_REASONS)
    assert rc.disabled_tools == [*ALWAYS_DISABLED_TOOLS, "schedule_subagent"]
    assert s["OUROBOROS_MAX_ROUNDS"] == 42
    assert s["TOTAL_BUDGET"] == s["OUROBOROS_PER_TASK_COST_USD"] == 7.5
    assert s["OUROBOROS_POST_TASK_EVOLUTION"] == "false"
    assert s["OUROBOROS_OR_PROVIDER"] == "resilience" and s["OUROBOROS_SAFETY_MODE"] == "light"
    assert s["OUROBOROS_MAX_SUBAGENT_DEPTH"] == 0
    for slot in (
        "OUROBOROS_MODEL",
        "OUROBOROS_MODEL_LIGHT",
        "OUROBOROS_MODEL_FALLBACKS",
        "OUROBOROS_MODEL_CONSCIOUSNESS",
        "OUROBOROS_MODEL_VISION",
        "OUROBOROS_WEBSEARCH_MODEL",
    ):
        assert s[slot] == "moonshotai/kimi-k3"
    roster = json.loads(s["OUROBOROS_SUBAGENTS"])
    assert len(roster["items"]) == 1 + 3
    assert {i["route"]["target_id"] for i in roster["items"]} == {"moonshotai/kimi-k3"}
    assert not [k for k in s if k.upper().endswith("_API_KEY")]
    assert "OUROBOROS_OR_PROVIDER" not in build_run_config(build(base)).settings


def test_run_config_file_with_subagents_and_compatible_endpoint(base):
    cfg = build(
        base,
        subagents=True,
        subagent_depth=2,
        openai_compatible_base_url="http://127.0.0.1:9/v1",
        credential_setting="OPENAI_COMPATIBLE_API_KEY",
    )
    rc = build_run_config(cfg)
    assert "schedule_subagent" not in rc.disabled_tools
    assert rc.settings["OUROBOROS_MAX_SUBAGENT_DEPTH"] == 2
    assert rc.settings["OUROBOROS_MODEL"] == "openai-compatible::moonshotai/kimi-k3"
    assert rc.settings["OPENAI_COMPATIBLE_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert rc.openai_compatible_base_url == "http://127.0.0.1:9/v1"
    assert rc.model == "moonshotai/kimi-k3"


def test_run_config_file_refuses_secret_settings():
    with pytest.raises(Exception, match="credentials"):
        EntrypointConfigFile(
            engine="ouroboros",
            model="m",
            settings={"OPENROUTER_API_KEY": "x"},
            disabled_tools=[],
            task_timeout_sec=1,
            mcp_tool_timeout_sec=1,
            truncation_reason_codes=[],
            diagnostic_eval_on_truncation=False,
            credential_setting="K",
            agent_short_name="a/m",
        )


@pytest.mark.parametrize("engine", ["ouroboros", "upstream:main_strands.py"])
def test_run_config_file_parses_in_the_container(base, engine):
    cfg = build(base, engine=engine, diagnostic_eval_on_truncation=True)
    raw = json.loads(build_run_config(cfg).to_json())
    parsed = parse_run_config(raw)
    assert parsed.engine == engine and parsed.model == cfg.agent.model
    assert parsed.task_timeout_sec == 3600 and parsed.diagnostic_eval_on_truncation is True
    assert parsed.key_env == "COWORK_PROVIDER_KEY" and parsed.openai_compatible_base_url is None
    assert parsed.agent_short_name.endswith("/moonshotai/kimi-k3")
    if engine != "ouroboros":
        assert parsed.upstream_entry == "main_strands.py" and parsed.settings == {}


@pytest.mark.parametrize(
    "daemon_cpus,daemon_mem,want",
    [
        (2, 24 << 30, (2.0, 16 << 30)),
        (8, 64 << 30, (4.0, 16 << 30)),
        (1, 8 << 30, (1.0, 8 << 30)),
    ],
)
def test_default_limits_fit_the_daemon(base, daemon_cpus, daemon_mem, want):
    fitted = build(base).fit_to_daemon(daemon_cpus, daemon_mem)
    assert (fitted.limits.cpus, fitted.limits.memory_bytes) == want
    assert (fitted.applied_config()["cpus"], fitted.applied_config()["memory_bytes"]) == want
    # The same daemon gives the same applied configuration: recovery compares equal values.
    assert build(base).fit_to_daemon(daemon_cpus, daemon_mem).applied_config() == fitted.applied_config()


def test_explicit_limits_within_the_daemon_are_kept(base):
    fitted = build(base, cpus=1.5, memory="2g").fit_to_daemon(2, 24 << 30)
    assert (fitted.limits.cpus, fitted.limits.memory_bytes) == (1.5, 2 << 30)


@pytest.mark.parametrize(
    "over,words",
    [
        ({"cpus": 4.0}, "--cpus 4 is more than the 2 CPUs of the Docker daemon at unix:///d; pass --cpus 2 or less."),
        ({"memory": "32g"}, "--memory 32g is more than the 24.0 GiB of memory of the Docker daemon at unix:///d"),
    ],
)
def test_explicit_limit_above_the_daemon_is_refused(base, over, words):
    with pytest.raises(Refusal) as info:
        build(base, **over).fit_to_daemon(2, 24 << 30, daemon="unix:///d")
    assert info.value.stage == "limits" and words in info.value.sentence
