"""resolved.py: the run's configuration once filled, and phase objects read after their phase."""

from __future__ import annotations

import msgspec
import pytest

from cowork_adapter.config import Money, RunConfig
from cowork_adapter.resolved import MoneyBounds, ResolvedConfig, Unresolved, fitted_cpus, reached
from cowork_adapter.run.spending import resolve_money
from cowork_adapter.schemas.campaign import CampaignRecord

GIB = 1 << 30


def _cfg(tmp_path, **flags) -> RunConfig:
    (tmp_path / "seed").mkdir(exist_ok=True)
    (tmp_path / "bench").mkdir(exist_ok=True)
    return RunConfig.from_flags(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r",
        dry_run=True,
        **flags,
    )


def test_a_built_config_has_its_resource_root_and_base_image(tmp_path):
    cfg = _cfg(tmp_path)
    built = ResolvedConfig.of(cfg)
    assert built.resource_root == (tmp_path / "runs").resolve()
    assert built.base_image == f"cowork-pack:{cfg.bench_commit[:7]}"
    given = ResolvedConfig.of(_cfg(tmp_path, resource_root=tmp_path, base_image="b:1"))
    assert (given.resource_root, given.base_image) == (tmp_path.resolve(), "b:1")


def test_a_config_whose_filled_field_was_taken_away_is_refused_by_name(tmp_path):
    cfg = _cfg(tmp_path).with_changes(resource_root=None)
    with pytest.raises(Unresolved, match="the resource root is read before the phase that sets it"):
        ResolvedConfig.of(cfg)


def test_cpus_are_typed_only_once_fitted_to_the_daemon(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.limits.cpus is None  # the default: fitted to the daemon by the launcher
    with pytest.raises(Unresolved, match="fit_to_daemon"):
        fitted_cpus(cfg)
    assert fitted_cpus(cfg.fit_to_daemon(2, 24 * GIB)) == 2.0
    assert fitted_cpus(cfg.fit_to_daemon(8, 24 * GIB)) == 4.0


def _record(**fields) -> CampaignRecord:
    base = dict(
        fingerprint="sha256:" + "f" * 16,
        ceiling_usd=50.0,
        prior_spend_usd=0.0,
        usage_baseline=1.0,
        last_usage=1.0,
        run_budget_usd=5.0,
        reserve_usd=2.0,
        last_usage_observed_at="2026-01-01T00:00:00Z",
        created_at="2026-01-01T00:00:00Z",
    )
    return msgspec.convert({**base, **fields}, CampaignRecord)


def test_money_bounds_come_from_resolve_money_not_from_the_bare_flags(tmp_path):
    money = Money(campaign_file=tmp_path / "c.json")
    with pytest.raises(Unresolved, match="--campaign-budget-usd"):
        MoneyBounds.of(money)
    bounds = MoneyBounds.of(resolve_money(money, _record()))
    assert bounds == MoneyBounds(campaign_budget_usd=50.0, budget_usd=5.0, budget_reserve_usd=2.0)
    given = MoneyBounds.of(resolve_money(msgspec.structs.replace(money, budget_usd=3.0), _record()))
    assert given.budget_usd == 3.0 and given.campaign_budget_usd == 50.0


def test_reached_returns_a_set_value_and_names_an_unset_one():
    assert reached(0, "zero") == 0  # a falsy value is set: only None is "not yet"
    assert reached("", "empty") == ""
    with pytest.raises(Unresolved, match="the campaign handle .admit. is read before"):
        reached(None, "the campaign handle (admit)")
