"""GPUDockerSpawner on a real three-node cluster: three Docker engines (node-a, node-b,
node-c in their network namespaces), each with a real node agent serving a declared inventory of
different GPU models, and a real hub. Every GPU a server holds is checked inside its
container (NVIDIA_VISIBLE_DEVICES, set by the engine from the DeviceRequest).

The cluster (8 GPUs, four classes, three drivers)::

    node-a  3 x RTX 3090 24 GiB (cc 8.6)                       driver 550.54.15
    node-b  2 x TITAN X (Pascal) 12 GiB (cc 6.1), 1 x 2080 Ti  driver 470.223.02
    node-c  2 x A100 80 GiB (cc 8.0)                           driver 535.104.05
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import docker
import httpx
import pytest
import yaml

from tests.conftest import gpu_inventory
from tests.support.agent import AgentProcess
from tests.support.cluster import (
    TEST_IMAGE,
    Engine,
    container_env,
    engine_crashed,
    engine_running,
)
from tests.support.hub import Hub
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RTX3090 = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
TITANX = ("NVIDIA TITAN X (Pascal)", 12288, "6.1")
RTX2080TI = ("NVIDIA GeForce RTX 2080 Ti", 11264, "7.5")
A100 = ("NVIDIA A100-SXM4-80GB", 81920, "8.0")

INVENTORY = [
    gpu_inventory("node-a", "aaaaaaaa", [RTX3090] * 3, "550.54.15", "12.4"),
    gpu_inventory("node-b", "bbbbbbbb", [TITANX, TITANX, RTX2080TI], "470.223.02", "11.4"),
    gpu_inventory("node-c", "cccccccc", [A100] * 2, "535.104.05", "12.2"),
]
UUIDS = {n["name"]: [g["uuid"] for g in n["gpus"]] for n in INVENTORY}
NODE_OF = {u: node for node, uuids in UUIDS.items() for u in uuids}
MODEL_OF = {g["uuid"]: g["model"] for n in INVENTORY for g in n["gpus"]}
A0, A1, A2 = UUIDS["node-a"]

RECONCILE_S = 2.0
FAST = f"c.GPUCluster.reconcile_interval = {RECONCILE_S}\nc.Spawner.poll_interval = 2\n"
# these tests check immediate refusals of a full cluster: no queue (test_queue.py's part)
FAST += "c.GPUDockerSpawner.max_queue_wait = 0\n"
# the hub reuses an agent's reading for up to 2.5 s (ClusterSettings.health_ttl / 2)
AGENT_CACHE_S = 2.5
LIGHT = {"cpu": 0.5, "mem_gib": 1}
CUDA11 = {"image": "demo-cuda11", "gpu_count": 1, **LIGHT}

# A stand-in for the single-user server: what these tests check is where servers go and
# which GPUs their containers get, and a real server needs ~10 s of CPU to start on this
# 2-core machine (8 at once at 0.5 CPU each miss the 60 s http_timeout while other tests
# run). It answers HTTP where JUPYTERHUB_SERVICE_URL says (0.0.0.0:8888 in its container),
# so the hub sees it ready at the port published on the node's address, and exits on
# SIGTERM. The container, its DeviceRequest, labels and limits are the real ones;
# tests/integration/test_spawner.py runs the real server.
STUB_SERVER = """
import http.server, os, signal, sys, urllib.parse
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
url = urllib.parse.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])  # JupyterHub's, not argv
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((url.hostname, url.port), Ok).serve_forever()
"""
STUB = f"c.GPUDockerSpawner.cmd = ['python3', '-c', {STUB_SERVER!r}]\n"
# What a test waits for instead of sleeping "long enough" (the hub logs both at DEBUG):
# a finished reconciliation round (Cluster.reconcile), and a poll of a server by the hub
# (DockerSpawner's "Container <id> status" line; "Poll of user/: node X is down; kept")
DEBUG_LOG = 'c.JupyterHub.log_level = "DEBUG"\n'
ROUND = r"Reconciliation round \d+ done"


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def agents(
    engines: list[Engine], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, AgentProcess]]:
    """One real agent per node (declared mode), shared by the module's tests."""
    work = tmp_path_factory.mktemp("agents")
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": INVENTORY}))
    token = secrets.token_hex(16)
    started: dict[str, AgentProcess] = {}
    try:
        for e in engines:
            agent = AgentProcess(e.name, inventory, work / f"{e.name}.log", token=token)
            started[e.name] = agent.start()
        yield started
    finally:
        for agent in started.values():
            agent.stop()


@pytest.fixture
def cluster(agents: dict[str, AgentProcess]) -> dict[str, AgentProcess]:
    """The agents with every GPU back to healthy, idle and free of processes."""
    for node, uuids in UUIDS.items():
        for uuid in uuids:
            agents[node].set_state(
                uuid,
                healthy=True,
                process_containers=[],
                utilization_pct=0,
                memory_used_mib=0,
            )
    return agents


@pytest.fixture
def by_name(engines: list[Engine]) -> dict[str, Engine]:
    return {e.name: e for e in engines}


# ---------------------------------------------------------------------------- helpers
def start_hub(
    make_hub: Callable[..., Hub],
    nodes: list[Engine],
    agents: dict[str, AgentProcess],
    extra: str = "",
    **kw: Any,
) -> Hub:
    """A hub over ``nodes`` (each with its agent, stub servers), fast polls and reconciliation."""
    return make_hub(nodes, INVENTORY, FAST + STUB + extra, agents=agents, **kw)


def create_users(hub: Hub, names: list[str]) -> None:
    r = hub.api("POST", "/users", json={"usernames": names})
    assert r.status_code in (201, 409), r.text


async def _post_spawns(hub: Hub, spawns: dict[str, dict[str, Any]]) -> dict[str, httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        responses = await asyncio.gather(
            *(
                hub.aapi(client, "POST", f"/users/{user}/server", content=json.dumps(options))
                for user, options in spawns.items()
            )
        )
    return dict(zip(spawns, responses, strict=True))


def spawn_all(hub: Hub, spawns: dict[str, dict[str, Any]]) -> dict[str, httpx.Response]:
    """POST every spawn at once (one connection each) and return the responses."""
    return asyncio.run(_post_spawns(hub, spawns))


def servers(hub: Hub) -> dict[str, dict[str, Any]]:
    """user -> their default server (with its state), for every user that has one."""
    r = hub.api("GET", "/users")
    r.raise_for_status()
    return {u["name"]: u["servers"][""] for u in r.json() if "" in (u.get("servers") or {})}


def wait_all_ready(hub: Hub, users: list[str], timeout: float = 120) -> dict[str, dict]:
    """Wait until every user's server is ready; their spawner states. Fails on any failure."""
    deadline = time.monotonic() + timeout
    while True:
        now = servers(hub)
        failed = [u for u in users if u not in now or not (now[u]["pending"] or now[u]["ready"])]
        assert not failed, f"servers failed to start: {failed}\n{hub.log_tail()}"
        if all(now[u]["ready"] for u in users):
            return {u: now[u]["state"] for u in users}
        assert time.monotonic() < deadline, f"not ready in {timeout}s: " + ", ".join(
            u for u in users if not now[u]["ready"]
        )
        time.sleep(0.5)


def spawn_ready(hub: Hub, user: str, options: dict[str, Any]) -> dict[str, Any]:
    create_users(hub, [user])
    r = hub.spawn(user, options)
    assert r.status_code in (201, 202), r.text
    return wait_all_ready(hub, [user])[user]


def spawn_refused(hub: Hub, user: str, options: dict[str, Any], *fragments: str) -> str:
    """Spawn that must fail at once with a message naming ``fragments``; nothing left."""
    create_users(hub, [user])
    t0 = time.monotonic()
    r = hub.spawn(user, options)
    assert r.status_code >= 400, f"{user} was not refused: {r.status_code} {r.text}"
    assert time.monotonic() - t0 < 10, "the refusal took longer than the slow-spawn timeout"
    message = str(r.json()["message"])
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message
    assert "Traceback" not in message
    assert hub.server(user) is None
    return message


def containers_of(engines: list[Engine], hub: Hub, owner: str) -> list[tuple[Engine, dict]]:
    """(engine, ``docker ps`` entry) for each container of ``owner`` (any state) anywhere."""
    labels = [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={owner}"]
    found = []
    for e in engines:
        with e.client() as client:
            found += [(e, c) for c in client.api.containers(all=True, filters={"label": labels})]
    return found


def check_inside(engines: list[Engine], hub: Hub, user: str, state: dict[str, Any]) -> None:
    """The user's one container runs on the state's node with exactly the state's GPUs."""
    found = containers_of(engines, hub, user)
    assert len(found) == 1, f"{user}: containers {[(e.name, c['Names']) for e, c in found]}"
    engine, container = found[0]
    assert engine.name == state["node"], f"{user}: container on {engine.name}, state {state}"
    assert all(NODE_OF[u] == state["node"] for u in state["gpu_uuids"]), state
    env = container_env(engine, container["Id"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(state["gpu_uuids"]), (user, env)
    assert container["Labels"]["jupyterhub-gpu.gpus"] == ",".join(state["gpu_uuids"])
    assert container["Labels"]["jupyterhub-gpu.node"] == state["node"]


def retry_spawn(hub: Hub, user: str, options: dict[str, Any], timeout: float) -> dict:
    """Spawn, retrying refusals (the hub has not caught up yet) for up to ``timeout`` s."""
    create_users(hub, [user])
    deadline = time.monotonic() + timeout
    while True:
        r = hub.spawn(user, options)
        if r.status_code in (201, 202):
            return wait_all_ready(hub, [user])[user]
        assert time.monotonic() < deadline, f"{user} still refused after {timeout}s: {r.text}"
        time.sleep(0.5)


def stop(hub: Hub, engines: list[Engine], *users: str) -> None:
    for user in users:
        r = hub.stop_server(user)
        assert r.status_code in (202, 204), r.text
    for user in users:
        wait_until(lambda u=user: hub.server(u) is None, 30, f"{user}'s server to stop")
        wait_until(
            lambda u=user: containers_of(engines, hub, u) == [], 30, f"{user}'s container to go"
        )


@contextmanager
def outage_held(engine: Engine) -> Iterator[None]:
    """Fails clearly if something outside the test (a ``scripts/cluster.sh up`` of another
    session) started the engine again while the test needed it down."""
    try:
        yield
    except AssertionError as e:
        if engine_running(engine):
            raise AssertionError(f"{engine.name} was started again during the outage") from e
        raise
    assert not engine_running(engine), f"{engine.name} was started again during the outage"


def wait_rounds(hub: Hub, after: int, count: int = 2) -> int:
    """Wait until ``count`` reconciliation rounds finished past log offset ``after``; with
    the default two, at least one whole round began after it."""
    return hub.wait_log(ROUND, after=after, count=count, timeout=count * RECONCILE_S + 60)


def wait_polls(hub: Hub, after: int, states: dict[str, dict[str, Any]], count: int = 2) -> None:
    """Wait until the hub polled the default server of each user of ``states`` (user ->
    spawner state) ``count`` times past log offset ``after``, so at least once from start
    to end after it; a poll of a server whose node is down counts too."""
    for user, state in states.items():
        polled = "|".join(
            (
                rf"Container {state['object_id'][:7]} status: ",
                rf"Poll of {re.escape(user)}/: node \S+ is down; kept",
                rf"Node \S+ unreachable while polling {re.escape(user)}/: ",
            )
        )
        hub.wait_log(polled, after=after, count=count, timeout=count * 2 + 60)


def assert_distinct(states: dict[str, dict[str, Any]]) -> list[str]:
    held = [u for s in states.values() for u in s["gpu_uuids"]]
    assert len(held) == len(set(held)), f"a GPU was given twice: {states}"
    return held


# ---------------------------------------------------------------------------- tests
def test_thirty_concurrent_spawns_get_every_gpu_once(make_hub, engines, cluster) -> None:
    hub = start_hub(make_hub, engines, cluster)
    users = [f"crowd{i:02d}" for i in range(30)]
    create_users(hub, users)

    responses = spawn_all(hub, dict.fromkeys(users, CUDA11))

    started = [u for u, r in responses.items() if r.status_code in (201, 202)]
    refused = {u: r for u, r in responses.items() if r.status_code >= 400}
    assert len(started) + len(refused) == len(users), {
        u: r.status_code for u, r in responses.items()
    }
    states = wait_all_ready(hub, started)
    assert len(started) == 8, f"{len(started)} servers for 8 GPUs: {sorted(started)}"
    assert sorted(assert_distinct(states)) == sorted(NODE_OF)
    for user, state in states.items():
        assert len(state["gpu_uuids"]) == 1
        check_inside(engines, hub, user, state)
    for user, r in refused.items():
        message = str(r.json()["message"])
        assert "free" in message.lower() and "Traceback" not in message, message
        assert hub.server(user) is None
        assert containers_of(engines, hub, user) == [], f"{user} left a container"


def test_hub_killed_restarted_then_reconciled(make_hub, engines, by_name, cluster) -> None:
    nodes = [by_name["node-a"], by_name["node-c"]]  # 5 GPUs: fewer containers, same point
    hub = start_hub(make_hub, nodes, cluster, DEBUG_LOG)
    users = [f"old{i}" for i in range(5)]
    create_users(hub, users)
    responses = spawn_all(hub, dict.fromkeys(users, CUDA11))
    assert all(r.status_code in (201, 202) for r in responses.values()), responses
    before = wait_all_ready(hub, users)
    assert sorted(assert_distinct(before)) == sorted(UUIDS["node-a"] + UUIDS["node-c"])

    # kill -9 the hub alone (its proxy keeps running) and start it again on the same state
    assert hub.proc is not None
    os.kill(hub.proc.pid, signal.SIGKILL)
    hub.proc.wait(10)
    os.kill(int((hub.workdir / "proxy.pid").read_text()), 0)  # the proxy is still there
    hub.start()
    assert wait_all_ready(hub, users, timeout=30) == before, "servers changed over the restart"
    spawn_refused(hub, "new0", CUDA11, "free")  # the restarted hub knows every GPU is taken

    # two servers stop; two new users get exactly their GPUs, nobody else's
    stop(hub, nodes, "old0", "old1")
    freed = {*before["old0"]["gpu_uuids"], *before["old1"]["gpu_uuids"]}
    create_users(hub, ["new0", "new1"])
    responses = spawn_all(hub, {"new0": CUDA11, "new1": CUDA11})
    assert all(r.status_code in (201, 202) for r in responses.values()), responses
    new = wait_all_ready(hub, ["new0", "new1"])
    assert {u for s in new.values() for u in s["gpu_uuids"]} == freed
    running = {**{u: before[u] for u in ("old2", "old3", "old4")}, **new}
    assert_distinct(running)
    for user, state in running.items():
        check_inside(nodes, hub, user, state)

    # a labelled container started by hand, claiming a freed GPU, is respected
    stop(hub, nodes, "old2")
    (claimed,) = before["old2"]["gpu_uuids"]
    engine = by_name[NODE_OF[claimed]]
    labels = {
        "jupyterhub-gpu.hub": hub.hub_id,
        "jupyterhub-gpu.owner": "byhand",
        "jupyterhub-gpu.server": "",
        "jupyterhub-gpu.node": engine.name,
        "jupyterhub-gpu.gpus": claimed,
        "jupyterhub-gpu.image": TEST_IMAGE,
        "jupyterhub-gpu.started": "2026-11-01T00:00:00+00:00",
    }
    with engine.client() as client:
        intruder = client.containers.run(
            TEST_IMAGE,
            ["sleep", "infinity"],
            name=f"byhand-{hub.hub_id}",
            labels=labels,
            detach=True,
            network_mode="none",
            device_requests=[
                docker.types.DeviceRequest(
                    driver="nvidia", device_ids=[claimed], capabilities=[["gpu"]]
                )
            ],
        )
    wait_rounds(hub, hub.log_offset())  # a whole reconciliation round after it appeared
    spawn_refused(hub, "late", CUDA11, "free")

    # a server container removed by hand frees its GPU (and the hub forgets the server)
    ((engine, victim),) = containers_of(nodes, hub, "old3")
    with engine.client() as client:
        client.api.remove_container(victim["Id"], force=True)
    wait_until(lambda: hub.server("old3") is None, 20, "the hub to notice old3's container went")
    after = spawn_ready(hub, "late", CUDA11)
    assert after["gpu_uuids"] == before["old3"]["gpu_uuids"]
    check_inside(nodes, hub, "late", after)

    # ...and so does the hand-made one, once reconciliation sees it gone
    intruder.remove(force=True)
    later = retry_spawn(hub, "later", CUDA11, timeout=4 * RECONCILE_S + 10)
    assert later["gpu_uuids"] == [claimed]
    check_inside(nodes, hub, "later", later)

    # a paused server keeps its GPU (its memory is still on the card)
    ((engine, paused),) = containers_of(nodes, hub, "old4")
    with engine.client() as client:
        client.api.pause(paused["Id"])
        try:
            # a whole reconciliation round since, and a poll that saw it paused: both kept it
            since = hub.log_offset()
            wait_rounds(hub, since)
            seen_paused = rf'Container {paused["Id"][:7]} status: .*"Paused": true'
            hub.wait_log(seen_paused, after=since, timeout=60)
            spawn_refused(hub, "extra", CUDA11, "free")
            assert hub.server("old4")["ready"]
        finally:
            client.api.unpause(paused["Id"])


@pytest.mark.alone  # node-b's engine is killed: no other test may use it meanwhile
def test_engine_dies_mid_run(make_hub, engines, by_name, cluster) -> None:
    hub = start_hub(make_hub, engines, cluster, DEBUG_LOG)
    on_b = {
        "titan": {**CUDA11, "gpu_model": TITANX[0]},
        "turing": {**CUDA11, "gpu_model": RTX2080TI[0]},
    }
    create_users(hub, list(on_b))
    assert all(r.status_code in (201, 202) for r in spawn_all(hub, on_b).values())
    held = wait_all_ready(hub, list(on_b))
    assert {s["node"] for s in held.values()} == {"node-b"}
    node_b = by_name["node-b"]
    others = [by_name["node-a"], by_name["node-c"]]

    with engine_crashed(node_b), outage_held(node_b):
        died_at = time.monotonic()

        # the API stays responsive
        for _ in range(5):
            t0 = time.monotonic()
            assert hub.api("GET", "/users").status_code == 200
            assert time.monotonic() - t0 < 1.0, "the hub API stalled while a node is down"

        # a request only node-b could take is refused, naming why, within seconds: at
        # most the first spawn that touches the dead engine fails otherwise (it was placed
        # before anything had failed there), and none waits on it
        messages = []

        def refused_as_unreachable() -> bool:
            create_users(hub, ["pascal"])
            t0 = time.monotonic()
            r = hub.spawn("pascal", {**CUDA11, "gpu_model": TITANX[0]})
            assert r.status_code >= 400, f"placed on a dead node: {r.text}"
            assert time.monotonic() - t0 < 5, "a spawn waited on the dead node"
            messages.append(r.json()["message"])
            return "unreachable" in messages[-1]

        wait_until(refused_as_unreachable, 8, "node-b to be skipped as unreachable")
        assert time.monotonic() - died_at < 10
        assert len(messages) <= 2, f"spawns kept going to the dead node: {messages}"

        # new spawns land elsewhere, promptly
        t0 = time.monotonic()
        create_users(hub, ["elsewhere"])
        r = hub.spawn("elsewhere", CUDA11)
        assert r.status_code in (201, 202), r.text
        assert time.monotonic() - t0 < 10
        state = wait_all_ready(hub, ["elsewhere"])["elsewhere"]
        assert state["node"] != "node-b"
        check_inside(others, hub, "elsewhere", state)

        # the servers on the dead node stay, with their GPUs, through whole polls of each
        # and a whole reconciliation round
        since = hub.log_offset()
        wait_polls(hub, since, held)
        wait_rounds(hub, since)
        now = servers(hub)
        for user, state in held.items():
            assert user in now and now[user]["ready"], f"{user} was dropped while node-b is down"
            assert now[user]["state"] == state

        # a user stops a server there: the hub lets go of it at once (its GPU stays held
        # until the node answers again: the container may still be running)
        t0 = time.monotonic()
        assert hub.stop_server("titan").status_code in (202, 204)
        assert hub.server("titan") is None and time.monotonic() - t0 < 10

    # dockerd killed the containers when it came back: the hub sees "turing" gone and
    # removes it; reconciliation finds no container of "titan" and frees its GPU
    wait_until(lambda: hub.server("turing") is None, 30, "turing's server to be cleared")
    back = {
        "pascal": {**CUDA11, "gpu_model": TITANX[0]},
        "pascal2": {**CUDA11, "gpu_model": TITANX[0]},
        "turing2": {**CUDA11, "gpu_model": RTX2080TI[0]},
    }
    create_users(hub, list(back))
    deadline = time.monotonic() + 4 * RECONCILE_S + 5
    while True:  # the first reconciliation after the restart may still be due
        responses = spawn_all(hub, back)
        back = {u: o for u, o in back.items() if responses[u].status_code >= 400}
        if not back or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not back, {u: responses[u].text for u in back}
    states = wait_all_ready(hub, ["pascal", "pascal2", "turing2"])
    assert sorted(u for s in states.values() for u in s["gpu_uuids"]) == sorted(UUIDS["node-b"])
    for user, state in states.items():
        check_inside([node_b], hub, user, state)


def test_unhealthy_or_foreign_gpu_never_chosen(make_hub, engines, cluster) -> None:
    agent = cluster["node-a"]
    agent.set_state(A0, healthy=False)
    agent.set_state(A1, process_containers=[""])  # a process outside any container
    hub = start_hub(make_hub, engines, cluster)  # its first reading of the agents comes later
    rtx = {**CUDA11, "gpu_model": RTX3090[0]}

    # without the marks the first RTX 3090 (index 0, the calmest) would be chosen
    first = spawn_ready(hub, "first", rtx)
    assert first["gpu_uuids"] == [A2]
    check_inside(engines, hub, "first", first)
    spawn_refused(hub, "second", rtx, "free")

    agent.set_state(A0, healthy=True)  # repaired: it is chosen again
    second = retry_spawn(hub, "second", rtx, timeout=AGENT_CACHE_S + 5)
    assert second["gpu_uuids"] == [A0]
    spawn_refused(hub, "third", rtx, "free")  # A1 still runs a foreign process


def test_image_needing_newer_driver(make_hub, engines, cluster) -> None:
    hub = start_hub(make_hub, engines, cluster)
    # node-b's small cards are where best fit puts a one-GPU CUDA 11 server...
    old = spawn_ready(hub, "cuda11", CUDA11)
    assert old["node"] == "node-b"
    # ...but node-b's driver 470 can't run CUDA 12: such servers go elsewhere
    new = spawn_ready(hub, "cuda12", {**CUDA11, "image": "demo-cuda12"})
    assert new["node"] != "node-b"
    check_inside(engines, hub, "cuda12", new)
    spawn_refused(
        hub, "pascal12", {**CUDA11, "image": "demo-cuda12", "gpu_model": TITANX[0]}, "driver"
    )
    message = spawn_refused(hub, "cuda13", {**CUDA11, "image": "demo-cuda13"}, "driver", "580")
    assert "node-a" in message and "node-b" in message and "node-c" in message, message


def test_heavy_and_light_requests_in_either_order(make_hub, engines, cluster) -> None:
    hub = start_hub(make_hub, engines, cluster)
    heavy = {**CUDA11, "min_gpu_memory_gib": 40}
    light = {**CUDA11, "gpu_model": "any", "min_gpu_memory_gib": 8}
    for order in (("heavy", "light"), ("light", "heavy")):
        states = {}
        for kind in order:
            user = f"{kind}{len(states)}"
            states[kind] = spawn_ready(hub, user, heavy if kind == "heavy" else light)
            check_inside(engines, hub, user, states[kind])
        assert [MODEL_OF[u] for u in states["heavy"]["gpu_uuids"]] == [A100[0]], order
        assert [MODEL_OF[u] for u in states["light"]["gpu_uuids"]] != [A100[0]], order
        stop(hub, engines, *(f"{kind}{i}" for i, kind in enumerate(order)))


def test_nodes_file_add_drain_remove(make_hub, engines, by_name, cluster, tmp_path) -> None:
    node_c = by_name["node-c"]
    nodes_file = tmp_path / "nodes.yaml"

    def write_nodes(entries: list[dict[str, Any]]) -> None:
        tmp = nodes_file.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump({"nodes": entries}))
        os.replace(tmp, nodes_file)  # the hub never reads half a file

    c_entry = node_c.node_config(agent_url=cluster["node-c"].url)
    write_nodes([])
    hub = start_hub(
        make_hub,
        [by_name["node-a"]],
        cluster,
        f"c.GPUCluster.nodes_file = {str(nodes_file)!r}\n" + DEBUG_LOG,
        extra_engines=[node_c],
    )
    big = {**CUDA11, "min_gpu_memory_gib": 40}
    spawn_refused(hub, "big", big, "40 GiB")

    write_nodes([c_entry])  # added while the hub runs
    state = spawn_ready(hub, "big", big)
    assert state["node"] == "node-c"
    check_inside([node_c], hub, "big", state)

    # a bad edit (a node without docker_url) is not applied: the hub keeps the nodes it had
    write_nodes([c_entry, {"name": "node-d", "address": "10.250.9.2"}])
    kept = spawn_ready(hub, "kept", big)
    assert kept["node"] == "node-c"
    running = {"big": state, "kept": kept}

    write_nodes([{**c_entry, "drain": True}])  # drained: nothing new, running ones untouched
    spawn_refused(hub, "big2", big, "drained")
    small = spawn_ready(hub, "small", CUDA11)
    assert small["node"] == "node-a"
    since = hub.log_offset()  # a whole reconciliation round and a whole poll of each since
    wait_rounds(hub, since)
    wait_polls(hub, since, running)
    for user, st in running.items():
        assert hub.server(user)["ready"] and hub.server(user)["state"] == st
        check_inside([node_c], hub, user, st)

    write_nodes([])  # removed: still no new servers there, the running ones still managed
    spawn_refused(hub, "big2", big, "40 GiB")
    since = hub.log_offset()
    wait_rounds(hub, since)
    wait_polls(hub, since, running)
    for user, st in running.items():
        assert hub.server(user)["ready"] and hub.server(user)["state"] == st
    stop(hub, [node_c], *running)
