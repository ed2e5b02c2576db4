"""Every campaign refusal happens in preflight: read-only, before a run root, a lock file or a container."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter.campaign.observe import AcceptedReading
from cowork_adapter.config import RunConfig
from cowork_adapter.errors import Refusal
from cowork_adapter.run.spending import campaign_preflight
from cowork_adapter.schemas.campaign import ActiveRun, CampaignRecord, key_fingerprint

KEY = "preflight-key-0123456789abcdef"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def reading(usage: float = 10.0, limit_remaining: float | None = None) -> AcceptedReading:
    return AcceptedReading(
        request_time=0.0, usage=usage, limit=None, limit_remaining=limit_remaining, attempts=1, observed_at=NOW
    )


def cfg(tmp_path: Path, **over) -> RunConfig:
    (tmp_path / "seed").mkdir(exist_ok=True)
    (tmp_path / "bench").mkdir(exist_ok=True)
    flags = dict(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r1",
        campaign_file=tmp_path / "campaign.json",
        new_campaign=True,
        campaign_budget_usd=50.0,
        budget_usd=20.0,
        budget_reserve_usd=5.0,
    )
    flags.update(over)
    return RunConfig.from_flags(**flags)


def write(path: Path, **over) -> bytes:
    fields = dict(
        fingerprint=key_fingerprint(KEY),
        ceiling_usd=50.0,
        usage_baseline=1.0,
        prior_spend_usd=0.0,
        last_usage=2.0,
        last_usage_observed_at=NOW,
        created_at=NOW,
    )
    fields.update(over)
    path.write_text(CampaignRecord(**fields).to_json())
    return path.read_bytes()


def refused(config: RunConfig, read: AcceptedReading | None = None) -> str:
    read = reading() if read is None else read
    with pytest.raises(Refusal) as info:
        campaign_preflight(config, KEY, read)
    assert info.value.stage == "campaign"
    return info.value.sentence


def test_a_missing_campaign_is_admitted_and_nothing_is_created(tmp_path):
    campaign_preflight(cfg(tmp_path), KEY, reading())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "seed"]  # no campaign, no lock file


def test_a_healthy_campaign_is_admitted_unchanged(tmp_path):
    config = cfg(tmp_path)
    before = write(config.money.campaign_file)
    campaign_preflight(config, KEY, reading())
    assert config.money.campaign_file.read_bytes() == before
    assert not config.money.campaign_file.with_name("campaign.json.lock").exists()


def active(tmp_path: Path) -> ActiveRun:
    return ActiveRun(
        run_root=str(tmp_path / "dead-run"),
        run_label="x" * 64,
        launcher_pid=999999,
        started_at=NOW,
        host="h",
        usage_at_start=2.0,
    )


@pytest.mark.parametrize(
    "case,record,flags,read,words",
    [
        ("unsettled", "active", {}, reading(), "has an unsettled active run"),
        ("other key", {"fingerprint": key_fingerprint("another-key-0123456789")}, {}, reading(), "belongs to key"),
        ("ceiling", {}, {"campaign_budget_usd": 60.0}, reading(), "a ceiling cannot change"),
        ("prior spend", {}, {"prior_spend_usd": 1.0}, reading(), "Prior spend can be declared only"),
        ("meter went down", {}, {}, reading(usage=1.5), "below the campaign's last accepted usage"),
        ("spent", {"usage_baseline": 1.0}, {}, reading(usage=47.0), "not above the $5.00 reserve"),
        ("key exhausted", {}, {}, reading(limit_remaining=0.0), "no remaining limit"),
    ],
)
def test_each_campaign_refusal_is_raised_in_preflight_without_touching_the_file(
    tmp_path, case, record, flags, read, words
):
    config = cfg(tmp_path, **flags)
    before = write(config.money.campaign_file, **({"active_run": active(tmp_path)} if record == "active" else record))
    assert words in refused(config, read)
    assert config.money.campaign_file.read_bytes() == before
    assert not config.money.campaign_file.with_name("campaign.json.lock").exists()


def test_a_new_campaign_whose_prior_spend_leaves_nothing_above_the_reserve_is_refused(tmp_path):
    assert "not above the $5.00 reserve" in refused(cfg(tmp_path, prior_spend_usd=46.0))
    assert not (tmp_path / "campaign.json").exists()


# ---- money is never implied (issue 21, item 1) -------------------------------------------------


def test_a_missing_campaign_without_new_campaign_is_refused_as_a_new_baseline(tmp_path):
    sentence = refused(cfg(tmp_path, new_campaign=False))
    assert "does not exist" in sentence and "new usage baseline" in sentence and "--new-campaign" in sentence
    assert "\n" not in sentence
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "seed"]


@pytest.mark.parametrize(
    "drop",
    [
        ("campaign_budget_usd",),
        ("budget_usd",),
        ("budget_reserve_usd",),
        ("campaign_budget_usd", "budget_usd", "budget_reserve_usd"),
    ],
)
def test_creating_a_campaign_needs_every_money_flag_given(tmp_path, drop):
    sentence = refused(cfg(tmp_path, **{name: None for name in drop}))
    flags = {
        "campaign_budget_usd": "--campaign-budget-usd",
        "budget_usd": "--budget-usd",
        "budget_reserve_usd": "--budget-reserve-usd",
    }
    for name, flag in flags.items():
        assert (flag in sentence) == (name in drop), sentence
    assert "given explicitly" in sentence and "\n" not in sentence
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "seed"]


def test_an_existing_campaign_supplies_the_bounds_it_stored(tmp_path):
    config = cfg(tmp_path, new_campaign=False, campaign_budget_usd=None, budget_usd=None, budget_reserve_usd=None)
    before = write(config.money.campaign_file, reserve_usd=4.0, run_budget_usd=12.0)
    resolved = campaign_preflight(config, KEY, reading())
    assert (resolved.money.campaign_budget_usd, resolved.money.budget_usd, resolved.money.budget_reserve_usd) == (
        50.0,
        12.0,
        4.0,
    )
    assert config.money.campaign_file.read_bytes() == before


def test_explicit_bounds_win_over_the_stored_ones_but_the_ceiling_never_changes(tmp_path):
    config = cfg(tmp_path, new_campaign=False, campaign_budget_usd=None, budget_usd=7.0, budget_reserve_usd=3.0)
    write(config.money.campaign_file, reserve_usd=4.0, run_budget_usd=12.0)
    resolved = campaign_preflight(config, KEY, reading())
    assert (resolved.money.campaign_budget_usd, resolved.money.budget_usd, resolved.money.budget_reserve_usd) == (
        50.0,
        7.0,
        3.0,
    )
    assert "a ceiling cannot change" in refused(cfg(tmp_path, campaign_budget_usd=60.0))


def test_a_campaign_that_stored_no_bounds_names_the_flags_to_give(tmp_path):
    config = cfg(tmp_path, new_campaign=False, campaign_budget_usd=None, budget_usd=None, budget_reserve_usd=None)
    write(config.money.campaign_file)  # a file written before the bounds were stored
    sentence = refused(config)
    assert "--budget-usd and --budget-reserve-usd" in sentence and "--campaign-budget-usd" not in sentence


def test_a_stored_ceiling_below_an_explicit_reserve_is_refused(tmp_path):
    config = cfg(tmp_path, new_campaign=False, campaign_budget_usd=None, budget_reserve_usd=50.0)
    write(config.money.campaign_file, reserve_usd=4.0, run_budget_usd=12.0)
    assert "is not below the campaign's ceiling $50" in refused(config)


# ---- one diagnostic setting per campaign (issue 21, item 4) ------------------------------------


@pytest.mark.parametrize("stored,asked", [(True, False), (False, True)])
def test_a_run_with_another_diagnostic_setting_than_the_campaigns_is_refused(tmp_path, stored, asked):
    config = cfg(tmp_path, diagnostic_eval_on_truncation=asked)
    before = write(config.money.campaign_file, diagnostic_eval_on_truncation=stored)
    sentence = refused(config)
    assert "--diagnostic-eval-on-truncation" in sentence and "same setting" in sentence
    assert config.money.campaign_file.read_bytes() == before


@pytest.mark.parametrize("stored", [None, True])
def test_the_same_or_an_unrecorded_diagnostic_setting_is_admitted(tmp_path, stored):
    config = cfg(tmp_path, diagnostic_eval_on_truncation=True)
    write(config.money.campaign_file, diagnostic_eval_on_truncation=stored)
    campaign_preflight(config, KEY, reading())


def test_the_startup_reading_is_one_sane_read_stamped_in_utc():
    """The first reading before custody (spending._startup_reading): accepted with its limit, or refused."""
    from types import SimpleNamespace

    from cowork_adapter.campaign.meter import MeterReading
    from cowork_adapter.run.spending import _startup_reading

    def meter(usage: float):
        answer = MeterReading(usage=usage, limit=40.0, limit_remaining=30.0, requested_at_monotonic=0.0)
        return SimpleNamespace(read_usage=lambda timeout: answer)

    accepted = _startup_reading(meter(10.0))
    assert accepted.usage == 10.0 and accepted.limit_remaining == 30.0 and accepted.attempts == 1
    assert accepted.observed_at.tzinfo is UTC
    with pytest.raises(Refusal, match="starting reading was rejected"):
        _startup_reading(meter(float("nan")))
