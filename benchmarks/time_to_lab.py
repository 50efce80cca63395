"""Time to JupyterLab with a real framework image: start to server ready, as the hub's API
sees it, on the test cluster, with the real PyTorch image served by the test registry.

Hand-run (pulls of a multi-GB image; NOT part of CI), from the repository root, as root,
with the cluster up (``scripts/cluster.sh up 3``) and the image pushed
(``benchmarks/real_images.py``), under the cluster lock::

    flock /tmp/jhgpu-cluster.lock .venv/bin/python benchmarks/time_to_lab.py --json
    # scaled down, one scenario at a time (each run merges into --out):
    flock /tmp/jhgpu-cluster.lock .venv/bin/python benchmarks/time_to_lab.py \\
        --scenarios local,cold --local-spawns 3 --cold-pulls 1 --out ttl.json --json
    flock /tmp/jhgpu-cluster.lock .venv/bin/python benchmarks/time_to_lab.py \\
        --scenarios prepull --users 6 --minutes 2 --out ttl.json --json

What is timed: from ``POST /hub/api/users/{name}/server`` until the hub's user model says
the server is ``ready`` (the progress event stream says when; one GET confirms), as in
benchmarks/spawn.py. The servers are the image's real ``jupyterhub-singleuser`` (JupyterLab
installed), each with 1 declared GPU, 1 CPU and 2 GiB.

Scenarios (each with its own real hub, GPUDockerSpawner, a one-entry catalog naming the
image at the registry, ``10.250.0.1:PORT/jupyterhub-gpu/pytorch:2.8.0-cuda12.8-pypi``):

- ``local`` (a): a hub with node-a only, which holds the image; ``--local-spawns`` spawns
  one after the other, each stopped before the next;
- ``cold`` (b): a hub with node-b only; before each of ``--cold-pulls`` spawns the image is
  removed from node-b, so the spawn pulls it from the registry;
- ``prepull`` (c): a hub with node-a, node-b and node-c, each declaring ``G`` identical
  GPUs (``G = ceil(0.4 * users)``: 8 for 20 users, so node-a fills first and the later
  users need node-b and node-c); only node-a holds the image at the start. The pre-puller
  is on (``configure_prepuller(images="all", disk_budget_gib=0, custom_disk_budget_gib=0,
  interval=15)``: it removes nothing); an untimed warm-up server starts its rounds, then
  (``--prepull-wait S``, default 600) the benchmark waits until the pre-puller reports the
  image on every node or S seconds pass, then stops the warm-up server. Then ``--users``
  users arrive at random times (fixed ``--seed``) spread over ``--minutes`` minutes; each
  keeps its server until the end;
- ``no_prepull`` (d): the same arrivals and nodes with the pre-puller off and image
  locality off (placement is told that no node holds any image: a benchmark-only patch of
  ``Cluster.images_on`` in the hub's config); the same warm-up server, with no wait.

- ``browser`` (e): one person in a real Chromium (Debian's, driven by Playwright through
  tests/support/browser.py) on a hub with node-a only, which holds the image before the
  run (pulled there first if it lacks it; the record says whether it had to): logs in
  through the hub's login form (the benchmark's hubs use JupyterHub's dummy authenticator),
  picks the entry by its display name in the spawn form, 1 GPU, clicks Start; timed from
  the click until JupyterLab's launcher is visible (and, as a part of it, until the
  browser's address is the server's ``/lab``). The spawn-pending page is not held for a
  screenshot (``hold_ready=False``): it goes on to the server as the hub's page does.
  Then, in a new notebook, ``import torch; print(torch.__version__, torch.version.cuda)``;
  the output must name the entry's framework and CUDA versions. Screenshots:
  artifacts/screenshots/ttl-browser-*.png.

For (c) and (d), each user's record says the node and whether that node held the image
when the spawn was asked (listed by the benchmark from the node's engine).

Event-loop stall, two ways, over each whole scenario from its hub's start (so the pulls
of (b), the pre-puller's pulls of (c) and the spawns' pulls of (d) are in it; (c) and (d)
also give it for the arrivals alone, ``..._arrivals_s``, and (c) for the pre-pull wait,
``..._prepull_wait_s``): ``loop_stall_max_s`` is measured INSIDE the hub: a task started
with the hub (``JupyterHub.start`` wrapped in the config) sleeps 50 ms at a time and
records how much later than asked it woke (what any request would have waited);
``api_latency_max_s`` is measured from OUTSIDE: ``GET /hub/api/`` straight to the hub's
own port, every 100 ms.

The machine has 2 cores shared with other work; ``loadavg`` is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402

from jupyterhub_gpu.core.catalog import CatalogEntry  # noqa: E402
from jupyterhub_gpu.edges.adminfiles import load_catalog  # noqa: E402
from tests.support.browser import (  # noqa: E402
    chromium_page,
    hub_login,
    run_in_new_notebook,
    screenshot,
    watch_spawn,
)
from tests.support.cluster import Engine, engines, remove_hub_containers  # noqa: E402
from tests.support.hub import Hub  # noqa: E402
from tests.support.real_registry import RealRegistry, real_registry  # noqa: E402

SLUG = "pytorch-2.8-cuda12.8-pypi"
BENCH_SLUG = "bench"
SCENARIOS = ("local", "cold", "prepull", "no_prepull", "browser", "versions")
OPTIONS = {"image": BENCH_SLUG, "gpu_count": 1, "cpu": 1, "mem_gib": 2}
SERVER_TIMEOUT_S = 1200  # start_timeout: a cold pull of a multi-GB image takes minutes
BROWSER_USER = "browser"
TORCH_CODE = "import torch; print(torch.__version__, torch.version.cuda)"
# scenario versions: what each framework says of itself, inside a server the hub spawned
VERSION_CODE = {
    "pytorch": TORCH_CODE,
    "tensorflow": (
        "import tensorflow as tf; "
        "print(tf.__version__, tf.sysconfig.get_build_info()['cuda_version'])"
    ),
}
GPU = {"model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "compute_capability": "8.0"}

LOOP_MONITOR = """
# benchmark only: how late a 50 ms sleeper wakes in the hub's event loop
import asyncio as _asyncio, time as _time
from jupyterhub.app import JupyterHub as _JH
_jh_start = _JH.start
_monitors = []
async def _monitored_start(self, *a, **kw):
    result = await _jh_start(self, *a, **kw)
    async def _monitor(path={path!r}, period=0.05):
        with open(path, "a") as f:
            while True:
                t0 = _time.monotonic()
                await _asyncio.sleep(period)
                lag = _time.monotonic() - t0 - period
                if lag >= 0.01:
                    f.write(f"{{_time.time():.3f}} {{lag:.4f}}\\n")
                    f.flush()
    _monitors.append(_asyncio.ensure_future(_monitor()))
    return result
_JH.start = _monitored_start
"""

NO_LOCALITY = """
# benchmark only (scenario no_prepull): placement sees no image on any node
from jupyterhub_gpu.hub.cluster import Cluster as _Cluster
async def _no_images(self, node):
    return frozenset()
_Cluster.images_on = _no_images
"""


def log(msg: str) -> None:
    print(f"[time-to-lab] {msg}", file=sys.stderr, flush=True)


def pct(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without samples."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return round(s[k], 2)


def docker(engine: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", engine.url, *args], check=False, text=True, capture_output=True
    )


def holds(engine: Engine, ref: str) -> bool:
    return docker(engine, "image", "inspect", "--format", "{{.Id}}", ref).returncode == 0


def remove_image(engine: Engine, ref: str) -> None:
    r = docker(engine, "image", "rm", ref)
    if r.returncode and holds(engine, ref):
        raise RuntimeError(f"could not remove {ref} from {engine.name}: {r.stderr.strip()}")


def ensure_pulled(engine: Engine, ref: str) -> float | None:
    """Pull ``ref`` on ``engine`` unless it holds it; the seconds it took (None: held)."""
    if holds(engine, ref):
        return None
    t0 = time.monotonic()
    r = docker(engine, "pull", "-q", ref)
    if r.returncode:
        raise RuntimeError(f"pull of {ref} on {engine.name} failed: {r.stderr.strip()}")
    return round(time.monotonic() - t0, 1)


# ---------------------------------------------------------------------- the hub
def inventory(nodes: Sequence[Engine], gpus: int) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "name": e.name,
                "driver_version": "570.133.20",
                "cuda_driver_version": "12.8",
                "gpus": [
                    {
                        "uuid": f"GPU-{n:02d}{i:06d}-0000-4000-8000-000000000000",
                        "index": i,
                        **GPU,
                    }
                    for i in range(gpus)
                ],
            }
            for n, e in enumerate(nodes)
        ]
    }


def catalog(entry: CatalogEntry, ref: str) -> dict[str, Any]:
    return {
        "images": [
            {
                "slug": BENCH_SLUG,
                "display_name": entry.display_name,
                "framework": entry.framework,
                "framework_version": entry.framework_version,
                "cuda_version": entry.cuda_version,
                "compute_capabilities": {"min": "7.5", "max": "12.0"},
                "image": ref,
                "description": f"{entry.slug} from the test registry",
            }
        ]
    }


def make_hub(
    workdir: Path,
    nodes: Sequence[Engine],
    gpus: int,
    entry: CatalogEntry,
    ref: str,
    prepull: bool = False,
    locality: bool = True,
) -> Hub:
    hub = Hub(workdir, hub_id="ttl" + secrets.token_hex(3))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "inventory.yaml").write_text(yaml.safe_dump(inventory(nodes, gpus)))
    (workdir / "catalog.yaml").write_text(yaml.safe_dump(catalog(entry, ref)))
    resources = {
        "max_gpus": 1,
        "max_cpu": 1,
        "max_mem_gib": 2,
        "default_cpu": 1,
        "default_mem_gib": 2,
    }
    config = f"""
c.JupyterHub.log_level = "INFO"
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = {[e.node_config() for e in nodes]!r}
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = {str(workdir / "inventory.yaml")!r}
c.GPUCluster.catalog_file = {str(workdir / "catalog.yaml")!r}
c.GPUDockerSpawner.resource_defaults = {resources!r}
c.GPUDockerSpawner.home_template = ""
c.GPUCluster.hub_id = {hub.hub_id!r}
c.GPUDockerSpawner.prefix = "jhgpu-" + {hub.hub_id!r}
c.GPUCluster.pull_timeout = {float(SERVER_TIMEOUT_S)!r}
c.GPUDockerSpawner.max_queue_wait = 0
c.DockerSpawner.remove = True
c.Spawner.environment = {{"HOME": "/tmp"}}
c.Spawner.start_timeout = {SERVER_TIMEOUT_S}
c.Spawner.http_timeout = 120
""" + LOOP_MONITOR.format(path=str(workdir / "loop-lag.txt"))
    if prepull:
        config += (
            "from jupyterhub_gpu.hub.extensions import configure_prepuller\n"
            "configure_prepuller(c, images='all', disk_budget_gib=0, custom_disk_budget_gib=0,"
            " interval=15)\n"
            # its scopes exist once configure_prepuller registered them
            "c.JupyterHub.load_roles = c.JupyterHub.load_roles + [{'name': 'bench-prepull', "
            "'scopes': ['custom:gpu-cluster:read', 'custom:gpu-cluster:admin'], "
            "'services': ['tester']}]\n"
        )
    if not locality:
        config += NO_LOCALITY
    hub.extra_config = config
    return hub


# ---------------------------------------------------------------------- spawns
class SpawnFailed(RuntimeError):
    pass


async def _wait_progress(hub: Hub, client: httpx.AsyncClient, user: str) -> None:
    url = f"{hub.url}/hub/api/users/{quote(user, safe='')}/server/progress"
    headers = {"Authorization": f"token {hub.token}"}
    async with client.stream("GET", url, headers=headers, timeout=None) as resp:
        if resp.status_code != 200:
            raise SpawnFailed(f"progress of {user}: HTTP {resp.status_code}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event.get("ready"):
                return
            if event.get("failed"):
                raise SpawnFailed(f"spawn of {user} failed: {event.get('message')}")
    raise SpawnFailed(f"progress stream of {user} ended without 'ready'")


async def _server(hub: Hub, client: httpx.AsyncClient, user: str) -> dict[str, Any] | None:
    r = await hub.aapi(client, "GET", f"/users/{quote(user, safe='')}")
    r.raise_for_status()
    server: dict[str, Any] | None = r.json()["servers"].get("")
    return server


async def spawn_once(hub: Hub, client: httpx.AsyncClient, user: str) -> tuple[float, str]:
    """Seconds from the spawn call until the user model says ready; the node."""
    await hub.aapi(client, "POST", f"/users/{quote(user, safe='')}")
    t0 = time.perf_counter()
    r = await hub.aapi(
        client, "POST", f"/users/{quote(user, safe='')}/server", content=json.dumps(OPTIONS)
    )
    if r.status_code == 202:
        await _wait_progress(hub, client, user)
    elif r.status_code != 201:
        raise SpawnFailed(f"spawn of {user}: HTTP {r.status_code} {r.text}")
    while True:
        server = await _server(hub, client, user)
        if server and server.get("ready"):
            break
        if not server or not server.get("pending"):
            raise SpawnFailed(f"server of {user} is gone: {server}")
        await asyncio.sleep(0.02)
    seconds = time.perf_counter() - t0
    return seconds, str((server.get("state") or {}).get("node", "?"))


async def stop(hub: Hub, client: httpx.AsyncClient, user: str) -> None:
    await hub.aapi(client, "DELETE", f"/users/{quote(user, safe='')}/server")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if await _server(hub, client, user) is None:
            return
        await asyncio.sleep(0.2)
    raise SpawnFailed(f"server of {user} did not stop in 120 s")


@dataclass
class Stalls:
    """``GET /hub/api/`` on the hub's own port every ``period`` s: response times."""

    url: str
    period: float = 0.1
    samples: list[tuple[float, float]] = field(default_factory=list)

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            while True:
                t0 = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    await client.get(self.url)
                took = time.perf_counter() - t0
                self.samples.append((time.time(), took))
                await asyncio.sleep(max(0.0, self.period - took))

    def max_between(self, t0: float, t1: float) -> float | None:
        xs = [took for at, took in self.samples if t0 <= at <= t1]
        return round(max(xs), 3) if xs else None


def loop_lag_max(path: Path, t0: float, t1: float) -> tuple[float, int]:
    """The largest in-hub loop lag between wall times t0 and t1 (0 when none >= 10 ms),
    and how many wake-ups were >= 0.5 s late."""
    worst, over = 0.0, 0
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            at, lag = (float(x) for x in line.split())
            if t0 <= at <= t1:
                worst = max(worst, lag)
                over += lag >= 0.5
    return round(worst, 3), over


# ---------------------------------------------------------------------- scenarios
@dataclass
class Setup:
    workdir: Path
    nodes: dict[str, Engine]
    entry: CatalogEntry
    ref: str
    registry: RealRegistry
    progress: Callable[[str], None] = log


def stall_stats(
    path: Path, stalls: Stalls, t0: float, t1: float, suffix: str = ""
) -> dict[str, Any]:
    """The in-hub loop lag and the outside API latency between wall times t0 and t1."""
    lag, late = loop_lag_max(path, t0, t1)
    return {
        f"loop_stall_max{suffix}_s": lag,
        f"loop_stalls_over_0_5{suffix}_s": late,
        f"api_latency_max{suffix}_s": stalls.max_between(t0, t1),
    }


def _stop_hub(hub: Hub) -> None:
    hub.stop()
    for e in engines(3):
        with contextlib.suppress(Exception):
            remove_hub_containers(e, hub.hub_id)


async def sequential(setup: Setup, node: Engine, n: int, cold: bool, name: str) -> dict[str, Any]:
    hub = make_hub(setup.workdir / name, [node], 2, setup.entry, setup.ref)
    hub.start()
    times: list[float] = []
    stalls = Stalls(f"http://{hub.hub_ip}:{hub.hub_api_port}/hub/api/")
    poller = asyncio.ensure_future(stalls.run())
    t0 = time.time()
    try:
        async with httpx.AsyncClient(timeout=SERVER_TIMEOUT_S) as client:
            for i in range(n):
                if cold:
                    remove_image(node, setup.ref)
                else:
                    ensure_pulled(node, setup.ref)
                user = f"{name}{i}"
                seconds, where = await spawn_once(hub, client, user)
                setup.progress(f"{name}: {user} ready on {where} in {seconds:.1f} s")
                times.append(seconds)
                await stop(hub, client, user)
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        _stop_hub(hub)
    t1 = time.time()
    return {
        "node": node.name,
        "spawns": [round(t, 2) for t in times],
        "p50_s": pct(times, 50),
        "p95_s": pct(times, 95),
        **stall_stats(setup.workdir / name / "loop-lag.txt", stalls, t0, t1),
    }


async def arrivals(
    setup: Setup, name: str, users: int, minutes: float, seed: int, prepull: bool, wait: float
) -> dict[str, Any]:
    nodes = [setup.nodes[n] for n in ("node-a", "node-b", "node-c")]
    ensure_pulled(nodes[0], setup.ref)
    for e in nodes[1:]:
        remove_image(e, setup.ref)
    gpus = max(1, math.ceil(0.4 * users))
    hub = make_hub(
        setup.workdir / name,
        nodes,
        gpus,
        setup.entry,
        setup.ref,
        prepull=prepull,
        locality=prepull,
    )
    hub.start()
    rng = random.Random(seed)
    at = sorted(rng.uniform(0, minutes * 60) for _ in range(users))
    records: list[dict[str, Any]] = []
    stalls = Stalls(f"http://{hub.hub_ip}:{hub.hub_api_port}/hub/api/")
    out: dict[str, Any] = {"gpus_per_node": gpus, "users": users, "minutes": minutes}
    poller = asyncio.ensure_future(stalls.run())
    t_hub = time.time()
    t_wait = (t_hub, t_hub)
    try:
        async with httpx.AsyncClient(timeout=SERVER_TIMEOUT_S) as client:
            # the warm-up server starts the hub's cluster (and the pre-puller's rounds)
            t_w = time.monotonic()
            _, where = await spawn_once(hub, client, "warmup")
            setup.progress(f"{name}: warm-up server on {where}")
            if prepull:
                w0 = time.time()
                out["prepull_wait"] = await wait_prepulled(hub, client, nodes, wait, setup)
                t_wait = (w0, time.time())
            await stop(hub, client, "warmup")
            out["setup_s"] = round(time.monotonic() - t_w, 1)

            async def user(i: int, delay: float) -> None:
                await asyncio.sleep(delay)
                name_i = f"u{i:02d}"
                held = await asyncio.to_thread(lambda: {e.name: holds(e, setup.ref) for e in nodes})
                try:
                    seconds, where = await spawn_once(hub, client, name_i)
                except SpawnFailed as e:
                    records.append({"user": name_i, "at_s": round(delay, 1), "error": str(e)})
                    setup.progress(f"{name}: {name_i} FAILED: {e}")
                    return
                records.append(
                    {
                        "user": name_i,
                        "at_s": round(delay, 1),
                        "ready_s": round(seconds, 2),
                        "node": where,
                        "node_held_image": held.get(where),
                    }
                )
                setup.progress(
                    f"{name}: {name_i} (t={delay:.0f}s) ready on {where} in {seconds:.1f} s"
                    f"{'' if held.get(where) else ' (pulled)'}"
                )

            t0 = time.time()
            await asyncio.gather(*(user(i, d) for i, d in enumerate(at)))
            t1 = time.time()
            if prepull:
                r = await hub.aapi(client, "GET", "/gpu/prepull")
                out["prepull_state"] = r.json() if r.status_code == 200 else r.text
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        _stop_hub(hub)
    ok = [r["ready_s"] for r in records if "ready_s" in r]
    lag_file = setup.workdir / name / "loop-lag.txt"
    out.update(
        {
            "users_detail": sorted(records, key=lambda r: r["at_s"]),
            "p50_s": pct(ok, 50),
            "p95_s": pct(ok, 95),
            "max_s": round(max(ok), 2) if ok else None,
            "failed": sum("error" in r for r in records),
            "waited_on_pull": sum(r.get("node_held_image") is False for r in records),
            # the whole scenario (warm-up, the pre-puller's pulls, arrivals), then its parts
            **stall_stats(lag_file, stalls, t_hub, t1),
            **(stall_stats(lag_file, stalls, *t_wait, "_prepull_wait") if prepull else {}),
            **stall_stats(lag_file, stalls, t0, t1, "_arrivals"),
            "api_latency_p50_s": pct([x for a, x in stalls.samples if t0 <= a <= t1], 50),
        }
    )
    return out


async def wait_prepulled(
    hub: Hub, client: httpx.AsyncClient, nodes: Sequence[Engine], wait: float, setup: Setup
) -> dict[str, Any]:
    """Ask for a round now, then wait (at most ``wait`` s) until every node holds the image."""
    t0 = time.monotonic()
    r = await hub.aapi(client, "POST", "/gpu/prepull")
    if r.status_code != 200:
        setup.progress(f"pre-puller round: HTTP {r.status_code} {r.text[:200]}")
    while time.monotonic() - t0 < wait:
        missing = await asyncio.to_thread(
            lambda: [e.name for e in nodes if not holds(e, setup.ref)]
        )
        if not missing:
            break
        await asyncio.sleep(2)
    missing = [e.name for e in nodes if not holds(e, setup.ref)]
    took = round(time.monotonic() - t0, 1)
    setup.progress(f"pre-pull wait: {took} s, missing on {missing or 'none'}")
    return {"waited_s": took, "missing_after": missing, "limit_s": wait}


def names_versions(printed: str, entry: CatalogEntry) -> bool:
    """Whether ``TORCH_CODE``'s output names the entry's framework and CUDA versions
    (``2.8.0+cu128 12.8`` for torch 2.8.0 with CUDA 12.8; the local tag is ignored;
    TensorFlow's ``12.5.1`` names CUDA 12.5)."""
    version, cuda = [*printed.split(), "", ""][:2]
    same_cuda = cuda == entry.cuda_version or cuda.startswith(f"{entry.cuda_version}.")
    return version.split("+")[0] == entry.framework_version and same_cuda


def versions(setup: Setup, node: Engine) -> dict[str, Any]:
    """Scenario (f): a server of the entry spawned through the hub's API; inside its
    container, the framework prints its own version and CUDA version."""
    code = VERSION_CODE.get(setup.entry.framework)
    if code is None:
        raise SystemExit(f"time_to_lab.py: no version check for {setup.entry.framework}")
    pulled_s = ensure_pulled(node, setup.ref)
    hub = make_hub(setup.workdir / "versions", [node], 2, setup.entry, setup.ref)
    hub.start()
    user = "versions"
    try:

        async def spawned() -> tuple[float, str]:
            async with httpx.AsyncClient(timeout=60) as client:
                return await spawn_once(hub, client, user)

        seconds, where = asyncio.run(spawned())
        container = f"jhgpu-{hub.hub_id}-{user}"
        done = docker(node, "exec", container, "python", "-c", code)
        printed = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        setup.progress(f"versions: {setup.entry.slug} on {where} in {seconds:.1f} s: {printed!r}")
        if not names_versions(printed, setup.entry):
            raise RuntimeError(
                f"{container} printed {printed!r} (stderr: {done.stderr[-500:]!r}), not "
                f"{setup.entry.framework} {setup.entry.framework_version} with CUDA "
                f"{setup.entry.cuda_version}"
            )
        hub.stop_server(user)
    finally:
        _stop_hub(hub)
    return {
        "slug": setup.entry.slug,
        "node": where,
        "node_held_image": pulled_s is None,
        "pulled_before_s": pulled_s,
        "ready_s": round(seconds, 2),
        "printed": printed,
    }


def browser(setup: Setup, node: Engine, timeout_s: float = 300) -> dict[str, Any]:
    """Scenario (e): a person in Chromium, from "Start" in the spawn form to JupyterLab."""
    pulled_s = ensure_pulled(node, setup.ref)
    hub = make_hub(setup.workdir / "browser", [node], 2, setup.entry, setup.ref)
    hub.extra_config += 'c.Spawner.default_url = "/lab"\n'
    hub.start()
    user, lab = BROWSER_USER, f"{hub.url}/user/{BROWSER_USER}/lab"
    out: dict[str, Any] = {"node_held_image": pulled_s is None, "pulled_before_s": pulled_s}
    try:
        with chromium_page(timeout_s=120, hold_ready=False) as page:
            try:
                hub_login(page, hub.url, user, secrets.token_hex(8))
                page.wait_for_selector("#jhgpu-form")
                page.select_option("#jhgpu-image", label=setup.entry.display_name)
                page.select_option("#jhgpu-gpu-count", "1")
                t0 = time.perf_counter()
                page.click("#spawn_form button[type=submit]")
                watch_spawn(page, rf"/user/{user}/lab", "ttl-browser-progress", timeout_s)
                at_lab = time.perf_counter() - t0
                page.locator(".jp-LauncherCard").first.wait_for(state="visible")
                ready = time.perf_counter() - t0
                screenshot(page, "ttl-browser-1-lab")
                server = hub.server(user) or {}
                printed = run_in_new_notebook(page, lab, TORCH_CODE, timeout_s=180)
                screenshot(page, "ttl-browser-2-notebook")
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, "ttl-browser-failure")
                raise
        setup.progress(f"browser: JupyterLab's launcher {ready:.1f} s after Start; {printed!r}")
        out.update(
            {
                "node": (server.get("state") or {}).get("node"),
                "image_option": setup.entry.display_name,
                "to_lab_url_s": round(at_lab, 2),
                "to_lab_s": round(ready, 2),
                "torch_versions": printed.strip(),
            }
        )
        if not names_versions(printed, setup.entry):
            raise RuntimeError(
                f"the notebook printed {printed!r}, not torch {setup.entry.framework_version} "
                f"with CUDA {setup.entry.cuda_version}"
            )
        hub.stop_server(user)
    finally:
        _stop_hub(hub)
    return out


# ---------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    p.add_argument("--slug", default=SLUG, help="the catalog entry whose image is used")
    p.add_argument(
        "--image",
        metavar="NAME:TAG",
        help="a repository in the test registry instead of the entry's image (a smoke run "
        "with a small image; the entry's versions stay in the one-entry catalog)",
    )
    p.add_argument("--local-spawns", type=int, default=5)
    p.add_argument("--cold-pulls", type=int, default=3)
    p.add_argument("--users", type=int, default=20, help="arrivals in (c) and (d)")
    p.add_argument("--minutes", type=float, default=10, help="arrival window of (c) and (d)")
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--prepull-wait", type=float, default=600, help="max s to wait in (c)")
    p.add_argument("--out", type=Path, help="merge the results into this JSON file")
    p.add_argument("--keep", action="store_true", help="keep the hubs' folders")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="smallest run (the same keys, those of scenarios not run are null): "
        "--scenarios local --local-spawns 1: one spawn on node-a, which holds the image "
        "(it still needs the image in the test registry: run real_images.py)",
    )
    args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        p.set_defaults(scenarios="local", local_spawns=1)
        args = p.parse_args(argv)
    return args


def summary(results: dict[str, Any]) -> dict[str, Any]:
    s = results.get("scenarios", {})

    def get(name: str, key: str) -> Any:
        return (s.get(name) or {}).get(key)

    stalls = [get(n, "loop_stall_max_s") for n in SCENARIOS]
    return {
        "local_p50_s": get("local", "p50_s"),
        "local_p95_s": get("local", "p95_s"),
        "cold_pull_p50_s": get("cold", "p50_s"),
        "cold_pull_p95_s": get("cold", "p95_s"),
        "prepull_p50_s": get("prepull", "p50_s"),
        "prepull_p95_s": get("prepull", "p95_s"),
        "prepull_waited_on_pull": get("prepull", "waited_on_pull"),
        "no_prepull_p50_s": get("no_prepull", "p50_s"),
        "no_prepull_p95_s": get("no_prepull", "p95_s"),
        "no_prepull_waited_on_pull": get("no_prepull", "waited_on_pull"),
        "browser_to_lab_s": get("browser", "to_lab_s"),
        "browser_torch_versions": get("browser", "torch_versions"),
        "spawned_versions": get("versions", "printed"),
        "loop_stall_max_s": max((x for x in stalls if x is not None), default=None),
        "api_latency_max_s": max(
            (x for n in SCENARIOS if (x := get(n, "api_latency_max_s"))),
            default=None,
        ),
    }


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # a timeout still stops hubs, servers
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"time_to_lab.py: unknown scenarios {unknown} (of {SCENARIOS})")
    entry = load_catalog(REPO / "images" / "catalog.yaml").get(args.slug)
    if entry is None:
        raise SystemExit(f"time_to_lab.py: no catalog entry {args.slug}")
    nodes = {e.name: e for e in engines(3)}
    workdir = Path(tempfile.mkdtemp(prefix="jhgpu-ttl-"))
    previous: dict[str, Any] = {}
    if args.out and args.out.exists():
        previous = json.loads(args.out.read_text())
    results: dict[str, Any] = {"scenarios": dict(previous.get("scenarios", {}))}
    ok = False
    with real_registry() as registry:
        image = args.image or entry.image
        ref = registry.pull_reference(image)
        if registry.manifest_digest(image) is None:
            raise SystemExit(f"time_to_lab.py: the registry lacks {ref}: run real_images.py")
        setup = Setup(workdir, nodes, entry, ref, registry)
        try:
            for name in chosen:
                log(f"scenario {name} ({ref})")
                t0 = time.monotonic()
                if name == "local":
                    res = asyncio.run(
                        sequential(setup, nodes["node-a"], args.local_spawns, False, name)
                    )
                elif name == "browser":
                    res = browser(setup, nodes["node-a"])
                elif name == "versions":
                    res = versions(setup, nodes["node-a"])
                elif name == "cold":
                    res = asyncio.run(
                        sequential(setup, nodes["node-b"], args.cold_pulls, True, name)
                    )
                else:
                    res = asyncio.run(
                        arrivals(
                            setup,
                            name,
                            args.users,
                            args.minutes,
                            args.seed,
                            prepull=name == "prepull",
                            wait=args.prepull_wait,
                        )
                    )
                res["wall_s"] = round(time.monotonic() - t0, 1)
                res["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
                res["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                results["scenarios"][name] = res
                if args.out:
                    args.out.write_text(json.dumps(results, indent=2))
            ok = True
        finally:
            if args.keep or not ok:
                log(f"hub folders kept in {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    results["image"] = ref
    results["image_size_bytes"] = int(
        docker(nodes["node-a"], "image", "inspect", "--format", "{{.Size}}", ref).stdout.strip()
        or 0
    )
    results.update(summary(results))
    results["nproc"] = os.cpu_count()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for k, v in summary(results).items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
