"""Image locality in placement (core/placement/locality.py, policy rule 5): identities of
references and of an engine's listing, the tie-break and what it never trades, CPU-only
servers, and "no holder = exactly today's decision" over many random snapshots."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.core.placement.index import index_for
from jupyterhub_gpu.core.placement.locality import NO_NODE, cpu_node, held, identity, wanted
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from tests.unit.test_placement import A100, GIB, RTX3090, TITANX, gpu, node, placed, snap, uniform

pytestmark = pytest.mark.unit

IMAGE = "registry.example:5000/jupyterhub-gpu/pytorch:2.8-cuda12.8"
WANT = wanted(IMAGE)
DIGEST = "sha256:" + "ab" * 32
IMAGE_ID = "sha256:" + "cd" * 32


def holding(n: NodeState, reference: str = IMAGE) -> NodeState:
    return replace(n, images=wanted(reference))


def with_image(request: PlacementRequest, reference: str = IMAGE) -> PlacementRequest:
    return replace(request, image=wanted(reference))


# -- identities ---------------------------------------------------------------------------

IDENTITY_CASES = [
    ("python", "docker.io/library/python:latest"),
    ("python:3.11", "docker.io/library/python:3.11"),
    ("docker.io/library/python:3.11", "docker.io/library/python:3.11"),
    ("index.docker.io/library/python:3.11", "docker.io/library/python:3.11"),
    (
        "jupyterhub-gpu/python-cpu:3.11-bookworm",
        "docker.io/jupyterhub-gpu/python-cpu:3.11-bookworm",
    ),
    ("Registry.Example:443/team/img:v1", "registry.example/team/img:v1"),
    ("localhost:5000/saved/alice/env:1", "localhost:5000/saved/alice/env:1"),
    (f"localhost:5000/saved/alice/env@{DIGEST}", f"localhost:5000/saved/alice/env@{DIGEST}"),
    (f"localhost:5000/saved/alice/env:1@{DIGEST}", f"localhost:5000/saved/alice/env@{DIGEST}"),
    (IMAGE_ID, IMAGE_ID),
    ("cd" * 32, IMAGE_ID),
    ("<none>:<none>", None),
    ("<none>@<none>", None),
    ("", None),
]


@pytest.mark.parametrize(("reference", "expected"), IDENTITY_CASES)
def test_identity_has_one_spelling(reference: str, expected: str | None) -> None:
    assert identity(reference) == expected


def test_an_engine_listing_gives_every_name_of_every_image() -> None:
    """What docker-py's ``images()`` answers (Engine API GET /images/json)."""
    listing: list[Any] = [
        {
            "Id": IMAGE_ID,
            "RepoTags": ["jupyterhub-gpu/python-cpu:3.11-bookworm", "localhost:5000/x/y:1"],
            "RepoDigests": [f"localhost:5000/x/y@{DIGEST}"],
            "Size": 123,
        },
        {"Id": "sha256:" + "ef" * 32, "RepoTags": None, "RepoDigests": ["<none>@<none>"]},
        {"Id": "sha256:" + "01" * 32, "RepoTags": ["<none>:<none>"], "RepoDigests": []},
        "not a mapping",
    ]
    assert held(listing) == {
        IMAGE_ID,
        "docker.io/jupyterhub-gpu/python-cpu:3.11-bookworm",
        "localhost:5000/x/y:1",
        f"localhost:5000/x/y@{DIGEST}",
        "sha256:" + "ef" * 32,
        "sha256:" + "01" * 32,
    }
    # a catalog reference, a saved image's repo@digest and a bare name all meet it
    images = held(listing)
    assert wanted("jupyterhub-gpu/python-cpu:3.11-bookworm") <= images
    assert wanted(f"localhost:5000/x/y@{DIGEST}") <= images
    assert not wanted("localhost:5000/x/y") & images  # :latest is another image
    assert not wanted(f"localhost:5000/x/z@{DIGEST}") & images  # same digest, other repo


# -- the tie-break ------------------------------------------------------------------------


def test_of_equally_good_nodes_the_one_holding_the_image_wins() -> None:
    """a is calmer and first by name (today's winner); b holds the image: b."""
    a = uniform("a", 2)
    b = holding(uniform("b", 2, utilization_pct=80.0))
    assert placed(place(snap([a, b]), PlacementRequest(1))).node == "a"
    assert placed(place(snap([a, b]), with_image(PlacementRequest(1)))).node == "b"
    # two GPUs: the same, and the GPUs on b are chosen as on any node
    two = placed(place(snap([a, b]), with_image(PlacementRequest(2))))
    assert two == Placement("b", ("GPU-b-0", "GPU-b-1"))


def test_locality_never_changes_the_packing() -> None:
    """b holds the image but would be left with 3 free GPUs; a is a perfect fit."""
    a = uniform("a", 2)
    b = holding(uniform("b", 4))
    assert placed(place(snap([a, b], ["GPU-a-0"]), with_image(PlacementRequest(1)))).node == "a"


def test_locality_never_changes_the_class() -> None:
    """A request that fits TITAN X and A100 goes to the smaller class even when only the
    A100 node holds the image; a 40 GiB request keeps its A100 when only the TITAN X node
    holds it."""
    small = uniform("small", 4, TITANX, 12)
    big = holding(uniform("big", 4, A100, 80, cc=(8, 0)))
    assert placed(place(snap([small, big]), with_image(PlacementRequest(1)))).node == "small"
    small, big = holding(uniform("small", 4, TITANX, 12)), uniform("big", 4, A100, 80, cc=(8, 0))
    heavy = with_image(PlacementRequest(1, min_memory_mib=40 * GIB))
    assert placed(place(snap([small, big]), heavy)).node == "big"


def test_locality_never_gives_up_a_topology_group() -> None:
    """Two GPUs: a's free pair shares a group; b holds the image but its pair spans two."""
    a = node("a", [gpu("a", i, topology_group="g0") for i in range(2)])
    b = holding(node("b", [gpu("b", i, topology_group=f"g{i}") for i in range(2)]))
    assert placed(place(snap([a, b]), with_image(PlacementRequest(2)))).node == "a"
    # when both pairs share a group, locality decides
    b = holding(node("b", [gpu("b", i, topology_group="g0") for i in range(2)]))
    assert placed(place(snap([a, b]), with_image(PlacementRequest(2)))).node == "b"


def test_locality_never_breaks_a_whole_node_that_would_stay_whole() -> None:
    """Today's choice, a, has 4 of 8 free; b, a whole free 4-GPU node, holds the image:
    as many free GPUs, but taking one would break a node kept for multi-GPU servers."""
    a = uniform("a", 8)
    b = holding(uniform("b", 4))
    busy = [f"GPU-a-{i}" for i in range(4)]
    assert placed(place(snap([a, b], busy), PlacementRequest(1))).node == "a"
    assert placed(place(snap([a, b], busy), with_image(PlacementRequest(1)))).node == "a"


def test_a_saved_image_is_found_by_its_digest() -> None:
    pinned = f"localhost:5000/jupyterhub-gpu/saved/alice/env@{DIGEST}"
    a = uniform("a", 2)
    b = replace(uniform("b", 2, utilization_pct=50.0), images=held([{"RepoDigests": [pinned]}]))
    assert placed(place(snap([a, b]), with_image(PlacementRequest(1), pinned))).node == "b"


# -- servers without GPUs ------------------------------------------------------------------


def test_a_server_without_gpus_goes_to_a_node_that_holds_its_image() -> None:
    nodes = (uniform("a", 1), holding(uniform("b", 1)), uniform("c", 1))
    s = ClusterSnapshot(nodes)
    busy = {"a": 0, "b": 5, "c": 1}
    assert cpu_node(s, with_image(PlacementRequest(0)), busy) == Placement("b", ())
    # no holder, or no image: the fewest servers, then the name (today's rule)
    assert cpu_node(s, with_image(PlacementRequest(0), "other:1"), busy) == Placement("a", ())
    assert cpu_node(s, PlacementRequest(0), {"a": 2, "b": 2, "c": 1}).node == "c"
    assert cpu_node(s, PlacementRequest(0), {}).node == "a"
    # a holder that takes no servers is not chosen; none that does: the sentence
    drained = (uniform("a", 1), replace(holding(uniform("b", 1)), schedulable=False))
    assert cpu_node(ClusterSnapshot(drained), with_image(PlacementRequest(0)), {}).node == "a"
    down = tuple(replace(n, reachable=False) for n in nodes)
    assert cpu_node(ClusterSnapshot(down), PlacementRequest(0), {}) == NoFit(NO_NODE)


# -- properties over random clusters ---------------------------------------------------------

MODELS = [(TITANX, 12, (6, 1)), (RTX3090, 24, (8, 6)), (A100, 80, (8, 0))]


def random_cluster(rng: random.Random) -> list[NodeState]:
    nodes = []
    for k in range(rng.randrange(1, 10)):
        name = f"n{k}"
        model, mem, cc = rng.choice(MODELS[1:] * 3 + MODELS[:1])  # many alike: ties
        size = rng.choice((1, 2, 2, 4, 4, 8))
        gpus = [
            gpu(
                name,
                i,
                model,
                mem,
                cc=cc,
                utilization_pct=rng.choice((0.0, 0.0, 30.0, 90.0)),
                healthy=rng.random() > 0.05,
                topology_group=rng.choice((None, f"g{i // 2}", f"g{i // 4}")),
            )
            for i in range(size)
        ]
        nodes.append(node(name, gpus, schedulable=rng.random() > 0.1))
    return nodes


def random_request(rng: random.Random) -> PlacementRequest:
    return PlacementRequest(
        rng.choice((1, 1, 1, 2, 2, 3, 4, 8)),
        min_memory_mib=rng.choice((0, 0, 16 * GIB, 40 * GIB)),
        allowed_models=rng.choice((None, None, frozenset({RTX3090}), frozenset({TITANX, A100}))),
    )


def random_allocations(rng: random.Random, nodes: list[NodeState]) -> list[str]:
    uuids = [g.uuid for n in nodes for g in n.inventory.gpus]
    return rng.sample(uuids, rng.randrange(len(uuids) * 2 // 3 + 1))


def test_without_a_holder_every_decision_is_todays() -> None:
    """Whether the request names an image no node holds, or nodes hold other images:
    the very answer of the request without an image (placements and NoFit sentences)."""
    rng = random.Random(25)
    checked = 0
    for _ in range(400):
        nodes = random_cluster(rng)
        others = [replace(n, images=wanted(f"other/{rng.randrange(3)}:1")) for n in nodes]
        alloc = random_allocations(rng, nodes)
        request = random_request(rng)
        today = place(snap(nodes, alloc), request)
        assert place(snap(nodes, alloc), with_image(request)) == today
        assert place(snap(others, alloc), with_image(request)) == today
        assert place(snap(others, alloc), request) == today
        checked += isinstance(today, Placement)
    assert checked > 100  # enough of them placed something


def _facts(nodes: list[NodeState], alloc: list[str], p: Placement) -> tuple[object, ...]:
    """What rules 1-4 judge a placement by: the class of its GPUs, the free GPUs of its
    slot before it, whether it breaks a whole node, whether its GPUs share a group."""
    index = index_for(tuple(nodes))
    slot = index.slot_of[p.gpu_uuids[0]]
    free = sum(1 for d in index.slot_devices[slot] if d[0] not in alloc)
    size = index.slot_size[slot]
    groups = {d[3] for d in index.slot_devices[slot] if d[0] in p.gpu_uuids}
    count = len(p.gpu_uuids)
    shared = count > 1 and len(groups) == 1 and None not in groups
    return index.slot_class[slot], free, free == size and size >= max(4, count + 1), shared


def test_locality_only_breaks_ties() -> None:
    """With random holders: the same class and packing as without locality, never a whole
    node or a topology group given up; a holder whenever an equally good one exists."""
    rng = random.Random(2025)
    moved = 0
    for _ in range(600):
        nodes = random_cluster(rng)
        nodes = [holding(n) if rng.random() < 0.3 else n for n in nodes]
        alloc = random_allocations(rng, nodes)
        request = random_request(rng)
        today = place(snap(nodes, alloc), request)
        local = place(snap(nodes, alloc), with_image(request))
        if isinstance(today, NoFit):
            assert local == today
            continue
        local = placed(local)
        c0, f0, w0, g0 = _facts(nodes, alloc, today)
        c1, f1, w1, g1 = _facts(nodes, alloc, local)
        assert (c1, f1) == (c0, f0), (request, today, local)
        assert w1 <= w0 and g1 >= g0, (request, today, local)
        moved += local.node != today.node
        holders = {n.name for n in nodes if n.images}
        if today.node in holders:
            assert local == today
        elif request.gpu_count == 1 and local.node not in holders:  # no equally good holder
            for n in nodes:
                free = [g for g in n.inventory.gpus if g.healthy and g.uuid not in alloc]
                if n.name in holders and n.schedulable and free:
                    other = _facts(nodes, alloc, Placement(n.name, (free[0].uuid,)))
                    assert other[:2] != (c0, f0) or (other[2] and not w0), (n.name, local)
    assert moved >= 10  # the tie-break did act (ties are rare in random clusters)
