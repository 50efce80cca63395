"""Accounting with a real hub, real engines and agents, and a real database (issue 11):
SQLite (the default, a file in the hub's directory) and PostgreSQL (a server of the test
run). Each scenario leaves exactly the records it should, with times within what the test
observed: a server stopped; a container killed behind the hub's back; a refused spawn (no
record); the hub killed with SIGKILL while a server runs (the same record is re-joined, not
doubled); the hub killed and the container removed while it is down (closed as missed when
the restarted hub sees it). GPU utilisation set through the declared agents is folded into
the record, and the report command reads the same database.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import select

from jupyterhub_gpu.cli.report import run as report_command
from jupyterhub_gpu.edges.accounting.schema import AllocationRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    A100,
    DEBUG_LOG,
    ROUND,
    TITANX,
    agents,
    cluster,
    containers_of,
    create_users,
    outage_held,
    spawn_ready,
    start_hub,
)
from tests.integration.test_pull import progress
from tests.support.cluster import Engine, engine_crashed
from tests.support.hub import Hub
from tests.support.pg_fixture import fresh_postgres_database, postgres_url  # noqa: F401
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ON_A100 = {"image": "demo-cuda11", "gpu_count": 1, "gpu_model": A100[0], "cpu": 0.5, "mem_gib": 1}
RECONCILE_S = 2.0  # test_multinode's FAST


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return ""  # the hub's default: jupyterhub-gpu-accounting.sqlite in its directory
    return fresh_postgres_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def hub(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict,  # noqa: F811
    db_url: str,
) -> Hub:
    extra = DEBUG_LOG + (f"c.GPUCluster.accounting_url = {db_url!r}\n" if db_url else "")
    return start_hub(make_hub, engines, cluster, extra)


@pytest.fixture
def store(hub: Hub, db_url: str) -> Iterator[AccountingStore]:
    s = AccountingStore(db_url or f"sqlite:///{hub.workdir / 'jupyterhub-gpu-accounting.sqlite'}")
    yield s
    s.engine.dispose()


def rows(store: AccountingStore) -> dict[str, AllocationRow]:
    """user -> their one record (fails if a user has two: a double count)."""
    with store.session() as s:
        found = list(s.scalars(select(AllocationRow)))
    users = [r.user for r in found]
    assert len(users) == len(set(users)), f"more than one record for a user: {sorted(users)}"
    return {r.user: r for r in found}


def kill_hub(hub: Hub) -> None:
    assert hub.proc is not None
    os.kill(hub.proc.pid, signal.SIGKILL)
    hub.proc.wait(10)


def test_every_allocation_leaves_exactly_its_record(
    hub: Hub,
    store: AccountingStore,
    engines: list[Engine],
    cluster: dict,  # noqa: F811
) -> None:
    create_users(hub, ["alice", "bob", "carol", "dave", "erin"])

    # alice: started, used (80 % through her node's agent), stopped
    t0 = now()
    alice = spawn_ready(hub, "alice", ON_A100)
    t1 = now()
    (uuid,) = alice["gpu_uuids"]
    cluster[alice["node"]].set_state(uuid, utilization_pct=80, memory_used_mib=4096)
    row = rows(store)["alice"]
    assert row.id == alice["allocation"] and row.end_reason is None
    assert (row.node, row.gpu_uuids, row.gpus) == (alice["node"], uuid, 1)
    assert (row.gpu_model, row.image, row.cuda) == (A100[0], "demo-cuda11", "11.8")
    assert t0 <= row.started_at <= t1 and row.running_at is not None
    wait_until(lambda: rows(store)["alice"].busy_s >= 2 * RECONCILE_S, 60, "usage samples")
    t2 = now()
    assert hub.stop_server("alice").status_code in (202, 204)
    wait_until(lambda: rows(store)["alice"].ended_at, 60, "alice's record to close")
    row = rows(store)["alice"]
    assert row.end_reason == "stopped" and t2 <= row.ended_at <= now()
    assert row.peak_util_pct == 80 and row.peak_memory_mib == 4096
    assert row.util_pct_seconds / row.sampled_s == pytest.approx(80, abs=0.01)

    # bob: his container killed behind the hub's back -> died, seen by the hub's poll
    bob = spawn_ready(hub, "bob", ON_A100)
    (engine, container), = containers_of(engines, hub, "bob")  # fmt: skip
    t3 = now()
    with engine.client() as client:
        client.api.kill(container["Id"])
    wait_until(lambda: rows(store)["bob"].ended_at, 60, "bob's record to close")
    row = rows(store)["bob"]
    assert row.id == bob["allocation"] and row.end_reason == "died"
    assert t3 <= row.ended_at <= now()

    # erin: refused (3 A100s: the cluster has 2) -> no record at all
    r = hub.spawn("erin", {**ON_A100, "gpu_count": 3})
    assert r.status_code >= 400
    assert "erin" not in rows(store)

    # carol runs through a SIGKILL of the hub: the same record, still open, once
    carol = spawn_ready(hub, "carol", ON_A100)
    kill_hub(hub)
    hub.start()
    hub.wait_log(ROUND, after=hub.log_offset(), count=2, timeout=60)
    row = rows(store)["carol"]
    assert row.id == carol["allocation"] and row.ended_at is None

    # dave's container goes while the hub is down: closed as missed when it comes back
    assert hub.stop_server("carol").status_code in (202, 204)
    wait_until(lambda: rows(store)["carol"].ended_at, 60, "carol's record to close")
    dave = spawn_ready(hub, "dave", ON_A100)
    kill_hub(hub)
    (engine, container), = containers_of(engines, hub, "dave")  # fmt: skip
    with engine.client() as client:
        client.api.remove_container(container["Id"], force=True)
    t4 = now()
    hub.start()
    wait_until(lambda: rows(store)["dave"].ended_at, 60, "dave's record to close")
    row = rows(store)["dave"]
    assert row.id == dave["allocation"] and row.end_reason == "missed"
    assert t4 <= row.ended_at <= now()

    # nothing open now, one record per allocation; the report reads the same database
    assert sorted(rows(store)) == ["alice", "bob", "carol", "dave"]
    assert all(r.ended_at is not None for r in rows(store).values())
    status, text = report_command(
        ["--db", store.url, "--by", "user", "--format", "csv", "--user", "alice"]
    )
    assert status == 0, text
    a = rows(store)["alice"]
    held_h = (a.ended_at - a.started_at).total_seconds() / 3600
    line = text.splitlines()[1].split(",")
    assert line[0] == "alice" and float(line[2]) == pytest.approx(held_h, abs=1e-4)
    used_h = held_h * a.util_pct_seconds / a.sampled_s / 100
    assert float(line[3]) == pytest.approx(used_h, abs=1e-4)  # the CSV has 4 decimals


@pytest.mark.alone  # node-b's engine is killed: no other test may use it meanwhile
def test_a_server_stopped_while_its_node_is_lost(
    hub: Hub,
    store: AccountingStore,
    engines: list[Engine],
) -> None:
    """Erin's node dies; her server is stopped meanwhile (the stop can't reach the node,
    so her GPU stays held: its container may still run). Her record stays open through the
    outage and is closed as node_lost once the node answers again without the container."""
    node_b = next(e for e in engines if e.name == "node-b")
    create_users(hub, ["erin"])
    erin = spawn_ready(hub, "erin", {**ON_A100, "gpu_model": TITANX[0]})
    assert erin["node"] == "node-b"
    with engine_crashed(node_b), outage_held(node_b):
        assert hub.stop_server("erin").status_code in (202, 204)
        wait_until(lambda: hub.server("erin") is None, 60, "the hub to let go of erin's server")
        # two whole reconciliation rounds during the outage leave it open
        hub.wait_log(ROUND, after=hub.log_offset(), count=2, timeout=60)
        assert rows(store)["erin"].ended_at is None, "closed while its GPU is still held"
    back = now()
    wait_until(lambda: rows(store)["erin"].ended_at, 90, "erin's record to close")
    row = rows(store)["erin"]
    assert row.id == erin["allocation"] and row.end_reason == "node_lost"
    assert back <= row.ended_at <= now()


def test_a_server_that_never_answers_ends_failed(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict,  # noqa: F811
    db_url: str,
) -> None:
    """The container runs but its server never listens: JupyterHub gives up after
    http_timeout and stops it; the allocation ends as failed, not stopped. A container
    that exits while starting (gus's, hal's) fails the start at once with a sentence, long
    before http_timeout, and its allocation ends failed too."""
    silent = (
        "c.GPUDockerSpawner.cmd = ['sh', '-c', "
        '\'[ "$JUPYTERHUB_USER" = gus ] && exit 7; '
        '[ "$JUPYTERHUB_USER" = hal ] && sleep 1 && exit 8; exec sleep 3600\']\n'
        "c.Spawner.http_timeout = 5\n"
    )
    accounting = f"c.GPUCluster.accounting_url = {db_url!r}\n" if db_url else ""
    hub = start_hub(make_hub, engines, cluster, DEBUG_LOG + accounting + silent)
    store = AccountingStore(
        db_url or f"sqlite:///{hub.workdir / 'jupyterhub-gpu-accounting.sqlite'}"
    )
    try:
        create_users(hub, ["fay"])
        assert hub.spawn("fay", ON_A100).status_code in (201, 202)
        wait_until(lambda: "fay" in rows(store) and rows(store)["fay"].ended_at, 90, "an end")
        row = rows(store)["fay"]
        assert row.end_reason == "failed" and row.running_at is not None, row.end_reason
        assert hub.server("fay") is None

        # gus's command fails at once (before its port is even read), hal's after 1 s
        # (while the spawner checks for its first answer); the engine removes both
        # containers as they exit (auto_remove), so the exit code may be gone
        create_users(hub, ["gus", "hal"])
        for user in ("gus", "hal"):
            r = hub.spawn(user, ON_A100)
            if r.status_code in (201, 202):
                failed = progress(hub, user)[-1]
                assert failed.get("failed"), failed
                message = failed["message"]
            else:
                message = r.json()["message"]
            # only the spawner's own checks say this (JupyterHub's would say the server
            # did not respond within http_timeout; the port lookup, that the node did
            # not publish it)
            assert "Your server stopped while starting (" in message, (user, message)
            ended = lambda u=user: u in rows(store) and rows(store)[u].ended_at  # noqa: E731
            wait_until(ended, 30, "an end")
            assert rows(store)[user].end_reason == "failed"
    finally:
        store.engine.dispose()
