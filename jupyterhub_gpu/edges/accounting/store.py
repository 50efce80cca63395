"""The accounting database (edge): SQLAlchemy over SQLite (default) or PostgreSQL.

Synchronous: the hub calls it from one worker thread (:mod:`.recorder`), the report
command directly. The schema is created and upgraded by Alembic (``migrations/``), with a
version table of its own so it can live in JupyterHub's own database too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar, overload

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, Select, create_engine, event, func, inspect, or_, select, update
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.core.accounting.usage import Usage
from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.scheduling.state import Reservation
from jupyterhub_gpu.edges.accounting.schema import AllocationRow, ReservationRow, SavedImageRow
from jupyterhub_gpu.errors import AccountingUnavailable

MIGRATIONS = Path(__file__).with_name("migrations")
#: Alembic's version table of the accounting tables: not JupyterHub's (both may share one
#: database)
VERSION_TABLE = "jhgpu_alembic_version"
# where the hub, the report command and the services look when no URL is configured
DEFAULT_URL = "sqlite:///jupyterhub-gpu-accounting.sqlite"
R = TypeVar("R")
T = TypeVar("T")


def alembic_config() -> Config:
    """Alembic's configuration of the accounting migrations (``migrations/``)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def naive_utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


@overload
def column_time(t: float) -> datetime: ...
@overload
def column_time(t: float | None) -> datetime | None: ...
def column_time(t: float | None) -> datetime | None:
    """A Unix time as the tables keep it: naive UTC (None stays None)."""
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None)


@overload
def unix_time(t: datetime) -> float: ...
@overload
def unix_time(t: datetime | None) -> float | None: ...
def unix_time(t: datetime | None) -> float | None:
    """A table's naive UTC time as a Unix time (None stays None)."""
    return None if t is None else t.replace(tzinfo=timezone.utc).timestamp()


def safe_url(url: str) -> str:
    """``url`` with whatever stands before its last ``@`` hidden (user and password: a
    password may itself hold an unencoded ``@``), for logs and messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def make_engine(url: str) -> Engine:
    try:
        engine = create_engine(url, pool_pre_ping=True, future=True)
    except (ArgumentError, ImportError, SQLAlchemyError, ValueError) as e:
        raise AccountingUnavailable(
            f"The accounting database URL {safe_url(url)} can't be used ({type(e).__name__}). "
            "Use sqlite:///PATH or postgresql+psycopg://USER@HOST[:PORT]/DB."
        ) from None
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")  # the report reads while the hub writes
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.close()

    return engine


class AccountingStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def __repr__(self) -> str:
        return f"AccountingStore({safe_url(self.url)})"

    def _failure(self, what: str, e: Exception, advice: str = "") -> AccountingUnavailable:
        """``what`` (naming the database where it says ``{}``, password hidden) with the
        error's type and first line (SQLAlchemy puts the statement on later lines)."""
        first = (str(e).splitlines() or [""])[0][:300]
        return AccountingUnavailable(
            f"{what.format(safe_url(self.url))}: {type(e).__name__}: {first}{advice}"
        )

    @contextmanager
    def session(self) -> Iterator[Session]:
        try:
            with self._sessions.begin() as s:
                yield s
        except SQLAlchemyError as e:
            raise self._failure(
                "The accounting database {} failed",
                e,
                ". Check that it runs and that the hub may write to it; records wait and "
                "are written when it answers again.",
            ) from None

    def records(self, query: Select[R], convert: Callable[[R], T]) -> list[T]:
        """``convert`` of each row that ``query`` selects, in order, in one session."""
        with self.session() as s:
            return [convert(row) for row in s.scalars(query)]

    def upgrade(self) -> None:
        """Create or migrate the schema to the newest revision (idempotent)."""
        cfg = alembic_config()
        try:
            with self.engine.begin() as connection:
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, "head")
        except SQLAlchemyError as e:
            raise self._failure("Can't prepare the accounting database {}", e) from None

    def revisions(self) -> tuple[str | None, str]:
        """(the database's migration revision, None when it has none; the newest one)."""
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(alembic_config()).get_current_head() or ""
        database = self.engine.url.database or ""
        sqlite_file = self.engine.dialect.name == "sqlite" and database not in ("", ":memory:")
        if sqlite_file and not Path(database).is_file():  # connecting would create it
            return None, head
        try:
            with self.engine.connect() as connection:
                context = MigrationContext.configure(
                    connection, opts={"version_table": VERSION_TABLE}
                )
                return context.get_current_revision(), head
        except SQLAlchemyError as e:
            raise self._failure("The accounting database {} can't be read", e) from None

    def has_schema(self) -> bool:
        """Whether the accounting tables are there (readers never create them: a mistyped
        URL must not become a new, empty database)."""
        database = self.engine.url.database or ""
        sqlite_file = self.engine.dialect.name == "sqlite" and database not in ("", ":memory:")
        if sqlite_file and not Path(database).is_file():  # connecting would create it
            return False
        try:
            return inspect(self.engine).has_table(AllocationRow.__tablename__)
        except SQLAlchemyError as e:
            raise self._failure("The accounting database {} can't be read", e) from None

    def require_schema(self) -> None:
        if not self.has_schema():
            raise AccountingUnavailable(
                f"{safe_url(self.url)} has no accounting tables (jhgpu_allocations): is it "
                "the hub's GPUCluster.accounting_url? The hub creates them."
            )

    # ------------------------------------------------------------------ writes
    def open(self, record: AllocationRecord) -> None:
        """Insert ``record`` (a record already there is left as it is: replays are safe)."""
        with self.session() as s:
            if s.get(AllocationRow, record.id) is not None:
                return
            s.add(
                AllocationRow(
                    id=record.id,
                    hub=record.hub,
                    user=record.user,
                    server=record.server,
                    group=record.group,
                    node=record.node,
                    gpu_uuids=",".join(record.gpu_uuids),
                    gpus=record.gpus,
                    gpu_fraction=record.gpu_fraction,
                    gpu_model=record.gpu_model,
                    image=record.image,
                    cuda=record.cuda,
                    cpus=record.cpus,
                    mem_gib=record.mem_gib,
                    kind=record.kind,
                    started_at=naive_utc(record.started_at),
                    sampled_s=0.0,
                    util_pct_seconds=0.0,
                    peak_util_pct=0.0,
                    peak_memory_mib=0,
                    busy_s=0.0,
                )
            )

    def mark_running(self, allocation: str, at: datetime) -> None:
        with self.session() as s:
            s.execute(
                update(AllocationRow)
                .where(AllocationRow.id == allocation, AllocationRow.running_at.is_(None))
                .values(running_at=naive_utc(at))
            )

    def close(self, allocation: str, at: datetime, reason: EndReason) -> bool:
        """End an open allocation; False if it was not open (unknown or already ended:
        the first end recorded stands, so nothing is counted twice)."""
        with self.session() as s:
            result = s.execute(
                update(AllocationRow)
                .where(AllocationRow.id == allocation, AllocationRow.ended_at.is_(None))
                .values(ended_at=naive_utc(at), end_reason=reason.value)
            )
            return bool(getattr(result, "rowcount", 0))

    def save_usage(self, usages: dict[str, Usage]) -> None:
        """Write the usage aggregates of these allocations (one transaction)."""
        with self.session() as s:
            for allocation, usage in usages.items():
                s.execute(
                    update(AllocationRow)
                    .where(AllocationRow.id == allocation)
                    .values(**_usage_columns(usage))
                )

    # ------------------------------------------------------------------ reads
    def open_allocations(self, hub: str | None = None) -> dict[str, str]:
        """allocation id -> node, of every allocation without an end (of ``hub`` if given:
        each hub confirms or closes only its own)."""
        q = select(AllocationRow.id, AllocationRow.node).where(AllocationRow.ended_at.is_(None))
        if hub is not None:
            q = q.where(AllocationRow.hub == hub)
        with self.session() as s:
            return {r.id: r.node for r in s.execute(q)}

    def usages(self, allocations: list[str]) -> dict[str, Usage]:
        """The stored usage of these allocations (those the store has), in one query."""
        with self.session() as s:
            rows = s.scalars(select(AllocationRow).where(AllocationRow.id.in_(allocations)))
            return {row.id: _usage_of(row) for row in rows}

    def usage(self, allocation: str) -> Usage | None:
        return self.usages([allocation]).get(allocation)

    def get(self, allocation: str) -> AllocationRow | None:
        with self.session() as s:
            return s.get(AllocationRow, allocation)

    def intervals(
        self, start: datetime, end: datetime, user: str | None = None, group: str | None = None
    ) -> list[Interval]:
        """The allocations overlapping [start, end) (naive UTC), as report intervals."""
        a = AllocationRow
        q = select(
            a.user, a.group, a.gpu_model, a.node, a.gpus, a.gpu_fraction, a.started_at, a.ended_at,
            a.sampled_s, a.util_pct_seconds, a.end_reason, a.last_busy_at, a.kind,
        ).where(a.started_at < end, or_(a.ended_at.is_(None), a.ended_at > start))  # fmt: skip
        if user is not None:
            q = q.where(a.user == user)
        if group is not None:
            q = q.where(a.group == group)
        with self.session() as s:
            return [
                Interval(
                    user=r.user,
                    group=r.group,
                    model=r.gpu_model,
                    node=r.node,
                    gpus=r.gpus * (1.0 if r.gpu_fraction is None else r.gpu_fraction),
                    start=r.started_at,
                    end=r.ended_at,
                    mean_util_pct=r.util_pct_seconds / r.sampled_s if r.sampled_s else 0.0,
                    culled=r.end_reason == EndReason.CULLED.value,
                    last_busy=r.last_busy_at,
                    kind=r.kind or "server",
                )
                for r in s.execute(q)
            ]

    def image_counts(self, since: datetime) -> dict[str, int]:
        """Catalog slug -> the allocations started since ``since`` (naive UTC) with it
        (the pre-puller's ``most-used:N``)."""
        a = AllocationRow
        q = select(a.image, func.count()).where(a.started_at >= since).group_by(a.image)
        with self.session() as s:
            return {str(image): int(n) for image, n in s.execute(q) if image}

    # ------------------------------------------------------------------ reservations
    def reservations(self, ending_after: datetime) -> list[Reservation]:
        """Reservations that end after ``ending_after`` (naive or aware UTC), by start."""
        q = (
            select(ReservationRow)
            .where(ReservationRow.ends_at > naive_utc(ending_after))
            .order_by(ReservationRow.starts_at, ReservationRow.id)
        )
        return self.records(q, _reservation_of)

    def add_reservation(self, r: Reservation, note: str = "", by: str = "") -> None:
        with self.session() as s:
            s.add(
                ReservationRow(
                    id=r.id,
                    group=r.group,
                    starts_at=column_time(r.start),
                    ends_at=column_time(r.end),
                    gpu_model=r.model,
                    gpu_count=r.count,
                    nodes=",".join(sorted(r.nodes)),
                    gpu_uuids=",".join(sorted(r.gpu_uuids)),
                    note=note,
                    created_by=by,
                    created_at=_naive(datetime.now(timezone.utc)),
                )
            )

    def delete_reservation(self, reservation: str) -> bool:
        """Delete a reservation; False if there was none with that id."""
        with self.session() as s:
            row = s.get(ReservationRow, reservation)
            if row is None:
                return False
            s.delete(row)
            return True

    # ------------------------------------------------------------------ saved images
    def saved_images(self) -> list[SavedImage]:
        """Every saved image, by owner and name (a site has tens to thousands)."""
        q = select(SavedImageRow).order_by(SavedImageRow.owner, SavedImageRow.name)
        return self.records(q, _saved_of)

    def add_saved_image(
        self,
        image: SavedImage,
        image_id: str,
        check: Callable[[list[SavedImage]], None] | None = None,
    ) -> None:
        """Record a saved image. ``check`` sees the owner's images as stored, in the
        same transaction, and raises to refuse (a name taken, a limit reached: its
        exception goes to the caller, nothing is written). The unique constraint on
        (owner, name) is the last word between two hubs on one database."""
        with self.session() as s:
            mine = select(SavedImageRow).where(SavedImageRow.owner == image.owner)
            if check is not None:
                check([_saved_of(row) for row in s.scalars(mine)])
            s.add(
                SavedImageRow(
                    id=image_id,
                    owner=image.owner,
                    name=image.name,
                    base_slug=image.base_slug,
                    base_image=image.base_image,
                    reference=image.reference,
                    digest=image.digest,
                    packages="\n".join(image.packages),
                    size_bytes=image.size_bytes,
                    created_at=naive_utc(image.created),
                    shared_with=image.shared_with,
                )
            )

    def share_saved_image(self, owner: str, name: str, group: str | None) -> SavedImage | None:
        """Share ``owner``'s image ``name`` with ``group`` (``None``: make it private);
        the image as it is now, or ``None`` when there is none of that name."""
        with self.session() as s:
            row = _saved_row(s, owner, name)
            if row is None:
                return None
            row.shared_with = group
            return _saved_of(row)

    def delete_saved_image(self, owner: str, name: str) -> SavedImage | None:
        """Forget ``owner``'s image ``name``; what it was, or ``None`` if there was none."""
        with self.session() as s:
            row = _saved_row(s, owner, name)
            if row is None:
                return None
            image = _saved_of(row)
            s.delete(row)
            return image

    def known(self, column: str, value: str) -> bool:
        """Whether any allocation has ``value`` in ``column`` (``user`` or ``group``)."""
        col = {"user": AllocationRow.user, "group": AllocationRow.group}[column]
        with self.session() as s:
            return s.execute(select(col).where(col == value).limit(1)).first() is not None

    def names(self, column: str) -> list[str]:
        col = {"user": AllocationRow.user, "group": AllocationRow.group}[column]
        with self.session() as s:
            return sorted(v for (v,) in s.execute(select(col).distinct()))


def _usage_columns(usage: Usage) -> dict[str, object]:
    """A :class:`Usage` as the row's columns (the inverse of :func:`_usage_of`)."""
    return {
        "sampled_s": usage.sampled_s,
        "util_pct_seconds": usage.util_pct_seconds,
        "peak_util_pct": usage.peak_util_pct,
        "peak_memory_mib": usage.peak_memory_mib,
        "busy_s": usage.busy_s,
        "last_sample_at": _naive(usage.last_sample),
        "last_busy_at": _naive(usage.last_busy),
    }


def _usage_of(row: AllocationRow) -> Usage:
    return Usage(
        sampled_s=row.sampled_s,
        util_pct_seconds=row.util_pct_seconds,
        peak_util_pct=row.peak_util_pct,
        peak_memory_mib=row.peak_memory_mib,
        busy_s=row.busy_s,
        last_sample=_aware(row.last_sample_at),
        last_busy=_aware(row.last_busy_at),
    )


def _naive(t: datetime | None) -> datetime | None:
    return naive_utc(t) if t is not None else None


def _aware(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=timezone.utc) if t is not None else None


def _reservation_of(row: ReservationRow) -> Reservation:
    return Reservation(
        id=row.id,
        group=row.group,
        start=unix_time(row.starts_at),
        end=unix_time(row.ends_at),
        model=row.gpu_model,
        count=row.gpu_count,
        nodes=frozenset(n for n in row.nodes.split(",") if n),
        gpu_uuids=frozenset(u for u in row.gpu_uuids.split(",") if u),
    )


def _saved_row(s: Session, owner: str, name: str) -> SavedImageRow | None:
    q = select(SavedImageRow).where(SavedImageRow.owner == owner, SavedImageRow.name == name)
    return s.scalars(q).first()


def _saved_of(row: SavedImageRow) -> SavedImage:
    return SavedImage(
        owner=row.owner,
        name=row.name,
        base_slug=row.base_slug,
        base_image=row.base_image,
        reference=row.reference,
        packages=tuple(p for p in row.packages.split("\n") if p),
        size_bytes=row.size_bytes,
        created=row.created_at.replace(tzinfo=timezone.utc),
        digest=row.digest,
        shared_with=row.shared_with,
    )
