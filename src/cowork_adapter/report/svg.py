"""Tiny inline-SVG charts (bars, histogram, step line) for the self-contained HTML report.

Every chart names both axes with their units (`x_label`, `y_label` are required): a plot whose
numbers have no unit cannot be read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape

W, H = 640, 290
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 24, 86  # the bottom holds rotated category labels and the x-axis label
INK, BAR, GRID = "#222", "#4a78b5", "#ddd"


_FIXED = re.compile(r"^([^.]*)\.(\d+)([f%])$")


def distinct_fmt(values: Sequence[float], fmt: str, max_digits: int = 6) -> str:
    """`fmt`, with more decimals when needed so that distinct values get distinct labels.

    Small money amounts ($0.003) and short spans would otherwise all print as "0.00".
    """
    match = _FIXED.match(fmt)
    wanted = len(set(values))
    if match is None:
        return fmt
    head, digits, kind = match.group(1), int(match.group(2)), match.group(3)
    while digits < max_digits and len({format(v, f"{head}.{digits}{kind}") for v in values}) < wanted:
        digits += 1
    return f"{head}.{digits}{kind}"


def _axis_labels(x_label: str, y_label: str) -> list[str]:
    plot_mid = TOP + (H - TOP - BOTTOM) / 2
    return [
        f'<text class="x-label" x="{LEFT + (W - LEFT - RIGHT) / 2:.1f}" y="{H - 6}" text-anchor="middle" '
        f'font-size="11" fill="{INK}">{escape(x_label)}</text>',
        f'<text class="y-label" x="14" y="{plot_mid:.1f}" text-anchor="middle" font-size="11" fill="{INK}" '
        f'transform="rotate(-90 14 {plot_mid:.1f})">{escape(y_label)}</text>',
    ]


def _frame(title: str, body: list[str], y_max: float, y_fmt: str, x_label: str, y_label: str) -> str:
    plot_h = H - TOP - BOTTOM
    y_fmt = distinct_fmt([y_max * i / 4 for i in range(5)], y_fmt)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" fill="{INK}">{escape(title)}</text>',
    ]
    for i in range(5):
        value = y_max * i / 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10" fill="{INK}">'
            f"{escape(format(value, y_fmt))}</text>"
        )
    parts.extend(body)
    parts.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{W - RIGHT}" y2="{TOP + plot_h}" stroke="{INK}"/>')
    parts.extend(_axis_labels(x_label, y_label))
    parts.append("</svg>")
    return "".join(parts)


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="60" role="img"><title>{escape(title)}</title>'
        f'<text x="8" y="30" font-size="13" fill="{INK}">{escape(title)}: no data</text></svg>'
    )


def bar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    y_fmt: str = ".0%",
) -> str:
    """Vertical bars, one per label (labels rotated under the axis)."""
    if not labels:
        return _empty(title)
    top = y_max if y_max is not None else (max(values) or 1.0)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    step = plot_w / len(labels)
    body = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * (min(value, top) / top if top else 0)
        x = LEFT + i * step + step * 0.1
        body.append(
            f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" fill="{BAR}">'
            f"<title>{escape(label)}: {escape(format(value, y_fmt))}</title></rect>"
        )
        lx, ly = x + step * 0.4, TOP + plot_h + 10
        body.append(
            f'<text x="{lx:.1f}" y="{ly}" font-size="9" fill="{INK}" text-anchor="end" '
            f'transform="rotate(-40 {lx:.1f} {ly})">{escape(label[:18])}</text>'
        )
    return _frame(title, body, top, y_fmt, x_label, y_label)


def histogram(
    title: str, values: Sequence[float], *, x_label: str, y_label: str, bins: int = 12, x_fmt: str = ".2f"
) -> str:
    """Counts of `values` in equal-width bins between their min and max (each bar labelled by its bin's start)."""
    if not values:
        return _empty(title)
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins if hi > lo else 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    starts = [lo + width * i for i in range(bins)]
    x_fmt = distinct_fmt(starts, x_fmt)
    labels = [format(x, x_fmt) for x in starts]
    top = 4 * math.ceil(max(counts) / 4)  # a multiple of the 4 grid steps: whole-number ticks
    return bar_chart(
        title, labels, [float(c) for c in counts], x_label=x_label, y_label=y_label, y_max=float(top), y_fmt=".0f"
    )


def _time_unit(span_s: float) -> tuple[float, str]:
    """(seconds per unit, suffix) that shows a span of `span_s` seconds with readable ticks."""
    if span_s >= 2 * 3600:
        return 3600.0, "h"
    if span_s >= 120:
        return 60.0, "min"
    return 1.0, "s"


def step_line(
    title: str, points: Sequence[tuple[float, float]], *, x_label: str, y_label: str, y_fmt: str = ".2f"
) -> str:
    """A line through (x, y) points with x in seconds from the first point (axis in h, min or s).

    `x_label` is completed with the time unit chosen for the span, e.g. "time since start (min)"."""
    if len(points) < 2:
        return _empty(title)
    x0 = points[0][0]
    x_max = max(p[0] for p in points) - x0 or 1.0
    y_max = max(p[1] for p in points) or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    coords = " ".join(
        f"{LEFT + plot_w * (x - x0) / x_max:.1f},{TOP + plot_h - plot_h * y / y_max:.1f}" for x, y in points
    )
    body = [f'<polyline points="{coords}" fill="none" stroke="{BAR}" stroke-width="2"/>']
    unit, suffix = _time_unit(x_max)
    ticks = [x_max * i / 4 / unit for i in range(5)]
    x_fmt = distinct_fmt(ticks, ".1f" if unit > 1 else ".0f", max_digits=2)
    for i, tick in enumerate(ticks):
        x = LEFT + plot_w * i / 4
        anchor = "end" if i == 4 else "middle"  # the last label would run past the right edge
        body.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" font-size="10" text-anchor="{anchor}" fill="{INK}">'
            f"{escape(format(tick, x_fmt))} {suffix}</text>"
        )
    return _frame(title, body, y_max, y_fmt, f"{x_label} ({suffix})", y_label)
