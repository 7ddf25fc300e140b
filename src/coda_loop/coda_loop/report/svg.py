# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Plot primitives that return inline SVG text: line charts, stacked bars and grouped bars.

Every chart has a title, labelled axes with ticks, and a legend; every piece of text goes
through :func:`esc`, so labels taken from a run's database cannot inject markup. The SVG has
no ``xmlns`` (inline SVG in HTML5 needs none), no scripts and no external references, so a page
that embeds it stays viewable offline. ``None`` values are gaps (line charts) or empty bars.
Pure module: no plotting library, no rclpy.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PALETTE: tuple[str, ...] = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#d55e00",
    "#cc79a7",
    "#56b4e9",
    "#f0e442",
    "#000000",
    "#999999",
    "#8c564b",
    "#7f7f7f",
    "#bcbd22",
)
"""Series colours (Okabe-Ito first, readable by most colour-blind viewers), reused cyclically."""


@dataclass(frozen=True)
class ChartLayout:
    """Sizes of one chart, pixels."""

    width: int = 720
    """Total width, legend included."""
    height: int = 320
    """Total height."""
    left: int = 56
    """Margin left of the plot area (y tick labels and the y axis label)."""
    right: int = 220
    """Margin right of the plot area (the legend)."""
    top: int = 34
    """Margin above the plot area (the title)."""
    bottom: int = 52
    """Margin below the plot area (x tick labels and the x axis label)."""
    legend_chars: int = 30
    """Legend labels longer than this are shortened (the full text is in a tooltip)."""

    def __post_init__(self) -> None:
        """Check that the plot area is not empty."""
        if self.width - self.left - self.right < 40 or self.height - self.top - self.bottom < 40:
            raise ValueError(f"ChartLayout {self}: the plot area must be at least 40 x 40 pixels")

    @property
    def plot_width(self) -> int:
        """Width of the plot area."""
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        """Height of the plot area."""
        return self.height - self.top - self.bottom


def esc(text: object) -> str:
    """Escape any value for use as SVG/HTML text or attribute value."""
    return html.escape(str(text), quote=True)


def color(index: int) -> str:
    """Return the palette colour of series ``index``."""
    return PALETTE[index % len(PALETTE)]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Return about ``count`` round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"nice_ticks: bounds must be finite, got {low}, {high}")
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-6:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high - step * 1e-6:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def _short(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: max(limit - 1, 1)] + "…"


class _Frame:
    """Coordinate mapping and common parts (title, axes, legend) of one chart."""

    def __init__(self, layout: ChartLayout, title: str, x_label: str, y_label: str, y_ticks: list[float]) -> None:
        self.layout = layout
        self.title = title
        self.x_label = x_label
        self.y_label = y_label
        self.y_ticks = y_ticks
        self.y_low, self.y_high = y_ticks[0], y_ticks[-1]

    def y(self, value: float) -> float:
        lay = self.layout
        frac = (value - self.y_low) / (self.y_high - self.y_low)
        return lay.top + lay.plot_height * (1.0 - frac)

    def open(self, kind: str) -> list[str]:
        lay = self.layout
        parts = [
            f'<svg class="chart {esc(kind)}" width="{lay.width}" height="{lay.height}" '
            f'viewBox="0 0 {lay.width} {lay.height}" role="img" aria-label="{esc(self.title)}">',
            f"<title>{esc(self.title)}</title>",
            f'<text class="chart-title" x="{lay.left}" y="{lay.top - 14}" font-size="14" '
            f'font-weight="bold">{esc(self.title)}</text>',
        ]
        for tick in self.y_ticks:
            y = self.y(tick)
            parts.append(
                f'<line x1="{lay.left}" y1="{y:.1f}" x2="{lay.left + lay.plot_width}" y2="{y:.1f}" '
                'stroke="#dddddd" stroke-width="1"/>'
            )
            parts.append(
                f'<text x="{lay.left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{esc(_fmt(tick))}</text>'
            )
        bottom = lay.top + lay.plot_height
        parts.append(
            f'<line class="axis" x1="{lay.left}" y1="{lay.top}" x2="{lay.left}" y2="{bottom}" stroke="#333333"/>'
        )
        parts.append(
            f'<line class="axis" x1="{lay.left}" y1="{bottom}" x2="{lay.left + lay.plot_width}" '
            f'y2="{bottom}" stroke="#333333"/>'
        )
        parts.append(
            f'<text class="x-label" x="{lay.left + lay.plot_width / 2:.1f}" y="{lay.height - 8}" '
            f'font-size="12" text-anchor="middle">{esc(self.x_label)}</text>'
        )
        mid = lay.top + lay.plot_height / 2
        parts.append(
            f'<text class="y-label" x="14" y="{mid:.1f}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {mid:.1f})">{esc(self.y_label)}</text>'
        )
        return parts

    def x_tick(self, x: float, label: str) -> str:
        bottom = self.layout.top + self.layout.plot_height
        return (
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#333333"/>'
            f'<text x="{x:.1f}" y="{bottom + 17}" font-size="11" text-anchor="middle">{esc(label)}</text>'
        )

    def legend(self, entries: Sequence[tuple[str, str, str]]) -> list[str]:
        """Legend rows of (label, colour, dash pattern or '') at the right of the plot area."""
        lay = self.layout
        x = lay.left + lay.plot_width + 16
        parts = ['<g class="legend">']
        for i, (label, col, dash) in enumerate(entries):
            y = lay.top + 8 + 18 * i
            if y > lay.height - 10:
                parts.append(f'<text x="{x}" y="{y}" font-size="11">… {len(entries) - i} more</text>')
                break
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(
                f'<line x1="{x}" y1="{y - 4}" x2="{x + 18}" y2="{y - 4}" stroke="{col}" stroke-width="6"{dash_attr}/>'
            )
            parts.append(
                f'<text x="{x + 24}" y="{y}" font-size="11"><title>{esc(label)}</title>'
                f"{esc(_short(label, lay.legend_chars))}</text>"
            )
        parts.append("</g>")
        return parts


def _values_range(values: Sequence[float | None], low: float | None, high: float | None) -> tuple[float, float]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    lo = low if low is not None else min([*finite, 0.0])
    hi = high if high is not None else max([*finite, lo + 1e-9])
    return lo, hi


def line_chart(
    *,
    title: str,
    x_label: str,
    y_label: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    dashed: Sequence[str] = (),
    y_min: float | None = 0.0,
    y_max: float | None = None,
    layout: ChartLayout | None = None,
) -> str:
    """One line per series over the shared ``x`` values (markers at every point, gaps at ``None``).

    ``dashed`` names series drawn with a dashed line (e.g. the OOD splits). ``y_min`` / ``y_max``
    fix the y range (``None``: from the data).
    """
    lay = layout or ChartLayout()
    for name, values in series.items():
        if len(values) != len(x):
            raise ValueError(f"line_chart {title!r}: series {name!r} has {len(values)} values for {len(x)} x values")
    all_values = [v for values in series.values() for v in values]
    frame = _Frame(lay, title, x_label, y_label, nice_ticks(*_values_range(all_values, y_min, y_max)))
    parts = frame.open("line-chart")
    if not x or not series:
        parts.append(f'<text x="{lay.left + 10}" y="{lay.top + 24}" font-size="12">no data</text></svg>')
        return "".join(parts)
    x_lo, x_hi = min(x), max(x)
    span = (x_hi - x_lo) or 1.0
    pad = 12

    def px(value: float) -> float:
        if x_hi == x_lo:
            return lay.left + lay.plot_width / 2
        return lay.left + pad + (lay.plot_width - 2 * pad) * (value - x_lo) / span

    for value in sorted(set(x)):
        parts.append(frame.x_tick(px(value), _fmt(value)))
    entries = []
    for i, (name, values) in enumerate(series.items()):
        col, dash = color(i), ("6 4" if name in dashed else "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        runs: list[list[tuple[float, float]]] = [[]]
        for xv, yv in zip(x, values, strict=True):
            if yv is None or not math.isfinite(float(yv)):
                runs.append([])
                continue
            runs[-1].append((px(xv), frame.y(float(yv))))
        parts.append(f'<g class="series" data-name="{esc(name)}">')
        for run in runs:
            if len(run) > 1:
                points = " ".join(f"{a:.1f},{b:.1f}" for a, b in run)
                parts.append(f'<polyline points="{points}" fill="none" stroke="{col}" stroke-width="2"{dash_attr}/>')
        for xv, yv in zip(x, values, strict=True):
            if yv is not None and math.isfinite(float(yv)):
                parts.append(
                    f'<circle cx="{px(xv):.1f}" cy="{frame.y(float(yv)):.1f}" r="3.5" fill="{col}">'
                    f"<title>{esc(name)}: {esc(_fmt(xv))} → {float(yv):.3f}</title></circle>"
                )
        parts.append("</g>")
        entries.append((name, col, dash))
    parts.extend(frame.legend(entries))
    parts.append("</svg>")
    return "".join(parts)


def _bar_slots(lay: ChartLayout, count: int) -> tuple[float, float]:
    slot = lay.plot_width / max(count, 1)
    return slot, slot * 0.7


def stacked_bar_chart(
    *,
    title: str,
    x_label: str,
    y_label: str,
    categories: Sequence[str],
    stacks: Mapping[str, Sequence[float]],
    layout: ChartLayout | None = None,
) -> str:
    """One bar per category, stacked from the series of ``stacks`` (each a value per category, >= 0)."""
    lay = layout or ChartLayout()
    for name, values in stacks.items():
        if len(values) != len(categories):
            raise ValueError(
                f"stacked_bar_chart {title!r}: stack {name!r} has {len(values)} values for {len(categories)} categories"
            )
        if any(v < 0 for v in values):
            raise ValueError(f"stacked_bar_chart {title!r}: stack {name!r} has negative values")
    totals = [sum(values[i] for values in stacks.values()) for i in range(len(categories))]
    frame = _Frame(lay, title, x_label, y_label, nice_ticks(0.0, max([*totals, 1.0])))
    parts = frame.open("stacked-bar-chart")
    if not categories or not stacks:
        parts.append(f'<text x="{lay.left + 10}" y="{lay.top + 24}" font-size="12">no data</text></svg>')
        return "".join(parts)
    slot, bar = _bar_slots(lay, len(categories))
    for i, category in enumerate(categories):
        left = lay.left + slot * i + (slot - bar) / 2
        parts.append(frame.x_tick(left + bar / 2, category))
        base = 0.0
        for j, (name, values) in enumerate(stacks.items()):
            value = float(values[i])
            if value <= 0:
                continue
            y_top, y_bottom = frame.y(base + value), frame.y(base)
            parts.append(
                f'<rect x="{left:.1f}" y="{y_top:.1f}" width="{bar:.1f}" height="{y_bottom - y_top:.1f}" '
                f'fill="{color(j)}"><title>{esc(category)} · {esc(name)}: {esc(_fmt(value))}</title></rect>'
            )
            base += value
    parts.extend(frame.legend([(name, color(j), "") for j, name in enumerate(stacks)]))
    parts.append("</svg>")
    return "".join(parts)


def grouped_bar_chart(
    *,
    title: str,
    x_label: str,
    y_label: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    errors: Mapping[str, Sequence[float | None]] | None = None,
    y_min: float | None = 0.0,
    y_max: float | None = None,
    layout: ChartLayout | None = None,
) -> str:
    """Side-by-side bars: per group one bar per series; ``errors`` draws +/- whiskers (e.g. the std)."""
    lay = layout or ChartLayout()
    errors = errors or {}
    for name, values in series.items():
        if len(values) != len(groups):
            raise ValueError(
                f"grouped_bar_chart {title!r}: series {name!r} has {len(values)} values for {len(groups)} groups"
            )
        if name in errors and len(errors[name]) != len(groups):
            raise ValueError(
                f"grouped_bar_chart {title!r}: errors of {name!r} have {len(errors[name])} values for "
                f"{len(groups)} groups"
            )
    tops = [
        float(v) + float((errors.get(name) or [0] * len(groups))[i] or 0.0)
        for name, values in series.items()
        for i, v in enumerate(values)
        if v is not None
    ]
    frame = _Frame(lay, title, x_label, y_label, nice_ticks(*_values_range(tops, y_min, y_max)))
    parts = frame.open("grouped-bar-chart")
    if not groups or not series:
        parts.append(f'<text x="{lay.left + 10}" y="{lay.top + 24}" font-size="12">no data</text></svg>')
        return "".join(parts)
    slot, width = _bar_slots(lay, len(groups))
    bar = width / len(series)
    zero = frame.y(max(frame.y_low, 0.0))
    for i, group in enumerate(groups):
        left = lay.left + slot * i + (slot - width) / 2
        parts.append(frame.x_tick(left + width / 2, group))
        for j, (name, values) in enumerate(series.items()):
            value = values[i]
            if value is None or not math.isfinite(float(value)):
                continue
            x = left + bar * j
            y_top = frame.y(float(value))
            y0, y1 = min(y_top, zero), max(y_top, zero)
            err = (errors.get(name) or [None] * len(groups))[i]
            label = f"{group} · {name}: {float(value):.3f}" + (f" ± {float(err):.3f}" if err is not None else "")
            parts.append(
                f'<rect x="{x:.1f}" y="{y0:.1f}" width="{max(bar - 1, 1):.1f}" height="{y1 - y0:.1f}" '
                f'fill="{color(j)}"><title>{esc(label)}</title></rect>'
            )
            if err is not None and float(err) > 0:
                cx = x + bar / 2
                hi = frame.y(min(float(value) + float(err), frame.y_high))
                lo = frame.y(max(float(value) - float(err), frame.y_low))
                parts.append(
                    f'<line class="error" x1="{cx:.1f}" y1="{hi:.1f}" x2="{cx:.1f}" y2="{lo:.1f}" '
                    'stroke="#222222" stroke-width="1"/>'
                )
    parts.extend(frame.legend([(name, color(j), "") for j, name in enumerate(series)]))
    parts.append("</svg>")
    return "".join(parts)
