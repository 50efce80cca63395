"""Placement benchmark: decision latency, and a replay of the Alibaba GPU trace (v2023).

Run from the repository root::

    .venv/bin/python benchmarks/placement.py            # readable tables
    .venv/bin/python benchmarks/placement.py --json     # one JSON object

Two parts (see docs/placement.md for the definitions and the measured numbers):

1. **Latency** of ``place`` at 10, 100 and 1,000 nodes x 8 GPUs with half the GPUs
   allocated. Allocations and our container set change between decisions, as in the
   hub; the inventory (``snapshot.nodes``) stays the same object between inventory
   refreshes, so the index built from it is reused ("warm"). The cost of the first
   decision after an inventory refresh (index build included) is reported as "cold".
2. **Replay** of ``openb_pod_list_gpuspec33.csv`` (GPU pods that ran; ``gpu_milli`` < 1000
   replayed as one whole GPU; ``gpu_spec`` = allowed models) onto ``--repeats``
   heterogeneous ``--nodes``-node sub-clusters drawn from ``openb_node_list_gpu_node.csv``
   with seeds ``--seed``, ``--seed``+1, ... (each draw must be able to carry the pinned
   work: see ``trace_cluster``), or onto ``--cluster FILE`` (then ``gpu_spec`` is
   dropped: the trace's model names are not the file's). Arrival times are scaled so the
   offered load sum(gpus x duration) / (cluster GPUs x span) is ``--load``. An
   event-driven simulation (heapq) replays it for every policy; requests that do not fit
   wait in a FIFO queue, with backfill by default (``--queue fifo``: strict
   head-of-line). Waits and placements are pooled over the repeats.

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23 (alibaba/clusterdata, cluster-trace-gpu-v2023).
"""

from __future__ import annotations

import argparse
import csv
import functools
import heapq
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.inventory.declared import load_inventory_file
from jupyterhub_gpu.inventory.model import GPU, ClusterSnapshot, NodeInventory, NodeState
from jupyterhub_gpu.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.placement.baselines import best_fit, first_fit, random_fit, spread
from jupyterhub_gpu.placement.index import clear_cache, index_for

Policy = Callable[[ClusterSnapshot, PlacementRequest], Placement | NoFit]
DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

# The trace names models only. Memory and compute capability of the disclosed ones are
# NVIDIA's; G2 and G3 are undisclosed, and these values are an ASSUMPTION that only fixes
# their place in the class order (G2 above the 16 GiB cards, G3 the largest).
TRACE_MODELS: dict[str, tuple[int, tuple[int, int]]] = {
    "P100": (16384, (6, 0)),
    "V100M16": (16384, (7, 0)),
    "T4": (16384, (7, 5)),
    "A10": (24576, (8, 6)),
    "V100M32": (32768, (7, 0)),
    "G2": (32768, (8, 0)),  # assumed
    "G3": (81920, (8, 0)),  # assumed
}

# the synthetic fleet of the latency part: (model, memory MiB, cc, driver)
LATENCY_MODELS = [
    ("NVIDIA GeForce RTX 3090", 24576, (8, 6), "550.54.15"),
    ("NVIDIA TITAN X (Pascal)", 12288, (6, 1), "470.223.02"),
    ("NVIDIA GeForce RTX 2080 Ti", 11264, (7, 5), "535.183.01"),
    ("NVIDIA A100-SXM4-80GB", 81920, (8, 0), "550.54.15"),
]
LATENCY_REQUESTS = [
    PlacementRequest(1),
    PlacementRequest(1, allowed_models=frozenset({"NVIDIA GeForce RTX 3090"})),
    PlacementRequest(2),
    PlacementRequest(1, min_memory_mib=40 * 1024),
    PlacementRequest(1, min_driver_version="525.60.13", min_compute_capability=(7, 0)),
    PlacementRequest(4, min_driver_version="525.60.13"),
    PlacementRequest(1, allowed_models=frozenset({"NVIDIA TITAN X (Pascal)"})),
    PlacementRequest(1, min_memory_mib=12 * 1024),
]


# -- latency -------------------------------------------------------------------------------


def synthetic_cluster(n_nodes: int, rng: random.Random) -> tuple[NodeState, ...]:
    """``n_nodes`` x 8 GPUs of mixed models; ~1% broken GPUs, foreign processes, drained nodes."""
    nodes = []
    for n in range(n_nodes):
        model, mem, cc, driver = LATENCY_MODELS[n % len(LATENCY_MODELS)]
        gpus = tuple(
            GPU(
                uuid=f"GPU-{n:05d}-{i}",
                index=i,
                model=model,
                memory_mib=mem,
                compute_capability=cc,
                utilization_pct=rng.choice((0.0, 0.0, 5.0, 40.0, 95.0)),
                memory_used_mib=rng.choice((0, 0, 512, 4096)),
                healthy=False if rng.random() < 0.01 else rng.choice((True, None)),
                process_containers=("",) if rng.random() < 0.01 else (),
                topology_group=f"pcie{i // 4}",
            )
            for i in range(8)
        )
        inv = NodeInventory(name=f"node-{n:05d}", driver_version=driver, gpus=gpus)
        nodes.append(NodeState(inv, schedulable=rng.random() >= 0.01))
    return tuple(nodes)


@dataclass
class _Ledger:
    """The hub's side of the latency benchmark: allocations and our container ids."""

    allocations: dict[str, str] = field(default_factory=dict)
    servers: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    our: frozenset[str] = frozenset()
    serial: int = 0

    def add(self, uuids: Sequence[str]) -> None:
        self.serial += 1
        cid = f"c{self.serial:08d}"
        for u in uuids:
            self.allocations[u] = cid
        self.servers.append((cid, tuple(uuids)))
        self.our = self.our | {cid}

    def remove_random(self, rng: random.Random) -> None:
        k = rng.randrange(len(self.servers))
        self.servers[k], self.servers[-1] = self.servers[-1], self.servers[k]
        cid, uuids = self.servers.pop()
        for u in uuids:
            del self.allocations[u]
        self.our = self.our - {cid}


def _half_allocated(nodes: tuple[NodeState, ...], rng: random.Random) -> _Ledger:
    ledger = _Ledger()
    uuids = [g.uuid for n in nodes for g in n.inventory.gpus]
    for u in rng.sample(uuids, len(uuids) // 2):
        ledger.add((u,))
    return ledger


def _pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between closest ranks."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def measure_latency(n_nodes: int, decisions: int, cold: int, seed: int) -> dict[str, float]:
    """Wall-clock median / p99 ms of warm decisions (allocations and our containers change
    before every one), CPU-time p99 (this thread only: shows what other load on the
    machine added), and cold decisions (index built after an inventory refresh)."""
    rng = random.Random(seed)
    nodes = synthetic_cluster(n_nodes, rng)
    ledger = _half_allocated(nodes, rng)
    cold_ms = []
    for _ in range(cold):
        clear_cache()
        t = time.perf_counter_ns()
        place(ClusterSnapshot(nodes, ledger.allocations, ledger.our), LATENCY_REQUESTS[0])
        cold_ms.append((time.perf_counter_ns() - t) / 1e6)
    wall_ms, cpu_ms, nofit = [], [], 0
    for i in range(decisions):
        snapshot = ClusterSnapshot(nodes, ledger.allocations, ledger.our)
        request = LATENCY_REQUESTS[i % len(LATENCY_REQUESTS)]
        c, t = time.thread_time_ns(), time.perf_counter_ns()
        result = place(snapshot, request)
        wall_ms.append((time.perf_counter_ns() - t) / 1e6)
        cpu_ms.append((time.thread_time_ns() - c) / 1e6)
        if isinstance(result, Placement):
            ledger.add(result.gpu_uuids)
            ledger.remove_random(rng)  # keep about half allocated
        else:
            nofit += 1
    return {
        "median_ms": statistics.median(wall_ms),
        "p99_ms": _pct(wall_ms, 0.99),
        "cpu_p99_ms": _pct(cpu_ms, 0.99),
        "cold_median_ms": statistics.median(cold_ms) if cold_ms else 0.0,
        "nofit_share": nofit / decisions,
    }


# -- the trace -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    arrival: float
    duration: float
    request: PlacementRequest
    fractional: bool  # asked for part of a GPU (gpu_milli < 1000): replayed as 1 whole GPU


def trace_cluster(
    path: Path, n_nodes: int, pods: list[Pod], rng: random.Random, tries: int = 200_000
) -> tuple[NodeState, ...]:
    """A random sub-cluster of ``n_nodes`` that can carry ``pods`` (drawn with ``rng``).

    Draws are uniform over the trace's GPU nodes and rejected until the sub-cluster is
    *stable* for the replayed pods: every pod fits some node when the cluster is empty,
    and for every set S of models the work of pods that can only use models in S is at
    most S's share of the GPUs (Hall's condition, so no model group is offered more than
    the overall ``--load``). Without it a 2-GPU T4 node would face T4-only work worth
    ~12 GPUs and every policy would wait on the same unbounded backlog.
    """
    rows = list(csv.DictReader(path.open()))
    for _ in range(tries):
        chosen = sorted(rng.sample(rows, n_nodes), key=lambda r: r["sn"])  # declared order
        if _stable(chosen, pods):
            return tuple(_trace_node(r) for r in chosen)
    raise SystemExit(f"no stable {n_nodes}-node sub-cluster in {tries} draws; try --nodes")


def _stable(rows: list[dict[str, str]], pods: list[Pod]) -> bool:
    gpus: dict[str, int] = {}
    biggest: dict[str, int] = {}
    for r in rows:
        gpus[r["model"]] = gpus.get(r["model"], 0) + int(r["gpu"])
        biggest[r["model"]] = max(biggest.get(r["model"], 0), int(r["gpu"]))
    present = frozenset(gpus)
    work: dict[frozenset[str], float] = {}
    for p in pods:
        allowed = present & (p.request.allowed_models or present)
        if not any(biggest[m] >= p.request.gpu_count for m in allowed):
            return False
        work[allowed] = work.get(allowed, 0.0) + p.request.gpu_count * p.duration
    total_work, total_gpus = sum(work.values()), sum(gpus.values())
    models = sorted(present)
    for mask in range(1, 1 << len(models)):
        group = frozenset(m for i, m in enumerate(models) if mask >> i & 1)
        need = sum(w for allowed, w in work.items() if allowed <= group)
        if need / total_work > sum(gpus[m] for m in group) / total_gpus:
            return False
    return True


def _trace_node(row: dict[str, str]) -> NodeState:
    model = row["model"]
    mem, cc = TRACE_MODELS[model]
    gpus = tuple(
        GPU(
            uuid=f"GPU-{row['sn']}-{i}", index=i, model=model, memory_mib=mem, compute_capability=cc
        )
        for i in range(int(row["gpu"]))
    )
    return NodeState(NodeInventory(name=row["sn"], driver_version="535.104.05", gpus=gpus))


def load_pods(path: Path, max_pods: int | None, keep_models: bool) -> list[Pod]:
    """GPU pods that ran, in arrival order, from the 1st percentile of arrivals on.

    Skips pods with ``num_gpu == 0`` and pods never scheduled (no service time); the
    first 1% of arrivals (a sparse head months before the rest) is dropped too.
    """
    pods = []
    for row in csv.DictReader(path.open()):
        gpus = int(row["num_gpu"])
        if gpus == 0 or not row["scheduled_time"] or not row["deletion_time"]:
            continue
        spec = row["gpu_spec"].strip()
        models = frozenset(spec.split("|")) if spec and keep_models else None
        pods.append(
            Pod(
                arrival=float(row["creation_time"]),
                duration=float(row["deletion_time"]) - float(row["scheduled_time"]),
                request=PlacementRequest(gpu_count=gpus, allowed_models=models),
                fractional=int(row["gpu_milli"]) < 1000,
            )
        )
    pods.sort(key=lambda p: p.arrival)
    start = len(pods) // 100
    return pods[start:] if max_pods is None else pods[start : start + max_pods]


def scale_arrivals(pods: list[Pod], total_gpus: int, load: float) -> tuple[list[Pod], float]:
    """Scale inter-arrival times so sum(gpus x duration) / (GPUs x span) == ``load``."""
    work = sum(p.request.gpu_count * p.duration for p in pods)
    t0 = pods[0].arrival
    span = pods[-1].arrival - t0
    factor = work / (total_gpus * span * load)
    scaled = [Pod((p.arrival - t0) * factor, p.duration, p.request, p.fractional) for p in pods]
    return scaled, factor


# -- the simulation ------------------------------------------------------------------------


@dataclass
class SimResult:
    waits: list[float]
    oversized: int
    placed: int
    allocation_rate: float


class Simulation:
    """Event-driven replay: arrivals join a FIFO queue; departures free GPUs.

    After every event the queue is scanned in arrival order. ``backfill=True``: a request
    that does not fit stays queued and later ones may start (each user waits only for
    what they asked for); ``backfill=False``: strict head-of-line, the scan stops at the
    first request that does not fit. The same rule applies to every policy.
    """

    def __init__(self, nodes: tuple[NodeState, ...], pods: list[Pod], backfill: bool) -> None:
        self.nodes, self.pods, self.backfill = nodes, pods, backfill
        index = index_for(nodes)
        self.rank = {u: index.slot_rank[s] for u, s in index.slot_of.items()}
        self.total = len(self.rank)
        self.needed = {
            p.request: index.slot_rank[index.candidates(p.request)[0].slots[0]] for p in pods
        }

    def run(self, policy: Policy) -> SimResult:
        alloc: dict[str, str] = {}
        snapshot = ClusterSnapshot(self.nodes, alloc)
        waits = [0.0] * len(self.pods)
        departures: list[tuple[float, int, tuple[str, ...]]] = []
        queue: list[int] = []
        oversized = 0
        end_arrivals = self.pods[-1].arrival
        integral, last, nxt = 0.0, 0.0, 0
        while nxt < len(self.pods) or departures:
            if departures and (nxt == len(self.pods) or departures[0][0] <= self.pods[nxt].arrival):
                now, _, uuids = heapq.heappop(departures)
                integral += len(alloc) * (min(now, end_arrivals) - min(last, end_arrivals))
                for u in uuids:
                    del alloc[u]
            else:
                now = self.pods[nxt].arrival
                integral += len(alloc) * (min(now, end_arrivals) - min(last, end_arrivals))
                queue.append(nxt)
                nxt += 1
            last = now
            for p, uuids in self._schedule(policy, snapshot, queue, now):
                waits[p] = now - self.pods[p].arrival
                oversized += self.rank[uuids[0]] > self.needed[self.pods[p].request]
                heapq.heappush(departures, (now + self.pods[p].duration, p, uuids))
        rate = integral / (self.total * end_arrivals) if end_arrivals > 0 else 0.0
        return SimResult(waits, oversized, len(self.pods), rate)

    def _schedule(
        self, policy: Policy, snapshot: ClusterSnapshot, queue: list[int], now: float
    ) -> list[tuple[int, tuple[str, ...]]]:
        """Start what fits now, in queue order; mutates ``snapshot.allocations`` and ``queue``."""
        alloc = snapshot.allocations
        assert isinstance(alloc, dict)
        started: list[tuple[int, tuple[str, ...]]] = []
        failed: set[PlacementRequest] = set()
        keep: list[int] = []
        for k, p in enumerate(queue):
            request = self.pods[p].request
            free = self.total - len(alloc)
            if request in failed or request.gpu_count > free:
                result: Placement | NoFit | None = None
            else:
                result = policy(snapshot, request)
            if isinstance(result, Placement):
                for u in result.gpu_uuids:
                    alloc[u] = f"pod-{p}"
                started.append((p, result.gpu_uuids))
                continue
            failed.add(request)
            keep.append(p)
            if not self.backfill or free == 0:
                keep.extend(queue[k + 1 :])
                break
        queue[:] = keep
        return started


def policy_metrics(results: list[SimResult]) -> dict[str, float]:
    """Waits and placements pooled over the runs; allocation rate averaged over them."""
    waits = [w for r in results for w in r.waits]
    return {
        "wait_mean_s": statistics.fmean(waits),
        "wait_p95_s": _pct(waits, 0.95),
        "wait_p99_s": _pct(waits, 0.99),
        "waited_share": sum(w > 0 for w in waits) / len(waits),
        "oversized_share": sum(r.oversized for r in results) / sum(r.placed for r in results),
        "allocation_rate": statistics.fmean(r.allocation_rate for r in results),
    }


def policies(seed: int) -> dict[str, Policy]:
    return {
        "ours": place,
        "first_fit": first_fit,
        "random": functools.partial(random_fit, rng=random.Random(seed)),
        "spread": spread,
        "best_fit": best_fit,  # ours without the fair share (an ablation, not a target)
    }


def _replay_once(
    args: argparse.Namespace, seed: int, results: dict[str, list[SimResult]]
) -> dict[str, object]:
    """One sub-cluster (drawn with ``seed``): every policy over the same pods."""
    trace_dir = Path(args.traces) / "alibaba-gpu-v2023"
    pods = load_pods(trace_dir / "openb_pod_list_gpuspec33.csv", args.max_pods, not args.cluster)
    if args.cluster:
        nodes = tuple(NodeState(n) for n in load_inventory_file(args.cluster))
    else:
        path = trace_dir / "openb_node_list_gpu_node.csv"
        nodes = trace_cluster(path, args.nodes, pods, random.Random(seed))
    index = index_for(nodes)
    fits = [p for p in pods if index.candidates(p.request)]
    fits, factor = scale_arrivals(fits, len(index.slot_of), args.load)
    sim = Simulation(nodes, fits, backfill=args.queue == "backfill")
    for name, policy in policies(seed).items():
        results.setdefault(name, []).append(sim.run(policy))
    return {
        "seed": seed,
        "nodes": len(nodes),
        "gpus": len(index.slot_of),
        "models": dict(sorted(Counter(g.model for n in nodes for g in n.inventory.gpus).items())),
        "pods": len(fits),
        "pods_skipped_no_fit": len(pods) - len(fits),
        "pods_fractional_as_whole": sum(p.fractional for p in fits),
        "arrival_scale": factor,
    }


def replay(args: argparse.Namespace) -> dict[str, object]:
    """Every policy on ``--repeats`` sub-clusters; pooled metrics and ratios to first_fit."""
    repeats = 1 if args.cluster else args.repeats
    results: dict[str, list[SimResult]] = {}
    runs = [_replay_once(args, args.seed + k, results) for k in range(repeats)]
    out = {name: policy_metrics(r) for name, r in results.items()}
    base = out["first_fit"]
    ratios = {
        name: {k: (m[k] / base[k] if base[k] else None) for k in m} for name, m in out.items()
    }
    return {"runs": runs, "queue": args.queue, "policies": out, "ratio_to_first_fit": ratios}


# -- output --------------------------------------------------------------------------------


def latency(args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    for n in (10, 100, 1000):
        m = measure_latency(n, args.decisions, args.cold, args.seed)
        for key, value in m.items():
            out[f"latency_{n}x8_{key}"] = value
    return out


def print_tables(result: dict[str, object]) -> None:
    if "latency_10x8_median_ms" in result:
        print_latency(result)
    print_replay(result)


def print_latency(result: dict[str, object]) -> None:
    print(
        "Decision latency (ms), half of the GPUs allocated, warm = same inventory object; "
        f"load average {result['loadavg_1min']:.1f} on {result['cpus']} CPUs"
    )
    print(f"{'cluster':>10} {'median':>8} {'p99':>8} {'cpu p99':>8} {'cold':>8} {'nofit':>6}")
    for n in (10, 100, 1000):
        r = {
            k: float(result[f"latency_{n}x8_{k}"])  # type: ignore[arg-type]
            for k in ("median_ms", "p99_ms", "cpu_p99_ms", "cold_median_ms", "nofit_share")
        }
        print(
            f"{f'{n}x8':>10} {r['median_ms']:8.3f} {r['p99_ms']:8.3f} {r['cpu_p99_ms']:8.3f} "
            f"{r['cold_median_ms']:8.2f} {r['nofit_share']:6.1%}"
        )


def print_replay(result: dict[str, object]) -> None:
    rep = result["replay"]
    assert isinstance(rep, dict)
    print(f"\nReplay at offered load {result['load']}, queue {rep['queue']}:")
    for run in rep["runs"]:
        models = ", ".join(f"{n} {m}" for m, n in run["models"].items())
        print(
            f"  seed {run['seed']}: {run['nodes']} nodes, {run['gpus']} GPUs ({models}); "
            f"{run['pods']} pods ({run['pods_fractional_as_whole']} fractional, as 1 GPU; "
            f"{run['pods_skipped_no_fit']} skipped: fit no node); "
            f"arrival scale {run['arrival_scale']:.3f}"
        )
    cols = ["wait_mean_s", "wait_p95_s", "wait_p99_s", "oversized_share", "allocation_rate"]
    print(f"\n{'policy':>10} " + " ".join(f"{c:>18}" for c in cols))
    for name, m in rep["policies"].items():
        ratio = rep["ratio_to_first_fit"][name]
        cells = [f"{m[c]:10.3f} ({_ratio(ratio[c])})" for c in cols]
        print(f"{name:>10} " + " ".join(f"{c:>18}" for c in cells))
    print("(in brackets: ratio to first_fit)")


def _ratio(value: float | None) -> str:
    return "  -  " if value is None else f"{value:5.2f}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--cluster", help="declared-inventory YAML to replay onto (drops gpu_spec)")
    p.add_argument("--traces", default=str(DEFAULT_TRACES), help="the shared traces folder")
    p.add_argument("--load", type=float, default=0.9, help="target offered load (default 0.9)")
    p.add_argument("--seed", type=int, default=1, help="seed for clusters, allocations, random")
    p.add_argument("--nodes", type=int, default=12, help="trace sub-cluster size (default 12)")
    p.add_argument("--max-pods", type=int, default=None, help="GPU pods replayed (default all)")
    p.add_argument(
        "--repeats", type=int, default=10, help="sub-clusters, seeds seed.. (default 10)"
    )
    p.add_argument("--queue", choices=("backfill", "fifo"), default="backfill")
    p.add_argument("--decisions", type=int, default=2000, help="warm decisions per size")
    p.add_argument("--cold", type=int, default=5, help="cold decisions per size")
    p.add_argument("--skip-latency", action="store_true", help="only the replay")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    result: dict[str, object] = {
        "load": args.load,
        "seed": args.seed,
        "loadavg_1min": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if not args.skip_latency:
        result.update(latency(args))
    rep = replay(args)
    result["replay"] = rep
    result["policies"] = rep["policies"]
    result["ratio_to_first_fit"] = rep["ratio_to_first_fit"]
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_tables(result)


if __name__ == "__main__":
    main()
