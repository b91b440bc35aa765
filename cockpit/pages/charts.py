"""Geometry of the diagnostics charts, drawn as server-rendered SVG (``templates/partials/_charts.html``).

No charting JavaScript: the server computes every rectangle and line; each carries a ``<title>``
with its value, which the browser shows on hover and screen readers read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine.runs import states as st
from engine.runs.diagnostics import Diagnostics, percentile
from engine.runs.outcome import is_decision

WIDTH = 640
HEIGHT = 220
LEFT = 44  # room for the y-axis labels
BOTTOM = 28  # room for the x-axis labels
TOP = 12
PLOT_W = WIDTH - LEFT - 12
PLOT_H = HEIGHT - TOP - BOTTOM

# Outcome groups of the runs-over-time chart, in stacking order, with their legend.
# A run an approver rejected is a decision, its own series whatever it undid (engine/runs/outcome.py).
OUTCOMES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("succeeded", "Succeeded", frozenset({st.SUCCEEDED})),
    ("rejected", "Rejected by an approver", frozenset()),
    ("failed", "Failed or compensated", frozenset({st.FAILED, st.COMPENSATED})),
    ("compensation_failed", "Compensation failed", frozenset({st.COMPENSATION_FAILED})),
    ("cancelled", "Cancelled", frozenset({st.CANCELLED})),
    ("in_flight", "In flight", frozenset(st.IN_FLIGHT)),
)


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    y: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Marker:
    """A vertical line (p50, p95) with its label beside it, on whichever side has room."""

    x: float
    css: str
    label: str
    label_x: float
    anchor: str
    label_y: float


@dataclass
class Chart:
    rects: list[Rect] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    empty: bool = True
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    plot_w: int = PLOT_W
    plot_h: int = PLOT_H


def _y_ticks(maximum: float, label: object = None) -> list[Tick]:
    ticks = [Tick(LEFT - 6, TOP + PLOT_H, "0", "end")]
    if maximum > 0:
        ticks.append(Tick(LEFT - 6, TOP + 10, _short(maximum) if label is None else str(label), "end"))
    return ticks


def _short(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def human_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes = seconds / 60
    if minutes < 120:
        return f"{minutes:.1f} min"
    hours = minutes / 60
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} d"


def _when(moment: datetime, span: timedelta) -> str:
    return moment.strftime("%m-%d %H:%M" if span < timedelta(days=2) else "%Y-%m-%d")


def runs_over_time(diag: Diagnostics, buckets: int = 12) -> Chart:
    """Stacked bars: the window's runs by when they started, coloured by outcome."""
    chart = Chart()
    if not diag.runs:
        return chart
    chart.empty = False
    start = min(r.created_at for r in diag.runs)
    end = max(r.created_at for r in diag.runs)
    span = max(end - start, timedelta(seconds=1))
    step = span / buckets
    counts: list[dict[str, int]] = [dict.fromkeys((k for k, _, _ in OUTCOMES), 0) for _ in range(buckets)]
    for run in diag.runs:
        index = min(buckets - 1, int((run.created_at - start) / step))
        if run.state in st.FINISHED and is_decision(run.error_category):
            counts[index]["rejected"] += 1
            continue
        for key, _label, members in OUTCOMES:
            if run.state in members:
                counts[index][key] += 1
                break
    tallest: float = max(sum(c.values()) for c in counts) or 1
    slot = PLOT_W / buckets
    for i, bucket in enumerate(counts):
        x = LEFT + i * slot + slot * 0.1
        y: float = TOP + PLOT_H
        frm, to = start + step * i, start + step * (i + 1)
        for key, label, _members in OUTCOMES:
            n = bucket[key]
            if not n:
                continue
            h = PLOT_H * n / tallest
            y -= h
            chart.rects.append(
                Rect(
                    x,
                    y,
                    slot * 0.8,
                    h,
                    f"o-{key}",
                    f"{label}: {n} run(s) started {_when(frm, span)} – {_when(to, span)}",
                )
            )
    chart.x_ticks = [
        Tick(LEFT, HEIGHT - 8, _when(start, span), "start"),
        Tick(LEFT + PLOT_W, HEIGHT - 8, _when(end, span), "end"),
    ]
    chart.y_ticks = _y_ticks(tallest)
    return chart


@dataclass(frozen=True)
class CategoryBar:
    step_id: str
    category: str
    count: int
    width_pct: float


def failure_bars(diag: Diagnostics) -> list[CategoryBar]:
    """Failure categories by step, as horizontal bars (widths relative to the largest)."""
    rows = [
        (step, category, count)
        for step, categories in diag.step_failure_categories().items()
        for category, count in categories.items()
    ]
    if not rows:
        return []
    biggest = max(count for _, _, count in rows)
    rows.sort(key=lambda r: (-r[2], r[0], r[1]))
    return [CategoryBar(step, category, count, 100 * count / biggest) for step, category, count in rows]


def failure_chart(diag: Diagnostics) -> Chart:
    """The same bars as an SVG: one row per (step, category)."""
    bars = failure_bars(diag)[:12]
    row = 22
    chart = Chart(height=TOP + row * max(1, len(bars)) + 8, left=170, plot_w=WIDTH - 170 - 40)
    if not bars:
        return chart
    chart.empty = False
    for i, bar in enumerate(bars):
        y = TOP + i * row
        w = chart.plot_w * bar.width_pct / 100
        chart.rects.append(
            Rect(chart.left, y, max(w, 2), row - 6, "o-failed", f"{bar.step_id}: {bar.count} × {bar.category}")
        )
        chart.y_ticks.append(Tick(chart.left - 6, y + row - 10, f"{bar.step_id} · {bar.category}", "end"))
        chart.x_ticks.append(Tick(chart.left + max(w, 2) + 4, y + row - 10, str(bar.count), "start"))
    return chart


def duration_histogram(diag: Diagnostics, bins: int = 12) -> Chart:
    """How long finished runs took, with p50 and p95 marked."""
    chart = Chart()
    durations = diag.durations_ms()
    if not durations:
        return chart
    chart.empty = False
    low, high = 0.0, max(durations)
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for d in durations:
        counts[min(bins - 1, int((d - low) / width))] += 1
    tallest = max(counts) or 1
    slot = PLOT_W / bins
    for i, n in enumerate(counts):
        if not n:
            continue
        h = PLOT_H * n / tallest
        a, b = low + width * i, low + width * (i + 1)
        chart.rects.append(
            Rect(
                LEFT + i * slot + 1,
                TOP + PLOT_H - h,
                slot - 2,
                h,
                "o-duration",
                f"{n} run(s) took {human_ms(a)} – {human_ms(b)}",
            )
        )
    span = (high - low) or 1.0
    for row, (q, css) in enumerate(((50, "p50"), (95, "p95"))):
        value = percentile(durations, q)
        if value is not None:
            x = LEFT + PLOT_W * (value - low) / span
            right_side = x < LEFT + PLOT_W * 0.6
            chart.markers.append(
                Marker(
                    x,
                    css,
                    f"p{q} {human_ms(value)}",
                    x + 4 if right_side else x - 4,
                    "start" if right_side else "end",
                    TOP + 10 + 14 * row,
                )
            )
    chart.x_ticks = [Tick(LEFT, HEIGHT - 8, "0", "start"), Tick(LEFT + PLOT_W, HEIGHT - 8, human_ms(high), "end")]
    chart.y_ticks = _y_ticks(tallest)
    return chart
