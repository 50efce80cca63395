"""The pre-puller on a real engine (node-b) with the test registry: a catalog image the
registry has and node-b lacks is pulled within one round; images labelled with a catalog
slug whose reference the catalog does not list are custom images (issue 30): over the
custom images' budget, the unused one is removed; one that a stopped container uses is
kept (the planner never picks it, and the engine refuses, 409, if asked).

The cluster is shared: the round sees only this test's images on node-b (the listing is
filtered to them), so no other image there can be planned for removal."""

from __future__ import annotations

import contextlib
import io
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from jupyterhub_gpu.core.catalog import Catalog, CatalogEntry
from jupyterhub_gpu.core.prepull import CATALOG_LABEL, GIB, HeldImage
from jupyterhub_gpu.hub import prepull as prepull_module
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.prepull import PrePuller, PrePullRunner, remove_image
from tests.conftest import gpu_inventory
from tests.support.cluster import TEST_IMAGE, Engine
from tests.support.registry import Registry, serving_images

pytestmark = pytest.mark.integration

NAME = "jupyterhub-gpu/prepulltest"
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")


@pytest.fixture(scope="module")
def registry(engines: list[Engine], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    folder = tmp_path_factory.mktemp("registry")
    with (
        engines[0].client() as client,
        serving_images(client, TEST_IMAGE, folder, NAME, {"1": 1}) as reg,
    ):
        yield reg


def labelled(client: docker.DockerClient, tag: str, slug: str) -> str:
    """A custom image (labelled with a catalog slug, its reference not in the catalog),
    made on the node from the test image in a second (one LABEL: no layer)."""
    dockerfile = f"FROM {TEST_IMAGE}\nLABEL {CATALOG_LABEL}={slug}\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    return str(image.id)


async def test_a_round_pulls_what_is_missing_and_removes_what_is_over_budget(
    engines: list[Engine], registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_b = engines[1]
    run = uuid.uuid4().hex[:8]
    wanted = registry.image(NAME, "1")
    gone, kept = f"jhgpu-prepull-test/gone-{run}:1", f"jhgpu-prepull-test/kept-{run}:1"
    container = None
    with node_b.client() as client:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(wanted, force=True)
        gone_id = labelled(client, gone, f"gone-{run}")
        kept_id = labelled(client, kept, f"kept-{run}")
        container = client.containers.create(kept, command=["true"], name=f"prepull-{run}")
    mine = {gone, kept, wanted}
    real_list = prepull_module.list_node

    def only_mine(client: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        images, containers = real_list(client)
        return [i for i in images if mine & set(i.get("RepoTags") or ())], containers

    removed: list[str] = []

    def guarded_remove(client: Any, image: HeldImage) -> bool:
        assert image.id == gone_id, image  # nothing else of this node is ever touched
        removed.append(image.id)
        return remove_image(client, image)

    monkeypatch.setattr(prepull_module, "list_node", only_mine)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [gpu_inventory(node_b.name, "dddddddd", [RTX])]}))
    settings = ClusterSettings(
        nodes=[node_b.node_config()],
        probe_mode="declared",
        inventory_file=str(inventory),
        reconcile_interval=0,
    )
    cluster = Cluster(settings, logging.getLogger("test-prepull"))
    cluster.reconciler.reconciled = True  # this cluster frees nothing of the shared engines
    entry = CatalogEntry("prepulltest", "Pre-pull test", "python", "3.11", None, wanted)
    try:
        with node_b.client() as client:
            size = client.images.get(gone).attrs["Size"]
        # custom: gone + kept = 2 sizes; their budget is 1.5: gone (unused) must go, and
        # the catalog's budget (1.5 too) is the catalog image's alone: it is pulled
        budget = 1.5 * size / GIB
        policy = PrePuller(
            enabled=True,
            images=["prepulltest"],
            disk_budget_gib=budget,
            custom_disk_budget_gib=budget,
        )
        runner = PrePullRunner(
            cluster, policy, lambda: Catalog((entry,)), cluster.log, remove_fn=guarded_remove
        )
        plans = await runner.round()
        assert [r.image.id for r in plans[node_b.name].removals] == [gone_id]
        assert plans[node_b.name].pulls == (entry,)
        assert plans[node_b.name].used_bytes == 0  # the labels count for nothing here
        assert plans[node_b.name].custom_used_bytes == 2 * size
        await runner.idle()
        state = runner.state()["nodes"][node_b.name]
        assert state["has"] == ["prepulltest"] and state["last_error"] is None, state
        assert state["removed"] == [gone]
        with node_b.client() as client:
            assert client.images.get(wanted).tags == [wanted]
            with pytest.raises(docker.errors.ImageNotFound):
                client.images.get(gone)
            assert client.images.get(kept).id == kept_id
            # the engine itself refuses to remove an image a stopped container uses
            held = HeldImage(id=kept_id, references=(kept,))
            assert remove_image(client.api, held) is False
        assert removed == [gone_id]
        assert any(f"/v2/{NAME}/manifests/" in line for line in registry.requests)
    finally:
        with node_b.client() as client:
            if container is not None:
                container.remove(force=True)
            for image in (wanted, gone, kept):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(image, force=True)
