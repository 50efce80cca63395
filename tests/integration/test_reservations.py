"""Reservations with a real hub, real engines and agents, and the real accounting database
(issue 12): an admin reserves node-c's two A100s for group "course" now; a reservation
that can't be honoured is refused when made, with the reason; alice's server (no group)
on an A100 is stopped when the reservation begins and its record ends "preempted", and so
is dave's, which holds a share of the other A100 (issue 26: A100s are shared in 2); bob
(no group) waits instead of getting a reserved A100; cathy (group course) gets one at
once; deleting the reservation lets bob in. A server that runs when a reservation of
another group is made for its GPUs is told on every hub page before it starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from jupyterhub_gpu.cli.reserve import main as command
from jupyterhub_gpu.core.words import clock
from jupyterhub_gpu.edges.accounting.schema import AllocationRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    A100,
    UUIDS,
    agents,
    cluster,
    create_users,
    servers,
    spawn_ready,
    start_hub,
    wait_all_ready,
)
from tests.integration.test_queue import progress
from tests.support.browser import chromium_page, hub_login
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ON_A100 = {"image": "demo-cuda11", "gpu_count": 1, "gpu_model": A100[0], "cpu": 0.5, "mem_gib": 1}
EXTRA = (
    """
c.GPUDockerSpawner.max_queue_wait = 300
c.GPUDockerSpawner.queue_policy = {"groups": {"course": {}}}
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
from jupyterhub_gpu.hub.extensions import configure_reservations as add_reservations
add_reservations(c)
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {"name": "group-maker", "scopes": ["admin:groups"], "services": ["tester"]}
]
"""
    + f'c.GPUSharing.models = {{{A100[0]!r}: {{"shares": 2}}}}\n'  # a share: half an A100
    + TOKEN_ROLE_CONFIG
)


def iso(t: datetime) -> str:
    return t.isoformat()


@pytest.fixture
def hub(make_hub: Callable[..., Hub], engines: list[Engine], cluster: dict) -> Hub:  # noqa: F811
    return start_hub(make_hub, engines, cluster, EXTRA)


def record_of(hub: Hub, user: str) -> AllocationRow:
    store = AccountingStore(f"sqlite:///{hub.workdir / 'jupyterhub-gpu-accounting.sqlite'}")
    try:
        with store.session() as s:
            (row,) = s.scalars(select(AllocationRow).where(AllocationRow.user == user))
            return row
    finally:
        store.engine.dispose()


def test_a_reservation_keeps_its_gpus_for_its_group(
    hub: Hub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = spawn_ready(hub, "alice", ON_A100)
    dave = spawn_ready(hub, "dave", {**ON_A100, "gpu_share": "1/2"})  # the other A100
    assert dave["node"] == "node-c" and dave["gpu_uuids"] != alice["gpu_uuids"]
    create_users(hub, ["bob", "cathy"])
    r = hub.api("POST", "/groups/course", json={"users": ["cathy"]})
    assert r.status_code == 201, r.text
    now = datetime.now(timezone.utc)
    window = {"group": "course", "start": iso(now - timedelta(minutes=1)),
              "end": iso(now + timedelta(hours=1))}  # fmt: skip

    # refused when made: more A100s than exist; a time without a zone; an unknown field
    r = hub.api("POST", "/gpu/reservations", json={**window, "model": A100[0], "count": 3})
    assert r.status_code == 400 and "2" in r.json()["message"], r.text
    r = hub.api("POST", "/gpu/reservations", json={**window, "start": "2026-12-01T09:00"})
    assert r.status_code == 400 and "time zone" in r.json()["message"], r.text
    r = hub.api("POST", "/gpu/reservations", json={**window, "nodes": ["node-c"], "x": 1})
    assert r.status_code == 400 and "Unknown field 'x'" in r.json()["message"], r.text
    # a user may not make one
    bob_token = hub.user_token("bob")
    r = hub.api("POST", "/gpu/reservations", json={**window, "nodes": ["node-c"]},
                headers={"Authorization": f"token {bob_token}"})  # fmt: skip
    assert r.status_code == 403, r.text

    # the command, as an admin would use it: node-c, both A100s, now
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token)
    args = ["--hub", hub.url, "add", "--group", "course", "--start", window["start"]]
    args += ["--end", window["end"], "--node", "node-c", "--note", "exam"]
    assert command(args) == 0, capsys.readouterr().err
    reservation = capsys.readouterr().out
    assert '"group": "course"' in reservation
    # the same GPUs in an overlapping window: refused, saying why
    r = hub.api("POST", "/gpu/reservations", json={**window, "gpu_uuids": [UUIDS["node-c"][0]]})
    assert r.status_code == 400 and "overlaps" in r.json()["message"], r.text

    # alice's server (no group) on an A100 is stopped: its GPUs are reserved; so is dave's
    # (no group either), which holds a share of the other A100
    assert alice["node"] == "node-c"
    both = ("alice", "dave")
    wait_until(lambda: all(hub.server(u) is None for u in both), 60, "both to be stopped")
    wait_until(lambda: all(record_of(hub, u).ended_at for u in both), 30, "records to close")
    assert [record_of(hub, u).end_reason for u in both] == ["preempted", "preempted"]

    # bob (no group) waits for an A100; cathy (course) gets one at once
    assert hub.spawn("bob", ON_A100).status_code == 202
    wait_until(lambda: any("in line" in m for m in progress(hub, "bob")), 30, "bob to wait")
    cathy = spawn_ready(hub, "cathy", ON_A100)
    assert cathy["node"] == "node-c"
    assert servers(hub)["bob"]["pending"] == "spawn" and not servers(hub)["bob"]["ready"]

    # the reservation is deleted: bob gets the other A100
    rid = hub.api("GET", "/gpu/reservations").json()[0]["id"]
    assert command(["--hub", hub.url, "delete", rid]) == 0, capsys.readouterr().err
    states = wait_all_ready(hub, ["bob"])
    assert states["bob"]["node"] == "node-c"
    assert set(states["bob"]["gpu_uuids"]) | set(cathy["gpu_uuids"]) == set(UUIDS["node-c"])


@pytest.mark.browser
def test_a_running_server_is_told_before_a_reservation_takes_its_gpus(hub: Hub) -> None:
    alice = spawn_ready(hub, "alice", ON_A100)
    assert alice["node"] == "node-c"
    create_users(hub, ["bob"])
    alice_token, bob_token = hub.user_token("alice"), hub.user_token("bob")
    mine = {"Authorization": f"token {alice_token}"}
    assert hub.api("GET", "/gpu/users/alice/notices", headers=mine).json() == []
    now = datetime.now(timezone.utc)
    start, end = now + timedelta(minutes=30), now + timedelta(hours=2)
    window = {"group": "course", "start": iso(start), "end": iso(end), "nodes": ["node-c"]}
    r = hub.api("POST", "/gpu/reservations", json=window)
    assert r.status_code == 201, r.text

    (notice,) = hub.api("GET", "/gpu/users/alice/notices", headers=mine).json()
    at, until = clock(start.timestamp(), time.time()), clock(end.timestamp(), time.time())
    assert notice["server"] == "" and notice["message"] == (
        f"Your default server is on a GPU reserved for group course from {at} to {until} "
        f"UTC: it will be stopped at {at}. Save your work before then."
    ), notice
    r = hub.api("GET", "/gpu/users/alice/notices", headers={"Authorization": f"token {bob_token}"})
    assert r.status_code in (403, 404), r.text  # bob reads only his own
    assert hub.api("GET", "/gpu/users/bob/notices",
                   headers={"Authorization": f"token {bob_token}"}).json() == []  # fmt: skip

    with chromium_page() as page:  # what alice sees on the hub's home page
        hub_login(page, hub.url, "alice", "any password")
        page.goto(f"{hub.url}/hub/home")
        shown = page.wait_for_selector("#jhgpu-notices .jhgpu-notice")
        assert shown is not None and shown.inner_text() == notice["message"]
    assert hub.server("alice") is not None  # told, not stopped: the window is ahead
