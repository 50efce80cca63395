"""One person's GPU time per local day (issue 36, "where is my usage"): split at the
viewer's midnights, shares as fractions, open allocations until now, and words in hours
and minutes (never "0.0 GPU-hours")."""

from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.accounting.daily import (
    Day,
    by_local_day,
    hours_minutes,
    local_days,
    summary,
)
from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.services.usage.page import rows, zone_of

pytestmark = pytest.mark.unit
PARIS = ZoneInfo("Europe/Paris")


def interval(
    start: datetime, end: datetime | None, gpus: float = 1.0, util: float = 0.0
) -> Interval:
    return Interval("alice", "ml", "A100", "n1", gpus, start, end, mean_util_pct=util)


@pytest.mark.parametrize(
    ("hours", "words"),
    [
        (0, "none"),
        (0.004, "under 1 min"),
        (20 / 60, "20 min"),
        (1.0, "1 h"),
        (1 + 5 / 60, "1 h 05 min"),
        (25.5, "25 h 30 min"),
        (-1, "none"),
    ],
)
def test_gpu_time_reads_in_hours_and_minutes(hours: float, words: str) -> None:
    assert hours_minutes(hours) == words


def test_a_session_across_local_midnight_counts_on_both_local_days() -> None:
    # 22:30 to 00:30 UTC is 23:30 to 01:30 in Paris (winter): 30 min, then 1 h 30 min
    s = interval(datetime(2026, 12, 4, 22, 30), datetime(2026, 12, 5, 0, 30), gpus=2, util=50)
    days = by_local_day([s], PARIS, date(2026, 12, 4), date(2026, 12, 5), datetime(2026, 12, 6))
    assert [(d.day.day, round(d.held_h, 3), round(d.busy_h, 3)) for d in days] == [
        (4, 1.0, 0.5),  # 2 GPUs x 30 min
        (5, 3.0, 1.5),
    ]
    utc = by_local_day(
        [s], timezone.utc, date(2026, 12, 4), date(2026, 12, 5), datetime(2026, 12, 6)
    )
    assert [round(d.held_h, 3) for d in utc] == [3.0, 1.0]  # the same session, UTC days


def test_an_open_allocation_counts_until_now_and_a_share_as_its_fraction() -> None:
    now = datetime(2026, 12, 5, 10, 20)
    days = by_local_day(
        [interval(datetime(2026, 12, 5, 10, 0), None, gpus=0.25)],
        timezone.utc,
        date(2026, 12, 5),
        date(2026, 12, 5),
        now,
    )
    assert hours_minutes(days[0].held_h) == "5 min" and days[0].allocations == 1


def test_the_period_and_the_sentence() -> None:
    first, last = local_days(datetime(2026, 12, 5, 23, 30, tzinfo=timezone.utc), PARIS, 14)
    assert (first, last) == (date(2026, 11, 23), date(2026, 12, 6))  # already the 6th in Paris
    days = [Day(date(2026, 12, 5), 1 + 5 / 60, 0.5, 2), Day(date(2026, 12, 6), 0, 0, 0)]
    assert summary(days) == (
        "You held GPUs for 1 h 05 min of GPU time; they were busy for 30 min of it (46 %)."
    )
    assert summary([Day(date(2026, 12, 6), 0, 0, 0)]) == "You held no GPU today."
    assert rows(days) == [
        {"day": "Sat 05 Dec 2026", "held": "1 h 05 min", "busy": "30 min", "servers": "2"}
    ]


@pytest.mark.parametrize(
    ("name", "zone"),
    [
        ("Europe/Paris", "Europe/Paris"),
        ("", "UTC"),
        ("Mars/Olympus", "UTC"),
        ("../../etc/passwd", "UTC"),
        ("x" * 500, "UTC"),
    ],
)
def test_the_browsers_zone_is_an_iana_name_or_utc(name: str, zone: str) -> None:
    assert zone_of(name)[1] == zone
