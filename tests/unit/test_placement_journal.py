"""The journaled allocations and the incremental index (issue 26: decision speed).

The index re-checks only the GPUs the journals name; these tests compare its answers, and
whole decisions, with those of a fresh index over many random snapshots and changes, and
the ledger's journaled ``allocations()`` with the holds it mirrors.
"""

from __future__ import annotations

import random

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.core.placement import journal as journal_module
from jupyterhub_gpu.core.placement.index import ClusterIndex, _IndexCache
from jupyterhub_gpu.core.placement.journal import Allocations, changed_between, journaled
from jupyterhub_gpu.core.scheduling import ClusterState, QueuedRequest, SchedulerSettings, schedule
from jupyterhub_gpu.core.sharing import parse_policy
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.hub.ledger import GPULedger

pytestmark = pytest.mark.unit

RTX3090 = "NVIDIA GeForce RTX 3090"
TITANX = "NVIDIA TITAN X (Pascal)"
A100 = "NVIDIA A100-SXM4-80GB"
MODELS = [(RTX3090, 24576, (8, 6)), (TITANX, 12288, (6, 1)), (A100, 81920, (8, 0))]
POLICY = parse_policy({RTX3090: {"shares": 4}, TITANX: {"shares": 2}}, {})
CONTAINERS = ["", "c1", "c2", "c3", "c4"]
REQUESTS = [
    PlacementRequest(1),
    PlacementRequest(2),
    PlacementRequest(4),
    PlacementRequest(1, allowed_models=frozenset({TITANX})),
    PlacementRequest(1, min_memory_mib=40 * 1024),
    PlacementRequest(1, shares=1),
    PlacementRequest(1, shares=2, allowed_models=frozenset({RTX3090})),
    PlacementRequest(1, shares=1, share_of=2),
]


def cluster(rng: random.Random, n_nodes: int = 10) -> tuple[NodeState, ...]:
    nodes = []
    for n in range(n_nodes):
        model, mem, cc = MODELS[n % len(MODELS)]
        gpus = tuple(
            GPU(
                uuid=f"GPU-{n}-{i}",
                index=i,
                model=model,
                memory_mib=mem,
                compute_capability=cc,
                utilization_pct=rng.choice((0.0, 40.0)),
                healthy=rng.choice((True, True, None, False)),
                process_containers=tuple(rng.sample(CONTAINERS, rng.randrange(3))),
                topology_group=f"g{i // 2}",
            )
            for i in range(rng.choice((2, 4, 8)))
        )
        inv = NodeInventory(name=f"n{n:02d}", driver_version="550.54.15", gpus=gpus)
        nodes.append(NodeState(inv, schedulable=rng.random() > 0.1))
    return tuple(nodes)


def uuids_of(nodes: tuple[NodeState, ...]) -> list[str]:
    return [g.uuid for n in nodes for g in n.inventory.gpus]


def mutate(alloc: dict[str, str], shares: dict[str, int], uuids: list[str], rng: random.Random):
    """A few random changes of every kind: take, free, share, unshare, set back."""
    for _ in range(rng.randrange(6)):
        u = rng.choice(uuids)
        op = rng.randrange(6)
        if op == 0:
            alloc[u] = f"h{rng.randrange(9)}"
        elif op == 1:
            alloc.pop(u, None)
            shares.pop(u, None)
        elif op == 2 and alloc.get(u, SHARED) == SHARED:
            alloc[u] = SHARED
            shares[u] = min(shares.get(u, 0) + 1, 2)
        elif op == 3 and u in alloc:
            holder = alloc.pop(u)
            alloc[u] = holder  # set back: in the journal, not a change
        elif op == 4:
            alloc.setdefault(u, "s")
        elif op == 5 and alloc:
            alloc.update({u: "u"})


@pytest.fixture(autouse=True)
def _journal_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """These clusters are small: make the index use the journals all the same."""
    monkeypatch.setattr("jupyterhub_gpu.core.placement.index._JOURNAL_FROM", 0)


# -- the journal ---------------------------------------------------------------------------


def test_changed_between_names_every_uuid_that_differs_across_a_family() -> None:
    rng = random.Random(3)
    uuids = [f"u{i}" for i in range(40)]
    root = Allocations({u: "x" for u in uuids[:10]})
    family = [root]
    moments: list[tuple[Allocations, tuple[object, int], dict[str, str]]] = []
    for _ in range(400):
        a = rng.choice(family)
        if rng.random() < 0.2 and len(family) < 6:
            family.append(a.fork())
            continue
        mutate(a, {}, uuids, rng)
        moments.append((a, a.point(), dict(a)))
    for _ in range(600):
        (_, pa, da), (_, pb, db) = rng.sample(moments, 2)
        changed = changed_between(pa, pb, limit=10**6)  # type: ignore[arg-type]
        if changed is None:  # only across a path deeper than the limit: never here
            pytest.fail("a family this small must be traceable")
        differ = {u for u in set(da) | set(db) if da.get(u) != db.get(u)}
        assert {u for u in differ if (u in da) != (u in db)} <= changed


def test_the_journal_says_none_when_it_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = Allocations(), Allocations()
    assert changed_between(a.point(), b.point(), 100) is None  # two families
    monkeypatch.setattr(journal_module, "_KEEP", 4)
    start = a.point()
    for i in range(20):
        a[f"u{i}"] = "x"
    assert changed_between(start, a.point(), 100) is None  # dropped entries
    assert changed_between(a.point(), a.point(), 100) == set()
    c = a.fork()
    c["v"] = "y"
    assert changed_between(a.point(), c.point(), 100) == {"v"}
    assert changed_between(a.point(), c.point(), 0) is None  # more than the limit


def test_copies_and_plain_dict_methods_stay_journaled() -> None:
    a = Allocations({"u1": "x"})
    b = a.copy()
    assert isinstance(b, Allocations) and b == a
    b.pop("u1")
    b.popitem() if b else None
    b |= {"u2": "y"}
    b.clear()
    assert changed_between(a.point(), b.point(), 100) == {"u1", "u2"}
    assert type(journaled({"u": "x"})) is Allocations
    assert dict(b) == {} and a == {"u1": "x"}


# -- the index and whole decisions ----------------------------------------------------------


def _decisions(snapshot: ClusterSnapshot) -> list[Placement | NoFit]:
    return [place(snapshot, r) for r in REQUESTS]


@pytest.mark.parametrize("seed", range(6))
def test_incremental_index_decides_as_a_fresh_one(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random allocations and shares, changed in place, forked, replaced by plain dicts or
    by another family, with random container sets: every decision of the cached
    (incremental) index equals the one of an index built fresh for that snapshot."""
    rng = random.Random(seed)
    nodes = cluster(rng)
    uuids = uuids_of(nodes)
    cache = _IndexCache(4)
    monkeypatch.setattr("jupyterhub_gpu.core.placement.index._CACHE", cache)
    family = [Allocations()]
    shares: dict[str, int] = {}
    for _ in range(150):
        pick = rng.random()
        if pick < 0.1:
            family.append(rng.choice(family).fork())
        elif pick < 0.15:
            family = [Allocations(dict(rng.choice(family)))]  # another family
        alloc: dict[str, str] = rng.choice(family)
        mutate(alloc, shares, uuids, rng)
        if rng.random() < 0.1:
            alloc = dict(alloc)  # a plain mapping now and then
        shares = {u: k for u, k in shares.items() if alloc.get(u) == SHARED}
        our = frozenset(rng.sample(CONTAINERS[1:], rng.randrange(5)))
        snapshot = ClusterSnapshot(nodes, alloc, our, dict(shares), POLICY)
        warm = cache.get(nodes)
        assert warm.sync(alloc, our) == ClusterIndex(nodes).sync(alloc, our)
        got = _decisions(snapshot)
        cache.clear()
        assert got == _decisions(snapshot)  # a fresh index (built again from the nodes)
        cache._entries[id(nodes)] = warm  # the warm one goes on


@pytest.mark.parametrize("seed", range(3))
def test_queue_decisions_match_with_a_fresh_index(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole queue decisions (working copies forked from the ledger's journaled
    allocations, claims, shares) with the warm index equal those with a fresh one."""
    rng = random.Random(100 + seed)
    nodes = cluster(rng, 12)
    uuids = uuids_of(nodes)
    cache = _IndexCache(4)
    monkeypatch.setattr("jupyterhub_gpu.core.placement.index._CACHE", cache)
    live = Allocations()
    shares: dict[str, int] = {}
    settings = SchedulerSettings(claim_after_s=0.0)
    for step in range(40):
        mutate(live, shares, uuids, rng)
        shares = {u: k for u, k in shares.items() if live.get(u) == SHARED}
        queue = [
            QueuedRequest(f"r{k}", f"u{k % 5}", f"g{k % 3}", rng.choice(REQUESTS), float(k))
            for k in range(rng.randrange(1, 25))
        ]
        snapshot = ClusterSnapshot(nodes, live.fork(), frozenset({"c1"}), dict(shares), POLICY)
        state = ClusterState(snapshot, now=100.0 + step)
        warm = cache.get(nodes)
        got = schedule(queue, state, settings)
        cache.clear()
        assert got == schedule(queue, state, settings)
        cache._entries[id(nodes)] = warm
        for start in got.starts[: rng.randrange(3)]:  # some of them start in the ledger
            (u, *more) = start.placement.gpu_uuids
            if start.placement.share is not None:
                live[u] = SHARED
                shares[u] = shares.get(u, 0) + start.placement.share.count
            else:
                for v in (u, *more):
                    live[v] = start.request.id


# -- the ledger ----------------------------------------------------------------------------


def _mirror(ledger: GPULedger) -> dict[str, str]:
    """What allocations() answered before it was journaled."""
    held = {uuid: hold.holder for uuid, hold in ledger._holds.items()}
    held.update(dict.fromkeys(ledger._shared, SHARED))
    return held


def test_the_ledger_s_journaled_allocations_follow_its_holds() -> None:
    rng = random.Random(5)
    ledger = GPULedger()
    uuids = [f"GPU-{i}" for i in range(12)]
    holders = [f"user{i}/" for i in range(5)]
    before = ledger.allocations()
    for _ in range(800):
        holder, uuid = rng.choice(holders), rng.choice(uuids)
        op = rng.randrange(7)
        try:
            if op == 0:
                ledger.reserve(holder, "n", [uuid], allocation=holder)
            elif op == 1:
                ledger.reserve_share(holder, "n", uuid, (rng.randrange(1, 3), 4), holder)
            elif op == 2:
                ledger.release(holder)
            elif op == 3:
                ledger.orphan(holder)
            elif op == 4:
                ledger.release_orphan(holder)
            elif op == 5:
                ledger.adopt(holder, "n", [uuid], allocation=holder, orphaned=rng.random() < 0.5)
            else:
                ledger.adopt_share(holder, "n", uuid, (1, 4), holder, rng.random() < 0.5)
        except KeyError:
            pass
        now = ledger.allocations()
        assert now == _mirror(ledger)
        changed = changed_between(before.point(), now.point(), limit=10**6)
        assert changed is not None
        assert {u for u in set(before) ^ set(now)} <= changed
        before = now
