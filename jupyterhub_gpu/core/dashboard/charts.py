"""Chart geometry for server-side SVG (pure): numbers in, coordinates out. The templates
draw them; nothing here knows HTML, so no text from a request ever reaches an attribute
unescaped (labels go through the templates' autoescaping)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def sparkline(
    samples: Sequence[tuple[float, float]],
    now: float,
    window: float,
    width: float = 96.0,
    height: float = 24.0,
    top: float = 100.0,
) -> str:
    """An SVG ``points`` attribute for ``(time, value)`` samples over the last ``window``
    seconds before ``now``, values 0..``top`` from the bottom up; "" for fewer than 2."""
    if len(samples) < 2 or window <= 0:
        return ""
    start = now - window
    pad = 1.0  # keep the stroke inside the box
    points = []
    for at, value in samples:
        x = (min(max(at, start), now) - start) / window * (width - 2 * pad) + pad
        v = min(max(value, 0.0), top) / top if top > 0 else 0.0
        y = (1.0 - v) * (height - 2 * pad) + pad
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)


def downsample(
    samples: Sequence[tuple[float, float]], points: int = 32
) -> list[tuple[float, float]]:
    """At most ``points`` samples: consecutive runs merged into their middle time and
    their highest value (a short busy spike stays visible)."""
    if len(samples) <= points:
        return list(samples)
    out = []
    for k in range(points):
        run = samples[k * len(samples) // points : (k + 1) * len(samples) // points]
        out.append((run[len(run) // 2][0], max(v for _, v in run)))
    return out


@dataclass(frozen=True)
class Bar:
    """One horizontal bar pair: ``allocated`` (the full bar) and ``used`` inside it."""

    label: str
    allocated: float
    used: float
    y: float
    allocated_width: float
    used_width: float

    @property
    def efficiency_pct(self) -> float | None:
        return None if self.allocated <= 0 else 100.0 * self.used / self.allocated


def bars(
    rows: Sequence[tuple[str, float, float]],
    width: float = 300.0,
    row_height: float = 22.0,
) -> tuple[list[Bar], float]:
    """Bars for ``(label, allocated, used)`` rows, widest first, scaled so the largest
    allocation fills ``width``; returns them and the chart's height."""
    ordered = sorted(rows, key=lambda r: (-r[1], r[0]))
    top = max((r[1] for r in ordered), default=0.0)
    scale = width / top if top > 0 else 0.0
    out = [
        Bar(label, alloc, used, i * row_height, alloc * scale, min(used, alloc) * scale)
        for i, (label, alloc, used) in enumerate(ordered)
    ]
    return out, max(len(out), 1) * row_height


@dataclass(frozen=True)
class Column:
    """One day's column pair: allocated (behind) and used (in front), from the baseline."""

    label: str
    allocated: float
    used: float
    x: float
    width: float
    allocated_y: float
    allocated_height: float
    used_y: float
    used_height: float


def columns(
    days: Sequence[tuple[str, float, float]],
    width: float = 560.0,
    height: float = 140.0,
) -> tuple[list[Column], list[tuple[float, float]]]:
    """Columns for ``(label, allocated, used)`` per day, left to right, and the y axis'
    ticks as ``(value, y)`` (0, half and the top, rounded up to a readable number)."""
    top = nice_ceiling(max((d[1] for d in days), default=0.0))
    step = width / max(len(days), 1)
    gap = min(4.0, step * 0.2)
    out = []
    for i, (label, alloc, used) in enumerate(days):
        a = alloc / top * height if top else 0.0
        u = min(used, alloc) / top * height if top else 0.0
        out.append(
            Column(label, alloc, used, i * step + gap / 2, step - gap, height - a, a, height - u, u)
        )
    ticks = [(v, height - v / top * height) for v in (0.0, top / 2, top)] if top else []
    return out, ticks


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n at or above ``value`` (0 for 0)."""
    if value <= 0:
        return 0.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if factor * magnitude >= value:
            return factor * magnitude
    return 10.0 * magnitude  # pragma: no cover - the loop always returns
