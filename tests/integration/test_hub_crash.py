"""A hub killed (SIGKILL) in the middle of spawn and stop waves, restarted on the same
state, again and again (issue 15): after each restart settles, every running server's GPUs
are distinct and match its container's labels, no container of the hub runs without a
server, and at the end every GPU can be handed out again.

The real hub, the three engines and their agents of ``test_multinode`` (whose fixtures and
helpers this module reuses), with its stub single-user server. Kill points, in turn:

- ``posted``: 0-0.3 s after the spawn POSTs returned (the hub answers at once:
  ``slow_spawn_timeout`` 0), while the spawns run;
- ``created``: as soon as an engine shows a container of the wave (any state): between
  the container's creation and its start, or just after;
- ``running``: as soon as a container of the wave runs, before the hub saved its state;
- ``ready``: as soon as a server of the wave is ready (right after ``start`` returned);
- ``stopping``: 0-0.3 s after DELETEs of a ready wave (``slow_stop_timeout`` 0).

``JHGPU_CRASH_SEED`` and ``JHGPU_CRASH_ROUNDS`` replay or lengthen a run: 10 rounds by
default (each kill point twice), 5 in scripts/test.sh and so in CI (each kill point once,
within the suite's time), 100 by hand before a release.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker
import httpx
import pytest

from jupyterhub_gpu.edges.accounting.store import AccountingStore
from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    CUDA11,
    DEBUG_LOG,
    NODE_OF,
    ROUND,
    agents,
    assert_distinct,
    cluster,
    create_users,
    servers,
    spawn_all,
    start_hub,
    wait_all_ready,
)
from tests.support.cluster import Engine
from tests.support.hub import Hub
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RECONCILE_S = 1.0
CONFIG = (
    DEBUG_LOG
    + f"c.GPUCluster.reconcile_interval = {RECONCILE_S}\n"
    + 'c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0, "slow_stop_timeout": 0}\n'
)
POINTS = ("posted", "created", "running", "ready", "stopping")
POOL = [f"w{i}" for i in range(10)]  # reused: a new spawn meets what an old one left
ANCHOR = "anchor"  # runs through every crash: re-adopted each time, never disturbed
Apis = dict[Engine, docker.APIClient]


# ---------------------------------------------------------------------------- helpers
@pytest.fixture
def apis(engines: list[Engine]) -> Iterator[Apis]:
    """One Docker client per engine for the whole test (a kill point is looked for every
    few milliseconds: no version negotiation each time)."""
    clients = {e: docker.APIClient(base_url=e.url, version="auto", timeout=30) for e in engines}
    yield clients
    for client in clients.values():
        client.close()


def hub_containers(apis: Apis, hub: Hub) -> list[tuple[Engine, dict[str, Any]]]:
    """(engine, ``docker ps -a`` entry) of every container of this hub's, in any state."""
    found = []
    for e, client in apis.items():
        listing = client.containers(all=True, filters={"label": f"jupyterhub-gpu.hub={hub.hub_id}"})
        found += [(e, c) for c in listing]
    return found


def of_wave(found: list[tuple[Engine, dict[str, Any]]], wave: list[str]) -> list[dict]:
    return [c for _, c in found if c["Labels"].get("jupyterhub-gpu.owner") in wave]


async def _delete_all(hub: Hub, users: list[str]) -> list[Any]:
    async with httpx.AsyncClient(timeout=60) as client:
        return await asyncio.gather(
            *(hub.aapi(client, "DELETE", f"/users/{u}/server") for u in users),
            return_exceptions=True,
        )


def stop_all(hub: Hub, apis: Apis, users: list[str]) -> None:
    """Stop these users' servers at once and wait until they and their containers are gone."""
    for r in asyncio.run(_delete_all(hub, users)):
        assert isinstance(r, httpx.Response) and r.status_code in (202, 204), r
    wait_until(lambda: not set(users) & set(servers(hub)), 60, f"servers of {users} to stop")
    wait_until(
        lambda: not [c for c in of_wave(hub_containers(apis, hub), users) if _runs(c)],
        60,
        f"containers of {users} to stop",
    )


def _runs(container: dict[str, Any]) -> bool:
    return str(container["State"]) in ("running", "paused", "restarting")


def kill_when(hub: Hub, ready: Callable[[], bool], timeout: float = 60) -> None:
    """SIGKILL the hub alone (its proxy lives on, as after a real crash) once ``ready``,
    checked as often as it can be (a spawn's steps are milliseconds apart)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"no kill point in {timeout}s:\n{hub.log_tail()}"
        time.sleep(0.005)
    assert hub.proc is not None
    os.kill(hub.proc.pid, signal.SIGKILL)
    hub.proc.wait(10)


def settle(hub: Hub) -> None:
    """After a restart: no server pending, then two reconciliation rounds (so at least one
    whole round began after the hub knew which servers it has)."""
    wait_until(
        lambda: not any(s["pending"] for s in servers(hub).values()), 90, "no server pending"
    )
    hub.wait_log(ROUND, after=hub.log_offset(), count=2, timeout=2 * RECONCILE_S + 60)


def check_settled(hub: Hub, apis: Apis) -> dict[str, dict[str, Any]]:
    """Every server ready, with distinct GPUs, each in exactly one running container whose
    labels name its node, GPUs and allocation; no running container without a server."""
    now = servers(hub)
    assert all(s["ready"] for s in now.values()), now
    states = {u: s["state"] for u, s in now.items()}
    assert_distinct(states)
    running = [(e, c) for e, c in hub_containers(apis, hub) if _runs(c)]
    stray = [
        (e.name, c["Names"][0], c["Labels"]["jupyterhub-gpu.gpus"])
        for e, c in running
        if c["Labels"]["jupyterhub-gpu.owner"] not in states
    ]
    assert not stray, f"containers running without a server (node, name, GPUs): {stray}"
    owners = sorted(c["Labels"]["jupyterhub-gpu.owner"] for _, c in running)
    assert owners == sorted(states), f"servers {sorted(states)}, running containers {owners}"
    for engine, c in running:
        state = states[c["Labels"]["jupyterhub-gpu.owner"]]
        assert c["Id"] == state["object_id"], (c["Names"], state)
        assert engine.name == state["node"] == c["Labels"]["jupyterhub-gpu.node"], state
        assert c["Labels"]["jupyterhub-gpu.gpus"] == ",".join(state["gpu_uuids"]), state
        assert c["Labels"]["jupyterhub-gpu.allocation"] == state["allocation"], state
        assert all(NODE_OF[u] == state["node"] for u in state["gpu_uuids"]), state
    # accounting: the records open are exactly the running servers' allocations (no
    # record lost, none left open for a server that is gone, none twice)
    # (the hub's recorder writes on its own thread: wait for it, then compare)
    running_ids = {s["allocation"] for s in states.values()}
    store = AccountingStore(f"sqlite:///{hub.workdir / 'jupyterhub-gpu-accounting.sqlite'}")
    try:
        deadline = time.monotonic() + 30
        while (open_ids := set(store.open_allocations())) != running_ids:
            assert time.monotonic() < deadline, (sorted(open_ids), sorted(running_ids))
            time.sleep(0.2)
    finally:
        store.engine.dispose()
    return states


# ---------------------------------------------------------------------------- the test
def test_hub_killed_mid_spawns_and_stops_never_leaks_a_gpu(
    make_hub,
    engines,
    cluster,  # noqa: F811  (test_multinode's fixture)
    apis: Apis,
) -> None:
    seed = int(os.environ.get("JHGPU_CRASH_SEED") or time.time_ns() % 10**6)
    rounds = int(os.environ.get("JHGPU_CRASH_ROUNDS") or 10)
    rng = random.Random(seed)
    print(f"\nJHGPU_CRASH_SEED={seed}")
    hub = start_hub(make_hub, engines, cluster, CONFIG)
    create_users(hub, [ANCHOR, *POOL])
    assert spawn_all(hub, {ANCHOR: CUDA11})[ANCHOR].status_code in (201, 202)
    anchor = wait_all_ready(hub, [ANCHOR])[ANCHOR]
    removed_before = 0

    for n in range(rounds):
        point = POINTS[n % len(POINTS)]
        wave = rng.sample(POOL, rng.randint(3, 6))
        started = time.monotonic()
        if point == "stopping":
            spawn_all(hub, dict.fromkeys(wave, CUDA11))
            ready = [u for u, s in wait_settled_wave(hub, wave).items() if s]
            asyncio.run(_delete_all(hub, ready))
            kill_when(hub, _after(rng.uniform(0, 0.3)))
        else:
            old = {c["Id"] for _, c in hub_containers(apis, hub)}  # not this wave's
            spawn_all(hub, dict.fromkeys(wave, CUDA11))  # 202 at once; refusals show below
            delay = rng.uniform(0, 0.3)
            kill_when(hub, _point(point, hub, apis, wave, old, delay))
        hub.start()
        settle(hub)
        states = check_settled(hub, apis)
        assert states[ANCHOR] == anchor, "the server that ran through the crash changed"
        log = hub.log_path.read_text(errors="replace")
        removed = log.count("Reconciliation: removed container ")
        print(
            f"round {n + 1:2d}: {point:8s} wave {len(wave)} -> {len(states) - 1} running, "
            f"{removed - removed_before} interrupted container(s) removed, "
            f"{time.monotonic() - started:.1f} s"
        )
        removed_before = removed
        stop_all(hub, apis, [u for u in states if u != ANCHOR])

    # with every server stopped, every GPU can be handed out again, each once
    stop_all(hub, apis, [ANCHOR])
    final = [f"final{i}" for i in range(len(NODE_OF))]
    create_users(hub, final)
    responses = spawn_all(hub, dict.fromkeys(final, CUDA11))
    assert all(r.status_code in (201, 202) for r in responses.values()), {
        u: r.text for u, r in responses.items() if r.status_code >= 400
    }
    states = wait_all_ready(hub, final)
    assert sorted(assert_distinct(states)) == sorted(NODE_OF)
    check_settled(hub, apis)
    print(f"{removed_before} interrupted container(s) removed over {rounds} rounds")
    assert removed_before >= 1, "no kill landed inside a spawn: the test proved nothing"


def wait_settled_wave(hub: Hub, wave: list[str]) -> dict[str, bool]:
    """Wait until no spawn of ``wave`` is pending; user -> ready (refused ones: no server)."""

    def done() -> dict[str, bool] | None:
        now = servers(hub)
        if any(now[u]["pending"] for u in wave if u in now):
            return None
        return {u: bool(now.get(u, {}).get("ready")) for u in wave}

    result: dict[str, bool] = wait_until(done, 90, "the wave to start")
    return result


def _point(
    point: str, hub: Hub, apis: Apis, wave: list[str], old: set[str], delay: float
) -> Callable[[], bool]:
    """When the hub is to be killed, for a kill point other than ``stopping``."""

    def new() -> list[dict[str, Any]]:
        return [c for c in of_wave(hub_containers(apis, hub), wave) if c["Id"] not in old]

    if point == "posted":
        return _after(delay)
    if point == "created":
        return lambda: bool(new())
    if point == "running":
        return lambda: any(_runs(c) for c in new())
    assert point == "ready", point
    return lambda: any(s["ready"] for u, s in servers(hub).items() if u in wave)


def _after(delay: float) -> Callable[[], bool]:
    t0 = time.monotonic()
    return lambda: time.monotonic() - t0 >= delay
