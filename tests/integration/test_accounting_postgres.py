"""The accounting store against a real PostgreSQL server and a real SQLite file.

Every store test runs on both back-ends (``[sqlite]``, ``[postgres]``); each test gets an
empty database of its own (a new SQLite file; a new database on the session's PostgreSQL
server, :mod:`tests.support.pg_fixture`). Only ``postgresql+psycopg`` URLs are used, as
the hub's documentation says.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.accounting.report import ReportQuery, report
from jupyterhub_gpu.edges.accounting.store import MIGRATIONS, AccountingStore, AccountingUnavailable
from tests.support.pg_fixture import fresh_postgres_database, postgres_url  # noqa: F401

pytestmark = pytest.mark.integration

UTC = timezone.utc
TABLE = "jhgpu_allocations"
HOSTILE = "x'; DROP TABLE jhgpu_allocations; --"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'accounting.sqlite'}"
    return fresh_postgres_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(db_url: str) -> Iterator[AccountingStore]:
    s = AccountingStore(db_url)
    s.upgrade()
    try:
        yield s
    finally:
        s.engine.dispose()


def record(
    id: str,
    start: datetime,
    *,
    user: str = "alice",
    group: str = "vision",
    gpus: int = 1,
    node: str = "node-a",
    model: str = "NVIDIA A100-SXM4-80GB",
) -> AllocationRecord:
    return AllocationRecord(
        id=id,
        user=user,
        server="",
        group=group,
        node=node,
        gpu_uuids=tuple(f"GPU-{id}-{i}" for i in range(gpus)),
        gpu_model=model if gpus else "",
        image="pytorch",
        cuda="12.4" if gpus else "",
        cpus=4.0,
        mem_gib=16.0,
        started_at=start,
    )


def tables(store: AccountingStore) -> set[str]:
    return set(inspect(store.engine).get_table_names())


def newest_migration() -> str:
    """The head of the migrations folder (what an upgraded database must be at)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_upgrade_twice_is_idempotent(db_url: str) -> None:
    first = AccountingStore(db_url)
    try:
        first.upgrade()
        first.open(record("a1", datetime(2026, 3, 1, 9, tzinfo=UTC)))
        first.upgrade()  # the same process again: nothing to do
    finally:
        first.engine.dispose()
    second = AccountingStore(db_url)  # a restarted hub
    try:
        second.upgrade()
        assert {TABLE, "jhgpu_alembic_version", "jhgpu_saved_images"} <= tables(second)
        with second.engine.connect() as c:
            versions = c.execute(text("SELECT version_num FROM jhgpu_alembic_version")).all()
        assert [v for (v,) in versions] == [newest_migration()]  # one row: the head
        assert second.open_allocations() == {"a1": "node-a"}  # the data survived
    finally:
        second.engine.dispose()


def test_open_close_round_trip(store: AccountingStore) -> None:
    start = datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC)
    rec = record("rt1", start, gpus=2)
    store.open(rec)
    store.open(record("rt1", start + timedelta(hours=1), user="mallory"))  # a replay: ignored
    row = store.get("rt1")
    assert row is not None
    assert (row.user, row.group, row.node, row.gpus, row.gpu_model) == (
        "alice", "vision", "node-a", 2, "NVIDIA A100-SXM4-80GB",
    )  # fmt: skip
    assert row.gpu_uuids == "GPU-rt1-0,GPU-rt1-1"
    assert (row.image, row.cuda, row.cpus, row.mem_gib) == ("pytorch", "12.4", 4.0, 16.0)
    assert row.started_at == datetime(2026, 3, 1, 9, 0, 5)  # naive UTC
    assert row.ended_at is None and row.end_reason is None
    assert store.open_allocations() == {"rt1": "node-a"}

    end = datetime(2026, 3, 1, 11, 30, 0, tzinfo=timezone(timedelta(hours=2)))  # 09:30 UTC
    assert store.close("rt1", end, EndReason.CULLED) is True
    row = store.get("rt1")
    assert row is not None
    assert row.ended_at == datetime(2026, 3, 1, 9, 30, 0)
    assert row.end_reason == "culled"
    assert store.open_allocations() == {}
    assert store.close("unknown", end, EndReason.STOPPED) is False


def test_close_twice_keeps_the_first_end(store: AccountingStore) -> None:
    store.open(record("c2", datetime(2026, 3, 1, 9, tzinfo=UTC)))
    first = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)
    assert store.close("c2", first, EndReason.STOPPED) is True
    assert store.close("c2", first + timedelta(hours=5), EndReason.MISSED) is False
    row = store.get("c2")
    assert row is not None
    assert (row.ended_at, row.end_reason) == (datetime(2026, 3, 1, 10), "stopped")


def test_allocation_over_midnight_is_split_exactly(store: AccountingStore) -> None:
    start = datetime(2026, 3, 1, 22, 30, 15, tzinfo=UTC)
    end = datetime(2026, 3, 2, 1, 15, 45, tzinfo=UTC)
    store.open(record("m1", start, gpus=2, group="nlp"))
    assert store.close("m1", end, EndReason.STOPPED)
    period = (datetime(2026, 3, 1), datetime(2026, 3, 3))
    intervals = store.intervals(*period)
    assert len(intervals) == 1
    assert (intervals[0].start, intervals[0].end) == (
        datetime(2026, 3, 1, 22, 30, 15), datetime(2026, 3, 2, 1, 15, 45),
    )  # fmt: skip
    rows = report(
        intervals,
        ReportQuery(*period, by=("group",), bucket="day"),
        now=datetime(2026, 4, 1),
    )
    assert [(r.keys, r.bucket, r.allocations) for r in rows] == [
        (("nlp",), datetime(2026, 3, 1), 1),
        (("nlp",), datetime(2026, 3, 2), 1),
    ]
    before, after = 3600 + 29 * 60 + 45, 3600 + 15 * 60 + 45  # 22:30:15-24:00, 00:00-01:15:45
    assert rows[0].gpu_hours_allocated * 3600 == pytest.approx(2 * before, abs=1e-6)
    assert rows[1].gpu_hours_allocated * 3600 == pytest.approx(2 * after, abs=1e-6)
    total = sum(r.gpu_hours_allocated for r in rows) * 3600
    assert total == pytest.approx(2 * (end - start).total_seconds(), abs=1e-6)


@pytest.mark.parametrize(
    "user, group",
    [
        ("alice", HOSTILE),
        ("robert'); DROP TABLE jhgpu_allocations;--", "vision"),
        ('o"brien \\ 100% _x_ ; --', "grüppe ☃ ' \" %s %(x)s"),
    ],
)
def test_sql_looking_names_are_stored_verbatim(
    store: AccountingStore, user: str, group: str
) -> None:
    store.open(record("h1", datetime(2026, 3, 1, 9, tzinfo=UTC), user=user, group=group))
    store.open(record("h2", datetime(2026, 3, 1, 9, tzinfo=UTC), user="other", group="other"))
    assert store.close("h1", datetime(2026, 3, 1, 10, tzinfo=UTC), EndReason.STOPPED)
    row = store.get("h1")
    assert row is not None and (row.user, row.group) == (user, group)
    period = (datetime(2026, 3, 1), datetime(2026, 3, 2))
    mine = store.intervals(*period, user=user, group=group)
    assert [(i.user, i.group) for i in mine] == [(user, group)]
    assert store.known("user", user) and store.known("group", group)
    assert not store.known("group", group + "'")
    assert user in store.names("user") and group in store.names("group")
    rows = report(store.intervals(*period), ReportQuery(*period, by=("group",)), now=period[1])
    assert {r.keys[0] for r in rows} == {group, "other"}
    assert TABLE in tables(store)
    assert len(store.intervals(*period)) == 2  # the table and its rows are all still there


def test_intervals_returns_only_overlapping_allocations(store: AccountingStore) -> None:
    lo, hi = datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC)
    h = timedelta(hours=1)
    cases = {  # user -> (start, end or None for still open)
        "ended-before": (lo - 3 * h, lo - h),
        "ends-at-start": (lo - 2 * h, lo),  # [start, end): touching is not overlapping
        "crosses-start": (lo - h, lo + h),
        "inside": (lo + h, lo + 2 * h),
        "crosses-end": (hi - h, hi + h),
        "spans-all": (lo - h, hi + h),
        "starts-at-end": (hi, hi + h),
        "after": (hi + h, hi + 2 * h),
        "open-before": (lo - 5 * h, None),
        "open-inside": (lo + 3 * h, None),
        "open-after": (hi + h, None),
    }
    for n, (user, (start, end)) in enumerate(cases.items()):
        store.open(record(f"i{n}", start, user=user))
        if end is not None:
            assert store.close(f"i{n}", end, EndReason.STOPPED)
    got = {i.user for i in store.intervals(lo.replace(tzinfo=None), hi.replace(tzinfo=None))}
    assert got == {
        "crosses-start", "inside", "crosses-end", "spans-all", "open-before", "open-inside",
    }  # fmt: skip
    only = store.intervals(lo.replace(tzinfo=None), hi.replace(tzinfo=None), user="inside")
    assert [i.user for i in only] == ["inside"]


def test_unreachable_postgres_names_the_database_without_its_password() -> None:
    url = "postgresql+psycopg://u:s3cretpw@127.0.0.1:1/x"  # nothing listens on port 1
    store = AccountingStore(url)
    try:
        assert "s3cretpw" not in repr(store)
        for attempt in (
            store.upgrade,
            lambda: store.open(record("u1", datetime(2026, 3, 1, tzinfo=UTC))),
            lambda: store.intervals(datetime(2026, 3, 1), datetime(2026, 3, 2)),
        ):
            with pytest.raises(AccountingUnavailable) as info:
                attempt()
            message = str(info.value)
            assert "s3cretpw" not in message
            assert "127.0.0.1:1/x" in message  # it says which database
            assert info.value.__cause__ is None and info.value.__suppress_context__
    finally:
        store.engine.dispose()


def test_db_current_and_upgrade_report_and_apply_the_migrations(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`jupyterhub-gpu db current|upgrade` on SQLite and PostgreSQL: no tables, a database
    one migration behind (as an older release left it), brought to the newest; the
    migrations' own version table, the password never shown."""
    from alembic import command

    from jupyterhub_gpu.cli import main
    from jupyterhub_gpu.edges.accounting.store import alembic_config

    assert main(["db", "current", "--db", db_url]) == 1
    assert "no accounting tables (no revision)" in capsys.readouterr().err
    from alembic.script import ScriptDirectory

    cfg = alembic_config()
    head = ScriptDirectory.from_config(cfg).get_current_head()
    before = ScriptDirectory.from_config(cfg).get_revision(head).down_revision
    store = AccountingStore(db_url)
    try:
        with store.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, before)  # the release before the newest migration
        assert store.revisions() == (before, head)
    finally:
        store.engine.dispose()
    assert main(["db", "current", "--db", db_url]) == 1
    err = capsys.readouterr().err
    assert f"revision {before}, the newest is {head}: run jupyterhub-gpu db upgrade" in err, err
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert f"upgraded from revision {before} to {head}." in capsys.readouterr().out
    assert main(["db", "current", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"revision {head}, the newest."), out
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert f"already at revision {head}" in capsys.readouterr().out
    store = AccountingStore(db_url)
    try:
        assert inspect(store.engine).has_table("jhgpu_alembic_version")
        assert not inspect(store.engine).has_table("alembic_version")  # JupyterHub's
    finally:
        store.engine.dispose()
    if "@" in db_url:
        assert db_url.split("://", 1)[1].split("@")[0] not in out  # credentials hidden
