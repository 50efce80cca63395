"""The accounting tables (SQLAlchemy ORM). Migrations: ``migrations/`` (Alembic).

Datetimes are stored naive in UTC, as JupyterHub stores its own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class AllocationRow(Base):
    __tablename__ = "jhgpu_allocations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hub: Mapped[str] = mapped_column(String(255), default="")  # GPUCluster.hub_id
    user: Mapped[str] = mapped_column(String(255))
    server: Mapped[str] = mapped_column(String(255), default="")
    group: Mapped[str] = mapped_column("charge_group", String(255), default="")
    node: Mapped[str] = mapped_column(String(255))
    gpu_uuids: Mapped[str] = mapped_column(Text, default="")  # comma separated
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # the part of each GPU held: a share's K/N (issue 26); 1 for whole GPUs (0004)
    gpu_fraction: Mapped[float] = mapped_column(Float, default=1.0, server_default="1.0")
    gpu_model: Mapped[str] = mapped_column(String(255), default="")
    image: Mapped[str] = mapped_column(String(255), default="")
    cuda: Mapped[str] = mapped_column(String(32), default="")
    cpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    running_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # usage aggregates (usage.Usage)
    sampled_s: Mapped[float] = mapped_column(Float, default=0.0)
    util_pct_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    peak_util_pct: Mapped[float] = mapped_column(Float, default=0.0)
    peak_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    busy_s: Mapped[float] = mapped_column(Float, default=0.0)
    last_sample_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    last_busy_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # issue 32: "server" or "job", and a job's exit code (0005)
    kind: Mapped[str] = mapped_column(String(16), default="server", server_default="server")
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (
        Index("ix_jhgpu_allocations_started_at", "started_at"),
        Index("ix_jhgpu_allocations_ended_at", "ended_at"),
        Index("ix_jhgpu_allocations_user", "user"),
        Index("ix_jhgpu_allocations_hub_ended_at", "hub", "ended_at"),
    )


class ReservationRow(Base):
    """A reservation (``scheduling.Reservation``): GPUs kept for ``group`` from
    ``starts_at`` to ``ends_at``, either ``gpu_model`` x ``gpu_count`` or explicit
    ``nodes`` / ``gpu_uuids`` (comma separated)."""

    __tablename__ = "jhgpu_reservations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    group: Mapped[str] = mapped_column("charge_group", String(255))
    starts_at: Mapped[datetime] = mapped_column(DateTime)
    ends_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    gpu_model: Mapped[str | None] = mapped_column(String(255), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    nodes: Mapped[str] = mapped_column(Text, default="")
    gpu_uuids: Mapped[str] = mapped_column(Text, default="")
    note: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime)


class SavedImageRow(Base):
    """An image a user saved (``builder.model.SavedImage``, docs/my-images.md): where it
    is in the registry (``reference``, ``digest``), the catalog entry it was built on, its
    packages (newline separated), what it adds to its base, and the one group it is
    shared with (``NULL``: private). One name per owner."""

    __tablename__ = "jhgpu_saved_images"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(64))
    base_slug: Mapped[str] = mapped_column(String(255))
    base_image: Mapped[str] = mapped_column(Text)
    reference: Mapped[str] = mapped_column(Text)
    digest: Mapped[str] = mapped_column(String(128), default="")
    packages: Mapped[str] = mapped_column(Text, default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    shared_with: Mapped[str | None] = mapped_column(String(255), nullable=True)

    __table_args__ = (UniqueConstraint("owner", "name", name="uq_jhgpu_saved_images_owner_name"),)


class JobRow(Base):
    """A batch job or one task of an array (``core.jobs.record.JobRecord``): ``spec`` is
    what was asked (wire/jobs.py's encode_spec), the other columns where it stands."""

    __tablename__ = "jhgpu_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    hub: Mapped[str] = mapped_column(String(255))
    user: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[str] = mapped_column(Text)
    array_id: Mapped[str] = mapped_column(String(32), default="")
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[datetime] = mapped_column(DateTime)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    node: Mapped[str] = mapped_column(String(255), default="")
    gpu_uuids: Mapped[str] = mapped_column(Text, default="")
    share: Mapped[str] = mapped_column(String(16), default="")
    allocation: Mapped[str] = mapped_column(String(64), default="")
    container: Mapped[str] = mapped_column(String(128), default="")
    stopping: Mapped[str | None] = mapped_column(String(16), nullable=True)
    stop_since: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    term_sent_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_jhgpu_jobs_hub_state", "hub", "state"),
        Index("ix_jhgpu_jobs_user", "user"),
    )
