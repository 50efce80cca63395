"""GPU-hours for the dashboard's charts: by group, by model, per day, and one user's own.

:func:`summarize` is pure (the accounting report's own :func:`~..accounting.report.report`
over plain intervals); :func:`load_intervals` reads the accounting store, read-only: a
database without the tables is reported as such, never created.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jupyterhub_gpu.core.accounting.report import Interval, ReportQuery, report
from jupyterhub_gpu.core.dashboard.charts import Bar, Column, bars, columns
from jupyterhub_gpu.core.form.availability import short_model_name
from jupyterhub_gpu.edges.accounting.store import AccountingStore

Row = tuple[str, float, float]  # label, GPU-hours allocated, GPU-hours used
NO_GROUP = "(no group)"
BAR_WIDTH = 240.0  # of 560: the label takes 150, the figures after the bar the rest
_Cell = tuple[tuple[str, ...], datetime | None, float, float]  # keys, bucket, allocated, used


@dataclass(frozen=True)
class UsageSummary:
    start: datetime  # naive UTC, midnight of the first day
    end: datetime  # naive UTC, now
    by_group: list[Row]
    by_model: list[Row]
    per_day: list[Row]  # one per day, oldest first, "MM-DD" labels

    @property
    def allocated(self) -> float:
        return sum(r[1] for r in self.per_day)

    @property
    def used(self) -> float:
        return sum(r[2] for r in self.per_day)


def period(now: datetime, days: int) -> tuple[datetime, datetime]:
    """The last ``days`` calendar days (UTC) up to ``now`` (naive UTC)."""
    first = (now - timedelta(days=max(days, 1) - 1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return first, now


def summarize(
    intervals: Sequence[Interval], now: datetime, days: int, user: str | None = None
) -> UsageSummary:
    """GPU-hours allocated and used over the last ``days`` days (of ``user`` only, if given)."""
    start, end = period(now, days)
    if user is not None:  # the report would skip the others one by one, three times
        intervals = [i for i in intervals if i.user == user]

    def rows(by: tuple[str, ...], bucket: str | None = None) -> list[_Cell]:
        query = ReportQuery(start=start, end=end, by=by, bucket=bucket, user=user)
        return [
            (r.keys, r.bucket, r.gpu_hours_allocated, r.gpu_hours_used)
            for r in report(intervals, query, now)
            if r.gpu_hours_allocated > 0
        ]

    by_group = [(k[0] or NO_GROUP, a, u) for k, _, a, u in rows(("group",))]
    by_model = [(short_model_name(k[0]) or "?", a, u) for k, _, a, u in rows(("model",))]
    daily = {b: (a, u) for _, b, a, u in rows((), "day") if b is not None}
    per_day = []
    for i in range((end.date() - start.date()).days + 1):
        day = start + timedelta(days=i)
        allocated, used = daily.get(day, (0.0, 0.0))
        per_day.append((f"{day:%m-%d}", allocated, used))
    return UsageSummary(start, end, by_group, by_model, per_day)


def load_intervals(store: AccountingStore, start: datetime, end: datetime) -> list[Interval] | None:
    """The allocations overlapping [start, end) (naive UTC); None when the database has no
    accounting tables yet (the hub makes them with its first spawn). Blocking: run it in
    an executor. Raises ``AccountingUnavailable`` when the database does not answer."""
    if not store.has_schema():
        return None
    return store.intervals(start, end)


@dataclass(frozen=True)
class UsageCharts:
    """A summary's chart geometry (:mod:`.charts`) for the templates."""

    summary: UsageSummary
    days: list[Column]
    ticks: list[tuple[float, float]]
    groups: list[Bar]
    groups_height: float
    models: list[Bar]
    models_height: float


def usage_charts(summary: UsageSummary) -> UsageCharts:
    days, ticks = columns(summary.per_day)
    groups, groups_height = bars(summary.by_group, width=BAR_WIDTH)
    models, models_height = bars(summary.by_model, width=BAR_WIDTH)
    return UsageCharts(summary, days, ticks, groups, groups_height, models, models_height)
