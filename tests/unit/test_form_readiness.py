"""Where an image is ready, in the spawn form's words (core/form/readiness.py), from the
nodes' image listings (core/placement/locality.sizes) to the rendered form."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.form import policy_from_config, resolve_bounds, spawn_form_html
from jupyterhub_gpu.core.form.readiness import image_size, readiness
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.placement.locality import sizes, wanted
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.wire.catalog_file import parse_catalog
from tests.unit.test_form_render import parse

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.lab:5000/jupyterhub-gpu/pytorch:2.8.0-cuda12.8"
OTHER = "registry.lab:5000/jupyterhub-gpu/tensorflow:2.20"
IMAGE_ID = "sha256:" + "ab" * 32


def nodes(*holding: bool) -> list[NodeState]:
    base = NodeState(load_inventory_file(ROOT / "tests/data/cluster-hetero.yaml")[0])
    return [
        replace(
            base,
            inventory=replace(base.inventory, name=f"n{i}"),
            images=wanted(IMAGE) if h else frozenset(),
        )
        for i, h in enumerate(holding, 1)
    ]


def test_sizes_come_from_the_listing_for_every_name_of_an_image() -> None:
    listing = [
        {"Id": IMAGE_ID, "RepoTags": [IMAGE], "RepoDigests": None, "Size": 6_234_000_000},
        {"Id": "sha256:" + "cd" * 32, "RepoTags": ["<none>:<none>"], "Size": 5},
        {"Id": "sha256:" + "ef" * 32, "RepoTags": [OTHER], "Size": "big"},  # not a size
        {"Id": "sha256:" + "01" * 32, "RepoTags": ["x:1"], "Size": True},  # not a size
        "garbage",
    ]
    found = sizes(listing)  # type: ignore[arg-type]
    assert found[IMAGE_ID] == 6_234_000_000
    assert image_size(IMAGE, found) == 6_234_000_000
    assert image_size(OTHER, found) is None and image_size("x:1", found) is None


def test_readiness_says_where_the_image_is_and_what_a_first_start_costs() -> None:
    known = {next(iter(wanted(IMAGE))): 6_234_000_000}
    assert readiness(IMAGE, nodes(True, True, False, True), known) == (
        "ready on 3 of 4 nodes (elsewhere a first start pulls it, about 6.2 GB on disk)"
    )
    assert readiness(IMAGE, nodes(True, True), known) == "ready on 2 of 2 nodes"
    assert readiness(IMAGE, nodes(True), known) == "ready on n1"
    assert readiness(IMAGE, nodes(False, False), known) == (
        "on no node yet: a first start pulls it first, about 6.2 GB on disk"
    )
    # no node ever listed it: no size is made up
    assert readiness(IMAGE, nodes(False), {}) == "on no node yet: a first start pulls it first"
    assert readiness(IMAGE, [], known) == ""  # no node can run it: the form says why elsewhere


def test_the_form_shows_each_images_readiness() -> None:
    catalog: Catalog = parse_catalog(
        {
            "images": [
                {"slug": "pt", "display_name": "PT", "framework": "pytorch",
                 "framework_version": "2.8.0", "cuda_version": "12.1", "image": IMAGE},
                {"slug": "tf", "display_name": "TF", "framework": "tensorflow",
                 "framework_version": "2.20", "cuda_version": "12.1", "image": OTHER},
            ]
        }
    )  # fmt: skip
    inventories = load_inventory_file(ROOT / "tests/data/cluster-hetero.yaml")
    states = [NodeState(inv) for inv in inventories]
    states[0] = replace(states[0], images=wanted(IMAGE))
    bounds = resolve_bounds(policy_from_config({"max_gpus": 2}), ["u"])
    html = spawn_form_html(
        catalog,
        ClusterSnapshot(tuple(states)),
        bounds,
        image_sizes={next(iter(wanted(OTHER))): 9 * 10**9},
    )
    facts = {o["value"]: o["data-facts"] for o in parse(html).selects["image"]}
    assert "ready on 1 of " in facts["pt"], facts["pt"]
    assert facts["tf"].endswith(  # what a student reads comes before the admin's details
        "on no node yet: a first start pulls it first, about 9.0 GB on disk · needs driver "
        ">= 525.60.13, compute capability >= 5.0"
    ), facts["tf"]
