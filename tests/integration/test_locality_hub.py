"""Image locality on the real cluster: of two equally good nodes, the server goes to the one
whose engine already holds its image (docs/placement.md, "Image locality").

node-a and node-b each declare one RTX 3090 (same driver, idle): without locality the
name decides (node-a), and a CPU-only server goes to the node with fewer servers. Only
node-b holds the image under test: a tag of the test image made for this test on node-b
alone (no bytes copied) and removed afterwards.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import CATALOG, gpu_inventory
from tests.integration.test_multinode import FAST, STUB, spawn_ready
from tests.support.cluster import TEST_IMAGE, Engine
from tests.support.hub import Hub

pytestmark = pytest.mark.integration

RTX3090 = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
INVENTORY = [
    gpu_inventory("node-a", "aaaaaaaa", [RTX3090]),
    gpu_inventory("node-b", "bbbbbbbb", [RTX3090]),
]
LIGHT = {"cpu": 0.5, "mem_gib": 1}


@pytest.fixture
def only_on_b(engines: list[Engine]) -> Iterator[str]:
    """A reference to the test image that only node-b's engine knows; untagged after."""
    by_name = {e.name: e for e in engines}
    repository = f"jupyterhub-gpu/locality-{secrets.token_hex(4)}"
    reference = f"{repository}:1"
    with by_name["node-b"].client() as client:
        client.api.tag(TEST_IMAGE, repository, "1")
    with by_name["node-a"].client() as client:
        assert not client.api.images(name=repository)
    try:
        yield reference
    finally:
        with by_name["node-b"].client() as client:
            client.api.remove_image(reference)  # the tag only: the test image stays


def catalog_with(path: Path, reference: str) -> Path:
    """The demo catalog plus a GPU and a CPU-only entry of ``reference``."""
    data = yaml.safe_load(CATALOG.read_text())
    common = {"framework": "python", "framework_version": "3.11", "image": reference}
    data["images"] += [
        {
            "slug": "only-b-gpu",
            "display_name": "Only on node-b (GPU)",
            "cuda_version": "12.4",
            "compute_capabilities": {"min": "5.0", "max": "9.0"},
            **common,
        },
        {"slug": "only-b-cpu", "display_name": "Only on node-b", "cuda_version": None, **common},
    ]
    path.write_text(yaml.safe_dump(data))
    return path


def test_of_two_equal_nodes_the_server_goes_to_the_one_holding_its_image(
    make_hub: Callable[..., Hub], engines: list[Engine], only_on_b: str, tmp_path: Path
) -> None:
    nodes = [e for e in engines if e.name in ("node-a", "node-b")]
    catalog = catalog_with(tmp_path / "catalog.yaml", only_on_b)
    hub = make_hub(
        nodes, INVENTORY, FAST + STUB + f"c.GPUCluster.catalog_file = {str(catalog)!r}\n"
    )
    gpu = spawn_ready(hub, "loc-gpu", {"image": "only-b-gpu", "gpu_count": 1, **LIGHT})
    assert gpu["node"] == "node-b", gpu  # without locality: node-a (first by name)
    cpu = spawn_ready(hub, "loc-cpu", {"image": "only-b-cpu", "gpu_count": 0, **LIGHT})
    assert cpu["node"] == "node-b", cpu  # without locality: node-a (no server there yet)
    # an image both nodes hold: the fewest servers again (node-a has none)
    plain = spawn_ready(hub, "loc-plain", {"image": "demo-cpu", "gpu_count": 0, **LIGHT})
    assert plain["node"] == "node-a", plain
