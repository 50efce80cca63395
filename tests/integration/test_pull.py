"""Pulling a missing image on the chosen node: progress on the spawn page, and a registry
error told in a sentence with nothing left held.

A real pull: a test registry (tests/support/registry.py) serves the test image, saved from
node-a, plus one new layer of random bytes, as ``127.0.0.1:<port>/jupyterhub-gpu/pulltest:1``;
node-b's engine pulls it through the spawner, and the hub streams the progress.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from tests.conftest import gpu_inventory
from tests.integration.test_multinode import STUB
from tests.support.cluster import SITE_ADDRESS, TEST_IMAGE, Engine
from tests.support.hub import Hub
from tests.support.registry import Registry, serving_images
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
NAME = "jupyterhub-gpu/pulltest"
PERCENT = re.compile(
    r"^Pulling (\S+) on node node-b: (\d+)% \(downloaded (\d+)% of (\d+) MB, unpacked (\d+)%"
    r"(?:; about (?:\d+ s|\d+ min) left)?\)$"
)


@pytest.fixture(scope="module")
def registry(engines: list[Engine], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    # 160 MiB: enough for the engine to report unpacking in several steps (16 MiB: one);
    # tag 3 is a small one, cut off mid-way
    folder = tmp_path_factory.mktemp("registry")
    with (
        engines[0].client() as client,
        serving_images(client, TEST_IMAGE, folder, NAME, {"1": 160, "3": 4}) as reg,
    ):
        yield reg


def hub_extra(tmp_path: Path, registry: Registry) -> str:
    """The test catalog, and a spawn request that answers at once (202) so that the
    progress stream is read while the spawn runs."""
    path = catalog(tmp_path / "catalog.yaml", registry)
    return (
        f"c.GPUCluster.catalog_file = {str(path)!r}\n"
        'c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}\n'
    )


def catalog(path: Path, registry: Registry) -> Path:
    def entry(slug: str, tag: str) -> dict[str, Any]:
        return {
            "slug": slug,
            "display_name": f"Pull test ({tag})",
            "framework": "python",
            "framework_version": "3.11",
            "cuda_version": "12.4",
            "compute_capabilities": {"min": "5.0", "max": "9.0"},
            "image": registry.image(NAME, tag),
        }

    down = {**entry("down", "1"), "image": f"{SITE_ADDRESS}:{dead_port()}/{NAME}:1"}
    entries = [entry("pulltest", "1"), entry("missing", "2"), down, entry("cutoff", "3")]
    path.write_text(yaml.safe_dump({"images": entries}))
    return path


def dead_port() -> int:
    """A port of the site address that nothing listens on (a registry that is down)."""
    with socket.socket() as s:
        s.bind((SITE_ADDRESS, 0))
        return int(s.getsockname()[1])


def progress(hub: Hub, user: str) -> list[dict[str, Any]]:
    """Every event of the hub's progress stream for ``user``'s spawn, to its end."""
    events = []
    url = f"{hub.url}/hub/api/users/{user}/server/progress"
    headers = {"Authorization": f"token {hub.token}"}
    with httpx.stream("GET", url, headers=headers, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    return events


def remove_image(engine: Engine, image: str) -> None:
    with engine.client() as client, contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(image, force=True)


def test_a_missing_image_is_pulled_with_progress(
    make_hub, engines: list[Engine], registry: Registry, tmp_path: Path
) -> None:
    node_b = engines[1]
    image = registry.image(NAME, "1")
    remove_image(node_b, image)
    extra = hub_extra(tmp_path, registry)
    hub = make_hub([node_b], [gpu_inventory(node_b.name, "bbbbbbbb", [RTX, RTX])], extra)
    # paced so that the download lasts about 4 s on any machine: the estimate of the time
    # left shows from 2 s into a pull (a fast machine pulls 167 MB locally in under 2 s)
    registry.seconds_per_mib = 0.025
    try:
        hub.create_user("alice")
        r = hub.spawn("alice", {"image": "pulltest", "gpu_count": 1})
        assert r.status_code == 202, r.text
        events = progress(hub, "alice")
        registry.seconds_per_mib = 0.0
        messages = [e.get("message", "") for e in events]
        assert f"Pulling {image} on node node-b (not there yet)" in messages, messages
        shown = [int(m[2]) for m in map(PERCENT.match, messages) if m]
        assert shown and shown == sorted(set(shown)), messages  # rising, each step once
        assert shown[-1] == 100 and all(p % 5 == 0 for p in shown), shown
        phases = [(int(m[3]), int(m[5])) for m in map(PERCENT.match, messages) if m]
        # the bytes the layers weigh: the test image's and the 160 MiB layer's (167 MB)
        assert all(int(m[4]) >= 167 for m in map(PERCENT.match, messages) if m and int(m[2]) >= 50)
        assert any("left)" in m for m in messages), messages  # and a time left, once paced
        assert phases[-1] == (100, 100), phases
        # unpacking is shown as it goes, not only as the last step
        assert any(down == 100 and 0 < unpacked < 100 for down, unpacked in phases), phases
        assert events[-1].get("ready") is True, events[-1]
        state = hub.wait_ready("alice")
        with node_b.client() as client:
            assert client.images.get(image).tags == [image]
        assert any(f"/v2/{NAME}/blobs/" in line for line in registry.requests)
        assert state is not None
    finally:
        registry.seconds_per_mib = 0.0
        hub.stop_server("alice")
        remove_image(node_b, image)


def test_a_registry_error_is_a_sentence_and_holds_nothing(
    make_hub, engines: list[Engine], registry: Registry, tmp_path: Path
) -> None:
    node_b = engines[1]
    image = registry.image(NAME, "2")  # not in the registry
    extra = hub_extra(tmp_path, registry)
    hub = make_hub([node_b], [gpu_inventory(node_b.name, "cccccccc", [RTX])], extra)
    hub.create_user("bob")
    r = hub.spawn("bob", {"image": "missing", "gpu_count": 1})
    assert r.status_code == 202, r.text
    events = progress(hub, "bob")
    assert events[-1].get("failed") is True, events
    failure = events[-1].get("message", "")
    assert f"Could not pull {image} on node node-b" in failure, failure
    assert "manifest unknown" in failure and "Ask an admin" in failure, failure
    assert hub.server("bob") is None
    # a registry that is down: its own sentence, on the spawn page and in the hub's log
    hub.create_user("dora")
    assert hub.spawn("dora", {"image": "down", "gpu_count": 1}).status_code == 202
    events = progress(hub, "dora")
    assert events[-1].get("failed") is True, events
    failure = events[-1].get("message", "")
    assert "did not answer (connection refused). It may be down: try again later" in failure
    registry_down = failure.split("Could not pull ", 1)[1]
    assert f"Pull failed (registry): Could not pull {registry_down}" in hub.log_tail(400)
    assert hub.server("dora") is None
    with node_b.client() as client:
        left = client.containers.list(
            ignore_removed=True,
            all=True, filters={"label": f"jupyterhub-gpu.hub={hub.hub_id}"}
        )
    assert left == []
    # the node's only GPU was not kept: the next spawn gets it
    hub.create_user("carol")
    try:
        r = hub.spawn("carol", {"image": "pulltest", "gpu_count": 1})
        assert r.status_code == 202, r.text
        assert progress(hub, "carol")[-1].get("ready") is True
        assert hub.wait_ready("carol")["state"]["gpu_uuids"] == [
            "GPU-cccccccc0000-0000-4000-8000-000000000000"
        ]
    finally:
        hub.stop_server("carol")
        remove_image(node_b, registry.image(NAME, "1"))


def test_a_pull_cut_off_by_a_hub_restart_leaves_nothing_and_the_next_start_pulls(
    make_hub, engines: list[Engine], registry: Registry, tmp_path: Path
) -> None:
    """The hub is killed (SIGKILL) while its spawn's pull is half-way (the registry holds
    the new layer after its first MiB): the engine lists no such image, the restarted hub
    has no server pending and no GPU held for it, and the next start gets the image whole
    (the engine may have carried on with the pull it had begun: then the start finds it,
    else it pulls it)."""
    node_b = engines[1]
    image = registry.image(NAME, "3")
    remove_image(node_b, image)
    layer = json.loads(registry.manifests[(NAME, "3")])["layers"][-1]["digest"]
    hub = make_hub(
        [node_b],
        [gpu_inventory(node_b.name, "dddddddd", [RTX])],
        hub_extra(tmp_path, registry) + STUB,
    )  # a stand-in server: ready in 1 s
    hub.create_user("dan")
    registry.blobs_flow.clear()
    try:
        assert hub.spawn("dan", {"image": "cutoff", "gpu_count": 1}).status_code == 202
        wait_until(lambda: any(f"/blobs/{layer}" in r for r in registry.requests), 60,
                   "the new layer to be half-way", details=hub.log_tail)  # fmt: skip
        assert hub.proc is not None
        os.kill(hub.proc.pid, signal.SIGKILL)  # its proxy lives on, as after a real crash
        hub.proc.wait(10)
        with node_b.client() as client, pytest.raises(docker.errors.ImageNotFound):
            client.images.get(image)  # half a layer is no image
        hub.start()
        wait_until(lambda: hub.server("dan") is None, 30, "the cut-off spawn to be forgotten")
        registry.blobs_flow.set()
        assert hub.spawn("dan", {"image": "cutoff", "gpu_count": 1}).status_code == 202
        events = progress(hub, "dan")
        assert events[-1].get("ready") is True, events
        # the node's one GPU: nothing was kept for the spawn the restart cut off
        state = hub.wait_ready("dan")["state"]
        assert state["gpu_uuids"] == ["GPU-dddddddd0000-0000-4000-8000-000000000000"], state
        with node_b.client() as client:
            assert client.images.get(image).tags == [image]
    finally:
        registry.blobs_flow.set()
        hub.stop_server("dan")
        remove_image(node_b, image)
