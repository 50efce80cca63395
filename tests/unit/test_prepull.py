"""The pre-puller's planner (core/prepull.py) and its policy (c.PrePuller): which images
go onto which node, and what is removed when a node is over its budget."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpu.core.catalog import Catalog, CatalogEntry
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.core.prepull import (
    CATALOG_LABEL,
    CUSTOM_LRU,
    GIB,
    HeldImage,
    NodeFacts,
    Selection,
    choose_entries,
    normal_reference,
    parse_selection,
    plan,
    plan_node,
)
from jupyterhub_gpu.hub.extensions import configure_prepuller
from jupyterhub_gpu.hub.prepull import PrePuller

pytestmark = pytest.mark.unit

REG = "registry.lab:5000/jhgpu"
CPU = CatalogEntry("cpu", "CPU", "none", "0", None, f"{REG}/cpu:1")
TORCH = CatalogEntry(
    "torch", "PyTorch", "pytorch", "2.8", "12.8", f"{REG}/torch:2.8",
    min_driver="525.60.13", min_compute_capability=(7, 0),
)  # fmt: skip
TF = CatalogEntry(
    "tf", "TF", "tensorflow", "2.20", "12.5", f"{REG}/tf:2.20",
    min_driver="525.60.13", min_compute_capability=(5, 0),
)  # fmt: skip
NEW13 = CatalogEntry(
    "cuda13", "New", "pytorch", "2.9", "13.0", f"{REG}/new:13",
    min_driver="580", min_compute_capability=(7, 5),
)  # fmt: skip
CATALOG = Catalog((CPU, TORCH, TF, NEW13))


def inv(name: str, driver: str = "550.54.15", cc: tuple[int, int] = (8, 0)) -> NodeInventory:
    return NodeInventory(name, driver, (GPU(f"GPU-{name}", 0, "A100", 40960, cc),))


def img(ref: str, gib: float, **kw: object) -> HeldImage:
    return HeldImage(id=f"sha256:{ref}", references=(ref,), size=int(gib * GIB), **kw)  # type: ignore[arg-type]


def node(name: str, *images: HeldImage, **kw: object) -> NodeFacts:
    return NodeFacts(inv(name, **kw), tuple(images))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- policy
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", Selection("all")),
        (" most-used:3 ", Selection("most-used", top=3)),
        (["torch", "cpu", "torch"], Selection("list", slugs=("torch", "cpu"))),
    ],
)
def test_selection_parses(value: object, expected: Selection) -> None:
    assert parse_selection(value) == expected


@pytest.mark.parametrize("value", ["most-used:0", "most-used", "some", [], [""], 3, ["a", 1]])
def test_bad_selection_is_refused_with_a_sentence(value: object) -> None:
    with pytest.raises(ValueError, match=r"PrePuller.images is .*catalog slug"):
        parse_selection(value)


def test_policy_config_refuses_bad_values_with_a_sentence() -> None:
    assert PrePuller().images == "all" and not PrePuller().enabled
    with pytest.raises(TraitError, match="most-used:N"):
        PrePuller(images="most-used:-1")
    with pytest.raises(TraitError, match=r"disk_budget_gib is -1\.0; it must be 0 or more"):
        PrePuller(disk_budget_gib=-1)
    with pytest.raises(TraitError, match=r"custom_disk_budget_gib is -2\.0; it must be 0"):
        PrePuller(custom_disk_budget_gib=-2)
    assert PrePuller().custom_budget_bytes == 30 * GIB
    with pytest.raises(TraitError, match=r"interval is 0\.0; it must be more than 0"):
        PrePuller(interval=0)
    c = Config()
    c.PrePuller.images = "everything"
    with pytest.raises(TraitError, match="write 'all'"):
        PrePuller(config=c)


def test_configure_prepuller_sets_the_policy_and_the_api() -> None:
    c = Config()
    configure_prepuller(c, images=["torch"], disk_budget_gib=80)
    assert c.PrePuller.enabled is True and c.PrePuller.images == ["torch"]
    assert PrePuller(config=c).budget_bytes == 80 * GIB
    assert any(h[0] == r"/api/gpu/prepull" for h in c.JupyterHub.extra_handlers)
    with pytest.raises(TypeError, match=r"unknown setting.*budget"):
        configure_prepuller(Config(), budget=3)
    with pytest.raises(TypeError, match=r"unknown setting.*custom_budget"):
        configure_prepuller(Config(), custom_budget=3)
    custom = Config()
    configure_prepuller(custom, custom_disk_budget_gib=12)
    assert PrePuller(config=custom).custom_budget_bytes == 12 * GIB
    bad = Config()
    with pytest.raises(TraitError, match="most-used:N"):
        configure_prepuller(bad, images="most-used:x")
    assert "PrePuller" not in bad  # nothing half-done


def test_choose_entries() -> None:
    assert choose_entries(CATALOG, Selection("all")) == ((CPU, TORCH, TF, NEW13), ())
    assert choose_entries(CATALOG, Selection("list", slugs=("tf", "gone", "cpu"))) == (
        (TF, CPU),
        ("gone",),
    )
    counts = {"tf": 5, "cpu": 9, "torch": 5, "gone": 50}
    assert choose_entries(CATALOG, Selection("most-used", top=3), counts)[0] == (CPU, TORCH, TF)
    assert choose_entries(CATALOG, Selection("most-used", top=1), {})[0] == ()


def test_references_compare_as_the_engine_names_them() -> None:
    assert normal_reference("Ubuntu") == "ubuntu:latest"
    assert normal_reference("docker.io/library/ubuntu:22.04") == "ubuntu:22.04"
    assert normal_reference("reg:5000/a/b") == "reg:5000/a/b:latest"
    assert normal_reference("reg/a@sha256:" + "0" * 64).endswith("@sha256:" + "0" * 64)


# ---------------------------------------------------------------------- pulls
def test_pulls_only_where_driver_and_gpus_can_run_it() -> None:
    old = node("old", driver="470.82.01")  # too old for CUDA 12
    volta = node("volta", cc=(7, 0))  # torch yes, cuda13 no (driver too)
    new = node("new", driver="580.65.06", cc=(9, 0))
    plans = plan([old, volta, new], (CPU, TORCH, NEW13), CATALOG, 0)
    assert plans["old"].pulls == (CPU,)
    assert "older than 525.60.13" in plans["old"].skipped["torch"]
    assert plans["volta"].pulls == (CPU, TORCH)
    assert "cuda13" in plans["volta"].skipped
    assert plans["new"].pulls == (CPU, TORCH, NEW13)


def test_held_images_are_not_pulled_again_and_unreachable_nodes_wait() -> None:
    a = node("a", img(f"{REG}/cpu:1", 1))
    down = NodeFacts(inv("down"), (), reachable=False)
    drained = NodeFacts(inv("drained"), (), schedulable=False)
    plans = plan([a, down, drained], (CPU, TORCH), CATALOG, 0)
    assert plans["a"].pulls == (TORCH,) and plans["a"].held == ("cpu",)
    assert "down" not in plans
    assert plans["drained"].pulls == () and "drained" in plans["drained"].skipped["cpu"]


def test_a_new_entry_or_a_new_node_is_planned_next_round() -> None:
    a = node("a", img(f"{REG}/cpu:1", 1), img(f"{REG}/torch:2.8", 5))
    assert plan([a], (CPU, TORCH), CATALOG, 20 * GIB)["a"].pulls == ()
    grown = Catalog((*CATALOG.entries, CatalogEntry("r", "R", "r", "4", None, f"{REG}/r:4")))
    chosen, _ = choose_entries(grown, Selection("all"))
    plans = plan([a, node("b")], chosen, grown, 20 * GIB)
    # sizes unknown anywhere: one such pull per node and round (cuda13: driver too old)
    assert [e.slug for e in plans["a"].pulls] == ["tf"]
    assert [e.slug for e in plans["b"].pulls] == ["cpu", "torch", "tf"]
    a2 = node("a", *a.images, img(f"{REG}/tf:2.20", 4))
    assert [e.slug for e in plan([a2], chosen, grown, 20 * GIB)["a"].pulls] == ["r"]
    assert [e.slug for e in plan([a, node("b")], chosen, grown, 0)["b"].pulls] == [
        "cpu", "torch", "tf", "r",
    ]  # fmt: skip


def test_budget_counts_known_sizes_and_pulls_in_priority_order() -> None:
    a = node("a", img(f"{REG}/cpu:1", 1), img(f"{REG}/torch:2.8", 6), img(f"{REG}/tf:2.20", 4))
    b = node("b")
    # b: 10 GiB fits cpu (1) + torch (6); tf (4) would make 11
    plans = plan([a, b], (CPU, TORCH, TF), CATALOG, 10 * GIB)
    assert plans["b"].pulls == (CPU, TORCH)
    assert "4.0 GiB does not fit" in plans["b"].skipped["tf"]
    # exactly at the budget fits
    assert plan([a, b], (CPU, TORCH, TF), CATALOG, 11 * GIB)["b"].pulls == (CPU, TORCH, TF)
    # a lower-priority image that fits is still pulled after one that does not
    assert plan([a, b], (TORCH, TF, CPU), CATALOG, 7 * GIB)["b"].pulls == (TORCH, CPU)


def test_unknown_size_is_pulled_only_under_budget_one_at_a_time() -> None:
    b = node("b", img(f"{REG}/cpu:1", 1))
    assert plan([b], (CPU, TORCH, TF), CATALOG, 2 * GIB)["b"].pulls == (TORCH,)
    full = node("b", img(f"{REG}/cpu:1", 2))
    assert plan([full], (CPU, TORCH), CATALOG, 2 * GIB)["b"].pulls == ()
    # a size remembered from an earlier pull counts
    assert plan([b], (CPU, TORCH), CATALOG, 2 * GIB, {"torch": 5 * GIB})["b"].pulls == ()


# ---------------------------------------------------------------------- removals
def test_over_budget_removes_unchosen_first_then_least_recently_used() -> None:
    cpu = img(f"{REG}/cpu:1", 1, last_used=100)
    torch = img(f"{REG}/torch:2.8", 5, last_used=50)
    tf = img(f"{REG}/tf:2.20", 4, last_used=800)
    retired = img(f"{REG}/old:1", 3, labels={CATALOG_LABEL: "old"}, last_used=900)
    a = node("a", retired, cpu, torch, tf)  # 10 GiB of ours: the retired one is custom
    removals = plan([a], (CPU, TORCH), CATALOG, 6 * GIB)["a"].removals
    assert [(r.image.references[0], r.why) for r in removals] == [(f"{REG}/tf:2.20", "not chosen")]
    nplan = plan([a], (CPU, TORCH, TF), CATALOG, 9 * GIB)["a"]
    assert [(r.image, r.why) for r in nplan.removals] == [(torch, "least recently used")]
    assert nplan.used_bytes == 10 * GIB and nplan.custom_used_bytes == 3 * GIB
    # under the budget: nothing is removed
    assert plan([a], (CPU, TORCH, TF), CATALOG, 10 * GIB)["a"].removals == ()
    # no budget: nothing is removed
    assert plan([a], (CPU,), CATALOG, 0)["a"].removals == ()


def test_an_image_a_container_uses_is_never_removed() -> None:
    tf = img(f"{REG}/tf:2.20", 30, in_use=True)
    torch = img(f"{REG}/torch:2.8", 5, in_use=True)
    cpu = img(f"{REG}/cpu:1", 1)
    nplan = plan([node("a", tf, torch, cpu)], (TORCH,), CATALOG, 1 * GIB)["a"]
    assert [r.image for r in nplan.removals] == [cpu]  # not chosen: it goes; the others stay
    assert nplan.used_bytes == 36 * GIB


def test_never_saved_images_nor_images_not_ours() -> None:
    saved = img("registry.lab:5000/jupyterhub-gpu/saved/ann/x:1", 9, saved=True)
    saved_labelled = img(
        "other/x:1", 9, labels={"io.jupyterhub-gpu.saved.owner": "ann", CATALOG_LABEL: "cpu"}
    )
    build = img("tmp/x:1", 9, labels={"io.jupyterhub-gpu.build-id": "b1"})
    stranger = img("postgres:16", 9)
    mine = img(f"{REG}/tf:2.20", 1)
    facts = node("a", saved, saved_labelled, build, stranger, mine)
    nplan = plan([facts], (), CATALOG, 1, custom_budget_bytes=1)["a"]
    assert [r.image for r in nplan.removals] == [mine]
    assert nplan.used_bytes == 1 * GIB  # only ours count
    assert nplan.custom_used_bytes == 0  # and none of them is a custom image


def test_room_is_made_for_a_chosen_pull_from_unchosen_images_only() -> None:
    b = node("b", img(f"{REG}/cpu:1", 4), img(f"{REG}/tf:2.20", 4))
    sizes_from = node("a", img(f"{REG}/torch:2.8", 5))
    # torch (5) needs room: cpu and tf (not chosen) may go, least recently used first
    nplan = plan([b, sizes_from], (TORCH,), CATALOG, 9 * GIB)["b"]
    assert nplan.pulls == (TORCH,)
    assert [r.image.references[0] for r in nplan.removals] == [f"{REG}/cpu:1"]
    # a chosen image is never removed for another chosen one
    nplan = plan([b, sizes_from], (TF, TORCH), CATALOG, 9 * GIB)["b"]
    assert nplan.pulls == (TORCH,) and [r.why for r in nplan.removals] == ["not chosen"]
    nplan = plan([b, sizes_from], (TF, TORCH), CATALOG, 8 * GIB)["b"]
    assert nplan.pulls == () and nplan.removals == ()
    assert "does not fit" in nplan.skipped["torch"]


# ---------------------------------------------------------------------- custom images
LAB = "hub.example.org/lab"
OPEN = Catalog((CPU, TORCH, TF, NEW13), allowed_image_patterns=(f"{LAB}/*",))


def test_a_labelled_custom_image_does_not_evict_a_catalog_image() -> None:
    """Issue 30: the catalog label on an image the catalog does not list (a user's own,
    in use) counted against the catalog's budget: chosen torch was removed, cpu not
    pulled."""
    torch = img(f"{REG}/torch:2.8", 5)
    mimic = img(f"{LAB}/mine:1", 8, labels={CATALOG_LABEL: "torch"}, in_use=True)
    nplan = plan([node("a", torch, mimic)], (TORCH, CPU), CATALOG, 8 * GIB, {"cpu": GIB})["a"]
    assert nplan.removals == ()
    assert nplan.pulls == (CPU,)
    assert nplan.held == ("torch",)
    assert nplan.used_bytes == 5 * GIB and nplan.custom_used_bytes == 8 * GIB


def test_unused_custom_images_beyond_their_budget_go_least_recently_used_first() -> None:
    c1 = img(f"{LAB}/one:1", 3, last_used=100)
    c2 = img(f"{LAB}/two:1", 3, last_used=300)
    c3 = img(f"{LAB}/three:1", 3, created=200)  # never seen in use: its creation time
    retired = img(f"{REG}/old:1", 3, labels={CATALOG_LABEL: "old"}, last_used=50)
    stranger = img("postgres:16", 30, created=1)  # no pattern names it: never touched
    cpu = img(f"{REG}/cpu:1", 1)
    facts = node("a", c2, c3, stranger, cpu, c1, retired)
    nplan = plan([facts], (CPU,), OPEN, 1 * GIB, custom_budget_bytes=5 * GIB)["a"]
    assert [(r.image, r.why) for r in nplan.removals] == [
        (retired, CUSTOM_LRU),
        (c1, CUSTOM_LRU),
        (c3, CUSTOM_LRU),
    ]
    assert nplan.custom_used_bytes == 12 * GIB and nplan.custom_budget_bytes == 5 * GIB
    # within the budget, or no budget: none goes
    assert plan([facts], (CPU,), OPEN, 1 * GIB, custom_budget_bytes=12 * GIB)["a"].removals == ()
    assert plan([facts], (CPU,), OPEN, 1 * GIB, custom_budget_bytes=0)["a"].removals == ()
    # without the patterns only the labelled one is a custom image
    nplan = plan([facts], (CPU,), CATALOG, 1 * GIB, custom_budget_bytes=1)["a"]
    assert [r.image for r in nplan.removals] == [retired]


def test_a_custom_image_in_use_or_a_server_starts_from_is_never_removed() -> None:
    used = img(f"{LAB}/used:1", 3, in_use=True, last_used=1)
    starting = img(f"{LAB}/starting:1", 3, last_used=2)
    saved = img(f"{LAB}/saved:1", 3, saved=True)
    idle = img(f"{LAB}/idle:1", 3, last_used=3)
    facts = NodeFacts(
        inv("a"), (used, starting, saved, idle), pinned=frozenset({f"{LAB}/starting:1"})
    )
    nplan = plan_node(facts, (), OPEN, 0, custom_budget_bytes=1)
    assert [r.image for r in nplan.removals] == [idle]
    assert nplan.custom_used_bytes == 9 * GIB  # the saved one is never a custom image
    # a pin in another spelling (Docker Hub's long form, no tag) holds too
    hub = img("python:latest", 1)
    pinned_hub = NodeFacts(inv("a"), (hub,), pinned=frozenset({"docker.io/library/python"}))
    only_hub = Catalog((CPU,), allowed_image_patterns=("python:*",))
    assert plan_node(pinned_hub, (), only_hub, 0, custom_budget_bytes=1).removals == ()
    assert [
        r.image for r in plan_node(NodeFacts(inv("a"), (hub,)), (), only_hub, 0, None, 1).removals
    ] == [hub]


def test_a_catalog_image_a_server_starts_from_is_not_removed_either() -> None:
    tf = img(f"{REG}/tf:2.20", 4)
    facts = NodeFacts(inv("a"), (tf,), pinned=frozenset({f"{REG}/tf:2.20"}))
    assert plan_node(facts, (), CATALOG, 1).removals == ()
    assert [r.image for r in plan_node(NodeFacts(inv("a"), (tf,)), (), CATALOG, 1).removals] == [tf]


def test_one_plan_node_matches_plan() -> None:
    a = node("a", img(f"{REG}/cpu:1", 1))
    assert plan_node(a, (CPU, TORCH), CATALOG, 0) == plan([a], (CPU, TORCH), CATALOG, 0)["a"]


def test_a_chosen_image_goes_only_when_that_brings_the_node_within_budget() -> None:
    used = img(f"{REG}/tf:2.20", 3, in_use=True)
    cpu = img(f"{REG}/cpu:1", 1)
    # 4 GiB, budget 2: the image in use keeps the node over it whatever goes
    assert plan([node("a", used, cpu)], (CPU,), CATALOG, 2 * GIB)["a"].removals == ()
    assert [
        r.image for r in plan([node("a", used, cpu)], (CPU,), CATALOG, 3 * GIB)["a"].removals
    ] == [cpu]
