"""Pulls that fail on a real engine (issue 25, "Bad input and faults"): a node whose disk
fills during a pull, and a registry that is down. Each is a sentence in the hub's log and
in the error the user (or the pre-puller's state) sees; nothing half-pulled counts as
present: not in the engine's listing, not in the hub's image listing (locality, the
form's "ready on" words), not in the pre-puller's "has", and nothing is left "pulling".

The node is a fresh engine of its own (tests/support/bare_node.py: a network namespace
and a private ``dockerd``) whose data-root is a 24 MiB tmpfs; the images are small
synthetic ones of random bytes from the test registry (tests/support/registry.py): a
40 MiB one that can't fit, and a 2 MiB one that can, pulled afterwards to show that the
failed pull left the disk usable. The registry that is down is a port of the site
address nothing listens on (the engine's connection is refused at once).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.core.catalog import Catalog, CatalogEntry
from jupyterhub_gpu.core.form.readiness import readiness
from jupyterhub_gpu.core.placement import locality
from jupyterhub_gpu.errors import ImageUnavailable
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.prepull import PrePuller, PrePullRunner
from jupyterhub_gpu.hub.pull import pull
from tests.conftest import gpu_inventory
from tests.support.bare_node import SITE_ADDRESS, BareNode
from tests.support.registry import Registry, serve
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.integration

NODE = "small-disk"
DISK_MIB = 24


@pytest.fixture
def small_disk() -> Iterator[BareNode]:
    """A node whose engine's data-root is a ``DISK_MIB`` MiB tmpfs (removed afterwards)."""
    node = BareNode(7)
    node.create()
    try:
        data = node.folder / "data"
        data.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "jhgpu-small-disk", str(data)],
            check=True,
        )
        drop_in = node.folder / "docker.conf"
        drop_in.write_text("[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd\n")
        settings = node.folder / "daemon.source.json"
        settings.write_text(json.dumps({
            "hosts": ["unix:///run/docker.sock"], "bridge": "none", "iptables": False,
            "insecure-registries": [f"{SITE_ADDRESS}/32"],
        }))  # fmt: skip
        node.start_engine(drop_in, settings)
        yield node
    finally:
        node.destroy()  # stops dockerd, unmounts the tmpfs, removes the folder


def dead_port() -> int:
    """A port of the site address that nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind((SITE_ADDRESS, 0))
        return int(s.getsockname()[1])


def cpu_entry(slug: str, image: str) -> CatalogEntry:
    return CatalogEntry(slug, slug, "python", "3.11", None, image)


async def test_a_full_disk_and_a_registry_down_are_sentences_and_leave_nothing_present(
    small_disk: BareNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry")
    registry.folder.mkdir()
    registry.add_random_image("jhgpu-faults/big", "1", 40)  # more than the node's disk
    registry.add_random_image("jhgpu-faults/small", "1", 2)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [gpu_inventory(NODE, "fa17fa17", [])]}))
    node_config = {
        "name": NODE, "docker_url": f"unix://{small_disk.socket}", "address": small_disk.address,
    }  # fmt: skip
    settings = ClusterSettings(
        nodes=[node_config],
        probe_mode="declared",
        inventory_file=str(inventory),
        reconcile_interval=0,
    )
    cluster = Cluster(settings, logging.getLogger("test-pull-faults"))
    cluster.reconciler.reconciled = True  # nothing of ours runs there: no reconciliation needed
    log = logging.getLogger("test-pull-faults")
    with serve(registry), caplog.at_level(logging.WARNING):
        big, small = (registry.image(f"jhgpu-faults/{n}", "1") for n in ("big", "small"))
        entries = (cpu_entry("big", big), cpu_entry("small", small))
        runner = PrePullRunner(
            cluster,
            PrePuller(enabled=True, images="all", disk_budget_gib=0, custom_disk_budget_gib=0),
            lambda: Catalog(entries),
            log,
        )
        # the pre-puller: big fills the disk; small is left for a later round
        plans = await runner.round()
        assert plans[NODE].pulls == entries
        await runner.idle()
        state = runner.state()["nodes"][NODE]
        error = state["last_error"] or ""
        assert error.startswith(f"Could not pull {big} on node {NODE}: the node's disk is full"), (
            state
        )
        assert "free space on node small-disk" in error, error
        assert state["has"] == [] and state["pulling"] is None, state
        assert state["needs"] == ["big", "small"], state  # small not tried on a full disk
        assert any(error in r.getMessage() for r in caplog.records), caplog.text
        # nothing of big counts as present: the engine, the hub's listing, the form
        assert small_disk.docker("images", "-q").stdout.strip() == ""
        snapshot = await cluster.snapshot()
        (node_state,) = snapshot.nodes
        assert not locality.holds(node_state.images, locality.wanted(big)), node_state.images
        assert readiness(big, [node_state], cluster.image_sizes()).startswith("on no node yet")
        # the engine gave up mid-blob (the registry sees its connection go)
        await wait_until_async(lambda: registry.cut_off, 10, "the engine to drop the blob")

        # a registry that is down: a sentence naming it, nothing present
        down = f"{SITE_ADDRESS}:{dead_port()}/jhgpu-faults/down:1"
        with pytest.raises(ImageUnavailable) as failed:
            await pull(cluster, NODE, down, 60, lambda p, m: None, log)
        assert failed.value.cause == "registry", failed.value
        sentence = str(failed.value)
        assert sentence.startswith(
            f"Could not pull {down} on node {NODE}: its registry {down.split('/')[0]} did not "
            "answer (connection refused). It may be down: try again later"
        ), sentence
        assert any(sentence in r.getMessage() for r in caplog.records), caplog.text

        # the failed pull left the disk usable: an image that fits is pulled, and only now
        # counts as present (the form says ready)
        await pull(cluster, NODE, small, 60, lambda p, m: None, log)
        (node_state,) = (await cluster.snapshot()).nodes
        assert locality.holds(node_state.images, locality.wanted(small))
        assert readiness(small, [node_state], {}) == f"ready on {NODE}"
        assert small in small_disk.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout
