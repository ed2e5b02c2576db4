"""Which run conditions resume and the report compare (runroot/identity.py, RunConfig.applied_config).

The walk: every field of RunConfig, group fields included, either changes applied_config() when it
changes, or is listed in config.IDENTITY_EXEMPT with its reason. A new flag that is neither fails here,
so a condition that changes the agent's world or its money cannot be skipped by the comparison unseen.
"""

from __future__ import annotations

import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from run_flags import config_for

from cowork_adapter.config import GROUPS, IDENTITY_EXEMPT, RunConfig
from cowork_adapter.runroot.identity import first_config_difference, identity_difference
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.vocab import KeyRoute


def _fields() -> list[str]:
    out = []
    for name in RunConfig.__struct_fields__:
        if name in GROUPS:
            out.extend(f"{name}.{f}" for f in GROUPS[name].__struct_fields__)
        else:
            out.append(name)
    return out


def _exempt(dotted: str) -> bool:
    return dotted in IDENTITY_EXEMPT or dotted.partition(".")[0] in IDENTITY_EXEMPT


def _annotation(dotted: str) -> Any:
    group, _, field = dotted.rpartition(".")
    owner = GROUPS[group] if group else RunConfig
    return typing.get_type_hints(owner)[field]


def _other_value(value: Any, annotation: Any) -> Any:
    """A value unlike `value` of the field's type (the comparison is what is tested, not the flag checks)."""
    choices = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return next(c for c in choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 2 + 1.5
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, Path):
        return value / "other"
    if isinstance(value, tuple):
        return value + ("other",)
    if value is None:
        kinds = [a for a in choices if isinstance(a, type)]
        if Path in kinds:
            return Path("/elsewhere")
        if str in kinds:
            return "other"
        if float in kinds:
            return 3.5
        if int in kinds:
            return 3
        for kind in choices:  # an enum or a literal
            args = typing.get_args(kind)
            if args:
                return args[0]
            if hasattr(kind, "__members__"):
                return next(iter(kind.__members__.values()))
    raise AssertionError(f"no other value for {value!r} ({annotation})")


# Fields whose values have a format of their own.
OTHER_VALUES: dict[str, Any] = {"limits.memory": "3g"}


def _changed(cfg: RunConfig, dotted: str) -> RunConfig:
    group, _, field = dotted.rpartition(".")
    if dotted in OTHER_VALUES:
        return cfg.with_changes(**{field: OTHER_VALUES[dotted]})
    current = getattr(getattr(cfg, group), field) if group else getattr(cfg, field)
    return cfg.with_changes(**{field: _other_value(current, _annotation(dotted))})


# A paid run on the default route: the gateway's caps and the key's route are recorded only then.
PAID = dict(dry_run=False, campaign_file=Path("/nonexistent/cowork-test/campaign.json"))


@pytest.mark.parametrize("dotted", _fields())
def test_every_field_is_compared_or_exempt_with_a_reason(dotted: str) -> None:
    if _exempt(dotted):
        reason = IDENTITY_EXEMPT.get(dotted) or IDENTITY_EXEMPT[dotted.partition(".")[0]]
        assert len(reason) > 10
        return
    base = config_for(**PAID)
    assert base.applied_config() != _changed(base, dotted).applied_config(), (
        f"{dotted} changes the run but not applied_config(): compare it, or list it in IDENTITY_EXEMPT with why"
    )


def test_exempt_names_exist() -> None:
    names = set(_fields()) | set(RunConfig.__struct_fields__)
    assert set(IDENTITY_EXEMPT) <= names


@pytest.mark.parametrize(
    ("fields", "route"),
    [
        ({}, KeyRoute.GATEWAY_OPENROUTER),
        ({"llm_gateway": True}, KeyRoute.GATEWAY_OPENAI),
        ({"key_in_agent": True}, KeyRoute.KEY_IN_AGENT),
        ({"openai_compatible_base_url": "http://127.0.0.1:9/v1"}, KeyRoute.KEY_IN_AGENT),
        ({"engine": "nop", "campaign_file": None, "dry_run": True}, KeyRoute.NONE),
    ],
)
def test_key_route_of_each_flag_set(fields: dict[str, Any], route: KeyRoute) -> None:
    cfg = config_for(**{**PAID, **fields})
    assert cfg.key_route is route
    assert cfg.applied_config()["key_route"] == route.value


def _manifest(applied: dict[str, Any]) -> RunManifest:
    """The parts of a manifest the comparison reads (a whole manifest has many more)."""
    return typing.cast(RunManifest, SimpleNamespace(applied_config=applied, seed=None, bench=None, image=None))


def test_a_default_route_run_resumed_with_the_key_in_the_agent_differs() -> None:
    ours = config_for(**PAID).applied_config()
    theirs = config_for(**PAID, key_in_agent=True).applied_config()
    assert first_config_difference(ours, theirs) == "key_route"


def test_another_gateway_cap_differs() -> None:
    ours = config_for(**PAID).applied_config()
    for change in ({"llm_gateway_max_tokens": 1000}, {"llm_gateway_unknown_cost_usd": 9.0}):
        theirs = config_for(**PAID, **change).applied_config()
        assert first_config_difference(ours, theirs) == next(iter(change))


def test_a_manifest_from_before_the_route_was_recorded_is_never_merged() -> None:
    current = config_for(**PAID).applied_config()
    old = {
        k: v
        for k, v in current.items()
        if k not in ("key_route", "llm_gateway_max_tokens", "llm_gateway_unknown_cost_usd")
    }
    diff = identity_difference(_manifest(old), applied_config=current, seed_head=None, bench_commit=None, image_id=None)
    assert diff is not None and "key_route" in diff and "<absent>" in diff


def test_the_diagnostic_flag_absent_still_means_off() -> None:
    current = config_for(**PAID).applied_config()
    old = {k: v for k, v in current.items() if k != "diagnostic_eval_on_truncation"}
    assert (
        identity_difference(_manifest(old), applied_config=current, seed_head=None, bench_commit=None, image_id=None)
        is None
    )
