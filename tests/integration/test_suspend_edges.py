"""jupyterhub_gpu.edges.suspend's refusals on a real engine: each says why in a sentence
and leaves nothing behind (the checkpoint and restore that work are in
test_benchmarks_smoke_cluster.py::test_suspend_smoke)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from jupyterhub_gpu.edges.suspend import Checkpoint, checkpoint, restore
from jupyterhub_gpu.errors import SuspendFailed
from tests.support.cluster import STATE, TEST_IMAGE, Engine

pytestmark = pytest.mark.integration


@pytest.fixture
def client(engines: list[Engine]) -> docker.DockerClient:
    with engines[1].client() as c:
        yield c


def test_a_bad_checkpoint_name_is_refused_before_the_engine_is_asked(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    for name in ("", "../x", "-x", "a" * 65, "a b"):
        with pytest.raises(SuspendFailed, match="cannot name a checkpoint"):
            checkpoint(client, "nonexistent", tmp_path, name)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_of_a_missing_container_says_why_and_leaves_no_folder(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    with pytest.raises(SuspendFailed, match=r"could not checkpoint the container: .*nonexistent"):
        checkpoint(client, "jhgpu-nonexistent", tmp_path, "c1")
    assert not (tmp_path / "c1").exists()


def test_a_restore_on_another_engine_than_the_containers_says_where_it_must_run(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    saved = Checkpoint(name="c1", path=tmp_path, size_bytes=0, seconds=0.0)
    with pytest.raises(SuspendFailed, match="restore runs on the node whose engine created it"):
        restore(client, "0" * 64, saved, STATE / "engines" / "node-a" / "data")


def test_a_failed_restore_removes_its_copy_and_leaves_the_container_created(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    (tmp_path / "garbage.img").write_bytes(b"not a CRIU image")
    saved = Checkpoint(name="c1", path=tmp_path, size_bytes=16, seconds=0.0)
    created = client.containers.create(
        TEST_IMAGE, ["true"], network_mode="none", user="10001:5000", cap_drop=["ALL"]
    )
    try:
        root = Path(client.info()["DockerRootDir"])
        with pytest.raises(SuspendFailed, match="could not restore the container"):
            restore(client, created.id, saved, root)
        assert not (root / "containers" / created.id / "checkpoints" / "c1").exists()
        created.reload()
        assert created.status == "created"
    finally:
        created.remove(force=True)
