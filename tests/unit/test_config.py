"""RunConfig: defaults, every validation rule, applied_config, the run config file it renders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowork_adapter.config import (
    Money,
    RunConfig,
    Selection,
    parse_docker_size,
)
from cowork_adapter.container.runconfig import parse_run_config
from cowork_adapter.defaults import PINNED_BENCH_COMMIT, flag_value, refuse_key_on_command_line
from cowork_adapter.errors import Refusal
from cowork_adapter.schemas.run_config import ALWAYS_DISABLED_TOOLS, EntrypointConfigFile, build_run_config
from cowork_adapter.vocab import TRUNCATION_RUNTIME_REASONS, EngineKind, ProbeKind


@pytest.fixture
def base(tmp_path) -> dict:
    """The smallest valid flags of a paid run."""
    return {
        "repo_dir": tmp_path / "seed",
        "bench_root": tmp_path / "bench",
        "run_root": tmp_path / "storage" / "run-1",
        "docker_host": "unix:///var/run/docker.sock",
        "campaign_file": tmp_path / "storage" / "campaign.json",
    }


def build(flags: dict, **changes) -> RunConfig:
    return RunConfig.from_flags(**{**flags, **changes})


def refusal(flags: dict, **changes) -> Refusal:
    with pytest.raises(Refusal) as info:
        build(flags, **changes)
    assert "\n" not in info.value.sentence
    return info.value


# ---- defaults --------------------------------------------------------------------------------


def test_defaults(base, tmp_path):
    cfg = build(base)
    assert cfg.bench_commit == PINNED_BENCH_COMMIT
    assert cfg.resource_root == (tmp_path / "storage").resolve()
    assert cfg.image.base_image == "cowork-pack:d943e75"
    assert cfg.image.image is None
    assert (cfg.selection.concurrency, cfg.agent.max_steps, cfg.agent.task_timeout, cfg.agent.mcp_tool_timeout) == (
        1,
        100,
        3600,
        300,
    )
    assert cfg.agent.model == "moonshotai/kimi-k3" and cfg.agent.engine == "ouroboros"
    assert (cfg.agent.effort, cfg.agent.review_effort, cfg.agent.review_slots) == ("high", "high", 3)
    assert (cfg.agent.task_review_mode, cfg.agent.review_enforcement, cfg.agent.review_max_cycles) == (
        "required",
        "blocking",
        "2",
    )
    assert (cfg.agent.safety_mode, cfg.agent.runtime_mode, cfg.agent.max_workers) == ("off", "pro", 4)
    assert cfg.agent.subagents is False and cfg.agent.subagent_depth == 0
    assert cfg.agent.per_task_cost_usd == 25.0 and cfg.agent.diagnostic_eval_on_truncation is False
    # No amount of money is a default: a paid run takes them from its flags or from its campaign.
    assert (
        cfg.money.budget_usd,
        cfg.money.campaign_budget_usd,
        cfg.money.prior_spend_usd,
        cfg.money.budget_reserve_usd,
    ) == (None, None, 0.0, None)
    assert cfg.money.new_campaign is False
    assert cfg.money.meter_blindness_sec == 30.0 and cfg.money.meter_url == "https://openrouter.ai/api/v1"
    assert (cfg.disk.min_free_gib, cfg.disk.min_root_free_gib, cfg.money.min_key_usd) == (200.0, 40.0, 20.0)
    assert cfg.provider.or_provider == "" and cfg.provider.openai_compatible_base_url == ""
    assert cfg.provider.api_key_env == cfg.provider.credential_setting == "OPENROUTER_API_KEY"
    assert (cfg.limits.cpus, cfg.limits.memory, cfg.limits.pids_limit) == (
        None,
        None,
        512,
    )  # fitted to the daemon by the launcher
    assert cfg.limits.memory_bytes == 16 * 1024**3
    assert cfg.probe is None and cfg.is_paid
    assert cfg.selection.task_ids is None and cfg.selection.tasks == () and cfg.selection.resume_from == ()


def test_paths_become_absolute(base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = build(
        base,
        repo_dir=Path("seed"),
        run_root=Path("storage/../storage/run-2"),
        resume_from=[Path("old")],
        task_file=None,
    )
    assert cfg.repo_dir == (tmp_path / "seed").resolve()
    assert cfg.run_root == (tmp_path / "storage" / "run-2").resolve()
    assert cfg.selection.resume_from == ((tmp_path / "old").resolve(),)
    assert all(p.is_absolute() for p in (cfg.bench_root, cfg.resource_root, cfg.money.campaign_file))


def test_none_lists_mean_empty(base):
    cfg = build(base, tasks=None, resume_from=None)
    assert cfg.selection.tasks == () and cfg.selection.resume_from == () and cfg.selection.task_ids is None


def test_frozen(base):
    cfg = build(base)
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError is one
        cfg.selection.concurrency = 2  # type: ignore[misc]


def test_base_image_follows_bench_commit(base):
    cfg = build(base, bench_commit="0123456789abcdef0123456789abcdef01234567")
    assert cfg.image.base_image == "cowork-pack:0123456"


def test_subagent_depth_only_with_subagents(base):
    assert build(base, subagent_depth=5).agent.subagent_depth == 0
    assert build(base, subagents=True, subagent_depth=5).agent.subagent_depth == 5
    assert build(base, subagents=True).agent.subagent_depth == 3


def test_probe_none_and_modes_are_unpaid(base):
    unpaid = {k: v for k, v in base.items() if k != "campaign_file"}
    assert build(unpaid, probe="none", dry_run=True).probe is None
    cfg = build(unpaid, probe="inventory")
    assert cfg.probe is ProbeKind.INVENTORY and not cfg.is_paid
    assert not build(unpaid, dry_run=True).is_paid


def test_engine_forms(base):
    cfg = build(base, engine="upstream:main_strands.py")
    assert cfg.agent.engine_kind is EngineKind.UPSTREAM and cfg.agent.upstream_entry == "main_strands.py"
    assert build(base).agent.upstream_entry is None


# ---- single-flag rules -----------------------------------------------------------------------

BAD_VALUES = [
    ("concurrency", 0, "--concurrency must be at least 1"),
    ("max_steps", 0, "--max-steps must be at least 1"),
    ("task_timeout", 0, "--task-timeout must be greater than 0"),
    ("mcp_tool_timeout", -5, "--mcp-tool-timeout must be greater than 0"),
    ("review_slots", -1, "--review-slots must be at least 0"),
    ("max_workers", 0, "--max-workers must be at least 1"),
    ("per_task_cost_usd", 0.0, "--per-task-cost-usd must be greater than 0"),
    ("budget_usd", -1.0, "--budget-usd must be greater than 0"),
    ("campaign_budget_usd", 0.0, "--campaign-budget-usd must be greater than 0"),
    ("prior_spend_usd", -0.5, "--prior-spend-usd must be at least 0"),
    ("budget_reserve_usd", -1.0, "--budget-reserve-usd must be at least 0"),
    ("meter_blindness_sec", 20.0, "--meter-blindness-sec must be greater than 20"),
    ("min_free_gib", -1.0, "--min-free-gib must be at least 0"),
    ("min_root_free_gib", -0.1, "--min-root-free-gib must be at least 0"),
    ("min_key_usd", -1.0, "--min-key-usd must be at least 0"),
    ("cpus", 0.0, "--cpus must be greater than 0"),
    ("pids_limit", 15, "--pids-limit must be at least 16"),
    ("memory", "lots", "--memory 'lots' is not a Docker size"),
    ("memory", "0", "below Docker's minimum"),
    ("memory", "1m", "below Docker's minimum"),
    ("bench_commit", "d943e75", "full 40-character"),
    ("engine", "camel", "--engine 'camel' must be"),
    ("engine", "upstream:", "must be 'ouroboros', 'oracle', 'nop' or"),
    ("engine", "upstream:../evil.py", "must be 'ouroboros', 'oracle', 'nop' or"),
    ("engine", "upstream:.hidden.py", "must be 'ouroboros', 'oracle', 'nop' or"),
    ("model", "", "--model '' must be"),
    ("model", "a model", "without spaces"),
    ("effort", "very high", "--effort 'very high' must be a single word"),
    ("review_max_cycles", "two", "--review-max-cycles 'two'"),
    ("review_max_cycles", "-1", "--review-max-cycles '-1'"),
    ("api_key_env", "OPENROUTER-KEY", "--api-key-env 'OPENROUTER-KEY' is not a valid environment variable"),
    ("api_key_env", "1KEY", "is not a valid environment variable"),
    ("api_key_env", "", "is not a valid environment variable"),
    ("credential_setting", "A B", "--credential-setting 'A B'"),
    ("meter_url", "ftp://example.org", "--meter-url 'ftp://example.org' is not an http(s) URL"),
    ("meter_url", "http://", "is not an http(s) URL"),
    ("meter_url", "https://user:pw@example.org/api", "no credentials"),
    ("openai_compatible_base_url", "localhost:8000", "--openai-compatible-base-url"),
    ("safety_mode", "medium", "--safety-mode"),
    ("task_review_mode", "sometimes", "--task-review-mode"),
    ("review_enforcement", "strict", "--review-enforcement"),
    ("runtime_mode", "turbo", "--runtime-mode"),
    ("probe", "everything", "--probe"),
]


@pytest.mark.parametrize("field,value,words", BAD_VALUES, ids=[f"{b[0]}={b[1]!r}" for b in BAD_VALUES])
def test_bad_value_is_refused(base, field, value, words):
    r = refusal(base, **{field: value})
    assert r.stage == "flags"
    assert words in r.sentence, r.sentence


FLOAT_FIELDS = [
    "per_task_cost_usd",
    "budget_usd",
    "campaign_budget_usd",
    "prior_spend_usd",
    "budget_reserve_usd",
    "meter_blindness_sec",
    "min_free_gib",
    "min_root_free_gib",
    "min_key_usd",
    "cpus",
]


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_refused(base, field, value):
    r = refusal(base, **{field: value})
    assert "finite" in r.sentence and r.sentence.startswith("--" + field.replace("_", "-"))


def test_boundaries_that_pass(base):
    cfg = build(
        base,
        meter_blindness_sec=20.001,
        pids_limit=16,
        review_slots=0,
        min_free_gib=0.0,
        budget_reserve_usd=0.0,
        prior_spend_usd=0.0,
        memory="6m",
    )
    assert (
        cfg.money.meter_blindness_sec == 20.001
        and cfg.limits.pids_limit == 16
        and cfg.limits.memory_bytes == 6 * 1024**2
    )


def test_empty_docker_host_is_refused_by_name(base):
    for value in ("", "   "):
        r = refusal(base, docker_host=value)
        assert r.stage == "docker_host" and "--docker-host is empty" in r.sentence


def test_missing_required_flags(base):
    flags = {k: v for k, v in base.items() if k != "bench_root"}
    r = refusal(flags)
    assert r.sentence == "--bench-root is required (or set COWORK_BENCH_ROOT)."
    flags = {k: v for k, v in base.items() if k != "repo_dir"}
    assert refusal(flags).sentence == "--repo-dir is required."


def test_unknown_field_is_refused(base):
    assert "--run-id" in refusal(base, run_id="x").sentence


def test_urls_lose_trailing_slash(base):
    cfg = build(base, meter_url="http://127.0.0.1:9/api/v1/", openai_compatible_base_url="http://h:1/v1/")
    assert cfg.money.meter_url == "http://127.0.0.1:9/api/v1"
    assert cfg.provider.openai_compatible_base_url == "http://h:1/v1"


# ---- combinations ------------------------------------------------------------------------------


def test_paid_run_needs_campaign_file(base):
    flags = {k: v for k, v in base.items() if k != "campaign_file"}
    r = refusal(flags)
    assert r.stage == "flags" and "--campaign-file" in r.sentence
    assert build(flags, dry_run=True).money.campaign_file is None
    assert build(flags, probe="stateful").money.campaign_file is None


def test_new_campaign_needs_campaign_file(base):
    flags = {k: v for k, v in base.items() if k != "campaign_file"}
    r = refusal(flags, dry_run=True, new_campaign=True)
    assert r.stage == "flags" and "--new-campaign is only meaningful with --campaign-file" in r.sentence
    assert build(base, new_campaign=True).money.new_campaign is True


def test_a_reserve_alone_or_a_ceiling_alone_is_not_compared_with_an_assumed_amount(base):
    assert build(base, budget_reserve_usd=5000.0).money.campaign_budget_usd is None
    assert build(base, campaign_budget_usd=1.0).money.budget_reserve_usd is None


def test_prior_spend_needs_campaign_file(base):
    flags = {k: v for k, v in base.items() if k != "campaign_file"}
    # Given explicitly (even as 0) without a campaign: refused.
    assert "--prior-spend-usd" in refusal(flags, dry_run=True, prior_spend_usd=0.0).sentence
    assert "--prior-spend-usd" in refusal(flags, dry_run=True, prior_spend_usd=5.0).sentence
    # Not given: fine, recorded as 0.
    assert build(flags, dry_run=True, prior_spend_usd=None).money.prior_spend_usd == 0.0
    assert build(base, prior_spend_usd=12.5).money.prior_spend_usd == 12.5


def test_prior_spend_rule_also_holds_for_direct_construction(base):
    flags = {k: v for k, v in base.items() if k != "campaign_file"}
    with pytest.raises(Exception, match="prior-spend"):
        RunConfig(**flags, dry_run=True, money=Money(prior_spend_usd=3.0))


@pytest.mark.parametrize("reserve,ceiling", [(100.0, 100.0), (150.0, 100.0), (1000.0, 1000.0)])
def test_reserve_must_be_below_ceiling(base, reserve, ceiling):
    r = refusal(base, budget_reserve_usd=reserve, campaign_budget_usd=ceiling)
    assert r.stage == "flags" and "--budget-reserve-usd" in r.sentence and "--campaign-budget-usd" in r.sentence


def test_reserve_just_below_ceiling_passes(base):
    assert build(base, budget_reserve_usd=99.99, campaign_budget_usd=100.0).money.budget_reserve_usd == 99.99


def test_run_root_outside_checkouts(base, tmp_path):
    assert "outside the seed" in refusal(base, run_root=tmp_path / "seed" / "runs" / "r").sentence
    assert "outside the benchmark" in refusal(base, run_root=tmp_path / "bench").sentence
    assert "--campaign-file" in refusal(base, campaign_file=tmp_path / "seed" / "c.json").sentence


def test_resume_from_rules(base, tmp_path):
    assert "twice" in refusal(base, resume_from=[tmp_path / "a", tmp_path / "x" / ".." / "a"]).sentence
    assert "not this run" in refusal(base, resume_from=[base["run_root"]]).sentence


# ---- selection through from_flags --------------------------------------------------------------


def test_selection_resolved(base, tmp_path):
    task_file = tmp_path / "tasks.txt"
    task_file.write_text("c\n# skip\nd\n")
    cfg = build(base, tasks=["b", "a"], task_file=task_file)
    assert cfg.selection.task_ids == ("b", "a", "c", "d") and cfg.selection.tasks == ("b", "a")
    assert cfg.selection.task_file == task_file.resolve()


def test_selection_refusal_has_selection_stage(base, tmp_path):
    task_file = tmp_path / "tasks.txt"
    task_file.write_text("a\na\n")
    r = refusal(base, task_file=task_file)
    assert r.stage == "selection" and "line 2" in r.sentence


# ---- the provider key --------------------------------------------------------------------------

FAKE_KEY = "sk-or-v1-FAKE-0000000000000000"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--model", FAKE_KEY],
        ["run", f"--or-provider={FAKE_KEY}"],
        ["run", "--task", f"x{FAKE_KEY}y"],
    ],
)
def test_key_on_command_line_is_refused(base, argv):
    env = {"OPENROUTER_API_KEY": FAKE_KEY}
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(argv=argv, environ=env, **base)
    assert info.value.stage == "credential"
    assert info.value.sentence == "the provider key must not appear on the command line."
    assert FAKE_KEY not in info.value.sentence


def test_key_named_by_api_key_env_is_checked(base):
    env = {"MY_KEY": "abcdefgh12345"}
    with pytest.raises(Refusal):
        RunConfig.from_flags(argv=["run", "abcdefgh12345"], environ=env, api_key_env="MY_KEY", **base)
    # Not in argv: accepted.
    RunConfig.from_flags(argv=["run", "--model", "m"], environ=env, api_key_env="MY_KEY", **base)


def test_short_keys_only_match_whole_elements():
    env = {"OPENROUTER_API_KEY": "abc"}
    refuse_key_on_command_line(["--model", "xabcx"], env, "OPENROUTER_API_KEY")
    with pytest.raises(Refusal):
        refuse_key_on_command_line(["--model", "abc"], env, "OPENROUTER_API_KEY")


def test_unset_or_empty_key_never_matches():
    refuse_key_on_command_line(["", "--x"], {"OPENROUTER_API_KEY": ""}, "OPENROUTER_API_KEY")
    refuse_key_on_command_line(["", "--x"], {}, "OTHER")


# ---- memory sizes --------------------------------------------------------------------------------

SIZES = [
    ("16g", 16 * 1024**3),
    ("16G", 16 * 1024**3),
    ("16gb", 16 * 1024**3),
    ("16GiB", 16 * 1024**3),
    ("512m", 512 * 1024**2),
    ("512MB", 512 * 1024**2),
    ("1.5g", int(1.5 * 1024**3)),
    ("10485760", 10485760),
    ("10485760b", 10485760),
    ("8192k", 8 * 1024**2),
    ("1t", 1024**4),
    (" 2 g ", 2 * 1024**3),
]


@pytest.mark.parametrize("text,expected", SIZES)
def test_docker_size_parsing(text, expected):
    assert parse_docker_size(text) == expected


@pytest.mark.parametrize("text", ["", "g", "16x", "-1g", "16 gigs", "1e9", "16gg", "nan"])
def test_docker_size_rejects(text):
    with pytest.raises(ValueError):
        parse_docker_size(text)


def test_a_memory_size_too_large_for_a_number_is_one_sentence(base):
    """400 digits overflow a float: refused by name, not a traceback (OverflowError)."""
    r = refusal(base, memory="1" * 400 + "g")
    assert r.sentence == f"--memory {'1' * 20!r}... is too large to be a memory size."
    with pytest.raises(ValueError):
        parse_docker_size("9" * 400)


@given(st.integers(min_value=6, max_value=10**6), st.sampled_from(["m", "M", "mb", "MiB"]))
def test_docker_size_megabytes_property(n, unit):
    assert parse_docker_size(f"{n}{unit}") == n * 1024**2


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


# ---- --llm-gateway ---------------------------------------------------------------------------


def test_llm_gateway_is_off_by_default_and_recorded_as_the_key_route(base):
    assert build(base).provider.llm_gateway is False
    assert build(base).applied_config()["key_route"] == "gateway_openrouter"
    assert build(base, llm_gateway=True).applied_config()["key_route"] == "gateway_openai"


def test_llm_gateway_refusals(base):
    free = {k: v for k, v in base.items() if k != "campaign_file"}
    assert "makes none" in refusal(free, engine="oracle", llm_gateway=True).sentence
    # The default route has a gateway too: the host is meaningful there, not on the seed's path.
    assert build(base, llm_gateway_host="10.0.0.1").provider.llm_gateway_host == "10.0.0.1"
    assert (
        "only meaningful when a gateway serves"
        in refusal(base, key_in_agent=True, llm_gateway_host="10.0.0.1").sentence
    )


def test_llm_gateway_caps_are_flags_of_the_gateway_only(base):
    cfg = build(base, llm_gateway=True, llm_gateway_max_tokens=4096, llm_gateway_unknown_cost_usd=1.5)
    assert (cfg.provider.llm_gateway_max_tokens, cfg.provider.llm_gateway_unknown_cost_usd) == (4096, 1.5)
    assert cfg.applied_config()["llm_gateway_max_tokens"] == 4096  # it bounds how the agent ran
    assert cfg.applied_config()["llm_gateway_unknown_cost_usd"] == 1.5  # it prices answers without a cost
    # The default route's gateway applies its defaults; the seed's own path has no gateway to record.
    assert build(base).applied_config()["llm_gateway_max_tokens"] == cfg.provider.__class__().llm_gateway_max_tokens
    assert "llm_gateway_max_tokens" not in build(base, key_in_agent=True).applied_config()
    for field, value in (("llm_gateway_max_tokens", 100), ("llm_gateway_unknown_cost_usd", 1.0)):
        assert build(base, **{field: value}).provider_tls  # the default route's gateway takes them
        assert "only meaningful when a gateway serves" in refusal(base, key_in_agent=True, **{field: value}).sentence
    assert "llm-gateway-max-tokens" in refusal(base, llm_gateway=True, llm_gateway_max_tokens=0).sentence
    assert "llm-gateway-unknown-cost-usd" in refusal(base, llm_gateway=True, llm_gateway_unknown_cost_usd=0).sentence


def test_the_key_route_is_the_default_tls_one_unless_a_flag_names_another(base):
    """No flag: the run's gateway serves openrouter.ai (no container holds the key). --key-in-agent
    is the seed's path, --llm-gateway the OpenAI-compatible face; a reference engine has no key."""
    free = {k: v for k, v in base.items() if k != "campaign_file"}
    assert build(base).provider_tls and build(base).served_by_gateway
    assert not build(base, key_in_agent=True).provider_tls and not build(base, key_in_agent=True).served_by_gateway
    assert not build(base, llm_gateway=True).provider_tls and build(base, llm_gateway=True).served_by_gateway
    compatible = build(
        base, openai_compatible_base_url="http://10.0.0.9:8000/v1", credential_setting="OPENAI_COMPATIBLE_API_KEY"
    )
    assert not compatible.provider_tls and not compatible.served_by_gateway
    assert not build(free, engine="oracle").provider_tls
    assert "not both" in refusal(base, key_in_agent=True, llm_gateway=True).sentence
    assert "uses none" in refusal(free, engine="nop", key_in_agent=True).sentence
    # The test beds' hidden flags: each only where it means something, the stand-in's two together.
    assert build(base, provider_upstream_url="http://127.0.0.1:9/api/v1").provider.provider_upstream_url
    assert (
        "default OpenRouter route"
        in refusal(base, key_in_agent=True, provider_upstream_url="http://127.0.0.1:9/api/v1").sentence
    )
    assert "go together" in refusal(base, key_in_agent=True, provider_standin_address="10.0.0.1").sentence
    assert (
        "only meaningful with --key-in-agent"
        in refusal(base, provider_standin_address="10.0.0.1", provider_standin_bundle="/tmp/b.pem").sentence
    )


def test_gateway_run_serves_the_provider_host_by_default(base, tmp_path):
    """open_for_run on the default route: the engine's config is untouched (the OpenRouter route), the
    gateway answers TLS as openrouter.ai on port 443 of the host address, the shim gets the route,
    and the TLS key is deleted with the secret. A port it cannot bind is one sentence naming
    --key-in-agent (here: 443 on an address this host does not have)."""
    import os

    from cowork_adapter.gateway import run as gateway_run

    run_root = tmp_path / "storage" / "run-1"
    run_root.mkdir(parents=True)
    cfg = build(base, llm_gateway_host="127.0.0.1", model="vendor/model-x")
    if os.geteuid() != 0:
        pytest.fail("binding port 443 needs root: the project's tests run as root (docs/testing.md)")
    gateway, engine_cfg, record, provider = gateway_run.open_for_run(cfg, "sk-test", "c" * 32, run_root)
    try:
        assert engine_cfg is cfg and gateway.port == 443 and gateway.openrouter
        assert record.route.value == "provider_tls" and record.listen_address == "127.0.0.1:443"
        assert record.container_url == "https://openrouter.ai/api/v1" == record.upstream_url
        assert (provider.host, provider.address) == ("openrouter.ai", "127.0.0.1") and provider.ca_bundle.is_file()
        assert (run_root / "private" / "provider-leaf.key").stat().st_mode & 0o777 == 0o600
        assert gateway.policy.provider_keys and gateway.policy.function_tools_only
        assert any("seed's OpenRouter route" in d for d in record.disclosures)
    finally:
        gateway_run.close_for_run(gateway, record, run_root)
    assert not (run_root / "private" / "provider-leaf.key").exists()
    other = tmp_path / "storage" / "run-2"
    other.mkdir()
    with pytest.raises(Refusal) as info:
        gateway_run.open_for_run(build(base, run_root=other, llm_gateway_host="192.0.2.1"), "sk-test", "d" * 32, other)
    assert info.value.stage == "provider_tls" and "--key-in-agent" in info.value.sentence
    assert "\n" not in info.value.sentence
    assert (
        not (other / "private" / "provider-leaf.key").exists() and not (other / "private" / "gateway.secret").exists()
    )


def test_gateway_run_points_every_engine_at_the_gateway(base, tmp_path, monkeypatch):
    """open_for_run: the engines get the gateway's URL and the compatible key setting; the gateway
    forwards to the endpoint the run would otherwise have used."""
    from cowork_adapter.gateway import run as gateway_run
    from cowork_adapter.schemas.run_config import build_run_config

    run_root = tmp_path / "storage" / "run-1"
    run_root.mkdir(parents=True)
    cfg = build(base, llm_gateway=True, llm_gateway_host="127.0.0.1", model="vendor/model-x")
    gateway, engine_cfg, record, provider = gateway_run.open_for_run(cfg, "sk-test", "c" * 32, run_root)
    try:
        url = f"http://127.0.0.1:{gateway.port}/v1"
        assert record.container_url == url and record.upstream_url == "https://openrouter.ai/api/v1"
        assert record.routed_model == "openai-compatible::vendor/model-x"
        settings = build_run_config(engine_cfg).settings
        assert settings["OPENAI_COMPATIBLE_BASE_URL"] == url and settings["OUROBOROS_MODEL"] == record.routed_model
        assert build_run_config(engine_cfg).credential_setting == "OPENAI_COMPATIBLE_API_KEY"
        assert (run_root / "private" / "gateway.secret").stat().st_mode & 0o777 == 0o600
    finally:
        gateway_run.close_for_run(gateway, record, run_root)
    assert not (run_root / "private" / "gateway.secret").exists() and record.requests == 0
    # The gateway was given the run's limits, and the record says how it shaped and counted.
    assert gateway.policy.model == "vendor/model-x" and gateway.per_task_usd == cfg.agent.per_task_cost_usd
    assert gateway.peers is not None and gateway.peers.run_label == "c" * 32
    assert record.unknown_cost_price_usd == cfg.provider.llm_gateway_unknown_cost_usd and record.assumed_usd == 0
    assert any("pinned the model" in d for d in record.disclosures)


# ---- RunConfig as a msgspec Struct: the first problem, in one sentence ---------------------------


@pytest.mark.parametrize(
    "field,value,sentence",
    [
        ("concurrency", "x", "--concurrency: input should be a valid integer, unable to parse string as an integer."),
        ("concurrency", 2.5, "--concurrency: input should be a valid integer, got a number with a fractional part."),
        (
            "meter_blindness_sec",
            "x",
            "--meter-blindness-sec: input should be a valid number, unable to parse string as a number.",
        ),
        ("memory", 5, "--memory: input should be a valid string."),
        ("subagents", "maybe", "--subagents: input should be a valid boolean, unable to interpret input."),
        ("tasks", [1], "--tasks: input should be a valid string."),
        ("repo_dir", None, "--repo-dir: input should be a valid path."),
        ("safety_mode", "medium", "--safety-mode: input should be 'full', 'light' or 'off'."),
        ("review_enforcement", None, "--review-enforcement: input should be 'advisory' or 'blocking'."),
        ("probe", "everything", "--probe: input should be 'inventory' or 'stateful'."),
        ("meter_url", "http://[x", "--meter-url: value error, Invalid IPv6 URL."),
        ("repo_dir", "a\0b", "--repo-dir: value error, embedded null byte."),
        ("run_id", "x", "--run-id: extra inputs are not permitted."),
    ],
)
def test_a_value_of_the_wrong_kind_is_one_sentence(base, field, value, sentence):
    r = refusal(base, **{field: value})
    assert (r.stage, r.sentence) == ("flags", sentence)


def test_values_are_converted_to_the_declared_types(base):
    cfg = build(
        base,
        concurrency="3",
        cpus=2,
        pids_limit=16.0,
        repo_dir=str(base["repo_dir"]),
        tasks=["a"],
        probe="inventory",
        dry_run="true",
    )
    assert (cfg.selection.concurrency, cfg.limits.cpus, cfg.limits.pids_limit, cfg.selection.tasks) == (
        3,
        2.0,
        16,
        ("a",),
    )
    assert isinstance(cfg.limits.cpus, float) and isinstance(cfg.repo_dir, Path) and cfg.probe is ProbeKind.INVENTORY
    assert cfg.dry_run is True


@pytest.mark.parametrize(
    "changes,sentence",
    [
        ({"concurrency": 0, "pids_limit": 0}, "--concurrency must be at least 1 (got 0)."),  # declared first
        ({"pids_limit": 0, "bench_commit": "x"}, "--bench-commit 'x' is not a full 40-character lowercase commit id."),
        ({"zzz": 1, "concurrency": 0}, "--concurrency must be at least 1 (got 0)."),  # a value before an unknown name
        (
            {"zzz": 1, "dry_run": True, "campaign_file": None, "budget_reserve_usd": 1.0, "campaign_budget_usd": 1.0},
            "--zzz: extra inputs are not permitted.",
        ),  # an unknown name before a combination
    ],
)
def test_the_first_problem_is_reported_in_field_order(base, changes, sentence):
    assert refusal(base, **changes).sentence == sentence


def test_a_missing_flag_comes_before_a_later_bad_value(base):
    flags = {k: v for k, v in base.items() if k != "bench_root"}
    assert refusal(flags, bench_commit="x").sentence == "--bench-root is required (or set COWORK_BENCH_ROOT)."


def test_direct_construction_refuses_with_the_same_sentence(base):
    from cowork_adapter.defaults import InvalidFlag

    where = {k: v for k, v in base.items() if k != "campaign_file"}
    money = Money(campaign_file=base["campaign_file"])
    with pytest.raises(InvalidFlag) as info:
        RunConfig(**where, money=money, selection=Selection(concurrency=0))
    assert info.value.sentence == "--concurrency must be at least 1 (got 0)."
    cfg = RunConfig(**where, money=money, selection=Selection(concurrency="2"))  # type: ignore[arg-type]
    assert cfg == build(base, concurrency=2) and cfg.selection.concurrency == 2


def test_with_changes_copies_without_touching_the_original(base):
    cfg = build(base)
    changed = cfg.with_changes(cpus=2.0, memory=str(8 << 30))
    assert (changed.limits.cpus, changed.limits.memory_bytes) == (2.0, 8 << 30) and (
        cfg.limits.cpus,
        cfg.limits.memory,
    ) == (None, None)
    assert changed.with_changes() == changed
    with pytest.raises(TypeError, match="no field 'cpu'"):
        cfg.with_changes(cpu=2.0)


def test_building_a_run_config_imports_no_pydantic():
    """RunConfig is a msgspec Struct: pydantic is no dependency of the package any more."""
    import subprocess
    import sys

    probe = (
        "import sys; from pathlib import Path; from cowork_adapter.config import RunConfig; "
        "RunConfig.from_flags(repo_dir=Path('/s'), bench_root=Path('/b'), run_root=Path('/r/x'), "
        "docker_host='unix:///d', dry_run=True); print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--docker-host", "tcp://h:2375", "--x"], "tcp://h:2375"),
        (["run", "--docker-host=unix:///d.sock"], "unix:///d.sock"),
        (["run", "--docker-host=a", "--docker-host", "b"], "a"),  # the first one given
        (["run", "--docker-host"], None),  # a flag without its value names nothing
        (["run", "--docker-hosts", "x"], None),  # only the exact flag
        ([], None),
    ],
)
def test_flag_value_reads_a_flag_without_parsing(argv, expected):
    assert flag_value(argv, "--docker-host") == expected
