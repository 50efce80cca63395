"""A precomputed view of a cluster snapshot, so one placement decision stays under 1 ms.

Placement is a pure function of ``(snapshot, request)``; this module only memoises the
parts of that computation that do not change between decisions. Three inputs change at
different rates, and each is handled at its own cost:

- ``snapshot.nodes`` (the inventory: models, memory, driver, health, processes, live
  readings) changes when the inventory client refreshes, every few seconds at most. A
  :class:`ClusterIndex` is built from it once (``O(GPUs)``) and cached by the identity of
  the ``nodes`` tuple. Per request shape, the index also caches the *static* candidates:
  the (node, model) slots that satisfy the request's model, memory, driver and
  compute-capability constraints, whatever is allocated.
- ``snapshot.allocations`` and ``snapshot.our_containers`` change with every spawn and
  stop. When ``allocations`` is a journaled :class:`~.journal.Allocations` of the same
  family as the one the index saw last (the ledger's, its snapshots, the queue pass's
  working copies), only the uuids its journals name are re-checked (``O(changes)``);
  otherwise one C-level symmetric difference with a private copy of what the index saw
  last (``O(allocated GPUs)``). Either way the per-slot free counts are updated for the
  GPUs that changed. ``our_containers`` only matters for unallocated GPUs that run
  processes (an allocated GPU is taken anyway): those few are re-judged when the part of
  it that names their containers changes.

A *slot* is the set of healthy GPUs of one model (and one class) on one node: a placement
never mixes models, so a slot is the unit that nodes are compared by.

A *GPU class* is ``(memory_mib, compute_capability)``; classes are ordered by memory first,
then compute capability, so "the smallest class that satisfies a request" keeps the cards
with the most memory, then the newest architectures, for requests that need them.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from jupyterhub_gpu.core.inventory import GPU, NodeState, parse_version
from jupyterhub_gpu.core.placement.journal import Point, changed_between, point_of
from jupyterhub_gpu.core.placement.request import PlacementRequest

GPUClass = tuple[int, tuple[int, int]]  # (memory_mib, compute capability)
# one device as the device chooser sees it: (uuid, index, busy 0..1, topology group)
Device = tuple[str, int, float, str | None]

_CANDIDATE_CACHE_SIZE = 1024  # request shapes remembered per index
_INDEX_CACHE_SIZE = 4  # inventories remembered
_JOURNAL_FROM = 256  # allocations below this many are diffed whole (cheaper than journals)


class ClassSlots(NamedTuple):
    """The slots of one GPU class that could hold a request, and their GPU count;
    ``holders``: those of the slots whose node holds the request's image, in the same
    order (empty when the request names no image or no node holds it)."""

    slots: tuple[int, ...]
    gpus: int
    holders: tuple[int, ...] = ()


def gpu_class(gpu: GPU) -> GPUClass:
    """The class of a card: ``(memory_mib, compute_capability)``; smaller sorts first."""
    return (gpu.memory_mib, gpu.compute_capability)


def busy(gpu: GPU) -> float:
    """How busy a card looks right now, 0..1: the larger of utilisation and memory use."""
    mem = gpu.memory_used_mib / gpu.memory_mib if gpu.memory_mib else 0.0
    return max(gpu.utilization_pct / 100.0, min(mem, 1.0))


def _driver(text: str) -> tuple[int, ...] | None:
    try:
        return parse_version(text)
    except ValueError:
        return None


class ClusterIndex:
    """Read-only arrays over one inventory (``snapshot.nodes``), built once per inventory."""

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self.nodes = nodes
        self.node_name: list[str] = []
        self.node_ok: list[bool] = []  # schedulable and reachable
        self.node_driver: list[tuple[int, ...] | None] = []
        self.node_live: list[float] = []  # mean busy of the node's GPUs
        self.slot_node: list[int] = []
        self.slot_model: list[str] = []
        self.slot_class: list[GPUClass] = []
        self.slot_rank: list[int] = []  # position of slot_class among all classes
        self.slot_devices: list[tuple[Device, ...]] = []  # healthy GPUs, by index
        self.slot_size: list[int] = []
        self.slot_of: dict[str, int] = {}  # healthy GPU uuid -> slot
        self.device_of: dict[str, Device] = {}  # healthy GPU uuid -> its device
        self.unhealthy: Counter[tuple[int, str]] = Counter()  # (node, model) -> broken GPUs
        self.procs: dict[str, tuple[str, ...]] = {}  # uuid -> containers with processes
        for node in self.nodes:
            self._add_node(node)
        self.classes = sorted(set(self.slot_class))
        rank = {c: i for i, c in enumerate(self.classes)}
        self.slot_rank = [rank[c] for c in self.slot_class]
        self._lock = threading.Lock()
        self._candidates: dict[PlacementRequest, tuple[ClassSlots, ...]] = {}
        # (share request, sharing policy[, what]) -> what placement.shares found for them
        self.share_cache: dict[tuple[object, ...], Any] = {}
        # dynamic state, mirrored from the last sync() (guarded by _lock)
        self._held: set[str] = set()  # allocated uuids
        self._unheld_procs: set[str] = set(self.procs)  # unallocated GPUs with processes
        self._our_procs: frozenset[str] | None = None  # our containers among procs'
        self._proc_containers = frozenset(c for cs in self.procs.values() for c in cs)
        self._seen: Point | None = None  # the journaled allocations synced last
        self._foreign: set[str] = set()  # unallocated GPUs running a process not of ours
        self._free: list[int] = list(self.slot_size)  # per slot: healthy, not held, not foreign

    def _add_node(self, node: NodeState) -> None:
        n = len(self.node_name)
        inv = node.inventory
        self.node_name.append(inv.name)
        self.node_ok.append(node.schedulable and node.reachable)
        self.node_driver.append(_driver(inv.driver_version))
        slots: dict[tuple[str, GPUClass], list[Device]] = {}
        live = 0.0
        for g in sorted(inv.gpus, key=lambda g: g.index):
            b = busy(g)
            live += b
            if g.process_containers:
                self.procs[g.uuid] = g.process_containers
            if g.healthy is False:
                self.unhealthy[(n, g.model)] += 1
                continue
            slots.setdefault((g.model, gpu_class(g)), []).append(
                (g.uuid, g.index, b, g.topology_group)
            )
        self.node_live.append(live / len(inv.gpus) if inv.gpus else 0.0)
        for (model, cls), devices in slots.items():
            s = len(self.slot_node)
            self.slot_node.append(n)
            self.slot_model.append(model)
            self.slot_class.append(cls)
            self.slot_devices.append(tuple(devices))
            self.slot_size.append(len(devices))
            for d in devices:
                self.slot_of[d[0]] = s
                self.device_of[d[0]] = d

    # -- static candidates ---------------------------------------------------------------

    def slot_matches(
        self, s: int, request: PlacementRequest, driver: tuple[int, ...] | None
    ) -> bool:
        """Whether slot ``s`` meets every static constraint of ``request`` (not free-ness)."""
        n = self.slot_node[s]
        mem, cc = self.slot_class[s]
        if not self.node_ok[n] or self.slot_size[s] < request.gpu_count:
            return False
        if driver is not None:
            have = self.node_driver[n]
            if have is None or have < driver:
                return False
        if request.allowed_models is not None and self.slot_model[s] not in request.allowed_models:
            return False
        if mem < request.min_memory_mib:
            return False
        lo, hi = request.min_compute_capability, request.max_compute_capability
        return (lo is None or cc >= lo) and (hi is None or cc <= hi)

    def candidates(self, request: PlacementRequest) -> tuple[ClassSlots, ...]:
        """Slots that could ever hold ``request``, grouped by class (smallest class first).

        Within a class, slots are ordered by their node's live load, then node name, then
        slot number: the static part of every tie-break. Cached per request shape (the
        image included: it decides each class's ``holders``).
        """
        hit = self._candidates.get(request)  # a dict read is atomic; writes take the lock
        if hit is not None:
            return hit
        driver = required_driver(request)
        by_rank: dict[int, list[int]] = {}
        for s in range(len(self.slot_node)):
            if self.slot_matches(s, request, driver):
                by_rank.setdefault(self.slot_rank[s], []).append(s)
        live, name, node = self.node_live, self.node_name, self.slot_node
        want = request.image
        held = [bool(want) and not want.isdisjoint(n.images) for n in self.nodes]
        result = []
        for _, slots in sorted(by_rank.items()):
            ordered = tuple(sorted(slots, key=lambda s: (live[node[s]], name[node[s]], s)))
            holders = tuple(s for s in ordered if held[node[s]])
            result.append(ClassSlots(ordered, sum(self.slot_size[s] for s in slots), holders))
        found = tuple(result)
        with self._lock:
            if len(self._candidates) >= _CANDIDATE_CACHE_SIZE:
                self._candidates.clear()  # many request shapes: start over
            self._candidates[request] = found
        return found

    def remember_shares(self, key: tuple[object, ...], found: Any) -> None:
        """Cache what ``placement.shares`` found for ``key`` (immutable by convention)."""
        with self._lock:
            if len(self.share_cache) >= _CANDIDATE_CACHE_SIZE:
                self.share_cache.clear()
            self.share_cache[key] = found

    # -- dynamic state -------------------------------------------------------------------

    def sync(
        self, allocations: Mapping[str, str], our: frozenset[str]
    ) -> tuple[list[int], frozenset[str]]:
        """Free GPUs per slot under ``allocations`` and ``our`` containers, and the
        unallocated GPUs busy with a foreign process.

        Works from the difference with the last call's allocations (a private copy, so
        any caller with any snapshot gets the right answer): the uuids the journals name
        between the two when both are journaled :class:`~.journal.Allocations` of one
        family, else all of them. Re-judges only unallocated GPUs that run processes, and
        only when ``our`` changes for their containers. Returns copies.
        """
        with self._lock:
            self._sync_allocations(allocations, our)
            self._sync_foreign(our)
            return list(self._free), frozenset(self._foreign)

    def _changed(self, allocations: Mapping[str, str], now: Point | None) -> Iterable[str]:
        """The uuids whose presence in ``allocations`` (at ``now``) may differ from
        ``_held``."""
        seen = self._seen
        if now is not None and seen is not None and len(allocations) >= _JOURNAL_FROM:
            changed = changed_between(seen, now, max(64, len(self._held) // 8))
            if changed is not None:
                return changed
        return self._held.symmetric_difference(allocations)

    def _sync_allocations(self, allocations: Mapping[str, str], our: frozenset[str]) -> None:
        now = point_of(allocations)
        changed = self._changed(allocations, now)
        self._seen = None  # until the loop is through: a failure means a full diff next
        self._apply(allocations, our, changed)
        self._seen = now

    def _apply(
        self, allocations: Mapping[str, str], our: frozenset[str], changed: Iterable[str]
    ) -> None:
        held, free, slot_of, procs = self._held, self._free, self.slot_of, self.procs
        unheld, foreign = self._unheld_procs, self._foreign
        for u in changed:
            s = slot_of.get(u)
            if u in allocations:
                if u in held:
                    continue
                held.add(u)
                unheld.discard(u)
                if u in foreign:
                    foreign.discard(u)  # still blocked, now by the allocation
                elif s is not None:
                    free[s] -= 1
                continue
            if u not in held:
                continue
            held.discard(u)
            if u in procs:
                unheld.add(u)
                if not our.issuperset(procs[u]):
                    foreign.add(u)  # still blocked, now by a foreign process
                    continue
            if s is not None:
                free[s] += 1

    def _sync_foreign(self, our: frozenset[str]) -> None:
        """Re-judge the unallocated GPUs that run processes (allocated ones are blocked)."""
        # only which of the processes' containers are ours decides; no reference to ``our``
        # is kept (dropping a big old set would be paid here, by the next decision)
        mine = self._proc_containers & our  # iterates the smaller set
        if mine == self._our_procs:
            return  # no process's container changed sides: no verdict changes
        self._our_procs = mine
        foreign, free, slot_of = self._foreign, self._free, self.slot_of
        for u in self._unheld_procs:
            now = not our.issuperset(self.procs[u])
            if now == (u in foreign):
                continue
            s = slot_of.get(u)
            if now:
                foreign.add(u)
                if s is not None:
                    free[s] -= 1
            else:
                foreign.discard(u)
                if s is not None:
                    free[s] += 1


def required_driver(request: PlacementRequest) -> tuple[int, ...] | None:
    """The request's minimum driver as a tuple; ``ValueError`` names a malformed one."""
    if request.min_driver_version is None:
        return None
    try:
        return parse_version(request.min_driver_version)
    except ValueError:
        raise ValueError(
            f"min_driver_version must look like '525.60.13', got {request.min_driver_version!r}"
        ) from None


class _IndexCache:
    """A few recent indexes, keyed by the identity of the ``nodes`` tuple they were built from.

    The entry holds a reference to the tuple, so its ``id`` cannot be reused while cached.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, ClusterIndex] = OrderedDict()

    def get(self, nodes: tuple[NodeState, ...]) -> ClusterIndex:
        key = id(nodes)
        with self._lock:
            index = self._entries.get(key)
            if index is not None and index.nodes is nodes:
                self._entries.move_to_end(key)
                return index
        index = ClusterIndex(nodes)  # holds the tuple: its id can't be reused while cached
        with self._lock:
            self._entries[key] = index
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return index

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_CACHE = _IndexCache(_INDEX_CACHE_SIZE)


def index_for(nodes: tuple[NodeState, ...]) -> ClusterIndex:
    """The (cached) index of an inventory; built on first use of this ``nodes`` tuple."""
    if not isinstance(nodes, tuple):  # not hashable by identity safely: no caching
        return ClusterIndex(tuple(nodes))
    return _CACHE.get(nodes)


def clear_cache() -> None:
    """Forget every cached index (benchmarks use it to time the cold path)."""
    _CACHE.clear()
