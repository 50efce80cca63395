"""Jobs live in the accounting database (issue 32): what one store writes, a new store
on the same file (a hub restarted after kill -9) reads back field for field; only the
active ones come back as active, in submission order; and an allocation of kind job
keeps its exit code."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jupyterhub_gpu.core.accounting.records import AllocationRecord
from jupyterhub_gpu.core.jobs.record import JobRecord
from jupyterhub_gpu.core.jobs.states import JobState
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.edges.accounting.jobs import JobStore
from jupyterhub_gpu.edges.accounting.store import AccountingStore

pytestmark = pytest.mark.unit


def job(i: int, **changes: object) -> JobRecord:
    base = JobRecord(
        id=f"{i}", seq=i, hub="hub1", user="alice", name="train", command=("python", "t.py"),
        image="pytorch", image_ref="reg/pytorch:2.4", cuda="12.4",
        request=PlacementRequest(1, min_memory_mib=1024, allowed_models=frozenset({"RTX"}),
                                 min_compute_capability=(7, 0), image=frozenset({"reg/p"})),
        cpu=2.0, mem_gib=8.0, charge_group="ml", time_limit_s=3600.0, requeue=True,
        workdir="/home/alice/r", uid=10001, gid=5000, supplementary_gids=(5001,),
        home=("/srv/homes/alice", "/home/alice"), binds={"/d": {"bind": "/data", "mode": "ro"}},
        submitted_at=1_700_000_000.0,
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_jobs_survive_a_new_store_on_the_same_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'acc.db'}"
    first = AccountingStore(url)
    first.upgrade()
    jobs = JobStore(first)
    assert jobs.next_seq() == 1
    tasks = [job(1, id=f"1_{k}", array_id="1", array_index=k, array_spec="0-1%1",
                 array_limit=1) for k in (1, 0)]  # fmt: skip
    jobs.add([*tasks, job(2, seq=2)])
    running = replace(
        job(2, seq=2), state=JobState.RUNNING, started_at=1_700_000_100.0, node="n1",
        gpu_uuids=("GPU-1",), allocation="a" * 32, container="c1", stopping="time",
        stop_since=1_700_000_200.0, term_sent_at=1_700_000_201.0, restarts=2,
    )  # fmt: skip
    jobs.save(running)
    jobs.add([job(3, seq=3, state=JobState.SUCCEEDED, exit_code=0)])

    again = JobStore(AccountingStore(url))  # the hub restarted
    assert again.next_seq() == 4
    active = again.active("hub1")
    assert [j.id for j in active] == ["1_0", "1_1", "2"]
    assert active[2] == running
    assert active[0] == tasks[1]
    assert again.active("another hub") == []
    assert [j.id for j in again.recent("hub1", "alice")][:2] == ["3", "2"]
    assert again.recent("hub1", "bob") == []
    assert again.get("3") is not None and again.get("3").exit_code == 0  # type: ignore[union-attr]


def test_a_jobs_allocation_has_its_kind_and_exit_code(tmp_path: Path) -> None:
    store = AccountingStore(f"sqlite:///{tmp_path / 'acc.db'}")
    store.upgrade()
    record = AllocationRecord("a1", "alice", "job:7", "ml", "n1", ("GPU-1",), "RTX", "p", "",
                              kind="job")  # fmt: skip
    store.open(record)
    JobStore(store).set_exit_code("a1", 3)
    row = store.get("a1")
    assert row is not None and row.kind == "job" and row.exit_code == 3
    store.open(replace(record, id="a2", kind="server"))
    assert store.get("a2").kind == "server"  # type: ignore[union-attr]


def test_the_report_splits_servers_and_jobs(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from jupyterhub_gpu.core.accounting.records import EndReason
    from jupyterhub_gpu.core.accounting.report import ReportQuery, report

    store = AccountingStore(f"sqlite:///{tmp_path / 'acc.db'}")
    store.upgrade()
    t0 = datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    for aid, kind, gpus, hours in (("s", "server", ("G1",), 2), ("j", "job", ("G1", "G2"), 3)):
        store.open(AllocationRecord(aid, "alice", "x", "ml", "n1", gpus, "RTX", "p", "",
                                    started_at=t0, kind=kind))  # fmt: skip
        store.close(aid, t0 + timedelta(hours=hours), EndReason.DIED)
    start, end = datetime(2026, 12, 1), datetime(2026, 12, 2)
    rows = report(store.intervals(start, end), ReportQuery(start, end, by=("kind",)), end)
    assert {r.keys: round(r.gpu_hours_allocated, 3) for r in rows} == {
        ("job",): 6.0,
        ("server",): 2.0,
    }
