"""Unit tests of the pure placement decision (jupyterhub_gpu.core.placement)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import (
    ModelAvailability,
    NoFit,
    Placement,
    PlacementRequest,
    availability,
    place,
)
from jupyterhub_gpu.core.placement.baselines import best_fit, first_fit, random_fit, spread
from jupyterhub_gpu.core.placement.index import ClusterIndex, clear_cache
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.adminfiles import load_inventory_file

pytestmark = pytest.mark.unit

HETERO = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
RTX3090 = "NVIDIA GeForce RTX 3090"
RTX2070 = "NVIDIA GeForce RTX 2070"
RTX2080TI = "NVIDIA GeForce RTX 2080 Ti"
TITANX = "NVIDIA TITAN X (Pascal)"
A100 = "NVIDIA A100-SXM4-80GB"
GIB = 1024

Policy = Callable[[ClusterSnapshot, PlacementRequest], Placement | NoFit]
POLICIES: dict[str, Policy] = {
    "ours": place,
    "first_fit": first_fit,
    "random": lambda s, r: random_fit(s, r, random.Random(7)),
    "spread": spread,
    "best_fit": best_fit,
}


# -- builders ------------------------------------------------------------------------------


def gpu(node: str, index: int, model: str = RTX3090, memory_gib: int = 24, **kw: object) -> GPU:
    cc = kw.pop("cc", (8, 6))
    return GPU(
        uuid=f"GPU-{node}-{index}",
        index=index,
        model=model,
        memory_mib=memory_gib * GIB,
        compute_capability=cc,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def node(
    name: str,
    gpus: Iterable[GPU],
    driver: str = "550.54.15",
    schedulable: bool = True,
    reachable: bool = True,
) -> NodeState:
    inv = NodeInventory(name=name, driver_version=driver, gpus=tuple(gpus))
    return NodeState(inv, schedulable=schedulable, reachable=reachable)


def uniform(
    name: str, n: int, model: str = RTX3090, memory_gib: int = 24, **kw: object
) -> NodeState:
    driver = str(kw.pop("driver", "550.54.15"))
    return node(name, [gpu(name, i, model, memory_gib, **kw) for i in range(n)], driver=driver)


def snap(
    nodes: Iterable[NodeState],
    allocations: Mapping[str, str] | Iterable[str] = (),
    our: Iterable[str] = (),
) -> ClusterSnapshot:
    alloc = (
        dict(allocations) if isinstance(allocations, Mapping) else dict.fromkeys(allocations, "x")
    )
    return ClusterSnapshot(nodes=tuple(nodes), allocations=alloc, our_containers=frozenset(our))


@pytest.fixture(scope="module")
def hetero() -> tuple[NodeState, ...]:
    return tuple(NodeState(n) for n in load_inventory_file(HETERO))


def uuids_of(
    nodes: Iterable[NodeState], *, node_name: str | None = None, model: str | None = None
) -> list[str]:
    return [
        g.uuid
        for n in nodes
        if node_name in (None, n.name)
        for g in n.inventory.gpus
        if model in (None, g.model)
    ]


def placed(result: Placement | NoFit) -> Placement:
    assert isinstance(result, Placement), f"expected a placement, got {result}"
    return result


def models_of(nodes: Iterable[NodeState], p: Placement) -> set[str]:
    by_uuid = {g.uuid: g.model for n in nodes for g in n.inventory.gpus}
    return {by_uuid[u] for u in p.gpu_uuids}


# -- constraints (table-driven) -------------------------------------------------------------

ALL = {RTX2070, RTX2080TI, TITANX, RTX3090, A100}
CONSTRAINT_CASES = [
    # (id, request, models any policy may use, what ours picks: (node, model))
    ("any-one", PlacementRequest(1), ALL, ("gpu-b", RTX2070)),
    ("two-same-model-one-node", PlacementRequest(2), {TITANX, RTX3090, A100}, ("gpu-b", TITANX)),
    ("three-only-gpu-a", PlacementRequest(3), {RTX3090}, ("gpu-a", RTX3090)),
    ("min-40-gib", PlacementRequest(1, min_memory_mib=40 * GIB), {A100}, ("gpu-c", A100)),
    (
        "min-12-gib",
        PlacementRequest(1, min_memory_mib=12 * GIB),
        {TITANX, RTX3090, A100},
        ("gpu-b", TITANX),
    ),
    (
        "allowed-3090",
        PlacementRequest(1, allowed_models=frozenset({RTX3090})),
        {RTX3090},
        ("gpu-a", RTX3090),
    ),
    (
        "allowed-two-models",
        PlacementRequest(1, allowed_models=frozenset({A100, TITANX})),
        {A100, TITANX},
        ("gpu-b", TITANX),
    ),
    (
        "cuda12-driver-excludes-gpu-b",
        PlacementRequest(1, min_driver_version="525.60.13"),
        {RTX3090, A100},
        ("gpu-a", RTX3090),
    ),
    (
        "cc-8.0-or-newer",
        PlacementRequest(1, min_compute_capability=(8, 0)),
        {RTX3090, A100},
        ("gpu-a", RTX3090),
    ),
    (
        "cc-up-to-6.1",
        PlacementRequest(1, max_compute_capability=(6, 1)),
        {TITANX},
        ("gpu-b", TITANX),
    ),
    (
        "cc-range-7.5-8.0",
        PlacementRequest(1, min_compute_capability=(7, 5), max_compute_capability=(8, 0)),
        {RTX2070, RTX2080TI, A100},
        ("gpu-b", RTX2070),
    ),
]


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
@pytest.mark.parametrize(
    ("request_", "models", "ours"),
    [c[1:] for c in CONSTRAINT_CASES],
    ids=[c[0] for c in CONSTRAINT_CASES],
)
def test_constraints_hold(
    hetero: tuple[NodeState, ...],
    policy: Policy,
    request_: PlacementRequest,
    models: set[str],
    ours: tuple[str, str],
) -> None:
    p = placed(policy(snap(hetero), request_))
    assert len(p.gpu_uuids) == request_.gpu_count == len(set(p.gpu_uuids))
    node_uuids = set(uuids_of(hetero, node_name=p.node))
    assert set(p.gpu_uuids) <= node_uuids, "all GPUs on the answered node"
    assert len(models_of(hetero, p)) == 1, "one model per server"
    assert models_of(hetero, p) <= models
    if policy is place:
        assert (p.node, *models_of(hetero, p)) == ours


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (
            PlacementRequest(4),
            ["No node has 4 x GPU", "at most 3 on one node", "Ask for at most 3"],
        ),
        (PlacementRequest(1, min_memory_mib=100 * GIB), ["100 GiB", "at most 80 GiB"]),
        (
            PlacementRequest(1, allowed_models=frozenset({"NVIDIA H100"})),
            ["no working NVIDIA H100"],
        ),
        (PlacementRequest(1, min_compute_capability=(9, 0)), ["compute capability 9.0 or newer"]),
        (
            PlacementRequest(1, allowed_models=frozenset({TITANX}), min_driver_version="525.60.13"),
            ["driver 525.60.13 or newer", "gpu-b runs 470.223.02", "Choose 'any GPU'."],
        ),
    ],
)
def test_impossible_requests_say_why(
    hetero: tuple[NodeState, ...], request_: PlacementRequest, words: list[str]
) -> None:
    result = place(snap(hetero), request_)
    assert isinstance(result, NoFit)
    for w in words:
        assert w in result.reason
    assert (
        "free now: 3 x NVIDIA GeForce RTX 3090 on gpu-a, 2 x NVIDIA A100-SXM4-80GB on gpu-c, "
        "2 x NVIDIA TITAN X (Pascal) on gpu-b and 2 more." in result.reason
    )


# -- exclusions -----------------------------------------------------------------------------


def _two_nodes(**bad: object) -> tuple[NodeState, NodeState]:
    """node-a (one GPU, spoiled by ``bad``) sorts first; node-b is a clean twin."""
    driver = str(bad.pop("driver", "550.54.15"))
    state = {k: bad.pop(k) for k in ("schedulable", "reachable") if k in bad}
    a = node("node-a", [gpu("node-a", 0, **bad)], driver=driver, **state)  # type: ignore[arg-type]
    return a, uniform("node-b", 1)


EXCLUSIONS = {
    "unhealthy": ({"healthy": False}, (), ()),
    "host-process": ({"process_containers": ("",)}, (), ()),
    "foreign-container": ({"process_containers": ("c-theirs",)}, (), ("c-ours",)),
    "ours-and-foreign": ({"process_containers": ("c-ours", "c-theirs")}, (), ("c-ours",)),
    "drained": ({"schedulable": False}, (), ()),
    "unreachable": ({"reachable": False}, (), ()),
    "allocated": ({}, ("GPU-node-a-0",), ()),
}


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
@pytest.mark.parametrize(("spoil", "alloc", "our"), EXCLUSIONS.values(), ids=EXCLUSIONS.keys())
def test_excluded_gpus_are_never_chosen(
    policy: Policy, spoil: dict[str, object], alloc: tuple[str, ...], our: tuple[str, ...]
) -> None:
    nodes = _two_nodes(**dict(spoil))
    p = placed(policy(snap(nodes, alloc, our), PlacementRequest(1)))
    assert p == Placement("node-b", ("GPU-node-b-0",))
    blocked = place(snap(nodes[:1], alloc, our), PlacementRequest(1))
    assert isinstance(blocked, NoFit)


@pytest.mark.parametrize(
    "spoil",
    [{"healthy": None}, {"process_containers": ("c-ours",)}],
    ids=["health-unknown", "our-own-process"],
)
def test_unknown_health_and_our_processes_are_allowed(spoil: dict[str, object]) -> None:
    nodes = _two_nodes(**dict(spoil))
    assert placed(place(snap(nodes[:1], our=("c-ours",)), PlacementRequest(1))).node == "node-a"


def test_too_old_driver_is_excluded_and_named() -> None:
    old = uniform("old-470", 2, driver="470.223.02")
    new = uniform("new-535", 1, driver="535.183.01")
    cuda12 = PlacementRequest(1, min_driver_version="525.60.13")
    assert placed(place(snap([old, new]), cuda12)).node == "new-535"
    result = place(snap([old, new], ["GPU-new-535-0"]), cuda12)
    assert isinstance(result, NoFit)
    assert result.reason.startswith("No GPU that can run this image is free")
    assert "free now: 2 x NVIDIA GeForce RTX 3090 on old-470" in result.reason
    assert "choose another image or try later" in result.reason
    # numeric, not string, comparison: "1000.1" > "525.60.13" although "1" < "5"
    future = uniform("future", 1, driver="1000.1")
    assert placed(place(snap([future]), cuda12)).node == "future"


# -- best fit across classes ------------------------------------------------------------------


@pytest.mark.parametrize("heavy_first", [True, False], ids=["heavy-first", "light-first"])
def test_heavy_and_light_end_on_the_right_cards(heavy_first: bool) -> None:
    nodes = (uniform("big", 1, A100, 80, cc=(8, 0)), uniform("small", 1, RTX2080TI, 11, cc=(7, 5)))
    heavy, light = PlacementRequest(1, min_memory_mib=40 * GIB), PlacementRequest(1)
    order = [heavy, light] if heavy_first else [light, heavy]
    alloc: dict[str, str] = {}
    got = {}
    for req in order:
        p = placed(place(snap(nodes, alloc), req))
        alloc.update(dict.fromkeys(p.gpu_uuids, "x"))
        got[req] = p.node
    assert got == {heavy: "big", light: "small"}
    # the declared-order baseline puts the light one on the A100 and the heavy one can't start
    p = placed(first_fit(snap(nodes), light))
    assert p.node == "big"
    assert isinstance(first_fit(snap(nodes, p.gpu_uuids), heavy), NoFit)


def test_light_requests_keep_the_big_class_while_small_ones_have_room(
    hetero: tuple[NodeState, ...],
) -> None:
    alloc: dict[str, str] = {}
    for _ in range(5):
        p = placed(place(snap(hetero, alloc), PlacementRequest(1)))
        assert models_of(hetero, p) != {A100}
        alloc.update(dict.fromkeys(p.gpu_uuids, "x"))


def test_fair_share_spills_to_the_next_class_but_pinned_requests_get_the_last_gpu() -> None:
    small = uniform("small", 4, RTX2080TI, 11, cc=(7, 5))
    large = uniform("large", 4, RTX3090, 24)
    busy = ["GPU-small-0", "GPU-small-1", "GPU-small-2"]  # 1 of 4 small ones left
    assert placed(place(snap([small, large], busy), PlacementRequest(1))).node == "large"
    pinned = PlacementRequest(1, allowed_models=frozenset({RTX2080TI}))
    assert placed(place(snap([small, large], busy), pinned)).gpu_uuids == ("GPU-small-3",)
    assert placed(place(snap([small, large]), PlacementRequest(1))).node == "small"
    assert placed(best_fit(snap([small, large], busy), PlacementRequest(1))).node == "small"


@pytest.mark.parametrize(
    ("small_gpus", "count", "expected"),
    [
        (4, 1, "m1"),  # a whole 4-GPU node is kept: the 3090 node in use takes it
        (2, 1, "s1"),  # a 2-GPU node is not "big": plain best fit across classes
        (4, 4, "s1"),  # a request as big as the node takes the whole node
    ],
)
def test_requests_that_fit_a_node_in_use_keep_big_whole_nodes(
    small_gpus: int, count: int, expected: str
) -> None:
    """2080 Ti < 3090 < A100. The 2080 Ti node is whole and free, the 3090 node has one
    server, the A100s are nearly full: both smaller classes keep their fair share."""
    nodes = [
        uniform("s1", small_gpus, RTX2080TI, 11, cc=(7, 5)),
        uniform("m1", 4, RTX3090, 24),
        uniform("a1", 4, A100, 80, cc=(8, 0)),
        uniform("a2", 4, A100, 80, cc=(8, 0)),
    ]
    busy = ["GPU-m1-0", "GPU-a1-0", "GPU-a1-1", "GPU-a1-2"] + [f"GPU-a2-{i}" for i in range(4)]
    if count > 3:
        busy.remove("GPU-m1-0")  # the 4-GPU request: the 3090 node is whole as well
    got = placed(place(snap(nodes, busy), PlacementRequest(count)))
    assert got.node == expected
    assert placed(best_fit(snap(nodes, busy), PlacementRequest(count))).node == "s1"


def test_fair_share_order_in_a_small_lab() -> None:
    """The trade-off documented in docs/placement.md, pinned down."""
    nodes = (
        uniform("t", 3, TITANX, 12, cc=(6, 1)),
        uniform("r", 3, RTX3090, 24),
        uniform("a", 2, A100, 80, cc=(8, 0)),
    )
    for policy, expected in ((place, "ttratrra"), (best_fit, "tttrrraa")):
        alloc: dict[str, str] = {}
        order = ""
        for _ in range(8):
            p = placed(policy(snap(nodes, alloc), PlacementRequest(1)))
            alloc.update(dict.fromkeys(p.gpu_uuids, "x"))
            order += p.node
        assert order == expected, policy


# -- packing, load, topology ----------------------------------------------------------------


def test_packs_nodes_to_keep_whole_nodes_free() -> None:
    a, b = uniform("a", 4), uniform("b", 4)
    alloc = ["GPU-b-0", "GPU-b-1", "GPU-b-2"]
    assert placed(place(snap([a, b], alloc), PlacementRequest(1))).node == "b"
    assert placed(place(snap([a, b], alloc), PlacementRequest(4))).node == "a"
    assert placed(spread(snap([a, b], alloc), PlacementRequest(1))).node == "a"


def test_least_loaded_node_and_device_break_ties() -> None:
    hot = node("a-hot", [gpu("a-hot", i, utilization_pct=90.0) for i in range(2)])
    cool = node(
        "b-cool",
        [gpu("b-cool", 0, memory_used_mib=20 * GIB), gpu("b-cool", 1, utilization_pct=1.0)],
    )
    assert placed(place(snap([hot, cool]), PlacementRequest(1))) == Placement(
        "b-cool", ("GPU-b-cool-1",)
    )


def test_prefers_one_topology_group_on_a_node() -> None:
    groups = ["pcie0", "pcie0", "pcie1", "pcie1"]
    n = node("n", [gpu("n", i, topology_group=g) for i, g in enumerate(groups)])
    p = placed(place(snap([n], ["GPU-n-0"]), PlacementRequest(2)))
    assert p.gpu_uuids == ("GPU-n-2", "GPU-n-3")


def test_takes_the_smallest_group_that_holds_the_request() -> None:
    groups = ["nvl0", "nvl0", "nvl1", "nvl1", "nvl1", "nvl1"]
    n = node("n", [gpu("n", i, topology_group=g) for i, g in enumerate(groups)])
    assert placed(place(snap([n]), PlacementRequest(2))).gpu_uuids == ("GPU-n-0", "GPU-n-1")
    assert placed(place(snap([n], ["GPU-n-0"]), PlacementRequest(4))).gpu_uuids == (
        "GPU-n-2",
        "GPU-n-3",
        "GPU-n-4",
        "GPU-n-5",
    )


def test_prefers_a_node_whose_free_gpus_share_a_group() -> None:
    groups = ["pcie0", "pcie0", "pcie1", "pcie1"]
    a = node("a", [gpu("a", i, topology_group=g) for i, g in enumerate(groups)])
    b = node("b", [gpu("b", i, topology_group=g) for i, g in enumerate(groups)])
    alloc = ["GPU-a-0", "GPU-a-2", "GPU-b-0", "GPU-b-1"]  # a: 1 + 3 free; b: 2 + 3 free
    assert placed(place(snap([a, b], alloc), PlacementRequest(2))) == Placement(
        "b", ("GPU-b-2", "GPU-b-3")
    )


def test_spans_fewest_groups_when_none_holds_the_request() -> None:
    groups = ["g0", "g1", "g1", "g2", "g2", "g2"]
    n = node("n", [gpu("n", i, topology_group=g) for i, g in enumerate(groups)])
    p = placed(place(snap([n]), PlacementRequest(5)))
    assert p.gpu_uuids == ("GPU-n-1", "GPU-n-2", "GPU-n-3", "GPU-n-4", "GPU-n-5")


# -- whole-cluster properties ----------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_no_gpu_is_handed_out_twice(hetero: tuple[NodeState, ...], policy: Policy) -> None:
    alloc: dict[str, str] = {}
    rng = random.Random(3)
    for _ in range(50):
        result = policy(snap(hetero, alloc), PlacementRequest(rng.choice((1, 1, 2))))
        if isinstance(result, NoFit):
            if isinstance(policy(snap(hetero, alloc), PlacementRequest(1)), NoFit):
                break
            continue
        assert len(result.gpu_uuids) == len(set(result.gpu_uuids))
        assert not set(result.gpu_uuids) & set(alloc)
        alloc.update(dict.fromkeys(result.gpu_uuids, "x"))
    else:
        pytest.fail("the cluster never filled up")
    assert sorted(alloc) == sorted(uuids_of(hetero))


def test_deterministic_and_independent_of_the_cache(hetero: tuple[NodeState, ...]) -> None:
    requests = [
        PlacementRequest(1),
        PlacementRequest(2),
        PlacementRequest(1, min_memory_mib=20 * GIB),
    ]
    first = [place(snap(hetero, ["GPU-aaaaaaaa-0000-4000-8000-000000000001"]), r) for r in requests]
    clear_cache()
    reordered = tuple(reversed(hetero))  # another tuple: another index
    again = [place(snap(hetero, ["GPU-aaaaaaaa-0000-4000-8000-000000000001"]), r) for r in requests]
    assert first == again
    assert [
        place(snap(reordered, ["GPU-aaaaaaaa-0000-4000-8000-000000000001"]), r) for r in requests
    ] == first


def test_incremental_index_matches_a_fresh_one() -> None:
    """The cached index follows arbitrary snapshots (allocations and our containers)."""
    rng = random.Random(11)
    nodes = tuple(
        node(
            f"n{k}",
            [
                gpu(
                    f"n{k}",
                    i,
                    healthy=rng.choice((True, None, False)),
                    process_containers=tuple(rng.sample(["", "c1", "c2", "c3"], rng.randrange(3))),
                )
                for i in range(4)
            ],
        )
        for k in range(6)
    )
    uuids = uuids_of(nodes)
    cached = ClusterIndex(nodes)
    for _ in range(300):
        alloc = dict.fromkeys(rng.sample(uuids, rng.randrange(len(uuids))), "x")
        our = frozenset(rng.sample(["c1", "c2", "c3", "c4"], rng.randrange(5)))
        assert cached.sync(alloc, our) == ClusterIndex(nodes).sync(alloc, our)


# -- words and summaries ---------------------------------------------------------------------


def test_nofit_names_what_is_missing_and_what_is_free(hetero: tuple[NodeState, ...]) -> None:
    busy = uuids_of(hetero, model=RTX3090) + uuids_of(hetero, node_name="gpu-c")
    busy += ["GPU-bbbbbbbb-0000-4000-8000-000000000002", "GPU-bbbbbbbb-0000-4000-8000-000000000003"]
    result = place(snap(hetero, busy), PlacementRequest(1, allowed_models=frozenset({RTX3090})))
    assert isinstance(result, NoFit)
    assert result.reason == (
        "No NVIDIA GeForce RTX 3090 is free; free now: 2 x NVIDIA TITAN X (Pascal) on gpu-b. "
        "Choose 'any GPU' or try later."
    )


@pytest.mark.parametrize(
    ("nodes_alloc", "request_", "expected"),
    [
        ("all-busy", PlacementRequest(1), "No GPU is free right now. Try later."),
        ("c-drained", PlacementRequest(1, min_memory_mib=40 * GIB), "is drained or unreachable"),
        ("split-3090", PlacementRequest(2, allowed_models=frozenset({RTX3090})), "free at once"),
    ],
)
def test_nofit_messages(
    hetero: tuple[NodeState, ...], nodes_alloc: str, request_: PlacementRequest, expected: str
) -> None:
    nodes, alloc = hetero, []
    if nodes_alloc == "all-busy":
        alloc = uuids_of(hetero)
    elif nodes_alloc == "c-drained":
        nodes = tuple(NodeState(n.inventory, schedulable=n.name != "gpu-c") for n in hetero)
    else:
        alloc = uuids_of(hetero, model=RTX3090)[:2]
    result = place(snap(nodes, alloc), request_)
    assert isinstance(result, NoFit)
    assert expected in result.reason
    assert "GPU-" not in result.reason and "\n" not in result.reason


def test_availability_per_model(hetero: tuple[NodeState, ...]) -> None:
    broken = (
        NodeState(n.inventory, schedulable=n.name != "gpu-c") if n.name != "gpu-a" else n
        for n in hetero
    )
    alloc = uuids_of(hetero, model=RTX3090)[:1]
    assert availability(snap(broken, alloc)) == [
        ModelAvailability(RTX2070, 1, 1),
        ModelAvailability(RTX2080TI, 1, 1),
        ModelAvailability(TITANX, 2, 2),
        ModelAvailability(RTX3090, 2, 3),
        ModelAvailability(A100, 0, 2),  # gpu-c drained
    ]


@pytest.mark.parametrize(
    "bad",
    [PlacementRequest(0), PlacementRequest(1, min_driver_version="r535")],
    ids=["zero-gpus", "bad-driver-version"],
)
def test_invalid_requests_raise(hetero: tuple[NodeState, ...], bad: PlacementRequest) -> None:
    with pytest.raises(ValueError):
        place(snap(hetero), bad)
