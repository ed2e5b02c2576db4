"""How the report's pages write a figure: one spelling for every page (report, trials, compare)."""

from __future__ import annotations


def pct(x: float | None) -> str:
    """A rate in [0, 1] as a percentage with one decimal; n/a when there is none."""
    return "n/a" if x is None else f"{100 * x:.1f} %"
