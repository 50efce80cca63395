"""Spawn benchmark: GPUDockerSpawner against stock DockerSpawner on the same engine.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python benchmarks/spawn.py                # readable table
    .venv/bin/python benchmarks/spawn.py --json         # one JSON object

What is measured: spawn latency, from the ``POST /hub/api/users/{name}/server`` call until
the hub's user model shows that server ``ready`` (a 201 answer is confirmed with one GET;
after a 202 the hub's progress event stream says when it is ready, then one GET confirms).

Set-up: the local test cluster's first engine (``node-a``, started by ``cluster_up(1)``) and
two real JupyterHub processes side by side, each with its own workdir, port and database:

- ``gpu``: :class:`jupyterhub_gpu.hub.spawner.GPUDockerSpawner` with a declared inventory of
  16 GPUs on ``node-a`` (enough for every concurrent server to get 1 GPU);
- ``stock``: ``dockerspawner.DockerSpawner`` as it comes, configured for the same bridged
  network: ``network_name`` = the user network (ICC off), ``use_internal_ip=False`` and
  ``host_ip`` = the node's address, so the engine publishes each server's port there and
  DockerSpawner reads it back. Everything else is stock, including its single shared
  executor thread.

Both: the same node in its own network namespace (the engine with bridge and iptables on),
the same user network, the same image (for the GPU spawner through a one-entry catalog),
``remove=True``, no home mount (``home_template=""`` for
the GPU spawner; DockerSpawner mounts nothing by default), ``HOME=/tmp`` in the environment
(the image's users have no writable home), the same CPU and memory limits (all cores, so no
throttling, and ``MEM_GIB``) and the same start and HTTP timeouts.

Schedule, per round (``--rounds``): ``--sequential`` spawns one at a time on each side,
interleaved in pairs (ABBA...), then ``--concurrent`` spawns at once on each side; which side
goes first alternates each round. Every server is stopped (not timed) before the next
measurement, followed by a short settle pause. One untimed warm-up spawn per hub comes first.
Containers are named with a per-run prefix and removed at the end, also on Ctrl-C or error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
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

import docker  # noqa: E402
import httpx  # noqa: E402
import yaml  # noqa: E402

from jupyterhub_gpu.core.usernet import network_options  # noqa: E402
from tests.support.cluster import (  # noqa: E402
    TEST_IMAGE,
    USER_NETWORK,
    Engine,
    cluster_up,
    remove_hub_containers,
)
from tests.support.hub import Hub  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402
from tests.support.procstat import machine_busy_cpu_s, process_cpu_s  # noqa: E402

USER_BRIDGE = "jhgpu-users"  # GPUCluster.user_bridge's default

SIDES = ("stock", "gpu")
INVENTORY_GPUS = 16
MEM_GIB = 8  # memory limit of every server, on both sides
SETTLE_S = 1.0  # pause after stopping servers, so teardown work never overlaps a measurement
SERVER_TIMEOUT_S = 180  # the hubs' start_timeout and http_timeout (a loaded machine is slow)
SPAWN_TIMEOUT_S = 240.0  # the benchmark's own limit for one measurement


# ---------------------------------------------------------------------- hubs


@dataclass
class Side:
    """One hub and the containers it makes."""

    name: str
    hub: Hub
    prefix: str
    engine: Engine

    @property
    def pid(self) -> int:
        assert self.hub.proc is not None, "hub not started"
        return self.hub.proc.pid

    def containers(self) -> list[Any]:
        with self.engine.client() as client:
            # ignore_removed: one removed between the listing and its inspection is gone
            found = client.containers.list(
                all=True, filters={"name": self.prefix}, ignore_removed=True
            )
        return [c for c in found if c.name.startswith(self.prefix + "-")]

    def remove_containers(self) -> None:
        for c in self.containers():
            with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                c.remove(force=True)
        remove_hub_containers(self.engine, self.hub.hub_id)


def _inventory(node: str, uuid_prefix: str) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "name": node,
                "driver_version": "550.54.15",
                "cuda_driver_version": "12.4",
                "gpus": [
                    {
                        "uuid": f"GPU-{uuid_prefix}{i:04d}-0000-4000-8000-000000000000",
                        "index": i,
                        "model": "NVIDIA A100-SXM4-80GB",
                        "memory_mib": 81920,
                        "compute_capability": "8.0",
                    }
                    for i in range(INVENTORY_GPUS)
                ],
            }
        ]
    }


def _catalog(image: str) -> dict[str, Any]:
    """A one-entry image catalog: the GPU spawner resolves its image from it."""
    return {
        "images": [
            {
                "slug": "bench",
                "display_name": "Benchmark image (the test image, CUDA 12.4 rules)",
                "framework": "python",
                "framework_version": "3.11",
                "cuda_version": "12.4",
                "compute_capabilities": {"min": "5.0", "max": "9.0"},
                "image": image,
                "description": "The same image as the stock side.",
            }
        ]
    }


def _common_config(prefix: str, log_level: str) -> str:
    """Identical for both hubs (``c.DockerSpawner`` applies to the GPU subclass as well)."""
    return f"""
c.JupyterHub.log_level = {log_level!r}
c.DockerSpawner.image = {TEST_IMAGE!r}
c.DockerSpawner.remove = True
c.DockerSpawner.prefix = {prefix!r}
c.Spawner.environment = {{"HOME": "/tmp"}}
c.Spawner.start_timeout = {SERVER_TIMEOUT_S}
c.Spawner.http_timeout = {SERVER_TIMEOUT_S}
"""


def ensure_user_network(engine: Engine) -> None:
    """The user network the GPU hub would create, made here for the stock side too."""
    with engine.client() as client:
        if not client.networks.list(names=[USER_NETWORK]):
            client.networks.create(
                USER_NETWORK, driver="bridge", options=network_options(USER_BRIDGE)
            )


def make_sides(
    engine: Engine, workdir: Path, run_id: str, log_level: str, accounting_url: str | None = None
) -> dict[str, Side]:
    """The two hubs; the GPU one records to ``accounting_url`` (None: its default, a SQLite
    file in its directory; "": nothing)."""
    sides: dict[str, Side] = {}
    # the same limits for both: all the machine's cores (no throttling), MEM_GIB of memory
    cpus = float(len(os.sched_getaffinity(0)))
    # stock: the subclass above, imported by the hub process from this file
    prefix = f"jhbench-{run_id}s"
    hub = Hub(workdir / "stock", hub_id=f"bench{run_id}s")
    hub.extra_config = _common_config(prefix, log_level) + (
        f"""
c.JupyterHub.spawner_class = "docker"
c.DockerSpawner.client_kwargs = {{"base_url": {engine.url!r}}}
c.DockerSpawner.network_name = {USER_NETWORK!r}
c.DockerSpawner.use_internal_ip = False
c.DockerSpawner.host_ip = {engine.address!r}
c.DockerSpawner.cpu_limit = {cpus!r}
c.DockerSpawner.mem_limit = "{MEM_GIB}G"
"""
    )
    sides["stock"] = Side("stock", hub, prefix, engine)

    prefix = f"jhbench-{run_id}g"
    hub = Hub(workdir / "gpu", hub_id=f"bench{run_id}g")
    hub.workdir.mkdir(parents=True, exist_ok=True)
    inventory = hub.workdir / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(_inventory(engine.name, run_id)))
    catalog = hub.workdir / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(_catalog(TEST_IMAGE)))
    resources = {
        "default_cpu": cpus,
        "max_cpu": cpus,
        "default_mem_gib": float(MEM_GIB),
        "max_mem_gib": float(MEM_GIB),
    }
    nodes = [engine.node_config()]
    hub.extra_config = _common_config(prefix, log_level) + (
        f"""
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = {nodes!r}
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = {str(inventory)!r}
c.GPUCluster.catalog_file = {str(catalog)!r}
c.GPUDockerSpawner.resource_defaults = {resources!r}
c.GPUDockerSpawner.home_template = ""
c.GPUCluster.hub_id = {hub.hub_id!r}
"""
        + ("" if accounting_url is None else f"c.GPUCluster.accounting_url = {accounting_url!r}\n")
    )
    sides["gpu"] = Side("gpu", hub, prefix, engine)
    return sides


# ---------------------------------------------------------------------- measuring


class SpawnFailed(RuntimeError):
    pass


@dataclass
class CPUMeter:
    """CPU used by one hub process, and by the whole machine, over a measurement."""

    pid: int
    hub0: float = 0.0
    machine0: float = 0.0

    def __enter__(self) -> CPUMeter:
        self.hub0, self.machine0 = process_cpu_s(self.pid), machine_busy_cpu_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hub_s = process_cpu_s(self.pid) - self.hub0
        self.machine_s = machine_busy_cpu_s() - self.machine0


async def _ready_in_model(side: Side, client: httpx.AsyncClient, user: str) -> None:
    """Return once the user model says the server is ready (a few quick GETs at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = await side.hub.aapi(client, "GET", f"/users/{quote(user, safe='')}")
        r.raise_for_status()
        server = r.json()["servers"].get("")
        if server and server.get("ready"):
            return
        if not server or not server.get("pending"):
            raise SpawnFailed(f"{side.name}: server of {user} is gone: {server}")
        await asyncio.sleep(0.02)
    raise SpawnFailed(f"{side.name}: server of {user} reported ready but the model disagrees")


async def _wait_progress(side: Side, client: httpx.AsyncClient, user: str) -> None:
    url = f"{side.hub.url}/hub/api/users/{quote(user, safe='')}/server/progress"
    headers = {"Authorization": f"token {side.hub.token}"}
    async with client.stream("GET", url, headers=headers) as resp:
        if resp.status_code != 200:
            raise SpawnFailed(f"{side.name}: progress of {user}: HTTP {resp.status_code}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event.get("ready"):
                return
            if event.get("failed"):
                raise SpawnFailed(f"{side.name}: spawn of {user} failed: {event.get('message')}")
    raise SpawnFailed(f"{side.name}: progress stream of {user} ended without 'ready'")


async def spawn_once(side: Side, client: httpx.AsyncClient, user: str) -> float:
    """Seconds from the spawn API call until the user model says ready."""
    t0 = time.perf_counter()
    r = await side.hub.aapi(client, "POST", f"/users/{quote(user, safe='')}/server", content="{}")
    if r.status_code == 202:
        await _wait_progress(side, client, user)
    elif r.status_code != 201:
        raise SpawnFailed(f"{side.name}: spawn of {user}: HTTP {r.status_code} {r.text}")
    await _ready_in_model(side, client, user)
    return time.perf_counter() - t0


async def spawn_many(side: Side, client: httpx.AsyncClient, users: Sequence[str]) -> list[float]:
    coros = [spawn_once(side, client, u) for u in users]
    return list(await asyncio.wait_for(asyncio.gather(*coros), SPAWN_TIMEOUT_S))


async def stop_all(side: Side, users: Sequence[str]) -> None:
    """Stop the servers (untimed) and wait until their containers are gone."""
    await asyncio.gather(*(asyncio.to_thread(side.hub.stop_server, u) for u in users))
    deadline = time.monotonic() + 60
    while side.containers():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side.name}: containers left after stopping: {side.containers()}")
        await asyncio.sleep(0.2)
    await asyncio.sleep(SETTLE_S)


@dataclass
class Samples:
    warmup: list[float] = field(default_factory=list)
    sequential: list[float] = field(default_factory=list)
    concurrent: list[list[float]] = field(default_factory=list)  # one list per round
    # CPU seconds over each measurement: the hub process, and all cores of the machine
    sequential_hub_cpu: list[float] = field(default_factory=list)
    sequential_machine_cpu: list[float] = field(default_factory=list)
    concurrent_hub_cpu: list[float] = field(default_factory=list)
    concurrent_machine_cpu: list[float] = field(default_factory=list)


async def measure(
    sides: dict[str, Side],
    rounds: int,
    sequential: int,
    concurrent: int,
    progress: Callable[[str], None],
) -> dict[str, Samples]:
    samples = {name: Samples() for name in SIDES}
    seq_user = "seq"
    conc_users = [f"c{i:02d}" for i in range(concurrent)]
    limits = httpx.Limits(max_connections=4 * concurrent + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        for side in sides.values():
            for user in [seq_user, *conc_users]:
                r = await side.hub.aapi(client, "POST", f"/users/{user}")
                if r.status_code not in (201, 409):
                    raise RuntimeError(f"{side.name}: cannot create user {user}: {r.text}")
        for name in SIDES:  # warm-up: first Docker client, executor, inventory read, image cache
            samples[name].warmup.append(await spawn_once(sides[name], client, seq_user))
            await stop_all(sides[name], [seq_user])
        for rnd in range(rounds):
            order = list(SIDES) if rnd % 2 == 0 else list(reversed(SIDES))
            for i in range(sequential):
                for name in order if i % 2 == 0 else reversed(order):
                    with CPUMeter(sides[name].pid) as cpu:
                        t = await spawn_once(sides[name], client, seq_user)
                    samples[name].sequential.append(t)
                    samples[name].sequential_hub_cpu.append(cpu.hub_s)
                    samples[name].sequential_machine_cpu.append(cpu.machine_s)
                    progress(f"round {rnd + 1}/{rounds} 1-at-a-time {name:5s} {t:6.2f} s")
                    await stop_all(sides[name], [seq_user])
            for name in order:
                with CPUMeter(sides[name].pid) as cpu:
                    times = await spawn_many(sides[name], client, conc_users)
                samples[name].concurrent.append(times)
                samples[name].concurrent_hub_cpu.append(cpu.hub_s)
                samples[name].concurrent_machine_cpu.append(cpu.machine_s)
                progress(
                    f"round {rnd + 1}/{rounds} {concurrent}-at-once  {name:5s} "
                    f"p50 {statistics.median(times):6.2f} s, max {max(times):6.2f} s"
                )
                await stop_all(sides[name], conc_users)
    return samples


# ---------------------------------------------------------------------- report


def p90(xs: Sequence[float]) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=10, method="inclusive")[8]


def _r(x: float) -> float:
    return round(x, 3)


def machine_info(engine: Engine) -> dict[str, Any]:
    import dockerspawner
    import jupyterhub

    with engine.client() as client:
        engine_version = client.version().get("Version", "?")
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "loadavg_1m": _r(os.getloadavg()[0]),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jupyterhub": jupyterhub.__version__,
        "dockerspawner": dockerspawner.__version__,
        "docker_engine": engine_version,
    }


def summarize(
    samples: dict[str, Samples], args: argparse.Namespace, machine: dict[str, Any]
) -> dict[str, Any]:
    gpu, stock = samples["gpu"], samples["stock"]
    out: dict[str, Any] = {
        "gpu_spawner_p50_s": _r(statistics.median(gpu.sequential)),
        "stock_spawner_p50_s": _r(statistics.median(stock.sequential)),
        "ratio_p50": _r(statistics.median(gpu.sequential) / statistics.median(stock.sequential)),
        "gpu_spawner_p90_s": _r(p90(gpu.sequential)),
        "stock_spawner_p90_s": _r(p90(stock.sequential)),
        "ratio_p90": _r(p90(gpu.sequential) / p90(stock.sequential)),
        "concurrent10_max_s": _r(max(max(r) for r in gpu.concurrent)),
        "stock_concurrent10_max_s": _r(max(max(r) for r in stock.concurrent)),
    }
    for name, s in samples.items():
        flat = [t for r in s.concurrent for t in r]
        out[f"{name}_concurrent_p50_s"] = _r(statistics.median(flat))
        out[f"{name}_concurrent_p90_s"] = _r(p90(flat))
        out[f"{name}_concurrent_max_per_round_s"] = [_r(max(r)) for r in s.concurrent]
        out[f"{name}_hub_cpu_per_spawn_p50_s"] = _r(statistics.median(s.sequential_hub_cpu))
        out[f"{name}_hub_cpu_concurrent_p50_s"] = _r(statistics.median(s.concurrent_hub_cpu))
    out["samples"] = {
        name: {
            "warmup": [_r(t) for t in s.warmup],
            "sequential": [_r(t) for t in s.sequential],
            "concurrent": [[_r(t) for t in r] for r in s.concurrent],
            "sequential_hub_cpu_s": [_r(t) for t in s.sequential_hub_cpu],
            "sequential_machine_cpu_s": [_r(t) for t in s.sequential_machine_cpu],
            "concurrent_hub_cpu_s": [_r(t) for t in s.concurrent_hub_cpu],
            "concurrent_machine_cpu_s": [_r(t) for t in s.concurrent_machine_cpu],
        }
        for name, s in samples.items()
    }
    out["config"] = {
        "accounting": args.accounting,
        "rounds": args.rounds,
        "sequential": args.sequential,
        "concurrent": args.concurrent,
        "engine": "node-a",
        "image": TEST_IMAGE,
        "network": f"{USER_NETWORK} (bridge, ICC off, port published on the node)",
        "remove": True,
        "home_mount": "none (both)",
        "cpu_limit": float(len(os.sched_getaffinity(0))),
        "mem_limit_gib": MEM_GIB,
        "gpus_per_server": 1,
        "inventory_gpus": INVENTORY_GPUS,
        "settle_s": SETTLE_S,
    }
    out["machine"] = machine
    return out


def table(result: dict[str, Any]) -> str:
    cfg, m = result["config"], result["machine"]
    c = cfg["concurrent"]
    rows = [
        ("1 at a time", "p50", "stock_spawner_p50_s", "gpu_spawner_p50_s"),
        ("", "p90", "stock_spawner_p90_s", "gpu_spawner_p90_s"),
        (f"{c} at once", "p50", "stock_concurrent_p50_s", "gpu_concurrent_p50_s"),
        ("", "p90", "stock_concurrent_p90_s", "gpu_concurrent_p90_s"),
        ("", "max", "stock_concurrent10_max_s", "concurrent10_max_s"),
        ("hub CPU/spawn", "p50", "stock_hub_cpu_per_spawn_p50_s", "gpu_hub_cpu_per_spawn_p50_s"),
        (f"hub CPU/{c}", "p50", "stock_hub_cpu_concurrent_p50_s", "gpu_hub_cpu_concurrent_p50_s"),
    ]
    lines = [
        f"Spawn latency, API call -> ready (s): {cfg['rounds']} rounds x ({cfg['sequential']} "
        f"one at a time + {c} at once) per side; engine {cfg['engine']}, nproc {m['nproc']}, "
        f"load {m['loadavg_1m']} -> {m.get('loadavg_1m_end', '?')}",
        f"{'':18s} {'stock':>8s} {'gpu':>8s} {'gpu/stock':>10s}",
    ]
    for what, stat, s, g in rows:
        ratio = result[g] / result[s] if result[s] else float("nan")
        lines.append(f"{what:14s}{stat:4s} {result[s]:8.2f} {result[g]:8.2f} {ratio:10.2f}")
    target = "met" if result["ratio_p50"] <= 1.10 else "NOT met"
    lines.append(f"target ratio_p50 <= 1.10: {target} ({result['ratio_p50']:.3f})")
    for name in SIDES:
        sample = result["samples"][name]
        seq = " ".join(f"{t:.2f}" for t in sample["sequential"])
        lines.append(f"{name:5s} one at a time: {seq}")
        worst = " ".join(f"{t:.2f}" for t in result[f"{name}_concurrent_max_per_round_s"])
        busy = " ".join(f"{t:.0f}" for t in sample["concurrent_machine_cpu_s"])
        lines.append(f"{name:5s} {c} at once, max per round: {worst} (machine CPU s: {busy})")
    return "\n".join(lines)


# ---------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--sequential", type=int, default=5, help="1-at-a-time spawns per round and side (5)"
    )
    p.add_argument("--concurrent", type=int, default=10, help="spawns at once per round (10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--keep", action="store_true", help="keep the workdir (hub logs) and print its path"
    )
    p.add_argument(
        "--hub-log-level", default="INFO", help="JupyterHub log level of both hubs (INFO)"
    )
    p.add_argument(
        "--accounting",
        choices=("sqlite", "postgres", "none"),
        default="sqlite",
        help="where the GPU hub records allocations: its default SQLite file, a PostgreSQL "
        "server started for the run (tests/support/postgres.py), or nothing (sqlite)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (about a minute; the same keys): "
        "--rounds 1 --sequential 1 --concurrent 2",
    )
    args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        p.set_defaults(rounds=1, sequential=1, concurrent=2)
        args = p.parse_args(argv)
    if args.rounds < 1 or args.sequential < 1 or args.concurrent < 1:
        p.error("--rounds, --sequential and --concurrent must be >= 1")
    if args.concurrent > INVENTORY_GPUS:
        p.error(f"--concurrent must be <= {INVENTORY_GPUS} (GPUs in the declared inventory)")
    return args


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def progress(msg: str) -> None:
        print(f"[spawn-bench] {msg}", file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, _raise_interrupt)
    engine = cluster_up(1)[0]
    ensure_user_network(engine)
    run_id = secrets.token_hex(4)
    workdir = Path(tempfile.mkdtemp(prefix="jhgpu-bench-spawn-"))
    postgres = PostgresServer().start() if args.accounting == "postgres" else None
    url = {"sqlite": None, "none": ""}.get(args.accounting, postgres.url if postgres else None)
    sides = make_sides(engine, workdir, run_id, args.hub_log_level, url)
    ok = False
    cleanup_errors: list[str] = []
    try:
        for side in sides.values():
            side.hub.start()
            progress(f"{side.name} hub on {side.hub.url} (log {side.hub.log_path})")
        machine = machine_info(engine)
        if machine["loadavg_1m"] > machine["nproc"]:
            progress(
                f"warning: load average {machine['loadavg_1m']} > {machine['nproc']} cores; "
                "expect noisy numbers"
            )
        samples = asyncio.run(
            measure(sides, args.rounds, args.sequential, args.concurrent, progress)
        )
        machine["loadavg_1m_end"] = _r(os.getloadavg()[0])
        result = summarize(samples, args, machine)
        ok = True
    except Exception:
        for side in sides.values():
            tail = side.hub.log_tail(40)
            print(f"\n===== {side.name} hub log tail =====\n{tail}", file=sys.stderr)
        raise
    finally:
        for side in sides.values():
            side.hub.stop()
        for side in sides.values():
            try:
                side.remove_containers()
            except Exception as exc:  # reported, not hidden: the engine may keep them
                cleanup_errors.append(f"{side.name}: {exc!r}")
                progress(f"could not remove the {side.name} hub's containers: {exc!r}")
        if postgres is not None:
            postgres.stop()
        if args.keep or not ok:
            progress(f"hub logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 1 if cleanup_errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("[spawn-bench] interrupted; hubs stopped and containers removed", file=sys.stderr)
        sys.exit(130)
