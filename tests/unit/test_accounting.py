"""Accounting's pure parts (issue 11): usage folding, the report's arithmetic and checks,
the charge group, which open allocations a restarted hub closes as missed; and the
recorder's order and backlog against a real SQLite file."""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu.core.accounting.records import (
    AllocationEvent,
    AllocationRecord,
    EndReason,
    EventKind,
    charge_group,
    chargeable_groups,
)
from jupyterhub_gpu.core.accounting.report import (
    Interval,
    ReportError,
    ReportQuery,
    report,
    validate_query,
)
from jupyterhub_gpu.core.accounting.usage import GPUSample, Usage, fold
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable, safe_url
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.recorder import Recorder, close_missed

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 2, 22, 0, tzinfo=timezone.utc)  # a Monday, 22:00 UTC
NOW = datetime(2026, 11, 24)


# ------------------------------------------------------------------ usage
def test_usage_weighs_each_reading_by_the_time_it_stands_for() -> None:
    u = fold(Usage(), T0, [GPUSample(50, 1000)])  # the first reading only starts the clock
    assert u.sampled_s == 0 and u.last_sample == T0 and u.peak_memory_mib == 1000
    u = fold(u, T0 + timedelta(seconds=30), [GPUSample(100, 3000), GPUSample(0, 10)])
    u = fold(u, T0 + timedelta(seconds=90), [GPUSample(0, 500), GPUSample(0, 500)])
    assert u.sampled_s == 90
    assert u.mean_util_pct == pytest.approx((50 * 30 + 0 * 60) / 90)
    assert u.peak_util_pct == 100 and u.peak_memory_mib == 3000
    assert u.busy_s == 30 and u.last_busy == T0 + timedelta(seconds=30)


def test_a_long_gap_counts_at_most_max_gap_and_old_readings_are_ignored() -> None:
    u = fold(Usage(), T0, [GPUSample(80, 1)])
    u = fold(u, T0 + timedelta(hours=5), [GPUSample(80, 1)], max_gap_s=300)
    assert u.sampled_s == 300 and u.busy_s == 300
    assert fold(u, T0 + timedelta(hours=1), [GPUSample(0, 1)]) == u
    assert fold(u, T0 + timedelta(hours=6), []) == u  # CPU-only: nothing to count


# ------------------------------------------------------------------ report
def iv(start: datetime, hours: float, **kw: object) -> Interval:
    fields: dict = dict(user="alice", group="ml", model="A100", node="n1", gpus=2)
    fields.update(kw)
    end = start + timedelta(hours=hours) if hours else None
    naive = start.replace(tzinfo=None)
    return Interval(start=naive, end=end and end.replace(tzinfo=None), **fields)


def q(**kw: object) -> ReportQuery:
    args: dict = dict(start=datetime(2026, 11, 1), end=datetime(2026, 12, 1))
    args.update(kw)
    return ReportQuery(**args)


def test_an_allocation_over_midnight_counts_on_both_days_each_second_once() -> None:
    rows = report([iv(T0, 3, mean_util_pct=25)], q(bucket="day"), NOW)
    assert [(r.bucket, r.gpu_hours_allocated) for r in rows] == [
        (datetime(2026, 11, 2), 4.0),
        (datetime(2026, 11, 3), 2.0),
    ]
    assert [r.gpu_hours_used for r in rows] == [1.0, 0.5]
    assert all(r.efficiency == 0.25 and r.allocations == 1 for r in rows)


def test_weeks_start_on_monday_and_months_on_the_first() -> None:
    sunday = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)
    weeks = report([iv(sunday, 24)], q(bucket="week"), NOW)
    assert [(r.bucket, r.gpu_hours_allocated) for r in weeks] == [
        (datetime(2026, 10, 26), 24.0),
        (datetime(2026, 11, 2), 24.0),
    ]
    months = report(
        [iv(datetime(2026, 10, 31, 12, tzinfo=timezone.utc), 24)],
        q(start=datetime(2026, 10, 1), bucket="month"),
        NOW,
    )
    assert [(r.bucket, r.gpu_hours_allocated) for r in months] == [
        (datetime(2026, 10, 1), 24.0),
        (datetime(2026, 11, 1), 24.0),
    ]


def test_the_period_clips_and_open_allocations_count_until_now() -> None:
    before = iv(datetime(2026, 10, 31, 23, tzinfo=timezone.utc), 2)  # 1 h inside
    open_ = iv(datetime(2026, 11, 23, 23, tzinfo=timezone.utc), 0, user="bob")  # until NOW
    outside = iv(datetime(2026, 9, 1, tzinfo=timezone.utc), 5)
    rows = report([before, open_, outside], q(by=("user",)), NOW)
    assert {r.keys: r.gpu_hours_allocated for r in rows} == {("alice",): 2.0, ("bob",): 2.0}


def test_grouping_by_several_keys_and_filters() -> None:
    rows = report(
        [
            iv(T0, 1, user="a", group="g1", model="A100"),
            iv(T0, 1, user="b", group="g1", model="A100"),
            iv(T0, 1, user="c", group="g2", model="TITAN X", gpus=1),
        ],
        q(by=("group", "model")),
        NOW,
    )
    assert {r.keys: (r.allocations, r.gpu_hours_allocated) for r in rows} == {
        ("g1", "A100"): (2, 4.0),
        ("g2", "TITAN X"): (1, 1.0),
    }
    only = report([iv(T0, 1, user="a"), iv(T0, 1, user="b")], q(by=("user",), user="b"), NOW)
    assert [r.keys for r in only] == [("b",)]


def test_the_culler_reclaimed_the_idle_stretch_before_its_cull() -> None:
    culled = iv(T0, 3, culled=True, last_busy=(T0 + timedelta(hours=1)).replace(tzinfo=None))
    never_busy = iv(T0, 2, user="bob", culled=True)
    stopped = iv(T0, 2, user="carol")
    rows = {r.keys: r for r in report([culled, never_busy, stopped], q(by=("user",)), NOW)}
    assert rows[("alice",)].reclaimed_idle_gpu_hours == 4.0  # 2 GPUs x 2 idle hours
    assert rows[("bob",)].reclaimed_idle_gpu_hours == 4.0
    assert rows[("carol",)].reclaimed_idle_gpu_hours == 0.0


@pytest.mark.parametrize(
    ("query", "says"),
    [
        (q(start=datetime(2026, 12, 1), end=datetime(2026, 11, 1)), "inverted"),
        (q(start=datetime(2026, 11, 1), end=datetime(2026, 11, 1)), "empty"),
        (q(start=datetime(1970, 1, 1)), "out of range"),
        (q(end=datetime(9999, 1, 1)), "out of range"),
        (q(by=("colour",)), "Can't group by colour"),
        (q(by=()), "choose one or more"),
        (q(by=("user", "user")), "each once"),
        (q(bucket="fortnight"), "Unknown period size"),
        (q(by=("user'; DROP TABLE x; --",)), "Can't group by"),
    ],
)
def test_bad_report_queries_say_what_to_change(query: ReportQuery, says: str) -> None:
    with pytest.raises(ReportError, match=says):
        validate_query(query, NOW)


# ------------------------------------------------------------------ records
@pytest.mark.parametrize(
    ("groups", "configured", "expected"),
    [
        (("zeta", "ml", "admins"), ("ml",), "ml"),
        (("zeta", "beta"), (), "beta"),
        ((), ("ml",), ""),
        (("b", "a"), ("b", "a"), "a"),
    ],
)
def test_the_charge_group(groups: tuple, configured: tuple, expected: str) -> None:
    assert charge_group(groups, configured) == expected


@pytest.mark.parametrize(
    ("groups", "configured", "expected"),
    [
        (("zeta", "ml", "admins"), ("ml",), ("ml",)),  # only the configured ones
        (("zeta", "ml", "cv"), ("cv", "ml", "other"), ("cv", "ml")),  # by name: cv first
        (("zeta", "beta"), (), ("beta",)),  # none configured: the first group, alone
        (("zeta", "beta"), ("other",), ("beta",)),
        ((), ("ml",), ()),  # in no group: nothing to choose
        (("ml", "ml"), ("ml",), ("ml",)),
    ],
)
def test_the_groups_a_user_may_charge(groups: tuple, configured: tuple, expected: tuple) -> None:
    """What the spawn form offers; the default (charge_group) is always the first."""
    assert chargeable_groups(groups, configured) == expected
    assert charge_group(groups, configured) == (expected[0] if expected else "")


def test_why_a_stop_ends_an_allocation() -> None:
    from jupyterhub_gpu.core.accounting.records import stop_reason

    assert stop_reason(never_answered=True, culled=False) is EndReason.FAILED
    assert stop_reason(never_answered=True, culled=True) is EndReason.FAILED
    assert stop_reason(never_answered=False, culled=True) is EndReason.CULLED
    assert stop_reason(never_answered=False, culled=False) is EndReason.STOPPED


def test_close_missed_needs_an_answering_node_and_no_sighting() -> None:
    open_ids = {"a1": "n1", "a2": "n1", "a3": "n2", "a4": "gone"}
    assert close_missed(open_ids, seen={"a2"}, answered={"n1", "gone"}) == ["a1", "a4"]


def test_the_ledger_announces_in_order() -> None:
    ledger, seen = GPULedger(), []
    ledger.subscribe(seen.append)
    ledger.subscribe(lambda e: 1 / 0)  # a broken listener never stops the others
    rec = AllocationRecord("a1", "alice", "", "ml", "n1", ("GPU-1",), "A100", "pt", "12.1")
    ledger.open_allocation(rec)
    ledger.allocation_started("a1")
    ledger.end_allocation("a1", EndReason.STOPPED)
    ledger.end_allocation("", EndReason.STOPPED)  # no id: nothing to announce
    assert [(e.kind, e.allocation, e.reason) for e in seen] == [
        (EventKind.RESERVED, "a1", None),
        (EventKind.STARTED, "a1", None),
        (EventKind.RELEASED, "a1", EndReason.STOPPED),
    ]
    assert seen[0].record == rec and ledger.open_allocations() == {}


# ------------------------------------------------------------------ recorder (real SQLite)
def test_the_recorder_keeps_order_and_loses_nothing_while_the_database_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "acc.sqlite"
    store = AccountingStore(f"sqlite:///{db}")
    store.upgrade()
    recorder = Recorder(store, logging.getLogger("test"))
    rec = AllocationRecord("a1", "alice", "", "ml", "n1", ("GPU-1",), "A100", "pt", "12.1", 1.0, 4)
    with sqlite3.connect(db) as c:  # the database refuses writes: a lock held elsewhere
        c.execute("PRAGMA busy_timeout=0")
        c.execute("BEGIN EXCLUSIVE")
        with caplog.at_level(logging.WARNING):
            recorder(AllocationEvent(EventKind.RESERVED, "a1", record=rec, at=T0))
            recorder(AllocationEvent(EventKind.RELEASED, "a1", at=T0, reason=EndReason.CULLED))
            recorder.flush().result()
        assert recorder.backlog == 2
        assert "accounting database" in caplog.text.lower() and str(db) in caplog.text
        c.rollback()
    recorder.flush().result()
    assert recorder.backlog == 0
    row = store.get("a1")
    assert row is not None and row.end_reason == "culled" and row.gpus == 1
    recorder.close()


def test_a_bad_url_says_what_to_use_and_hides_the_password() -> None:
    with pytest.raises(AccountingUnavailable, match="postgresql\\+psycopg") as e:
        AccountingStore("nosuchdb://u:hunter2@host/db")
    assert "hunter2" not in str(e.value)
    assert "hunter2" not in safe_url("postgresql://u:hunter2@h/db")


# ------------------------------------------------------------------ review fixes
def test_a_restarted_hub_continues_an_allocations_usage(tmp_path: Path) -> None:
    """The usage of an allocation re-joined after a restart goes on from the store's,
    never from zero (which would overwrite a week of training with a few seconds)."""
    import asyncio

    from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
    from tests.unit.test_quota import _snapshot

    url = f"sqlite:///{tmp_path / 'acc.sqlite'}"
    store = AccountingStore(url)
    store.upgrade()
    rec = AllocationRecord("a1", "alice", "", "ml", "n1", ("GPU-0",), "RTX", "pt", "12.1")
    store.open(rec)
    week = fold(
        fold(Usage(), T0, [GPUSample(90, 5)]), T0 + timedelta(seconds=200), [GPUSample(90, 5)]
    )
    store.save_usage({"a1": week})
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    cluster = Cluster(ClusterSettings(nodes=nodes, accounting_url=url), logging.getLogger("t"))
    cluster.ledger.rejoin_allocation(rec)
    asyncio.run(cluster.accounting.sample_usage(_snapshot()))  # GPU-0 reads 0 % now
    assert cluster.recorder is not None
    cluster.recorder.flush().result()
    after = store.usage("a1")
    assert after is not None and after.util_pct_seconds == week.util_pct_seconds
    assert after.sampled_s >= week.sampled_s and after.peak_util_pct == 90
    assert after.last_busy == week.last_busy
    cluster.recorder.close()


def test_each_hub_sees_only_its_own_open_allocations(tmp_path: Path) -> None:
    store = AccountingStore(f"sqlite:///{tmp_path / 'acc.sqlite'}")
    store.upgrade()
    for hub, aid in (("prod", "p1"), ("staging", "s1")):
        store.open(AllocationRecord(aid, "u", "", "", "n1", (), "", "cpu", "", hub=hub))
    assert store.open_allocations(hub="prod") == {"p1": "n1"}
    assert set(store.open_allocations()) == {"p1", "s1"}


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql+psycopg://u:p@ss-word@db.example.org/x", "ss-word"),
        ("postgresql+psycopg://u:hunter2@db.example.org:5432/x", "hunter2"),
        ("postgresql://only-a-token@db/x", "only-a-token"),
    ],
)
def test_urls_are_shown_without_any_part_of_the_password(url: str, secret: str) -> None:
    shown = safe_url(url)
    assert secret not in shown and shown.endswith(url.rpartition("@")[2]), shown


def test_a_bad_port_is_a_sentence_not_a_traceback() -> None:
    with pytest.raises(AccountingUnavailable, match="can't be used") as e:
        AccountingStore("postgresql+psycopg://u:pw@h:xx/db")
    assert "pw" not in str(e.value)


def test_readers_never_create_a_database(tmp_path: Path) -> None:
    from jupyterhub_gpu.cli.report import run

    typo = tmp_path / "typo.sqlite"
    status, text = run(["--db", f"sqlite:///{typo}"])
    assert status == 2 and "has no accounting tables" in text, text
    assert not typo.exists() or typo.stat().st_size == 0


def test_image_counts_are_the_spawns_per_slug_since_a_time(tmp_path: Path) -> None:
    store = AccountingStore(f"sqlite:///{tmp_path / 'acc.sqlite'}")
    store.upgrade()
    old = datetime(2026, 1, 1, tzinfo=timezone.utc)
    new = datetime(2026, 2, 1, tzinfo=timezone.utc)
    for i, (slug, at) in enumerate([("pt", new), ("pt", new), ("tf", new), ("tf", old)]):
        store.open(AllocationRecord(f"a{i}", "u", "", "", "n1", (), "", slug, "", started_at=at))
    assert store.image_counts(datetime(2026, 1, 15)) == {"pt": 2, "tf": 1}
    assert store.image_counts(datetime(2026, 3, 1)) == {}
