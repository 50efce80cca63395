"""GPU-hours allocated and used, grouped and bucketed over a period (pure).

Input is plain :class:`Interval` rows (what the store selects: allocations overlapping the
period); output is :class:`ReportRow` rows. Each interval is clipped to the period and cut
at bucket boundaries (UTC midnight, Monday, the 1st of the month), so an allocation that
runs over midnight counts on both days, each second once.

- allocated GPU-hours: GPUs x hours held;
- used GPU-hours: allocated x mean utilisation (utilisation-weighted);
- efficiency: used / allocated;
- reclaimed idle GPU-hours: for allocations the culler ended, GPUs x the idle stretch that
  ended with the cull (since the GPUs were last busy, or since the start if never), counted
  in the bucket where the allocation ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jupyterhub_gpu.errors import ReportError

GROUP_BY = ("user", "group", "model", "node", "kind")
BUCKETS = ("day", "week", "month")
EARLIEST = datetime(2000, 1, 1)


@dataclass(frozen=True)
class Interval:
    """One allocation as the report sees it (naive UTC datetimes)."""

    user: str
    group: str
    model: str
    node: str
    gpus: float  # GPUs held; a share counts as its fraction of one (issue 26)
    start: datetime
    end: datetime | None  # None: still open (counted up to the report's ``now``)
    mean_util_pct: float = 0.0
    culled: bool = False
    last_busy: datetime | None = None
    kind: str = "server"  # or "job" (issue 32): --by kind splits the two


@dataclass(frozen=True)
class ReportRow:
    keys: tuple[str, ...]  # the values of the report's ``by`` columns, in order
    bucket: datetime | None  # the bucket's start, None when not bucketed
    allocations: int
    gpu_hours_allocated: float
    gpu_hours_used: float
    reclaimed_idle_gpu_hours: float

    @property
    def efficiency(self) -> float | None:
        if self.gpu_hours_allocated <= 0:
            return None
        return self.gpu_hours_used / self.gpu_hours_allocated


@dataclass(frozen=True)
class ReportQuery:
    start: datetime
    end: datetime
    by: tuple[str, ...] = ("group",)
    bucket: str | None = None
    user: str | None = None  # only this user's allocations
    group: str | None = None  # only this group's


def validate_query(query: ReportQuery, now: datetime) -> ReportQuery:
    """``query`` if it makes sense, else :class:`ReportError` saying what to change."""
    if query.start >= query.end:
        raise ReportError(
            f"The period is empty or inverted: it starts {query.start:%Y-%m-%d %H:%M} and "
            f"ends {query.end:%Y-%m-%d %H:%M}. Give the start first."
        )
    if query.start < EARLIEST or query.end > now + timedelta(days=366):
        raise ReportError(
            f"The period {query.start:%Y-%m-%d} .. {query.end:%Y-%m-%d} is out of range: "
            f"give dates between {EARLIEST:%Y-%m-%d} and a year from now."
        )
    unknown = [k for k in query.by if k not in GROUP_BY]
    if unknown or not query.by or len(set(query.by)) != len(query.by):
        raise ReportError(
            f"Can't group by {', '.join(unknown) or 'that'}: choose one or more of "
            f"{', '.join(GROUP_BY)}, each once."
        )
    if query.bucket is not None and query.bucket not in BUCKETS:
        raise ReportError(
            f"Unknown period size {query.bucket!r}: choose one of {', '.join(BUCKETS)}."
        )
    return query


def bucket_start(t: datetime, bucket: str) -> datetime:
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if bucket == "day":
        return day
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def next_bucket(t: datetime, bucket: str) -> datetime:
    if bucket == "day":
        return t + timedelta(days=1)
    if bucket == "week":
        return t + timedelta(days=7)
    return (t.replace(day=28) + timedelta(days=4)).replace(day=1)


def _pieces(
    start: datetime, end: datetime, bucket: str | None
) -> Iterable[tuple[datetime | None, float]]:
    """(bucket start, seconds) for the span start..end cut at bucket boundaries."""
    if bucket is None:
        yield None, (end - start).total_seconds()
        return
    b = bucket_start(start, bucket)
    while b < end:
        nb = next_bucket(b, bucket)
        lo, hi = max(start, b), min(end, nb)
        if hi > lo:
            yield b, (hi - lo).total_seconds()
        b = nb


def _key(i: Interval, by: Sequence[str]) -> tuple[str, ...]:
    return tuple(getattr(i, k) for k in by)


def report(intervals: Iterable[Interval], query: ReportQuery, now: datetime) -> list[ReportRow]:
    """The rows of ``query`` over ``intervals`` (open ones counted up to ``now``), sorted
    by bucket then keys. Intervals outside the period or of other users/groups than the
    query asks for count nothing."""
    acc: dict[tuple[datetime | None, tuple[str, ...]], list[float]] = {}
    seen: dict[tuple[datetime | None, tuple[str, ...]], set[int]] = {}
    for n, i in enumerate(intervals):
        if (query.user is not None and i.user != query.user) or (
            query.group is not None and i.group != query.group
        ):
            continue
        end = min(i.end or now, now, query.end)
        start = max(i.start, query.start)
        key = _key(i, query.by)
        for b, seconds in _pieces(start, end, query.bucket) if end > start else ():
            cell = acc.setdefault((b, key), [0.0, 0.0, 0.0])
            cell[0] += i.gpus * seconds / 3600
            cell[1] += i.gpus * seconds / 3600 * i.mean_util_pct / 100
            seen.setdefault((b, key), set()).add(n)
        if i.culled and i.end is not None and query.start <= i.end < query.end and i.gpus:
            idle_from = max(i.last_busy or i.start, i.start)
            b = bucket_start(i.end, query.bucket) if query.bucket else None
            cell = acc.setdefault((b, key), [0.0, 0.0, 0.0])
            cell[2] += i.gpus * max((i.end - idle_from).total_seconds(), 0.0) / 3600
            seen.setdefault((b, key), set()).add(n)
    rows = [ReportRow(key, b, len(seen[(b, key)]), v[0], v[1], v[2]) for (b, key), v in acc.items()]
    return sorted(rows, key=lambda r: (r.bucket or datetime.min, r.keys))
