"""One person's GPU time per day, in their own time zone (pure): what the usage page shows.

An allocation is split at the viewer's local midnights (a server running from 23:00 to
01:00 counts one hour on each day); GPU time is GPUs x hours held (a share counts as its
fraction of a GPU), "busy" the part of it the GPUs were used (allocated x mean
utilisation, as the report's ``gpu_hours_used``). People read it in hours and minutes
(:func:`hours_minutes`): never "0.0 GPU-hours" for a 20-minute session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo

from jupyterhub_gpu.core.accounting.report import Interval

MAX_DAYS = 92


@dataclass(frozen=True)
class Day:
    day: date  # in the viewer's zone
    held_h: float  # GPU-hours held
    busy_h: float  # GPU-hours used (held x mean utilisation)
    allocations: int  # servers that held GPUs (or ran) that day


def hours_minutes(hours: float) -> str:
    """``1 h 05 min``, ``12 min``, ``under 1 min``, ``none``: GPU time for people."""
    minutes = round(max(hours, 0.0) * 60)
    if hours <= 0:
        return "none"
    if minutes < 1:
        return "under 1 min"
    h, m = divmod(minutes, 60)
    if not h:
        return f"{m} min"
    return f"{h} h {m:02d} min" if m else f"{h} h"


def _utc(d: date, zone: tzinfo) -> datetime:
    """Local midnight of ``d`` in ``zone`` as naive UTC (the store's times)."""
    return datetime.combine(d, time(0), zone).astimezone(timezone.utc).replace(tzinfo=None)


def local_days(now: datetime, zone: tzinfo, days: int) -> tuple[date, date]:
    """The first and last local day of the last ``days`` days up to ``now`` (aware)."""
    last = now.astimezone(zone).date()
    return last - timedelta(days=max(min(days, MAX_DAYS), 1) - 1), last


def by_local_day(
    intervals: Iterable[Interval], zone: tzinfo, first: date, last: date, now: datetime
) -> list[Day]:
    """GPU time per local day from ``first`` to ``last`` (both included), oldest first;
    an open allocation counts until ``now`` (naive UTC)."""
    spans = [(i, i.start, i.end or now) for i in intervals]
    out = []
    d = first
    while d <= last:
        lo, hi = _utc(d, zone), _utc(d + timedelta(days=1), zone)
        held = busy = 0.0
        count = 0
        for i, start, end in spans:
            overlap = (min(end, hi) - max(start, lo)).total_seconds()
            if overlap <= 0:
                continue
            count += 1
            gpu_h = i.gpus * overlap / 3600.0
            held += gpu_h
            busy += gpu_h * min(max(i.mean_util_pct, 0.0), 100.0) / 100.0
        out.append(Day(d, held, busy, count))
        d += timedelta(days=1)
    return out


def summary(days: Sequence[Day], who: str = "You") -> str:
    """One sentence over the period: ``You held GPUs for 3 h 05 min of GPU time; they
    were busy for 1 h 10 min of it (38 %).``"""
    held = sum(d.held_h for d in days)
    busy = sum(d.busy_h for d in days)
    if held <= 0:
        period = "today" if len(days) == 1 else f"in the last {len(days)} days"
        return f"{who} held no GPU {period}."
    share = f" ({100.0 * busy / held:.0f} %)"
    if busy * 60 < 0.5:
        return f"{who} held GPUs for {hours_minutes(held)} of GPU time; they were never busy."
    return (
        f"{who} held GPUs for {hours_minutes(held)} of GPU time; they were busy for "
        f"{hours_minutes(busy)} of it{share}."
    )
