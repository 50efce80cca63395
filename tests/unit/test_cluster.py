"""The hub's Cluster without engines: snapshots reuse one ``nodes`` tuple while nothing
changed (warm placement), endpoint changes reconnect, reconciliation per GPU."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.core.allocation import LabelledContainer
from jupyterhub_gpu.core.placement import PlacementRequest, place
from jupyterhub_gpu.core.placement.index import index_for
from jupyterhub_gpu.hub import cluster as cluster_module
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"


def make_cluster(tmp_path: Path) -> tuple[Cluster, Path]:
    inventory = tmp_path / "inventory.yaml"
    shutil.copy(DATA, inventory)
    nodes = [
        {
            "name": n["name"],
            "docker_url": f"unix://{tmp_path}/{n['name']}.sock",
            "address": "127.0.0.1",
        }
        for n in yaml.safe_load(DATA.read_text())["nodes"]
    ]
    settings = ClusterSettings(nodes=nodes, probe_mode="declared", inventory_file=str(inventory))
    cluster = Cluster(settings, logging.getLogger("test"))
    cluster.reconciler.reconciled = True  # no engines here: nothing to reconcile

    async def engine_ok(node: str) -> bool:
        return True

    cluster.engine_ok = engine_ok  # type: ignore[method-assign]
    return cluster, inventory


def test_unchanged_nodes_give_the_same_tuple(tmp_path: Path) -> None:
    cluster, _ = make_cluster(tmp_path)
    first = asyncio.run(cluster.snapshot())
    second = asyncio.run(cluster.snapshot())
    assert len(first.nodes) == 3
    assert second.nodes is first.nodes
    assert index_for(second.nodes) is index_for(first.nodes)  # one index, built once
    request = PlacementRequest(gpu_count=1)
    assert place(second, request) == place(first, request)


def test_a_changed_node_gives_a_new_tuple(tmp_path: Path) -> None:
    cluster, inventory = make_cluster(tmp_path)
    first = asyncio.run(cluster.snapshot())
    data = yaml.safe_load(inventory.read_text())
    data["nodes"][1]["gpus"][0]["healthy"] = False  # a TITAN X breaks
    inventory.write_text(yaml.safe_dump(data))
    second = asyncio.run(cluster.snapshot())
    assert second.nodes is not first.nodes and second.nodes != first.nodes
    broken = data["nodes"][1]["gpus"][0]["uuid"]
    (gpu_b,) = [n for n in second.nodes if n.name == "gpu-b"]
    assert [g.healthy for g in gpu_b.inventory.gpus if g.uuid == broken] == [False]


class FakeClient:
    """Stands in for docker.APIClient, which would connect at construction."""

    def __init__(self, base_url: str, **kwargs: object) -> None:
        self.base_url, self.closed = base_url, False

    def close(self) -> None:
        self.closed = True


def test_a_changed_docker_endpoint_gets_a_new_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose docker_url changes in the nodes file is reached at the new address (the
    old client closed); an unchanged node keeps its client."""
    monkeypatch.setattr(
        cluster_module, "node_client", lambda spec, timeout, tls: FakeClient(spec.docker_url)
    )
    nodes_file = tmp_path / "nodes.yaml"
    node = {
        "name": "gpu-x",
        "docker_url": "tcp://10.0.0.9:2376",
        "address": "10.0.0.9",
        "insecure_plaintext_docker_api": True,  # no TLS files in a unit test
    }
    nodes_file.write_text(yaml.safe_dump({"nodes": [node]}))
    fixed = {"name": "gpu-y", "docker_url": "unix:///run/y.sock", "address": "127.0.0.1"}
    settings = ClusterSettings(nodes=[fixed], nodes_file=str(nodes_file))
    cluster = Cluster(settings, logging.getLogger("test"))
    before, other = cluster.client("gpu-x"), cluster.client("gpu-y")
    assert before.base_url == "tcp://10.0.0.9:2376"
    node["docker_url"] = "tcp://10.0.0.10:2376"
    nodes_file.write_text(yaml.safe_dump({"nodes": [node]}))
    os.utime(nodes_file, (1, 1))  # a new mtime whatever the clock's resolution
    cluster.specs()  # the hub re-reads the file on its next snapshot or reconciliation
    after = cluster.client("gpu-x")
    assert after is not before and after.base_url == "tcp://10.0.0.10:2376"
    assert before.closed and not other.closed
    assert cluster.client("gpu-y") is other


def test_reconciliation_frees_gpus_a_running_container_does_not_list(tmp_path: Path) -> None:
    """The ledger says alice's server holds GPUs a and b; her running container's labels
    say only a: b is freed. A spawn in progress, and holds taken after the listing began,
    are left alone."""
    cluster, _ = make_cluster(tmp_path)
    ledger = cluster.ledger
    ledger.reserve("alice/", "gpu-a", ["GPU-a", "GPU-b"])
    ledger.reserve("bob/", "gpu-a", ["GPU-c", "GPU-d"])
    began = time.monotonic()
    ledger.reserve("carol/", "gpu-a", ["GPU-e"])  # taken after the listing began
    found = [
        LabelledContainer("gpu-a", "c1" * 32, "alice/", ("GPU-a",), True),
        LabelledContainer("gpu-a", "c2" * 32, "bob/", ("GPU-c",), True),
        LabelledContainer("gpu-a", "c3" * 32, "carol/", (), True),
    ]
    cluster.reconciler.apply("gpu-a", found, began, pending={"bob/"})
    assert ledger.held_by("alice/") == ["GPU-a"]
    assert ledger.held_by("bob/") == ["GPU-c", "GPU-d"]  # spawning: untouched
    assert ledger.held_by("carol/") == ["GPU-e"]  # newer than the listing
