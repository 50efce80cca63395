"""The GPU queue with a real hub, real engines and agents (issue 12): a full cluster
queues spawns instead of refusing them; the progress stream says where each stands;
freed GPUs go to the first in line, those behind move up; a cancelled spawn leaves the
queue at once and never gets a GPU; a request that can never fit is still refused at
once; a wait that runs out ends with a message that says where it stood.
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

from jupyterhub_gpu.culler.deadlines import save_deadlines
from jupyterhub_gpu.culler.idleness import Deadline
from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    A100,
    agents,
    cluster,
    create_users,
    servers,
    spawn_ready,
    start_hub,
    wait_all_ready,
    wait_until,
)
from tests.support.cluster import Engine
from tests.support.hub import Hub

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
    extra += f"c.GPUDockerSpawner.cull_deadlines_file = {str(deadlines)!r}\n"
    return start_hub(make_hub, engines, cluster, extra)


def progress(hub: Hub, user: str) -> list[str]:
    """The messages of ``user``'s progress stream so far (the stream the spawn-pending
    page shows), read until it goes quiet for a moment."""
    messages: list[str] = []
    url = f"{hub.url}/hub/api/users/{user}/server/progress"
    headers = {"Authorization": f"token {hub.token}"}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(3.0)) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    messages.append(str(event.get("message", "")))
                    if event.get("ready") or event.get("failed"):
                        break
    except httpx.ReadTimeout:
        pass  # quiet: the spawn waits on
    return messages


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
    assert carol.endswith(
        f"is expected to free up by about {cull_at:%H:%M} (a server on node-c reaches its "
        "idle limit)."
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
    create_users(hub, ["carol"])
    assert hub.spawn("carol", ON_A100).status_code == 202
    messages: list[Any] = []

    def ended() -> bool:
        messages[:] = progress(hub, "carol")
        return hub.server("carol") is None

    wait_until(ended, 60, "carol's wait to run out")
    text = hub.log_tail(200)
    assert "No GPU freed up for your server within 4 s (1st in line for an NVIDIA A100" in text
    assert sorted(holders(hub)) == ["alice", "bob"]


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
