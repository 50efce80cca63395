"""Queue load benchmark: the hub's REST API while spawns wait in the GPU queue (issue 12).

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python benchmarks/queue_load.py                # readable table
    .venv/bin/python benchmarks/queue_load.py --json         # one JSON object

Target (issue 12): "Hub under load: 200 spawns queued, 50 servers running, culler cycling:
hub REST API p99 < 100 ms".

Set-up: the local test cluster's engines (``node-a``..``node-c``, started or found by
``cluster_up``), one node agent per node (declared mode, on this machine) and one real
JupyterHub with :class:`jupyterhub_gpu.hub.spawner.GPUDockerSpawner`:

- a declared inventory of exactly ``--running`` GPUs (50) of one model spread over the
  nodes (17 + 17 + 16), so that ``--running`` one-GPU servers fill the cluster;
- the stub single-user server of ``tests/integration/test_multinode.py`` (a few lines of
  ``http.server`` in the test image: the container, its DeviceRequest, labels and limits
  are real, the server is not, so 50 of them are cheap on a 2-core machine);
- the GPU queue on, as ``check_config`` sets it: ``max_queue_wait`` 1800 s,
  ``concurrent_spawn_limit`` 0, ``concurrent_start_limit`` 20, and
  ``slow_spawn_timeout`` 1 s (a queued spawn is answered 202 after a second);
- reconciliation every 5 s; the idle culler as a hub-managed service judging every 5 s
  (its agents polled every 2 s) with a 24 h idle timeout, so it judges every server and
  stops none; its deadlines file feeds the queue's estimates.

Steps: create ``--running`` + ``--queued`` users in one API call; start ``--running``
servers (1 GPU each) and wait until all are ready; POST ``--queued`` more spawns (at most
``--concurrency`` at once), each of which must be answered 202; wait until the hub's log
says each one joined the GPU queue ("<user>/ waits in the GPU queue (N waiting)") and the
user list shows them pending; pause ``--settle`` s; then for ``--duration`` s start
``--rate`` operations per second on a fixed schedule (an open loop: a slow answer does not
delay the next request) from one client, each a hub REST API call through the proxy, read
mostly: a user's model, a page of users, a page of active users, the API's root, the
token's own identity, and now and then a token created and deleted. Every request's time is
kept (from the call to the end of the answer, errors included). Afterwards the pending
spawns are cancelled (``DELETE .../server``), then the running servers stopped, then the
hub, the agents and every container of this hub are removed (also after an error or
Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import importlib  # noqa: E402

import docker  # noqa: E402
import httpx  # noqa: E402
import yaml  # noqa: E402

from tests.support.agent import AgentProcess  # noqa: E402
from tests.support.cluster import (  # noqa: E402
    TEST_IMAGE,
    Engine,
    cluster_up,
    engines,
    remove_hub_containers,
)
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub  # noqa: E402
from tests.support.procstat import machine_busy_cpu_s, process_cpu_s  # noqa: E402

# Shared with the integration tests, so the benchmark runs what they run: the stub
# server, the culler's minimal role, the declared-inventory helper and the demo
# catalog. Imported at run time: those test modules are outside mypy's strict check.
_conftest = importlib.import_module("tests.conftest")
_multinode = importlib.import_module("tests.integration.test_multinode")
_culler = importlib.import_module("tests.integration.test_culler")
CATALOG: Path = _conftest.CATALOG
gpu_inventory: Callable[..., dict[str, Any]] = _conftest.gpu_inventory
STUB_SERVER: str = _multinode.STUB_SERVER
CULLER_SCOPES: list[str] = _culler.CULLER_SCOPES


TARGET_P99_MS = 100.0
# one GPU model everywhere: every waiting spawn waits for the same GPUs
MODEL = ("NVIDIA A100-SXM4-80GB", 81920, "8.0")
DRIVER = ("550.54.15", "12.4")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "cpu": 0.5, "mem_gib": 1}
MAX_QUEUE_WAIT_S = 1800
CONCURRENT_START_LIMIT = 20
RECONCILE_S = 5.0
CULLER_INTERVAL_S = 5.0
CULLER_GPU_POLL_S = 2.0
CULLER_TIMEOUT_S = 24 * 3600.0  # judges every server, stops none
SERVER_TIMEOUT_S = 180  # start_timeout and http_timeout: 50 containers on a loaded machine
REQUEST_TIMEOUT_S = 30.0
PAGE = 200  # JupyterHub's api_page_max_limit
#: operation -> share of the load (one ``token`` operation is two requests)
MIX = {
    "user": 0.45,  # GET /users/{name}, any of the users (running or waiting)
    "users_page": 0.15,  # GET /users?limit=50&offset=k
    "users_active": 0.10,  # GET /users?state=active&limit=50&offset=k
    "root": 0.10,  # GET /hub/api/ (version; no token checked)
    "whoami": 0.15,  # GET /hub/api/user (the caller's own model)
    "token": 0.05,  # POST /users/{name}/tokens, then DELETE /users/{name}/tokens/{id}
}
JOINED = re.compile(r"(\S+)/ waits in the GPU queue \((\d+) waiting\)")
CULL_ROUND = re.compile(r"GPUIdleCuller\] Cull round \d+ done: (\d+) server")
# JupyterHub's access log: "200 GET /hub/api/users/qb001 (tester@127.0.0.1) 3.45ms"; the
# benchmark's client is the service "tester" (or nobody, for the API's root)
ACCESS = re.compile(r"\] (\d{3}) (GET|POST|DELETE) /hub/api/\S* \((?:tester)?@[^)]*\) ([\d.]+)ms$")
LOG_LEVEL = re.compile(r"^\[([DIWEC]) ")


def progress(msg: str) -> None:
    print(f"[queue-bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- set-up


def split_gpus(total: int, nodes: int) -> list[int]:
    """``total`` GPUs over ``nodes`` nodes, as evenly as can be (50 / 3: 17, 17, 16)."""
    base, extra = divmod(total, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


def inventory(nodes: Sequence[Engine], total: int, run_id: str) -> list[dict[str, Any]]:
    return [
        gpu_inventory(e.name, f"{run_id[:6]}{i:02d}", [MODEL] * n, *DRIVER)
        for i, (e, n) in enumerate(zip(nodes, split_gpus(total, len(nodes)), strict=True))
    ]


def find_engines(n: int, start_cluster: bool) -> list[Engine]:
    """The cluster's first ``n`` engines: ``cluster_up`` (idempotent, as the tests and
    benchmarks/spawn.py do), or only checked when ``start_cluster`` is False."""
    if start_cluster:
        return cluster_up(n)
    found = engines(n)
    for e in found:
        try:
            with e.client() as client:
                client.ping()
                client.images.get(TEST_IMAGE)
        except docker.errors.ImageNotFound:
            raise SystemExit(f"{e.name} has no {TEST_IMAGE}: run scripts/cluster.sh up") from None
        except Exception as exc:
            raise SystemExit(
                f"{e.name} does not answer ({exc}): run scripts/cluster.sh up {n}"
            ) from None
    return found


def culler_service(work: Path, agents: dict[str, AgentProcess], deadlines: Path) -> str:
    """Hub config adding the idle culler as a managed service with its minimal role
    (tests/integration/test_culler.py's ``culler_extra``, without its test settings)."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "culler_config.py"
    config.write_text(
        f"""
c.GPUIdleCuller.agent_urls = { ({n: a.url for n, a in agents.items()})!r}
c.GPUIdleCuller.timeout = {CULLER_TIMEOUT_S}
c.GPUIdleCuller.gpu_timeout = {CULLER_TIMEOUT_S}
c.GPUIdleCuller.interval = {CULLER_INTERVAL_S}
c.GPUIdleCuller.gpu_poll_interval = {CULLER_GPU_POLL_S}
c.GPUIdleCuller.notes_file = {str(work / "cull-notes.json")!r}
c.GPUIdleCuller.state_file = {str(work / "culler-state.json")!r}
c.GPUIdleCuller.deadlines_file = {str(deadlines)!r}
"""
    )
    token = next(iter(agents.values())).token
    start = [
        "-m",
        "jupyterhub_gpu.services.culler",
        f"--config={config}",
        "--log-level=DEBUG",  # its "Cull round N done" lines, counted afterwards
    ]
    return f"""
import sys
c.JupyterHub.services.append({{
    "name": "gpu-culler",
    "command": [sys.executable, *{start!r}, "--GPUIdleCuller.proxy_url=" + c.JupyterHub.bind_url],
    "environment": {{"JUPYTERHUB_GPU_AGENT_TOKEN": {token!r}}},
}})
c.JupyterHub.load_roles.append(
    {{"name": "gpu-culler", "scopes": {CULLER_SCOPES!r}, "services": ["gpu-culler"]}}
)
"""


def make_hub(
    workdir: Path,
    nodes: Sequence[Engine],
    agents: dict[str, AgentProcess],
    gpus: int,
    run_id: str,
    args: argparse.Namespace,
) -> Hub:
    hub = Hub(workdir / "hub", hub_id=f"qbench{run_id}")
    hub.workdir.mkdir(parents=True, exist_ok=True)
    inv = hub.workdir / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": inventory(nodes, gpus, run_id)}))
    deadlines = hub.workdir / "cull-deadlines.json"
    node_cfg = [e.node_config(agent_url=agents[e.name].url) for e in nodes]
    token = next(iter(agents.values())).token
    resources = {
        "max_gpus": 8,
        "max_cpu": 2,
        "max_mem_gib": 4,
        "default_cpu": 1,
        "default_mem_gib": 1,
    }
    stub = ["python3", "-c", STUB_SERVER]
    hub.extra_config = (
        f"""
c.JupyterHub.log_level = {args.hub_log_level!r}
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = {node_cfg!r}
c.GPUCluster.agent_token = {token!r}
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = {str(inv)!r}
c.GPUDockerSpawner.image = {TEST_IMAGE!r}
c.GPUCluster.catalog_file = {str(CATALOG)!r}
c.GPUDockerSpawner.resource_defaults = {resources!r}
c.GPUDockerSpawner.home_template = ""
c.GPUCluster.hub_id = {hub.hub_id!r}
c.GPUDockerSpawner.prefix = {f"jhbench-{run_id}q"!r}
c.GPUDockerSpawner.cmd = {stub!r}
c.GPUCluster.reconcile_interval = {RECONCILE_S}
c.Spawner.start_timeout = {SERVER_TIMEOUT_S}
c.Spawner.http_timeout = {SERVER_TIMEOUT_S}
# the GPU queue on, with what check_config does when it is
c.GPUDockerSpawner.max_queue_wait = {MAX_QUEUE_WAIT_S}
c.JupyterHub.concurrent_spawn_limit = 0
c.GPUCluster.concurrent_start_limit = {CONCURRENT_START_LIMIT}
# a queued spawn is answered 202 after a second instead of ten
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 1}}
c.GPUCluster.cull_deadlines_file = {str(deadlines)!r}
"""
        + TOKEN_ROLE_CONFIG
        + culler_service(hub.workdir / "culler", agents, deadlines)
    )
    return hub


def start_agents(
    nodes: Sequence[Engine], gpus: int, run_id: str, work: Path
) -> dict[str, AgentProcess]:
    """One declared-mode agent per node, serving the hub's inventory, all with one secret."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "agents-inventory.yaml"
    path.write_text(yaml.safe_dump({"nodes": inventory(nodes, gpus, run_id)}))
    secret = secrets.token_hex(16)
    started: dict[str, AgentProcess] = {}
    try:
        for e in nodes:
            agent = AgentProcess(e.name, path, work / f"agent-{e.name}.log", token=secret)
            started[e.name] = agent.start()
    except Exception:
        for agent in started.values():
            agent.stop()
        raise
    return started


# ---------------------------------------------------------------------- hub calls


class BenchFailed(RuntimeError):
    pass


async def active_servers(client: httpx.AsyncClient, hub: Hub) -> dict[str, dict[str, Any]]:
    """user -> their default server's model, for every user with an active one (pending
    or ready), all pages."""
    out: dict[str, dict[str, Any]] = {}
    offset = 0
    while True:
        r = await hub.aapi(client, "GET", f"/users?state=active&limit={PAGE}&offset={offset}")
        r.raise_for_status()
        page = r.json()
        for user in page:
            server = (user.get("servers") or {}).get("")
            if server:
                out[user["name"]] = server
        if len(page) < PAGE:
            return out
        offset += len(page)


async def bounded(limit: int, coros: Sequence[Awaitable[Any]]) -> list[Any]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> Any:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def spawn(client: httpx.AsyncClient, hub: Hub, user: str) -> int:
    path = f"/users/{quote(user, safe='')}/server"
    try:
        r = await hub.aapi(client, "POST", path, content=json.dumps(OPTIONS))
    except httpx.HTTPError as e:
        progress(f"spawn of {user}: {type(e).__name__}: {e}")
        return 0
    if r.status_code not in (201, 202):
        progress(f"spawn of {user}: HTTP {r.status_code} {r.text[:300]}")
    return r.status_code


async def stop(client: httpx.AsyncClient, hub: Hub, user: str) -> int:
    try:
        r = await hub.aapi(client, "DELETE", f"/users/{quote(user, safe='')}/server")
    except httpx.HTTPError:
        return 0
    return r.status_code


async def wait_ready(
    client: httpx.AsyncClient, hub: Hub, users: Sequence[str], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        now = await active_servers(client, hub)
        failed = [u for u in users if u not in now]
        if failed:
            raise BenchFailed(f"{len(failed)} server(s) failed to start: {failed[:10]}")
        ready = sum(1 for u in users if now[u].get("ready"))
        if ready == len(users):
            return
        if ready != last:
            progress(f"{ready}/{len(users)} servers ready")
            last = ready
        if time.monotonic() > deadline:
            raise BenchFailed(f"only {ready} of {len(users)} servers ready after {timeout:.0f} s")
        await asyncio.sleep(1.0)


def log_lines(hub: Hub, start: int, end: int | None = None) -> list[str]:
    """Whole lines of the hub's log (its managed services' too) between two offsets."""
    with hub.log_path.open("rb") as f:
        f.seek(start)
        data = f.read() if end is None else f.read(max(end - start, 0))
    data = data[: data.rfind(b"\n") + 1]
    return data.decode(errors="replace").splitlines()


@dataclass
class QueueState:
    joined: set[str] = field(default_factory=set)  # users whose spawn joined, per the log
    max_waiting: int = 0  # the largest "(N waiting)" logged
    pending: int = 0  # of the queued users: pending spawns in the user list
    ready: int = 0  # of the running users: ready servers in the user list


def queue_state(
    hub: Hub,
    after: int,
    now: dict[str, dict[str, Any]],
    queued: Sequence[str],
    running: Sequence[str],
) -> QueueState:
    """The queue as the hub's log (past offset ``after``) and the user list ``now`` show it."""
    state = QueueState()
    for line in log_lines(hub, after):
        m = JOINED.search(line)
        if m:
            state.joined.add(m.group(1))
            state.max_waiting = max(state.max_waiting, int(m.group(2)))
    state.pending = sum(
        1 for u in queued if u in now and now[u].get("pending") == "spawn" and not now[u]["ready"]
    )
    state.ready = sum(1 for u in running if u in now and now[u].get("ready"))
    return state


async def wait_queued(
    client: httpx.AsyncClient,
    hub: Hub,
    after: int,
    queued: Sequence[str],
    running: Sequence[str],
    timeout: float,
) -> QueueState:
    """Wait until every queued user's spawn joined the GPU queue (the hub's log) and is
    pending (the user list); fail at once if one ended or a running server went."""
    deadline = time.monotonic() + timeout
    while True:
        now = await active_servers(client, hub)
        state = queue_state(hub, after, now, queued, running)
        if state.ready < len(running):
            raise BenchFailed(f"only {state.ready} of {len(running)} servers still ready")
        if len(state.joined & set(queued)) == len(queued) and state.pending == len(queued):
            return state
        gone = [u for u in queued if u not in now]
        if gone:
            raise BenchFailed(f"{len(gone)} queued spawn(s) ended: {gone[:10]}")
        if time.monotonic() > deadline:
            raise BenchFailed(
                f"after {timeout:.0f} s: {len(state.joined & set(queued))} of {len(queued)} "
                f"joined the queue per the log, {state.pending} pending"
            )
        await asyncio.sleep(1.0)


# ---------------------------------------------------------------------- the load


@dataclass
class Sample:
    kind: str
    ms: float
    status: int  # 0: no answer (timeout, connection error)
    ok: bool


Op = Callable[[], Coroutine[Any, Any, list[Sample]]]


async def timed(
    client: httpx.AsyncClient, hub: Hub, kind: str, method: str, path: str, want: int, **kw: Any
) -> tuple[Sample, httpx.Response | None]:
    t0 = time.perf_counter()
    try:
        r: httpx.Response | None = await hub.aapi(client, method, path, **kw)
    except httpx.HTTPError:
        r = None
    ms = (time.perf_counter() - t0) * 1000
    status = r.status_code if r is not None else 0
    return Sample(kind, ms, status, status == want), r


def make_op(client: httpx.AsyncClient, hub: Hub, users: Sequence[str], rng: random.Random) -> Op:
    """One operation of :data:`MIX`, drawn (with its user and page) from ``rng`` now."""
    kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
    user = quote(rng.choice(users), safe="")
    offset = 50 * rng.randrange(max(math.ceil(len(users) / 50), 1))

    async def get(path: str) -> list[Sample]:
        return [(await timed(client, hub, kind, "GET", path, 200))[0]]

    async def token() -> list[Sample]:
        body = {"expires_in": 600, "note": "queue benchmark"}
        made, r = await timed(
            client, hub, "token_create", "POST", f"/users/{user}/tokens", 201, json=body
        )
        if not made.ok or r is None:
            return [made]
        token_id = r.json()["id"]
        gone, _ = await timed(
            client, hub, "token_delete", "DELETE", f"/users/{user}/tokens/{token_id}", 204
        )
        return [made, gone]

    paths = {
        "user": f"/users/{user}",
        "users_page": f"/users?limit=50&offset={offset}",
        "users_active": f"/users?state=active&limit=50&offset={offset}",
        "root": "/",
        "whoami": "/user",
    }
    if kind == "token":
        return token
    return lambda: get(paths[kind])


@dataclass
class Load:
    samples: list[Sample]
    lag_ms: list[float]  # how late each operation started against its schedule
    wall_s: float


async def run_load(
    client: httpx.AsyncClient,
    hub: Hub,
    users: Sequence[str],
    rate: float,
    duration: float,
    seed: int,
) -> Load:
    """``rate`` operations a second for ``duration`` s on a fixed schedule (open loop)."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    count = max(int(duration * rate), 1)
    tasks: list[asyncio.Task[list[Sample]]] = []
    lags: list[float] = []
    t0 = loop.time()
    for i in range(count):
        due = t0 + i / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(loop.time() - due, 0.0) * 1000)
        tasks.append(asyncio.create_task(make_op(client, hub, users, rng)()))
    results = await asyncio.gather(*tasks)
    return Load([s for r in results for s in r], lags, loop.time() - t0)


# ---------------------------------------------------------------------- measuring


def pct(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); 0.0 for no values."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(max(math.ceil(p / 100 * len(s)) - 1, 0), len(s) - 1)]


def _r(x: float) -> float:
    return round(x, 2)


def stats(ms: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": _r(pct(ms, 50)),
        "p95_ms": _r(pct(ms, 95)),
        "p99_ms": _r(pct(ms, 99)),
        "max_ms": _r(max(ms, default=0.0)),
        "mean_ms": _r(sum(ms) / len(ms)) if ms else 0.0,
    }


@dataclass
class Window:
    """What the hub, its culler and the machine did while the load ran."""

    hub_cpu_s: float = 0.0
    machine_cpu_s: float = 0.0
    hub_side_ms: list[float] = field(default_factory=list)  # request times the hub logged
    culler_rounds: int = 0
    culler_judged: list[int] = field(default_factory=list)
    warnings: int = 0
    errors: int = 0


def read_window(hub: Hub, start: int, end: int) -> Window:
    w = Window()
    for line in log_lines(hub, start, end):
        m = ACCESS.search(line)
        if m:
            w.hub_side_ms.append(float(m.group(3)))
        m = CULL_ROUND.search(line)
        if m:
            w.culler_rounds += 1
            w.culler_judged.append(int(m.group(1)))
        level = LOG_LEVEL.match(line)
        if level and level.group(1) == "W":
            w.warnings += 1
        elif level and level.group(1) in "EC":
            w.errors += 1
    return w


@dataclass
class Run:
    setup: dict[str, Any] = field(default_factory=dict)
    queued: QueueState | None = None
    queued_end: QueueState | None = None
    load: Load | None = None
    window: Window | None = None
    cleanup: dict[str, Any] = field(default_factory=dict)


async def measure(hub: Hub, args: argparse.Namespace, run: Run) -> None:
    running = [f"qb{i:03d}" for i in range(args.running)]
    queued = [f"qb{i:03d}" for i in range(args.running, args.running + args.queued)]
    users = running + queued
    limits = httpx.Limits(max_connections=args.concurrency + 50, max_keepalive_connections=100)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        try:
            t = time.monotonic()
            r = await hub.aapi(client, "POST", "/users", json={"usernames": users})
            if r.status_code != 201:
                raise BenchFailed(f"creating {len(users)} users: HTTP {r.status_code} {r.text}")
            run.setup["create_users_s"] = _r(time.monotonic() - t)

            progress(f"starting {len(running)} servers (1 GPU each)")
            t = time.monotonic()
            codes = await bounded(args.concurrency, [spawn(client, hub, u) for u in running])
            run.setup["running_spawn_status"] = dict(Counter(str(c) for c in codes))
            if any(c not in (201, 202) for c in codes):
                raise BenchFailed(f"spawns refused: {run.setup['running_spawn_status']}")
            await wait_ready(client, hub, running, timeout=120 + 3 * len(running))
            run.setup["running_ready_s"] = _r(time.monotonic() - t)
            progress(f"{len(running)} servers ready in {run.setup['running_ready_s']} s")

            progress(f"queueing {len(queued)} spawns ({args.concurrency} at once)")
            after = hub.log_offset()
            t = time.monotonic()
            codes = await bounded(args.concurrency, [spawn(client, hub, u) for u in queued])
            run.setup["queued_post_s"] = _r(time.monotonic() - t)
            run.setup["queued_spawn_status"] = dict(Counter(str(c) for c in codes))
            if any(c != 202 for c in codes):
                raise BenchFailed(
                    f"queued spawns not all answered 202: {run.setup['queued_spawn_status']}"
                )
            run.queued = await wait_queued(
                client, hub, after, queued, running, timeout=60 + 0.5 * len(queued)
            )
            run.setup["queued_confirmed_s"] = _r(time.monotonic() - t)
            progress(
                f"{run.queued.pending} spawns waiting in the GPU queue (log: "
                f"{len(run.queued.joined)} joined, at most {run.queued.max_waiting} waiting), "
                f"{run.queued.ready} servers running; settling {args.settle:g} s"
            )
            await asyncio.sleep(args.settle)

            progress(f"load: {args.rate:g} operations/s for {args.duration:g} s")
            assert hub.proc is not None
            start, hub0, mach0 = hub.log_offset(), process_cpu_s(hub.proc.pid), machine_busy_cpu()
            run.load = await run_load(client, hub, users, args.rate, args.duration, args.seed)
            hub_cpu = process_cpu_s(hub.proc.pid) - hub0
            mach_cpu = machine_busy_cpu() - mach0
            await asyncio.sleep(0.5)  # the access log's last lines
            run.window = read_window(hub, start, hub.log_offset())
            run.window.hub_cpu_s, run.window.machine_cpu_s = hub_cpu, mach_cpu
            now = await active_servers(client, hub)
            run.queued_end = queue_state(hub, after, now, queued, running)
            progress(
                f"after the load: {run.queued_end.pending} waiting, {run.queued_end.ready} running"
            )
        finally:
            await cleanup(client, hub, running, queued, args.concurrency, run)


def machine_busy_cpu() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return machine_busy_cpu_s()
    return 0.0


async def cleanup(
    client: httpx.AsyncClient,
    hub: Hub,
    running: Sequence[str],
    queued: Sequence[str],
    concurrency: int,
    run: Run,
) -> None:
    """Cancel the waiting spawns first (so no GPU goes to them), then stop the servers.
    Best effort: whatever is left goes with the hub's containers afterwards."""
    if hub.proc is None or hub.proc.poll() is not None:
        return
    try:
        progress("cleaning up: cancelling the waiting spawns")
        t = time.monotonic()
        now = await active_servers(client, hub)
        waiting = [u for u in queued if u in now]
        codes = await bounded(concurrency, [stop(client, hub, u) for u in waiting])
        run.cleanup["cancel_status"] = dict(Counter(str(c) for c in codes))
        await wait_gone(client, hub, waiting, 120)
        run.cleanup["cancel_s"] = _r(time.monotonic() - t)
        progress("cleaning up: stopping the running servers")
        t = time.monotonic()
        now = await active_servers(client, hub)
        up = [u for u in (*running, *queued) if u in now]
        codes = await bounded(concurrency, [stop(client, hub, u) for u in up])
        run.cleanup["stop_status"] = dict(Counter(str(c) for c in codes))
        await wait_gone(client, hub, up, 180)
        run.cleanup["stop_s"] = _r(time.monotonic() - t)
    except Exception as e:  # the containers are removed by label afterwards anyway
        run.cleanup["error"] = f"{type(e).__name__}: {e}"
        progress(f"cleanup through the API incomplete ({run.cleanup['error']})")


async def wait_gone(
    client: httpx.AsyncClient, hub: Hub, users: Sequence[str], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        now = await active_servers(client, hub)
        left = [u for u in users if u in now]
        if not left:
            return
        if time.monotonic() > deadline:
            raise BenchFailed(f"{len(left)} server(s) still active after {timeout:.0f} s")
        await asyncio.sleep(1.0)


# ---------------------------------------------------------------------- report


def machine_info() -> dict[str, Any]:
    import jupyterhub

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "loadavg_1m": _r(os.getloadavg()[0]),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jupyterhub": jupyterhub.__version__,
    }


def summarize(
    run: Run, args: argparse.Namespace, nodes: Sequence[Engine], machine: dict[str, Any]
) -> dict[str, Any]:
    assert run.load is not None and run.window is not None
    assert run.queued is not None and run.queued_end is not None
    samples, w = run.load.samples, run.window
    all_ms = [s.ms for s in samples]
    errors = [s for s in samples if not s.ok]
    overall = stats(all_ms)
    reads = [s.ms for s in samples if not s.kind.startswith("token_")]
    kinds = sorted({s.kind for s in samples})
    out: dict[str, Any] = {
        "api_p50_ms": overall["p50_ms"],
        "api_p95_ms": overall["p95_ms"],
        "api_p99_ms": overall["p99_ms"],
        "api_max_ms": overall["max_ms"],
        "api_mean_ms": overall["mean_ms"],
        "read_p99_ms": stats(reads)["p99_ms"],
        "requests": len(samples),
        "errors": len(errors),
        "error_status": dict(Counter(str(s.status) for s in errors)),
        "queued": run.queued.pending,
        "queued_end": run.queued_end.pending,
        "queue_joined_logged": len(run.queued.joined),
        "queue_max_waiting_logged": run.queued.max_waiting,
        "running": run.queued.ready,
        "running_end": run.queued_end.ready,
        "duration_s": _r(run.load.wall_s),
        "operations": len(run.load.lag_ms),
        "rate_per_s": args.rate,
        "send_lag_p99_ms": _r(pct(run.load.lag_ms, 99)),
        "send_lag_max_ms": _r(max(run.load.lag_ms, default=0.0)),
        "target_api_p99_ms": TARGET_P99_MS,
        "target_met": overall["p99_ms"] < TARGET_P99_MS and not errors,
        "by_kind": {
            k: {
                "requests": sum(1 for s in samples if s.kind == k),
                "errors": sum(1 for s in samples if s.kind == k and not s.ok),
                **stats([s.ms for s in samples if s.kind == k]),
            }
            for k in kinds
        },
        "hub_side": {"requests": len(w.hub_side_ms), **stats(w.hub_side_ms)},
        "hub_cpu_pct": _r(100 * w.hub_cpu_s / run.load.wall_s),
        "machine_busy_pct": _r(100 * w.machine_cpu_s / run.load.wall_s / machine["nproc"]),
        "culler_rounds": w.culler_rounds,
        "culler_servers_judged": w.culler_judged,
        "hub_log_warnings": w.warnings,
        "hub_log_errors": w.errors,
        "setup": run.setup,
        "cleanup": run.cleanup,
        "config": {
            "nodes": [e.name for e in nodes],
            "gpus_per_node": split_gpus(args.running, len(nodes)),
            "gpu_model": MODEL[0],
            "spawn_options": OPTIONS,
            "server": "stub (tests/integration/test_multinode.py STUB_SERVER) in " + TEST_IMAGE,
            "max_queue_wait_s": MAX_QUEUE_WAIT_S,
            "concurrent_spawn_limit": 0,
            "concurrent_start_limit": CONCURRENT_START_LIMIT,
            "slow_spawn_timeout_s": 1,
            "reconcile_interval_s": RECONCILE_S,
            "culler_interval_s": CULLER_INTERVAL_S,
            "culler_gpu_poll_s": CULLER_GPU_POLL_S,
            "culler_timeout_s": CULLER_TIMEOUT_S,
            "mix": MIX,
            "concurrency": args.concurrency,
            "settle_s": args.settle,
            "seed": args.seed,
            "hub_log_level": args.hub_log_level,
            "path": "client -> configurable-http-proxy -> hub (127.0.0.1)",
        },
        "machine": machine,
    }
    return out


def table(result: dict[str, Any]) -> str:
    cfg, m = result["config"], result["machine"]
    lines = [
        f"Hub REST API under load: {result['running']} servers running, {result['queued']} "
        f"spawns waiting in the GPU queue, culler every {cfg['culler_interval_s']:g} s "
        f"({result['culler_rounds']} rounds)",
        f"{result['operations']} operations at {result['rate_per_s']:g}/s over "
        f"{result['duration_s']:.1f} s, {result['requests']} requests; nodes "
        f"{', '.join(cfg['nodes'])}; nproc {m['nproc']}, load {m['loadavg_1m']} -> "
        f"{m.get('loadavg_1m_end', '?')}",
        "",
        f"{'ms':14s} {'n':>6s} {'p50':>8s} {'p95':>8s} {'p99':>8s} {'max':>8s} {'errors':>7s}",
        f"{'all':14s} {result['requests']:6d} {result['api_p50_ms']:8.1f} "
        f"{result['api_p95_ms']:8.1f} {result['api_p99_ms']:8.1f} {result['api_max_ms']:8.1f} "
        f"{result['errors']:7d}",
    ]
    for kind, s in result["by_kind"].items():
        lines.append(
            f"{kind:14s} {s['requests']:6d} {s['p50_ms']:8.1f} {s['p95_ms']:8.1f} "
            f"{s['p99_ms']:8.1f} {s['max_ms']:8.1f} {s['errors']:7d}"
        )
    hs = result["hub_side"]
    lines.append(
        f"{'hub-side (log)':14s} {hs['requests']:6d} {hs['p50_ms']:8.1f} {hs['p95_ms']:8.1f} "
        f"{hs['p99_ms']:8.1f} {hs['max_ms']:8.1f}"
    )
    lines.append("")
    verdict = "met" if result["target_met"] else "NOT met"
    lines.append(
        f"target api_p99_ms < {result['target_api_p99_ms']:g} with no error: {verdict} "
        f"({result['api_p99_ms']:.1f} ms, {result['errors']} errors)"
    )
    lines.append(
        f"hub CPU {result['hub_cpu_pct']:.0f}% of one core, machine busy "
        f"{result['machine_busy_pct']:.0f}% of {m['nproc']} cores; send lag max "
        f"{result['send_lag_max_ms']:.1f} ms; hub log: {result['hub_log_warnings']} warnings, "
        f"{result['hub_log_errors']} errors"
    )
    lines.append(
        f"queue: {result['queued']} waiting before, {result['queued_end']} after (log: "
        f"{result['queue_joined_logged']} joined, at most {result['queue_max_waiting_logged']} "
        f"waiting); running {result['running']} before, {result['running_end']} after"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------- main


# --smoke: one node, 2 servers running, 3 spawns queued, 12 s of load at 5 operations/s
# (long enough for the culler, every 5 s, to judge during the load)
SMOKE: dict[str, Any] = {
    "nodes": 1,
    "running": 2,
    "queued": 3,
    "concurrency": 5,
    "settle": 1.0,
    "duration": 12.0,
    "rate": 5.0,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    assert __doc__ is not None
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (60)")
    p.add_argument("--rate", type=float, default=20.0, help="operations started a second (20)")
    p.add_argument(
        "--running", type=int, default=50, help="GPUs in the cluster = servers running (50)"
    )
    p.add_argument("--queued", type=int, default=200, help="spawns waiting in the queue (200)")
    p.add_argument("--nodes", type=int, default=3, choices=(1, 2, 3), help="engines used (3)")
    p.add_argument("--concurrency", type=int, default=50, help="spawn and stop calls at once (50)")
    p.add_argument(
        "--settle", type=float, default=5.0, help="pause between queueing and load, s (5)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the request mix (0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--keep", action="store_true", help="keep the workdir (hub, culler and agent logs)"
    )
    p.add_argument("--hub-log-level", default="INFO", help="JupyterHub's log level (INFO)")
    p.add_argument(
        "--no-cluster-up",
        action="store_true",
        help="do not run scripts/cluster.sh up (cluster_up); only check that the engines "
        "answer and have the test image",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (under a minute; the same keys): "
        + " ".join(f"--{k} {v}" for k, v in SMOKE.items()),
    )
    args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        p.set_defaults(**SMOKE)
        args = p.parse_args(argv)
    if args.running < args.nodes or args.queued < 1:
        p.error("--running must be >= --nodes and --queued >= 1")
    if args.duration <= 0 or args.rate <= 0 or args.concurrency < 1 or args.settle < 0:
        p.error("--duration, --rate, --concurrency must be > 0, --settle >= 0")
    return args


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    nodes = find_engines(args.nodes, start_cluster=not args.no_cluster_up)
    run_id = secrets.token_hex(4)
    workdir = Path(tempfile.mkdtemp(prefix="jhgpu-bench-queue-"))
    agents: dict[str, AgentProcess] = {}
    hub: Hub | None = None
    run = Run()
    ok = False
    try:
        agents = start_agents(nodes, args.running, run_id, workdir / "agents")
        hub = make_hub(workdir, nodes, agents, args.running, run_id, args)
        hub.start(timeout=90)
        progress(f"hub on {hub.url} (log {hub.log_path})")
        machine = machine_info()
        if machine["loadavg_1m"] > machine["nproc"]:
            progress(
                f"warning: load average {machine['loadavg_1m']} > {machine['nproc']} cores; "
                "expect noisy numbers"
            )
        asyncio.run(measure(hub, args, run))
        machine["loadavg_1m_end"] = _r(os.getloadavg()[0])
        result = summarize(run, args, nodes, machine)
        ok = True
    except Exception:
        if hub is not None:
            print(f"\n===== hub log tail =====\n{hub.log_tail(60)}", file=sys.stderr)
        raise
    finally:
        if hub is not None:
            hub.stop()
            for e in nodes:
                try:
                    remove_hub_containers(e, hub.hub_id)
                except Exception as exc:  # one dead engine must not leak the others'
                    progress(f"could not clean {e.name}: {exc}")
        for agent in agents.values():
            with contextlib.suppress(Exception):
                agent.stop()
        if args.keep or not ok:
            progress(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("[queue-bench] interrupted; hub stopped and containers removed", file=sys.stderr)
        sys.exit(130)
