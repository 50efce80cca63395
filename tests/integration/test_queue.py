"""The GPU queue with a real hub, real engines and agents (issue 12): a full cluster
queues spawns instead of refusing them; the progress stream says where each stands;
freed GPUs go to the first in line, those behind move up; a cancelled spawn leaves the
queue at once and never gets a GPU; a request that can never fit is still refused at
once; a wait that runs out ends with a message that says where it stood; freed GPUs go
by fair share (the group with less past use first), a group quota makes a spawn wait and
one over the group's absolute maximum is refused with the number.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.culling.idleness import Deadline
from jupyterhub_gpu.edges.accounting.schema import AllocationRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.edges.files import save_deadlines
from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    A100,
    agents,
    cluster,
    create_users,
    servers,
    spawn_ready,
    spawn_refused,
    start_hub,
    wait_all_ready,
)
from tests.support.cluster import Engine
from tests.support.hub import Hub
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ON_A100 = {"image": "demo-cuda11", "gpu_count": 1, "gpu_model": A100[0], "cpu": 0.5, "mem_gib": 1}
QUEUE = (
    "c.GPUDockerSpawner.max_queue_wait = {wait}\n"
    # the POST answers 202 after a second instead of ten: queued spawns are slow spawns
    "c.JupyterHub.tornado_settings = {{'slow_spawn_timeout': 1}}\n"
)


@pytest.fixture
def deadlines(tmp_path: Path) -> Path:
    return tmp_path / "cull-deadlines.json"  # what the culler would write


@pytest.fixture
def hub(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict,  # noqa: F811
    deadlines: Path,
) -> Hub:
    extra = QUEUE.format(wait=300)
    extra += f"c.GPUCluster.cull_deadlines_file = {str(deadlines)!r}\n"
    return start_hub(make_hub, engines, cluster, extra)


def events(hub: Hub, user: str) -> list[dict[str, Any]]:
    """The events of ``user``'s progress stream so far (the stream the spawn-pending
    page shows), read until it goes quiet for a moment."""
    got: list[dict[str, Any]] = []
    url = f"{hub.url}/hub/api/users/{user}/server/progress"
    headers = {"Authorization": f"token {hub.token}"}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(3.0)) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    got.append(event)
                    if event.get("ready") or event.get("failed"):
                        break
    except httpx.ReadTimeout:
        pass  # quiet: the spawn waits on
    return got


def progress(hub: Hub, user: str) -> list[str]:
    """The messages of ``user``'s progress stream so far."""
    return [str(e.get("message", "")) for e in events(hub, user)]


def told(hub: Hub, user: str, start: str, timeout: float = 30) -> str:
    """Wait until ``user``'s latest progress message starts with ``start``; return it."""
    latest: list[str] = []

    def check() -> bool:
        latest[:] = progress(hub, user)[-1:]
        return bool(latest) and latest[0].startswith(start)

    wait_until(check, timeout, f"{user} to be told {start!r} (last: {latest})")
    return latest[0]


def holders(hub: Hub) -> dict[str, list[str]]:
    return {u: s["state"].get("gpu_uuids", []) for u, s in servers(hub).items() if s["ready"]}


def test_a_full_cluster_queues_and_hands_out_freed_gpus_in_order(hub: Hub, deadlines: Path) -> None:
    # node-c's two A100s are taken; the culler would stop alice's at 20 min from now
    for user in ("alice", "bob"):
        spawn_ready(hub, user, ON_A100)
    create_users(hub, ["carol", "dave", "erin", "zed"])
    cull_at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=20)
    save_deadlines(deadlines, {"alice/": Deadline(cull_at, "idle")})

    # three more wait, in arrival order, and are told where they stand
    for user in ("carol", "dave", "erin"):
        r = hub.spawn(user, ON_A100)
        assert r.status_code == 202, r.text
        told(hub, user, "")  # joined (a message) before the next one arrives
    carol = told(hub, "carol", "1st in line for an NVIDIA A100")
    # 20 minutes on may be tomorrow (a run near midnight): then the day is said too
    same_day = cull_at.date() == datetime.now(timezone.utc).date()
    when = f"{cull_at:%H:%M}" if same_day else f"{cull_at:%a %d %b %H:%M}"
    assert carol.endswith(
        f"is expected to free up by about {when} UTC (a server on node-c reaches its idle limit)."
    ), carol
    dave = told(hub, "dave", "2nd in line for an NVIDIA A100")
    assert "There is no estimate yet" in dave, dave  # bob's server has no known end
    told(hub, "erin", "3rd in line for an NVIDIA A100")
    assert all(servers(hub)[u]["pending"] == "spawn" for u in ("carol", "dave", "erin"))

    # a request that can never fit (3 A100s: node-c has 2) is refused at once, not queued
    t0 = time.monotonic()
    r = hub.spawn("zed", {**ON_A100, "gpu_count": 3})
    assert r.status_code >= 400 and time.monotonic() - t0 < 10, r.text
    assert hub.server("zed") is None

    # alice stops: her A100 goes to carol, the first in line; dave and erin move up
    (alice_gpu,) = holders(hub)["alice"]
    assert hub.stop_server("alice").status_code in (202, 204)
    wait_all_ready(hub, ["carol"])
    assert holders(hub)["carol"] == [alice_gpu]
    told(hub, "dave", "1st in line")
    told(hub, "erin", "2nd in line")

    # erin cancels (what the spawn-pending page's cancel does): out of the queue at once
    assert hub.stop_server("erin").status_code in (202, 204)
    wait_until(lambda: hub.server("erin") is None, 30, "erin's cancelled spawn to end")

    # bob stops: dave gets his A100; erin, who left, gets nothing
    (bob_gpu,) = holders(hub)["bob"]
    assert hub.stop_server("bob").status_code in (202, 204)
    wait_all_ready(hub, ["dave"])
    held = holders(hub)
    assert held["dave"] == [bob_gpu] and "erin" not in servers(hub)
    assert sorted(held) == ["carol", "dave"]
    all_held = [u for gpus in held.values() for u in gpus]
    assert len(all_held) == len(set(all_held)), held


def test_a_wait_that_runs_out_says_so(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict,  # noqa: F811
) -> None:
    hub = start_hub(make_hub, engines, cluster, QUEUE.format(wait=4))
    for user in ("alice", "bob"):
        spawn_ready(hub, user, ON_A100)
    create_users(hub, ["carol", "zed"])
    assert hub.spawn("carol", ON_A100).status_code == 202
    queued: list[dict[str, Any]] = []

    def ended() -> bool:
        queued.extend(e for e in events(hub, "carol") if e.get("jhgpu_queued"))
        return hub.server("carol") is None

    wait_until(ended, 60, "carol's wait to run out")
    text = hub.log_tail(200)
    assert "No GPU freed up for your server within 4 s (1st in line for an NVIDIA A100" in text
    assert sorted(holders(hub)) == ["alice", "bob"]

    # what carol read (issue 36): the wait in plain words, marked for the page; then
    # the end as one sentence, never "503 SpawnException(reason=queue_timeout): ..."
    lines = [e["message"] for e in queued]
    assert any(m.startswith("1st in line for an NVIDIA A100") for m in lines), lines
    assert not [m for m in lines if "share:" in m or "recent use" in m or "ry later" in m]
    (failed,) = [e for e in events(hub, "carol") if e.get("failed")]
    sentence = failed["html_message"]
    assert sentence.startswith("No GPU freed up for your server within 4 s (1st in line"), failed
    assert failed["message"] == f"Spawn failed: {sentence}", failed
    # a request that can never fit is refused at once; the REST answer is the sentence
    r = hub.spawn("zed", {**ON_A100, "gpu_count": 3})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    assert message.endswith(".") and "A100" in message, message
    for internal in ("SpawnException", "reason=", "503", "no_capacity", "never_fits"):
        assert internal not in message, message
    (failed,) = [e for e in events(hub, "zed") if e.get("failed")]
    assert failed["message"] == f"Spawn failed: {message}", failed


def test_a_hub_restart_ends_waiting_spawns_without_a_hang(hub: Hub) -> None:
    """The queue lives in the hub's memory: a hub killed while a spawn waits comes back
    with that spawn ended (no server, nothing pending, nothing held), its progress stream
    answers at once instead of hanging, and the user can start again."""
    for user in ("alice", "bob"):
        spawn_ready(hub, user, ON_A100)
    create_users(hub, ["carol"])
    assert hub.spawn("carol", ON_A100).status_code == 202
    told(hub, "carol", "1st in line")
    assert hub.proc is not None
    hub.proc.kill()
    hub.proc.wait(10)
    hub.start()
    wait_until(lambda: hub.server("carol") is None, 60, "carol's waiting spawn to be ended")
    t0 = time.monotonic()
    r = httpx.get(
        f"{hub.url}/hub/api/users/carol/server/progress",
        headers={"Authorization": f"token {hub.token}"},
        timeout=10,
    )
    assert time.monotonic() - t0 < 5 and r.status_code in (400, 404), r.text  # no server
    # alice and bob kept their A100s; carol starts again and waits again
    assert sorted(holders(hub)) == ["alice", "bob"]
    assert hub.spawn("carol", ON_A100).status_code == 202
    told(hub, "carol", "1st in line")


def test_freed_gpus_go_by_fair_share_and_group_quotas_wait_or_refuse(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Five users of two groups. heavy (h1, h2, h3; at most 2 GPUs at once) used 10
    GPU-hours yesterday, light (l1; l2, in both groups, charges light) nothing. With both
    A100s held by heavy, h3 asks for one: it waits for its group's quota (h4 asking for 3,
    more than heavy may ever hold, is refused at once with the number; l3 charging a group
    she is not in, at once too). l1 and l2 come after h3 and still go first: each freed
    A100 goes to light, h3 gets one only when nobody of a lighter group waits. l2's record
    is charged to the group she chose."""
    url = f"sqlite:///{tmp_path / 'accounting.sqlite'}"
    store = AccountingStore(url)
    store.upgrade()
    yesterday = datetime.now(timezone.utc) - timedelta(hours=30)
    store.open(
        AllocationRecord("past-heavy", "h0", "", "heavy", "node-a", ("GPU-p0", "GPU-p1"),
                         A100[0], "demo-cuda11", "11.8", started_at=yesterday)
    )  # fmt: skip
    assert store.close("past-heavy", yesterday + timedelta(hours=5), EndReason.STOPPED)
    extra = QUEUE.format(wait=300) + (
        f"c.GPUCluster.accounting_url = {url!r}\n"
        'c.GPUDockerSpawner.queue_policy = {"groups": {"heavy": {"max_gpus": 2}, "light": {}}}\n'
        "c.JupyterHub.load_roles = c.JupyterHub.load_roles + [\n"
        '    {"name": "group-maker", "scopes": ["admin:groups"], "services": ["tester"]}]\n'
    )
    hub = start_hub(make_hub, engines, cluster, extra)
    create_users(hub, ["h1", "h2", "h3", "h4", "l1", "l2", "l3"])
    heavy, light = ["h1", "h2", "h3", "h4", "l2", "l3"], ["l1", "l2", "l3"]
    for group, members in (("heavy", heavy), ("light", light)):
        r = hub.api("POST", f"/groups/{group}", json={"users": members})
        assert r.status_code == 201, r.text
    for user in ("h1", "h2"):
        spawn_ready(hub, user, ON_A100)

    # (the refusals are other users': JupyterHub 6.1 does not stream the progress of a
    # user's spawn that follows a refused one)
    # over heavy's absolute maximum: refused at once, with the number
    spawn_refused(
        hub, "h4", {**ON_A100, "gpu_model": "any", "gpu_count": 3},
        "Group heavy may hold at most 2 GPUs at once, and this server asks for 3",
        "Ask for 2 or fewer",
    )  # fmt: skip
    # a charge group the user is not in: refused, naming the ones she may choose
    spawn_refused(
        hub, "l3", {**ON_A100, "charge_group": "ops"},
        "You are not a member of group 'ops'; choose 'heavy' or 'light'",
    )  # fmt: skip
    # within the maximum but over the quota now: h3 waits, first in the queue
    assert hub.spawn("h3", ON_A100).status_code == 202
    quota_wait = "Group heavy holds 2 of 2 GPUs allowed at once, and this server asks for 1"
    wait_until(
        lambda: any(m.startswith(quota_wait) for m in progress(hub, "h3")), 30, "h3's quota wait"
    )
    for user, options in (("l1", ON_A100), ("l2", {**ON_A100, "charge_group": "light"})):
        assert hub.spawn(user, options).status_code == 202
        told(hub, user, "")
    assert all(servers(hub)[u]["pending"] == "spawn" for u in ("h3", "l1", "l2"))
    told(hub, "l1", "1st in line for an NVIDIA A100")
    told(hub, "l2", "2nd in line for an NVIDIA A100-SXM4-80GB (group light)")
    h3 = told(hub, "h3", "3rd in line for an NVIDIA A100-SXM4-80GB (group heavy)")
    assert "Your group has used more than its share lately, so others go first." in h3, h3

    # h1 stops: heavy may start one again, yet the A100 goes to light's l1
    (h1_gpu,) = holders(hub)["h1"]
    assert hub.stop_server("h1").status_code in (202, 204)
    assert wait_all_ready(hub, ["l1"])["l1"]["gpu_uuids"] == [h1_gpu]
    told(hub, "l2", "1st in line")
    told(hub, "h3", "2nd in line")
    # h2 stops: l2 (charged to light) before h3
    assert hub.stop_server("h2").status_code in (202, 204)
    l2 = wait_all_ready(hub, ["l2"])["l2"]
    assert l2["charge_group"] == "light" and servers(hub)["h3"]["pending"] == "spawn"
    # l1 stops: nobody lighter waits, h3 gets its A100
    assert hub.stop_server("l1").status_code in (202, 204)
    assert wait_all_ready(hub, ["h3"])["h3"]["gpu_uuids"] == [h1_gpu]
    assert sorted(holders(hub)) == ["h3", "l2"]
    with store.session() as s:
        charged = {row.user: row.group for row in s.scalars(select(AllocationRow))}
    store.engine.dispose()
    assert charged == {"h0": "heavy", "h1": "heavy", "h2": "heavy", "l1": "light",
                       "l2": "light", "h3": "heavy"}  # fmt: skip
