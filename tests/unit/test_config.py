"""RunConfig: defaults, every validation rule, applied_config, the run config file it renders."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowork_adapter.config import Money, RunConfig, parse_docker_size
from cowork_adapter.defaults import PINNED_BENCH_COMMIT, refuse_key_on_command_line
from cowork_adapter.errors import Refusal
from cowork_adapter.vocab import EngineKind, ProbeKind


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
