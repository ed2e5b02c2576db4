"""The run's configuration once it is filled, and the values a phase sets before the next reads them.

RunConfig keeps Optional what the flags may leave out: the resource root and the base image until the
config is built (config._with_derived fills both), the CPUs until the limits are fitted to the daemon
(RunConfig.fit_to_daemon), the money bounds until the campaign is read (run/spending.resolve_money). The
code after those points reads these types instead, so the type checker holds the "never None once ..."
invariants that comments used to state. A value still unfilled here is our own bug, never a bad input:
`Unresolved` names it (and the run's error handling records it like any other crash of ours).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .config import Money, RunConfig

T = TypeVar("T")


class Unresolved(RuntimeError):
    """A value read before the step that fills it: a bug in the order of the run's phases."""


def reached(value: T | None, what: str) -> T:
    """`value`, set by an earlier phase (the campaign once admitted, the image once built, ...)."""
    if value is None:
        raise Unresolved(f"{what} is read before the phase that sets it")
    return value


@dataclass(frozen=True)
class ResolvedConfig:
    """A RunConfig as built: the fields its construction fills are typed as never None."""

    cfg: RunConfig
    resource_root: Path
    base_image: str

    @classmethod
    def of(cls, cfg: RunConfig) -> ResolvedConfig:
        return cls(
            cfg,
            resource_root=reached(cfg.resource_root, "the resource root"),
            base_image=reached(cfg.image.base_image, "the base image"),
        )


def fitted_cpus(cfg: RunConfig) -> float:
    """The per-container CPUs once fit_to_daemon settled an unset --cpus."""
    return reached(cfg.limits.cpus, "the container CPUs (fit_to_daemon)")


@dataclass(frozen=True)
class MoneyBounds:
    """The three money bounds of a paid run once resolve_money settled them from the flags and the campaign."""

    campaign_budget_usd: float
    budget_usd: float
    budget_reserve_usd: float

    @classmethod
    def of(cls, money: Money) -> MoneyBounds:
        return cls(
            campaign_budget_usd=reached(money.campaign_budget_usd, "--campaign-budget-usd (resolve_money)"),
            budget_usd=reached(money.budget_usd, "--budget-usd (resolve_money)"),
            budget_reserve_usd=reached(money.budget_reserve_usd, "--budget-reserve-usd (resolve_money)"),
        )
