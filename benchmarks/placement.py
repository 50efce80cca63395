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
   event-driven simulation (heapq) replays it for every policy. The simulation only
   advances time and frees GPUs: which queued pods start, and where, is decided by the
   hub's own ``jupyterhub_gpu.core.scheduling.schedule`` (docs/scheduling.md) with the
   policy as its placement function. The placement policies (``ours``, ``first_fit``,
   ``random``, ``spread``, ``best_fit``) run first come first served with backfill
   (``--queue fifo``: strict head-of-line); ``fairshare`` is the product: ``place``
   with the fair-share queue order (default ``SchedulerSettings``). The trace has no
   user column: each pod is charged to one of ``--groups`` synthetic groups, drawn with
   weights 1/k (Zipf-like, unequal demand) from ``random.Random(--group-seed)``. Waits
   and placements are pooled over the repeats; ``jain_fairness`` (Jain's index over
   groups of GPU-hours received / max-min fair share, per hour of replay; see
   ``jain_fairness``) is averaged over them.

3. **Image locality** (``--images K``, off by default): each replayed pod runs one of K
   images (``img1``..), drawn with weights 1/k (Zipf) from ``random.Random(--image-seed)``;
   each node starts with a random subset (each image with probability ``--image-share``,
   at most ``--image-slots``), a pod started on a node without its image pulls it there
   (the least recently started image no running pod uses is dropped when the node is
   full: a disk budget). ``ours`` and ``fairshare`` are replayed twice on the first
   sub-cluster: with the image in the request (locality) and without (``*_blind``: the
   placement before locality). Reported: pulls, the share of starts that found their
   image (``local_share``), ``pulls_avoided`` and the waits of each run.

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23 (alibaba/clusterdata, cluster-trace-gpu-v2023).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.core.placement.baselines import best_fit, first_fit, random_fit, spread
from jupyterhub_gpu.core.placement.index import clear_cache, index_for
from jupyterhub_gpu.core.placement.journal import Allocations
from jupyterhub_gpu.core.placement.locality import wanted
from jupyterhub_gpu.core.scheduling import (
    ClusterState,
    QueuedRequest,
    SchedulerSettings,
    UsageItem,
    UsageTotals,
    advance,
    schedule,
)
from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy, parse_policy
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.edges.adminfiles import load_inventory_file

Policy = Callable[[ClusterSnapshot, PlacementRequest], Placement | NoFit]
DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
GROUPS = 8  # synthetic groups the pods are charged to (the trace has no user column)
GROUP_SEED = 12  # fixed: the same pods get the same groups in every run
FAIR_WINDOW_S = 3600.0  # Jain's index: fair shares are worked out per hour of replay

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
    # shares in play (issue 26): the RTX 3090 and TITAN X are shared in 4 (LATENCY_SHARING)
    PlacementRequest(1, shares=1, share_of=4),
    PlacementRequest(1, shares=2, allowed_models=frozenset({"NVIDIA GeForce RTX 3090"})),
]
LATENCY_SHARING = parse_policy(
    {"NVIDIA GeForce RTX 3090": {"shares": 4}, "NVIDIA TITAN X (Pascal)": {"shares": 4}}, {}
)
QUEUE_WAITING = 200  # requests waiting in the timed queue decision
# --smoke: one sub-cluster, the first 400 GPU pods of the trace, 40 warm and 1 cold
# decisions per cluster size (every latency request shape is still asked)
SMOKE: dict[str, object] = {"repeats": 1, "max_pods": 400, "decisions": 40, "cold": 1}


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

    allocations: Allocations = field(default_factory=Allocations)  # journaled, as the hub's
    servers: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)
    our: frozenset[str] = frozenset()
    serial: int = 0
    shares: dict[str, int] = field(default_factory=dict)  # uuid -> shares held on it

    def add(self, uuids: Sequence[str], shares: int = 0) -> None:
        self.serial += 1
        cid = f"c{self.serial:08d}"
        for u in uuids:
            self.allocations[u] = SHARED if shares else cid
            if shares:
                self.shares[u] = self.shares.get(u, 0) + shares
        self.servers.append((cid, tuple(uuids), shares))
        self.our = self.our | {cid}

    def remove_random(self, rng: random.Random) -> None:
        k = rng.randrange(len(self.servers))
        self.servers[k], self.servers[-1] = self.servers[-1], self.servers[k]
        cid, uuids, shares = self.servers.pop()
        for u in uuids:
            if shares:
                self.shares[u] -= shares
                if self.shares[u]:
                    continue
                del self.shares[u]
            del self.allocations[u]
        self.our = self.our - {cid}

    def snapshot(self, nodes: tuple[NodeState, ...]) -> ClusterSnapshot:
        """A snapshot whose allocations are a fork of the ledger's, as the hub's
        ``GPULedger.allocations()`` gives them (built before the timer starts, as there)."""
        alloc = self.allocations.fork()
        return ClusterSnapshot(nodes, alloc, self.our, self.shares, LATENCY_SHARING)


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
        place(ledger.snapshot(nodes), LATENCY_REQUESTS[0])
        cold_ms.append((time.perf_counter_ns() - t) / 1e6)
    wall_ms, cpu_ms, nofit = [], [], 0
    for i in range(decisions):
        snapshot = ledger.snapshot(nodes)
        request = LATENCY_REQUESTS[i % len(LATENCY_REQUESTS)]
        c, t = time.thread_time_ns(), time.perf_counter_ns()
        result = place(snapshot, request)
        wall_ms.append((time.perf_counter_ns() - t) / 1e6)
        cpu_ms.append((time.thread_time_ns() - c) / 1e6)
        if isinstance(result, Placement):
            ledger.add(result.gpu_uuids, result.share.count if result.share else 0)
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


def measure_queue_decision(n_nodes: int, waiting: int, runs: int, seed: int) -> float:
    """Median ms of one whole queue decision (``schedule``, the product's settings) over
    ``waiting`` requests of every latency shape (shares included) on ``n_nodes`` x 8 GPUs
    with all but a few GPUs allocated, so most requests wait and each decision tries them
    all. The index is warm (built before), as between two inventory refreshes."""
    rng = random.Random(seed)
    nodes = synthetic_cluster(n_nodes, rng)
    ledger = _Ledger()
    uuids = [g.uuid for n in nodes for g in n.inventory.gpus]
    for u in rng.sample(uuids, len(uuids) - 16):
        ledger.add((u,))
    shapes = LATENCY_REQUESTS
    queue = [
        QueuedRequest(str(k), f"u{k % 40}", f"g{k % 8}", shapes[k % len(shapes)], float(k))
        for k in range(waiting)
    ]
    state = ClusterState(ledger.snapshot(nodes), now=float(waiting))
    settings = SchedulerSettings()
    schedule(queue, state, settings)  # warm: the index and its candidates
    times = []
    for _ in range(runs):
        t = time.perf_counter_ns()
        schedule(queue, state, settings)
        times.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(times)


# -- the trace -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    arrival: float
    duration: float
    request: PlacementRequest
    fractional: bool  # asked for part of a GPU (gpu_milli < 1000): replayed as 1 whole GPU
    group: str = ""  # synthetic: the trace has no user column (see assign_groups)
    milli: int = 1000  # gpu_milli: thousandths of one GPU (1000 for whole GPUs)


def as_shares(pods: list[Pod], split: int) -> list[Pod]:
    """The fractional pods asking for shares of one GPU split into ``split``: their
    ``gpu_milli`` rounded up to whole shares (a pod of 0.3 GPU takes 2 of 4); a pod that
    rounds up to the whole GPU stays a whole request. The others are unchanged."""
    out = []
    for p in pods:
        count = -(-p.milli * split // 1000)
        if p.fractional and count < split:
            request = dataclasses.replace(p.request, shares=count, share_of=split)
            p = dataclasses.replace(p, request=request)
        out.append(p)
    return out


def share_policy(split: int) -> SharingPolicy:
    """Every trace model shared into ``split`` equal shares (time-slicing)."""
    return parse_policy({m: {"shares": split} for m in TRACE_MODELS}, {})


def group_weights(groups: int) -> list[float]:
    """Zipf-like demand: group ``k`` (1-based) gets a share of pods proportional to 1/k."""
    return [1.0 / k for k in range(1, groups + 1)]


def assign_groups(pods: list[Pod], groups: int, seed: int) -> list[Pod]:
    """Each pod charged to one of ``groups`` groups (``g1``..), drawn independently with
    :func:`group_weights` from ``random.Random(seed)``, in arrival order."""
    rng = random.Random(seed)
    names = [f"g{k}" for k in range(1, groups + 1)]
    drawn = rng.choices(names, weights=group_weights(groups), k=len(pods))
    return [dataclasses.replace(p, group=g) for p, g in zip(pods, drawn, strict=True)]


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


def load_pods(
    path: Path,
    max_pods: int | None,
    keep_models: bool,
    groups: int = GROUPS,
    group_seed: int = GROUP_SEED,
) -> list[Pod]:
    """GPU pods that ran, in arrival order, from the 1st percentile of arrivals on.

    Skips pods with ``num_gpu == 0`` and pods never scheduled (no service time); the
    first 1% of arrivals (a sparse head months before the rest) is dropped too. Each
    pod is charged to a synthetic group (:func:`assign_groups`, ``group_seed``).
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
                milli=int(row["gpu_milli"]),
            )
        )
    pods.sort(key=lambda p: p.arrival)
    start = len(pods) // 100
    pods = pods[start:] if max_pods is None else pods[start : start + max_pods]
    return assign_groups(pods, groups, group_seed)


def scale_arrivals(pods: list[Pod], total_gpus: int, load: float) -> tuple[list[Pod], float]:
    """Scale inter-arrival times so sum(gpus x duration) / (GPUs x span) == ``load``."""
    work = sum(p.request.gpu_count * p.duration for p in pods)
    t0 = pods[0].arrival
    span = pods[-1].arrival - t0
    factor = work / (total_gpus * span * load)
    scaled = [dataclasses.replace(p, arrival=(p.arrival - t0) * factor) for p in pods]
    return scaled, factor


# -- the simulation ------------------------------------------------------------------------


@dataclass
class SimResult:
    waits: list[float]
    oversized: int
    placed: int
    allocation_rate: float
    jain_fairness: float = 1.0


class Simulation:
    """Event-driven replay: arrivals join the queue, departures free GPUs.

    The simulation only advances time and frees GPUs; after every event, which queued
    pods start and where is decided by ``jupyterhub_gpu.core.scheduling.schedule``, the
    hub's own queue decision, with the policy as its ``place_fn`` and the run's
    :class:`SchedulerSettings`: first come first served with plain backfill for the
    placement baselines (``SchedulerSettings.fifo``; ``--queue fifo``: strict order),
    fair share by decayed usage with claimed-node backfill for ``fairshare``. Usage for
    fair share is every finished pod's GPU-hours plus the running pods' hours so far,
    charged to the pod's synthetic group (one user per group).
    """

    def __init__(
        self,
        nodes: tuple[NodeState, ...],
        pods: list[Pod],
        backfill: bool,
        sharing: SharingPolicy = NO_SHARING,
    ) -> None:
        self.nodes, self.pods, self.backfill, self.sharing = nodes, pods, backfill, sharing
        index = index_for(nodes)
        self.memory = {g.uuid: g.memory_mib for n in nodes for g in n.inventory.gpus}
        self.shares: dict[str, int] = {}  # uuid -> shares held (pods placed as shares)
        self.share_memory: dict[str, int] = {}  # uuid -> MiB the shares on it were given
        self.over_memory = 0  # shares placed beyond their GPU's memory (must stay 0)
        self.gpus_in_use: list[int] = []  # GPUs held after every event
        self.rank = {u: index.slot_rank[s] for u, s in index.slot_of.items()}
        self.model = {u: index.slot_model[s] for u, s in index.slot_of.items()}
        self.total = len(self.rank)
        self.needed = {
            p.request: index.slot_rank[index.candidates(p.request)[0].slots[0]] for p in pods
        }
        self.items = [
            QueuedRequest(str(k), p.group, p.group, p.request, p.arrival)
            for k, p in enumerate(pods)
        ]
        self._settings = SchedulerSettings.fifo(backfill)
        self._usage = UsageTotals(0.0)
        self._running: dict[int, tuple[float, tuple[str, ...]]] = {}

    def run(self, policy: Policy) -> SimResult:
        """``policy`` first come first served (plain backfill, or strict order)."""
        return self.replay(policy, SchedulerSettings.fifo(self.backfill))

    def replay(self, policy: Policy, settings: SchedulerSettings) -> SimResult:
        """The whole trace through ``schedule`` with ``settings`` and ``policy``."""
        self._settings = settings
        alloc: dict[str, str] = {}
        self._usage, self._running = UsageTotals(0.0), {}
        self.shares, self.share_memory, self.over_memory = {}, {}, 0
        self.gpus_in_use = []
        self._share_of: dict[int, tuple[int, int]] = {}  # pod -> (shares, MiB) held
        snapshot = ClusterSnapshot(self.nodes, alloc, shares=self.shares, sharing=self.sharing)
        waits = [0.0] * len(self.pods)
        departures: list[tuple[float, int, tuple[str, ...]]] = []
        queue: list[int] = []
        oversized = 0
        end_arrivals = self.pods[-1].arrival
        integral, last, nxt = 0.0, 0.0, 0
        while nxt < len(self.pods) or departures:
            if departures and (nxt == len(self.pods) or departures[0][0] <= self.pods[nxt].arrival):
                now, p, uuids = heapq.heappop(departures)
                integral += len(alloc) * (min(now, end_arrivals) - min(last, end_arrivals))
                self._release(p, uuids, alloc)
                self._finished(p, now)
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
                self._running[p] = (now, uuids)
            self.gpus_in_use.append(len(alloc))
        rate = integral / (self.total * end_arrivals) if end_arrivals > 0 else 0.0
        jain = jain_fairness(self.pods, waits, self.total, end_arrivals, FAIR_WINDOW_S)
        return SimResult(waits, oversized, len(self.pods), rate, jain)

    def _release(self, p: int, uuids: tuple[str, ...], alloc: dict[str, str]) -> None:
        """Free pod ``p``'s GPUs, or its shares (the GPU once its last share ends)."""
        held = self._share_of.pop(p, None)
        if held is None:
            for u in uuids:
                del alloc[u]
            return
        (u,) = uuids
        self.shares[u] -= held[0]
        self.share_memory[u] -= held[1]
        if not self.shares[u]:
            del self.shares[u], self.share_memory[u], alloc[u]

    def _take_share(self, p: int, placement: Placement, alloc: dict[str, str]) -> None:
        share = placement.share
        assert share is not None
        (u,) = placement.gpu_uuids
        alloc[u] = SHARED
        self.shares[u] = self.shares.get(u, 0) + share.count
        self.share_memory[u] = self.share_memory.get(u, 0) + share.memory_mib
        self.over_memory += self.share_memory[u] > self.memory[u]
        self._share_of[p] = (share.count, share.memory_mib)

    def _fair(self) -> bool:
        s = self._settings
        return s.weight_fairshare > 0 or s.weight_user_fairshare > 0

    def _finished(self, p: int, now: float) -> None:
        start, uuids = self._running.pop(p)
        if self._fair():
            item = self._usage_item(p, start, uuids, now)
            self._usage = advance(self._usage, [item], now, self._settings)

    def _usage_item(self, p: int, start: float, uuids: tuple[str, ...], now: float) -> UsageItem:
        held = self._share_of.get(p)
        amount = self.pods[p].request.gpu_amount if held else len(uuids)
        hours = amount * (now - start) / 3600.0
        return UsageItem(self.pods[p].group, self.pods[p].group, self.model[uuids[0]], hours, now)

    def _usage_now(self, now: float) -> UsageTotals | None:
        """Finished pods' decayed usage plus the running pods' hours so far."""
        if not self._fair():
            return None
        running = [self._usage_item(p, s, u, now) for p, (s, u) in self._running.items()]
        return advance(self._usage, running, now, self._settings)

    def _schedule(
        self, policy: Policy, snapshot: ClusterSnapshot, queue: list[int], now: float
    ) -> list[tuple[int, tuple[str, ...]]]:
        """Start what ``schedule`` starts now; mutates ``snapshot.allocations`` and ``queue``."""
        alloc = snapshot.allocations
        assert isinstance(alloc, dict)
        state = ClusterState(snapshot, now, usage=self._usage_now(now))
        decision = schedule([self.items[p] for p in queue], state, self._settings, policy)
        started: list[tuple[int, tuple[str, ...]]] = []
        for start in decision.starts:
            p = int(start.request.id)
            if start.placement.share is not None:
                self._take_share(p, start.placement, alloc)
            for u in () if start.placement.share else start.placement.gpu_uuids:
                alloc[u] = f"pod-{p}"
            started.append((p, start.placement.gpu_uuids))
        gone = {p for p, _ in started} | {int(r.request.id) for r in decision.refused}
        queue[:] = [p for p in queue if p not in gone]
        return started


class ImageSimulation(Simulation):
    """The replay with images: which node holds which image, pulls, and a disk budget.

    ``images[p]`` is pod ``p``'s image (an index); the pods' requests name it (locality)
    or not (blind: the same starts are counted, placement just doesn't know). Every start
    on a node without the image is a pull that adds it; past ``slots`` images, the least
    recently started one that no running pod uses is dropped.
    """

    def __init__(
        self,
        nodes: tuple[NodeState, ...],
        pods: list[Pod],
        images: list[int],
        held: dict[str, list[int]],
        slots: int,
        backfill: bool,
    ) -> None:
        super().__init__(nodes, pods, backfill)
        self.images, self.initial, self.slots = images, held, slots
        self.node_of = {g.uuid: n.name for n in nodes for g in n.inventory.gpus}
        self.names = {k: wanted(f"img{k}") for k in set(images)}
        self.names.update({k: wanted(f"img{k}") for ks in held.values() for k in ks})
        self.reset()

    def reset(self) -> None:
        # node -> image -> last start (initial images: -1, in their order)
        self.held: dict[str, dict[int, float]] = {
            n: {k: -1.0 - i for i, k in enumerate(ks)} for n, ks in self.initial.items()
        }
        self.in_use: Counter[tuple[str, int]] = Counter()
        self.where: dict[int, tuple[str, int]] = {}
        self.pulls = self.hits = 0
        self._now_nodes: tuple[NodeState, ...] | None = None

    def replay(self, policy: Policy, settings: SchedulerSettings) -> SimResult:
        self.reset()
        return super().replay(policy, settings)

    def _nodes_now(self) -> tuple[NodeState, ...]:
        if self._now_nodes is None:
            self._now_nodes = tuple(
                dataclasses.replace(
                    n, images=frozenset().union(*(self.names[k] for k in self.held[n.name]))
                )
                for n in self.nodes
            )
        return self._now_nodes

    def _schedule(
        self, policy: Policy, snapshot: ClusterSnapshot, queue: list[int], now: float
    ) -> list[tuple[int, tuple[str, ...]]]:
        now_snapshot = dataclasses.replace(snapshot, nodes=self._nodes_now())
        started = super()._schedule(policy, now_snapshot, queue, now)
        for p, uuids in started:
            node, image = self.node_of[uuids[0]], self.images[p]
            held = self.held[node]
            if image in held:
                self.hits += 1
            else:
                self.pulls += 1
                self._make_room(node)
                self._now_nodes = None
            held[image] = now
            self.in_use[(node, image)] += 1
            self.where[p] = (node, image)
        return started

    def _make_room(self, node: str) -> None:
        held = self.held[node]
        while len(held) >= self.slots:
            idle = [k for k in held if not self.in_use[(node, k)]]
            if not idle:
                break  # every image in use: over budget until one is free
            del held[min(idle, key=held.__getitem__)]

    def _finished(self, p: int, now: float) -> None:
        super()._finished(p, now)
        self.in_use[self.where.pop(p)] -= 1


def image_replay(args: argparse.Namespace) -> dict[str, object]:
    """``--images``: locality against the same replay without it, on the first sub-cluster."""
    nodes, fits, _ = _sub_cluster(args, args.seed)
    k = args.images
    draw = random.Random(args.image_seed)
    images = draw.choices(range(1, k + 1), weights=group_weights(k), k=len(fits))
    start = random.Random(args.seed + 7919)
    held = {}
    for n in nodes:
        some = [i for i in range(1, k + 1) if start.random() < args.image_share]
        held[n.name] = start.sample(some, min(len(some), args.image_slots))
    named = [
        dataclasses.replace(p, request=dataclasses.replace(p.request, image=wanted(f"img{i}")))
        for p, i in zip(fits, images, strict=True)
    ]
    runs = {
        "ours": (named, place, SchedulerSettings.fifo(args.queue == "backfill")),
        "ours_blind": (fits, place, SchedulerSettings.fifo(args.queue == "backfill")),
        "fairshare": (named, place, SchedulerSettings(backfill=args.queue == "backfill")),
        "fairshare_blind": (fits, place, SchedulerSettings(backfill=args.queue == "backfill")),
    }
    out: dict[str, object] = {
        "images": k,
        "image_share": args.image_share,
        "image_slots": args.image_slots,
        "image_seed": args.image_seed,
        "pods": len(fits),
        "nodes": len(nodes),
    }
    for name, (replayed, policy, settings) in runs.items():
        sim = ImageSimulation(
            nodes, replayed, images, held, args.image_slots, args.queue == "backfill"
        )
        result = sim.replay(policy, settings)
        metrics = policy_metrics([result])
        out[name] = {
            "pulls": sim.pulls,
            "local_share": sim.hits / len(fits),
            "wait_mean_s": metrics["wait_mean_s"],
            "wait_p95_s": metrics["wait_p95_s"],
            "allocation_rate": metrics["allocation_rate"],
        }
    for name in ("ours", "fairshare"):
        blind, local = out[f"{name}_blind"], out[name]
        assert isinstance(blind, dict) and isinstance(local, dict)
        local["pulls_avoided"] = blind["pulls"] - local["pulls"]
    return out


def _windows(lo: float, hi: float, width: float, end: float) -> list[tuple[int, float]]:
    """(window number, seconds of [lo, hi) inside it), for windows of ``width`` up to ``end``."""
    hi = min(hi, end)
    out = []
    w = int(lo // width)
    while lo < hi:
        top = min((w + 1) * width, hi)
        out.append((w, top - lo))
        lo, w = top, w + 1
    return out


def water_fill(demand: dict[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair split of ``capacity`` among equal-share groups, none above its demand."""
    fair: dict[str, float] = {}
    left, groups = capacity, sorted(demand, key=demand.__getitem__)
    for k, g in enumerate(groups):
        fair[g] = min(demand[g], left / (len(groups) - k))
        left -= fair[g]
    return fair


def jain_fairness(
    pods: list[Pod], waits: list[float], gpus: int, end: float, window: float
) -> float:
    """Jain's index over groups of x_g = GPU-hours received / fair share, up to ``end``.

    Per ``window`` of replay time, a group's *demand* is the GPU-time of its pods that
    were waiting or running, its *received* the GPU-time of its pods that ran, and its
    *fair share* the max-min fair (water-filling) split of the cluster's GPU-time among
    the groups' demands, with equal shares. x_g sums received and fair share over the
    windows. 1.0: every group got the same fraction of its fair share.
    """
    demand: dict[int, dict[str, float]] = {}
    received: dict[str, float] = {}
    for p, wait in zip(pods, waits, strict=True):
        n, start = p.request.gpu_count, p.arrival + wait
        for w, secs in _windows(p.arrival, start + p.duration, window, end):
            row = demand.setdefault(w, {})
            row[p.group] = row.get(p.group, 0.0) + n * secs
        received[p.group] = received.get(p.group, 0.0) + n * sum(
            secs for _, secs in _windows(start, start + p.duration, window, end)
        )
    fair: dict[str, float] = {}
    for row in demand.values():
        for g, f in water_fill(row, gpus * window).items():
            fair[g] = fair.get(g, 0.0) + f
    x = [received.get(g, 0.0) / f for g, f in fair.items() if f > 0]
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x and any(x) else 1.0


def policy_metrics(results: list[SimResult]) -> dict[str, float]:
    """Waits and placements pooled over the runs; allocation rate and Jain's index
    averaged over them."""
    waits = [w for r in results for w in r.waits]
    return {
        "wait_mean_s": statistics.fmean(waits),
        "wait_p95_s": _pct(waits, 0.95),
        "wait_p99_s": _pct(waits, 0.99),
        "waited_share": sum(w > 0 for w in waits) / len(waits),
        "oversized_share": sum(r.oversized for r in results) / sum(r.placed for r in results),
        "allocation_rate": statistics.fmean(r.allocation_rate for r in results),
        "jain_fairness": statistics.fmean(r.jain_fairness for r in results),
    }


def policies(seed: int) -> dict[str, Policy]:
    """The placement policies, each replayed first come first served (with backfill)."""
    return {
        "ours": place,
        "first_fit": first_fit,
        "random": functools.partial(random_fit, rng=random.Random(seed)),
        "spread": spread,
        "best_fit": best_fit,  # ours without the fair share (an ablation, not a target)
    }


def schedulers(args: argparse.Namespace) -> dict[str, tuple[Policy, SchedulerSettings]]:
    """Policies that change the queue, not only the placement: ``fairshare`` is the
    product (``place`` + fair-share order + claimed-node backfill, default settings)."""
    product = SchedulerSettings(backfill=args.queue == "backfill")
    return {"fairshare": (place, product)}


def _replay_once(
    args: argparse.Namespace, seed: int, results: dict[str, list[SimResult]]
) -> dict[str, object]:
    """One sub-cluster (drawn with ``seed``): every policy over the same pods."""
    trace_dir = Path(args.traces) / "alibaba-gpu-v2023"
    pods = load_pods(
        trace_dir / "openb_pod_list_gpuspec33.csv",
        args.max_pods,
        not args.cluster,
        args.groups,
        args.group_seed,
    )
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
    for name, (policy, settings) in schedulers(args).items():
        results.setdefault(name, []).append(sim.replay(policy, settings))
    return {
        "seed": seed,
        "nodes": len(nodes),
        "gpus": len(index.slot_of),
        "models": dict(sorted(Counter(g.model for n in nodes for g in n.inventory.gpus).items())),
        "pods": len(fits),
        "pods_skipped_no_fit": len(pods) - len(fits),
        "pods_fractional_as_whole": sum(p.fractional for p in fits),
        "arrival_scale": factor,
        "group_work_share": _work_shares(fits),
    }


def _work_shares(pods: list[Pod]) -> dict[str, float]:
    """Each group's part of the replayed GPU x seconds (its demand)."""
    work: dict[str, float] = {}
    for p in pods:
        work[p.group] = work.get(p.group, 0.0) + p.request.gpu_count * p.duration
    total = sum(work.values())
    return {g: work[g] / total for g in sorted(work, key=lambda g: int(g[1:]))}


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
    groups = {"count": args.groups, "seed": args.group_seed, "weights": group_weights(args.groups)}
    return {
        "runs": runs,
        "queue": args.queue,
        "groups": groups,
        "policies": out,
        "ratio_to_first_fit": ratios,
    }


def _sub_cluster(
    args: argparse.Namespace, seed: int
) -> tuple[tuple[NodeState, ...], list[Pod], float]:
    """The sub-cluster drawn with ``seed`` and the pods that fit it, arrivals scaled (as
    :func:`_replay_once` does)."""
    trace_dir = Path(args.traces) / "alibaba-gpu-v2023"
    pods = load_pods(
        trace_dir / "openb_pod_list_gpuspec33.csv",
        args.max_pods,
        not args.cluster,
        args.groups,
        args.group_seed,
    )
    if args.cluster:
        nodes = tuple(NodeState(n) for n in load_inventory_file(args.cluster))
    else:
        nodes = trace_cluster(trace_dir / "openb_node_list_gpu_node.csv", args.nodes, pods,
                              random.Random(seed))  # fmt: skip
    index = index_for(nodes)
    fits, factor = scale_arrivals(
        [p for p in pods if index.candidates(p.request)], len(index.slot_of), args.load
    )
    return nodes, fits, factor


def pod_kind(pod: Pod, split: int) -> str:
    """The pod's kind in the trace, the same in both runs of the shares replay: a
    fractional pod is "as shares" when :func:`as_shares` makes it ``split`` shares' worth
    less than a GPU, else "kept whole" (it rounds up to the whole GPU)."""
    if pod.fractional:
        shares = -(-pod.milli * split // 1000)
        return "fractional, as shares" if shares < split else "fractional, kept whole"
    n = pod.request.gpu_count
    return "1 GPU" if n == 1 else "8 GPUs" if n >= 8 else "2-4 GPUs"


def _share_metrics(sims: list[Simulation], results: list[SimResult], split: int) -> dict[str, Any]:
    """Pooled over the sub-clusters. ``gpus_in_use_mean``: GPUs held (a shared GPU counts
    once), averaged over time up to the last arrival (``allocation_rate`` x GPUs);
    ``wait_mean_s_by_kind``: each kind's part of ``wait_mean_s`` (they add up to it)."""
    waits = [w for r in results for w in r.waits]
    served = [
        sum(p.arrival + w <= sim.pods[-1].arrival for p, w in zip(sim.pods, r.waits, strict=True))
        for sim, r in zip(sims, results, strict=True)
    ]
    parts: dict[str, float] = {}
    for sim, r in zip(sims, results, strict=True):
        for p, w in zip(sim.pods, r.waits, strict=True):
            kind = pod_kind(p, split)
            parts[kind] = parts.get(kind, 0.0) + w / len(waits)
    return {
        "wait_mean_s": statistics.fmean(waits),
        "wait_p95_s": _pct(waits, 0.95),
        "wait_mean_s_by_kind": dict(sorted(parts.items())),
        "gpus_in_use_mean": statistics.fmean(
            r.allocation_rate * s.total for s, r in zip(sims, results, strict=True)
        ),
        "allocation_rate": statistics.fmean(r.allocation_rate for r in results),
        "pods": sum(len(s.pods) for s in sims),
        "pods_served_by_last_arrival": sum(served),
        "over_memory": sum(s.over_memory for s in sims),
    }


def _offered(pods: list[Pod], nodes: tuple[NodeState, ...]) -> float:
    """sum(GPUs x duration) / (GPUs x span), a share counted as its fraction of a GPU."""
    span = pods[-1].arrival - pods[0].arrival
    work = sum(p.request.gpu_amount * p.duration for p in pods)
    return work / (len(index_for(nodes).slot_of) * span)


def shares_replay(args: argparse.Namespace) -> dict[str, object]:
    """The product (``place`` + the default fair-share queue) on ``--repeats``
    sub-clusters, twice: fractional pods as whole GPUs (today) and as shares of
    ``--shares`` per GPU (:func:`as_shares`, every model shared: :func:`share_policy`)."""
    settings = SchedulerSettings(backfill=args.queue == "backfill")
    policy = share_policy(args.shares)
    runs: dict[str, tuple[list[Simulation], list[SimResult]]] = {
        "whole": ([], []),
        "shares": ([], []),
    }
    seeds = [args.seed + k for k in range(1 if args.cluster else args.repeats)]
    loads: list[tuple[float, float]] = []
    for seed in seeds:
        nodes, fits, _ = _sub_cluster(args, seed)
        backfill = args.queue == "backfill"
        pods = as_shares(fits, args.shares)
        # both runs: the same pods, arrivals (scaled to --load by whole-GPU demand),
        # durations and groups; only the fractional pods' requests differ
        assert [(p.arrival, p.duration, p.group) for p in pods] == [
            (p.arrival, p.duration, p.group) for p in fits
        ]
        loads.append((_offered(fits, nodes), _offered(pods, nodes)))
        for name, sim in (
            ("whole", Simulation(nodes, fits, backfill)),
            ("shares", Simulation(nodes, pods, backfill, policy)),
        ):
            runs[name][0].append(sim)
            runs[name][1].append(sim.replay(place, settings))
    whole, shared = (_share_metrics(*runs[k], args.shares) for k in ("whole", "shares"))
    return {
        "seeds": f"{seeds[0]}-{seeds[-1]}",
        "split": args.shares,
        "pods_as_shares": sum(p.request.shares > 0 for s in runs["shares"][0] for p in s.pods),
        "offered_load": statistics.fmean(w for w, _ in loads),
        "offered_load_as_shares": statistics.fmean(s for _, s in loads),
        "whole": whole,
        "shares": shared,
        "shares_wait_mean_ratio": shared["wait_mean_s"] / whole["wait_mean_s"],
        "shares_wait_p95_ratio": (
            shared["wait_p95_s"] / whole["wait_p95_s"] if whole["wait_p95_s"] else None
        ),
        "shares_over_memory": shared["over_memory"],
        # the same pods' own mean wait, shares run over whole run (not the issue's target,
        # which is over all pods; docs/sharing.md "Benchmark" says why both are given)
        "share_pods_wait_mean_ratio": _kind_ratio(shared, whole, ("fractional, as shares",)),
        "fractional_pods_wait_mean_ratio": _kind_ratio(
            shared, whole, ("fractional, as shares", "fractional, kept whole")
        ),
    }


def _kind_ratio(
    shared: dict[str, Any], whole: dict[str, Any], kinds: tuple[str, ...]
) -> float | None:
    """The mean wait of the pods of ``kinds`` in the shares run over the whole run's: the
    same pods in both (:func:`pod_kind`), so the ratio of their parts of the mean is the
    ratio of their own means. None when they did not wait in the whole run."""

    def part(m: dict[str, Any]) -> float:
        return sum(m["wait_mean_s_by_kind"].get(k, 0.0) for k in kinds)

    return part(shared) / part(whole) if part(whole) else None


def print_shares(rep: dict[str, object]) -> None:
    print(
        f"\nShares (seeds {rep['seeds']}, {rep['split']} shares per GPU, "
        f"{rep['pods_as_shares']} pods as shares):"
    )
    print(f"{'run':>8} {'wait mean':>10} {'p95':>9} {'GPUs in use':>12} {'served':>8}")
    for name in ("whole", "shares"):
        m = rep[name]
        assert isinstance(m, dict)
        print(
            f"{name:>8} {m['wait_mean_s']:10.1f} {m['wait_p95_s']:9.1f} "
            f"{m['gpus_in_use_mean']:12.2f} {m['pods_served_by_last_arrival']:>8}/{m['pods']}"
        )
    print(
        f"mean wait ratio {rep['shares_wait_mean_ratio']:.3f}, p95 ratio "
        f"{rep['shares_wait_p95_ratio']}, shares over memory {rep['shares_over_memory']}"
    )
    print(
        f"the share pods' own mean wait ratio {rep['share_pods_wait_mean_ratio']}, "
        f"all fractional pods' {rep['fractional_pods_wait_mean_ratio']}"
    )


# -- output --------------------------------------------------------------------------------


def latency(args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    for n in (10, 100, 1000):
        m = measure_latency(n, args.decisions, args.cold, args.seed)
        for key, value in m.items():
            out[f"latency_{n}x8_{key}"] = value
    out["queue_decision_200_ms"] = measure_queue_decision(1000, QUEUE_WAITING, 5, args.seed)
    return out


def print_tables(result: dict[str, object]) -> None:
    if "latency_10x8_median_ms" in result:
        print_latency(result)
    if "replay" in result:
        print_replay(result)
    if "shares" in result:
        assert isinstance(result["shares"], dict)
        print_shares(result["shares"])
    if "image_locality" in result:
        print_images(result["image_locality"])


def print_images(images: object) -> None:
    assert isinstance(images, dict)
    print(
        f"\nImage locality: {images['images']} images (Zipf), {images['pods']} pods on "
        f"{images['nodes']} nodes, each starting with an image at {images['image_share']}, "
        f"at most {images['image_slots']} per node"
    )
    print(f"{'run':>16} {'pulls':>7} {'local':>7} {'avoided':>8} {'wait mean':>10} {'p95':>9}")
    for name in ("ours", "ours_blind", "fairshare", "fairshare_blind"):
        r = images[name]
        print(
            f"{name:>16} {r['pulls']:7d} {r['local_share']:7.1%} "
            f"{r.get('pulls_avoided', ''):>8} {r['wait_mean_s']:10.1f} {r['wait_p95_s']:9.1f}"
        )


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
    queue_ms = result["queue_decision_200_ms"]
    print(f"One queue decision, {QUEUE_WAITING} waiting, 1000x8: {queue_ms:.2f} ms")


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
    cols += ["jain_fairness"]
    print(f"\n{'policy':>10} " + " ".join(f"{c:>18}" for c in cols))
    for name, m in rep["policies"].items():
        ratio = rep["ratio_to_first_fit"][name]
        cells = [f"{m[c]:10.3f} ({_ratio(ratio[c])})" for c in cols]
        print(f"{name:>10} " + " ".join(f"{c:>18}" for c in cells))
    print("(in brackets: ratio to first_fit)")
    g = rep["groups"]
    print(
        f"Groups: {g['count']} (g1..), pods drawn with weights 1/k, seed {g['seed']}; "
        "Jain's index over groups of GPU-hours received / max-min fair share, per hour"
    )


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
    p.add_argument("--groups", type=int, default=GROUPS, help="synthetic groups (default 8)")
    p.add_argument(
        "--group-seed", type=int, default=GROUP_SEED, help="seed of the groups (default 12)"
    )
    p.add_argument("--decisions", type=int, default=2000, help="warm decisions per size")
    p.add_argument("--cold", type=int, default=5, help="cold decisions per size")
    p.add_argument("--skip-latency", action="store_true", help="only the replay")
    p.add_argument(
        "--images", type=int, default=0, help="K images for the locality replay (0: off)"
    )
    p.add_argument(
        "--image-share", type=float, default=0.3, help="chance a node starts with an image"
    )
    p.add_argument("--image-slots", type=int, default=3, help="images a node keeps (disk)")
    p.add_argument("--image-seed", type=int, default=5, help="seed of the pods' images")
    p.add_argument(
        "--shares", type=int, default=4, help="shares per GPU in the shares replay (0: off)"
    )
    p.add_argument(
        "--only-shares", action="store_true", help="only the shares replay (and latency)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (seconds; the same keys): " + _smoke_help(SMOKE),
    )
    args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        p.set_defaults(**SMOKE)
        args = p.parse_args(argv)
    return args


def _smoke_help(values: dict[str, object]) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items())


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
    if args.images > 0:
        result["image_locality"] = image_replay(args)
    if not args.only_shares:
        rep = replay(args)
        result["replay"] = rep
        result["policies"] = rep["policies"]
        result["ratio_to_first_fit"] = rep["ratio_to_first_fit"]
    if args.shares > 0:
        shares = shares_replay(args)
        result["shares"] = shares
        for key in (
            "shares_wait_mean_ratio",
            "shares_wait_p95_ratio",
            "shares_over_memory",
            "share_pods_wait_mean_ratio",
            "fractional_pods_wait_mean_ratio",
        ):
            result[key] = shares[key]
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_tables(result)


if __name__ == "__main__":
    main()
