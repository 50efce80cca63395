"""Batch jobs in the accounting database (issue 32): the ``jhgpu_jobs`` table read and
written as :class:`~jupyterhub_gpu.core.jobs.record.JobRecord` (its fixed part as
wire/jobs.py's ``spec`` text), and a job's exit code on its allocation record.

Only the hub writes; it calls these from one worker thread (hub/jobs.py), so the next
submission number (:meth:`JobStore.add`) is never taken twice."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select, update

from jupyterhub_gpu.core.jobs.record import JobRecord
from jupyterhub_gpu.core.jobs.states import ACTIVE, JobState, StopCause
from jupyterhub_gpu.edges.accounting.schema import AllocationRow, JobRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore, column_time, unix_time
from jupyterhub_gpu.wire.jobs import decode_spec, encode_spec

_STOPS: dict[str, StopCause] = {"cancel": "cancel", "time": "time", "preempt": "preempt"}


def _columns(job: JobRecord) -> dict[str, object]:
    """The columns that say where ``job`` stands."""
    return {
        "state": job.state.value,
        "reason": job.reason[:2000],
        "started_at": column_time(job.started_at),
        "ended_at": column_time(job.ended_at),
        "exit_code": job.exit_code,
        "node": job.node,
        "gpu_uuids": ",".join(job.gpu_uuids),
        "share": job.share,
        "allocation": job.allocation,
        "container": job.container,
        "stopping": job.stopping,
        "stop_since": column_time(job.stop_since),
        "term_sent_at": column_time(job.term_sent_at),
        "restarts": job.restarts,
    }


def _record(row: JobRow) -> JobRecord:
    return JobRecord(
        id=row.id,
        seq=row.seq,
        hub=row.hub,
        user=row.user,
        name=row.name,
        array_id=row.array_id,
        array_index=row.array_index,
        state=JobState(row.state),
        reason=row.reason,
        submitted_at=unix_time(row.submitted_at) or 0.0,
        started_at=unix_time(row.started_at),
        ended_at=unix_time(row.ended_at),
        exit_code=row.exit_code,
        node=row.node,
        gpu_uuids=tuple(u for u in row.gpu_uuids.split(",") if u),
        share=row.share,
        allocation=row.allocation,
        container=row.container,
        stopping=_STOPS.get(row.stopping or ""),
        stop_since=unix_time(row.stop_since),
        term_sent_at=unix_time(row.term_sent_at),
        restarts=row.restarts,
        **decode_spec(row.spec),
    )


class JobStore:
    def __init__(self, store: AccountingStore) -> None:
        self.store = store

    def next_seq(self) -> int:
        with self.store.session() as s:
            return int(s.scalar(select(func.max(JobRow.seq))) or 0) + 1

    def add(self, jobs: Iterable[JobRecord]) -> None:
        """Insert ``jobs`` (one submission: a job, or every task of an array) at once."""
        with self.store.session() as s:
            for job in jobs:
                s.add(
                    JobRow(
                        id=job.id,
                        seq=job.seq,
                        hub=job.hub,
                        user=job.user,
                        name=job.name,
                        spec=encode_spec(job),
                        array_id=job.array_id,
                        array_index=job.array_index,
                        submitted_at=column_time(job.submitted_at),
                        **_columns(job),
                    )
                )

    def save(self, job: JobRecord) -> None:
        """Write where ``job`` stands now."""
        with self.store.session() as s:
            s.execute(update(JobRow).where(JobRow.id == job.id).values(**_columns(job)))

    def active(self, hub: str) -> list[JobRecord]:
        """This hub's jobs not ended (queued, starting, running), in submission order."""
        states = [s.value for s in ACTIVE]
        query = (
            select(JobRow)
            .where(JobRow.hub == hub, JobRow.state.in_(states))
            .order_by(JobRow.seq, JobRow.array_index)
        )
        return self.store.records(query, _record)

    def recent(self, hub: str, user: str | None, limit: int = 500) -> list[JobRecord]:
        """The newest ``limit`` jobs of ``user`` (everyone's for None), newest first."""
        query = select(JobRow).where(JobRow.hub == hub)
        if user is not None:
            query = query.where(JobRow.user == user)
        query = query.order_by(JobRow.seq.desc(), JobRow.array_index).limit(limit)
        return self.store.records(query, _record)

    def array(self, hub: str, array_id: str) -> list[JobRecord]:
        """Every task of array ``array_id``, in index order."""
        query = (
            select(JobRow)
            .where(JobRow.hub == hub, JobRow.array_id == array_id)
            .order_by(JobRow.array_index)
        )
        return self.store.records(query, _record)

    def get(self, job_id: str) -> JobRecord | None:
        with self.store.session() as s:
            row = s.get(JobRow, job_id)
            return None if row is None else _record(row)

    def set_exit_code(self, allocation: str, code: int | None) -> None:
        """A job's exit status on its allocation record (``report`` reads it)."""
        with self.store.session() as s:
            s.execute(
                update(AllocationRow).where(AllocationRow.id == allocation).values(exit_code=code)
            )
