"""The hub's Cluster learns which images each node holds (for placement's locality): from
the engine's listing, at a bounded rate, off the event loop, never waiting long, and at
once after its own pull."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyterhub_gpu.core.placement import PlacementRequest, place
from jupyterhub_gpu.core.placement.locality import wanted
from jupyterhub_gpu.hub import cluster as cluster_module
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.pull import pull
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
CPU_IMAGE = "jupyterhub-gpu/python-cpu:3.11-bookworm"
DIGEST = "sha256:" + "ab" * 32


class Engine:
    """A node's engine as docker-py's APIClient answers: ``images()``, ``pull()``."""

    def __init__(self, listing: list[dict[str, Any]]) -> None:
        self.listing: list[dict[str, Any]] | Exception = listing
        self.calls = 0
        self.gate: threading.Event | None = None  # set: images() waits for it

    def images(self) -> list[dict[str, Any]]:
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(10)
        if isinstance(self.listing, Exception):
            raise self.listing
        return self.listing

    def pull(self, image: str, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"status": "Downloaded newer image for " + image}]

    def close(self) -> None:
        pass


def make_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engines: dict[str, Engine], **kw: Any
) -> Cluster:
    nodes = [
        {"name": n["name"], "docker_url": f"unix://{tmp_path}/{n['name']}.sock", "address": "::1"}
        for n in yaml.safe_load(DATA.read_text())["nodes"]
    ]
    monkeypatch.setattr(
        cluster_module, "node_client", lambda spec, timeout, tls: engines[spec.name]
    )
    settings = ClusterSettings(nodes=nodes, probe_mode="declared", inventory_file=str(DATA), **kw)
    cluster = Cluster(settings, logging.getLogger("test"))
    cluster.reconciler.reconciled = True  # no containers here

    async def engine_ok(node: str) -> bool:
        return True

    cluster.engine_ok = engine_ok  # type: ignore[method-assign]
    return cluster


def engines() -> dict[str, Engine]:
    return {
        "gpu-a": Engine([{"Id": "sha256:" + "01" * 32, "RepoTags": [CPU_IMAGE]}]),
        "gpu-b": Engine([]),
        "gpu-c": Engine([{"Id": "sha256:" + "02" * 32, "RepoDigests": [f"reg:5000/x@{DIGEST}"]}]),
    }


def images_of(snapshot: Any) -> dict[str, frozenset[str]]:
    return {n.name: n.images for n in snapshot.nodes}


def test_a_snapshot_says_which_images_each_node_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = engines()
    cluster = make_cluster(tmp_path, monkeypatch, fleet)

    async def scenario() -> None:
        first = await cluster.snapshot()
        assert images_of(first) == {
            "gpu-a": wanted(CPU_IMAGE) | {"sha256:" + "01" * 32},
            "gpu-b": frozenset(),
            "gpu-c": wanted(f"reg:5000/x@{DIGEST}") | {"sha256:" + "02" * 32},
        }
        # only gpu-c (A100s) holds it: a one-GPU server still takes the smallest class
        request = PlacementRequest(1, image=wanted(f"reg:5000/x@{DIGEST}"))
        assert place(first, request) == place(first, PlacementRequest(1))
        # within the refresh interval nobody asks the engines again; the tuple is reused
        second = await cluster.snapshot()
        assert second.nodes is first.nodes
        assert [e.calls for e in fleet.values()] == [1, 1, 1]

    asyncio.run(scenario())


def test_a_failed_listing_keeps_what_was_known_and_a_due_one_runs_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = engines()
    cluster = make_cluster(tmp_path, monkeypatch, fleet, image_refresh_interval=0.0)

    async def scenario() -> None:
        first = await cluster.snapshot()
        fleet["gpu-a"].listing = OSError("engine gone")
        fleet["gpu-b"].listing = [{"Id": "sha256:" + "03" * 32, "RepoTags": [CPU_IMAGE]}]
        await cluster.snapshot()  # starts the new listings, does not wait for them
        await wait_until_async(lambda: not cluster._image_reads, 10, "the listings to end")
        third = await cluster.snapshot()
        assert images_of(third)["gpu-a"] == images_of(first)["gpu-a"]  # kept
        assert wanted(CPU_IMAGE) <= images_of(third)["gpu-b"]  # renewed

    asyncio.run(scenario())


def test_a_slow_engine_never_holds_up_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node never listed yet is waited for at most ping_timeout; then it counts as
    holding nothing until its listing arrives."""
    fleet = engines()
    gate = fleet["gpu-a"].gate = threading.Event()
    cluster = make_cluster(tmp_path, monkeypatch, fleet, ping_timeout=0.3)

    async def scenario() -> None:
        began = time.monotonic()
        first = await cluster.snapshot()
        assert time.monotonic() - began < 3.0
        assert images_of(first)["gpu-a"] == frozenset()
        assert images_of(first)["gpu-c"]  # the others are there
        second_began = time.monotonic()
        await cluster.snapshot()  # no second wait for the same node
        assert time.monotonic() - second_began < 0.25
        gate.set()
        await wait_until_async(lambda: not cluster._image_reads, 10, "the listings to end")
        assert wanted(CPU_IMAGE) <= images_of(await cluster.snapshot())["gpu-a"]

    try:
        asyncio.run(scenario())
    finally:
        gate.set()


def test_the_hubs_own_pull_counts_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the hub's pull the node holds the image at once; a listing the engine
    answered before the pull ended (it lacks the image) does not take it away; the node
    is listed again at the next snapshot."""
    fleet = engines()
    cluster = make_cluster(tmp_path, monkeypatch, fleet)
    image = "reg:5000/team/torch:2.8"
    log = logging.getLogger("t")

    async def settled() -> None:
        await wait_until_async(lambda: not cluster._image_reads, 10, "the listings to end")

    async def scenario() -> None:
        assert not wanted(image) & images_of(await cluster.snapshot())["gpu-b"]
        gate = fleet["gpu-b"].gate = threading.Event()
        cluster._images_at.pop("gpu-b")  # a listing falls due and starts, without the image
        await cluster.snapshot()
        await pull(cluster, "gpu-b", image, 10.0, lambda pct, msg: None, log)
        assert wanted(image) <= images_of(await cluster.snapshot())["gpu-b"]  # at once
        gate.set()  # the old listing ends after the pull
        await settled()
        assert fleet["gpu-b"].calls == 2
        assert wanted(image) <= images_of(await cluster.snapshot())["gpu-b"]  # kept
        await settled()
        assert fleet["gpu-b"].calls == 3  # listed again after the pull

    asyncio.run(scenario())
