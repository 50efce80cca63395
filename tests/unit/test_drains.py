"""Admins' node drains survive a restart (wire/drains.py, Cluster.drain/undrain), and a
nodes file that isn't there is an error, not "no nodes"."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from jupyterhub_gpu.edges.adminfiles import load_nodes_file
from jupyterhub_gpu.edges.files import load_drains, save_drains
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.config import check_config
from jupyterhub_gpu.wire.drains import decode_drains, encode_drains

pytestmark = pytest.mark.unit

NODES = [
    {"name": "gpu-a", "docker_url": "unix:///nowhere-a.sock", "address": "127.0.0.1"},
    {"name": "gpu-b", "docker_url": "unix:///nowhere-b.sock", "address": "127.0.0.1"},
]


def cluster(path: Path) -> Cluster:
    import logging

    return Cluster(ClusterSettings(nodes=NODES, drains_file=str(path)), logging.getLogger("t"))


def test_a_drain_is_kept_across_a_new_cluster(tmp_path: Path) -> None:
    path = tmp_path / "drains.json"
    first = cluster(path)
    assert first.admin_drains == {}
    first.drain("gpu-b", "new power supply <b>today</b>")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = cluster(path)  # the hub restarted
    assert second.admin_drains == {"gpu-b": "new power supply <b>today</b>"}
    assert second.undrain("gpu-b") == "new power supply <b>today</b>"
    assert second.undrain("gpu-b") is None
    assert cluster(path).admin_drains == {}


def test_a_drain_that_cannot_be_saved_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "drains.json"
    c = cluster(path)
    c.drain("gpu-a", "")
    path.unlink()
    path.mkdir()  # the rename onto it now fails, whoever runs the test
    (path / "keep").write_text("")
    with pytest.raises(OSError):
        c.drain("gpu-b", "x")
    assert c.admin_drains == {"gpu-a": ""}
    with pytest.raises(OSError):
        c.undrain("gpu-a")
    assert c.admin_drains == {"gpu-a": ""}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drains.json"]  # no temporary left


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "drains.json"
    save_drains(path, {"gpu-a": "a"})
    save_drains(path, {"gpu-a": "a", "gpu-b": ""})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drains.json"]
    assert load_drains(path) == {"gpu-a": "a", "gpu-b": ""}
    assert decode_drains(encode_drains({"x": "y"})) == {"x": "y"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "is not JSON"),
        ("[]", "is not a drains file of version 1"),
        ('{"version": 2, "drains": {}}', "is not a drains file of version 1"),
        ('{"version": 1, "drains": []}', "'drains' must be an object"),
        ('{"version": 1, "drains": {"": "x"}}', "is not a node name"),
        ('{"version": 1, "drains": {"gpu-a": 3}}', "the note of node 'gpu-a'"),
        (json.dumps({"version": 1, "drains": {"gpu-a": "x" * 501}}), "not a short text"),
    ],
)
def test_a_malformed_drains_file_stops_the_hub_with_its_name(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "drains.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says) as e:
        cluster(path)
    assert str(path) in str(e.value) and "fix or remove the file" in str(e.value)


def test_a_missing_drains_file_is_no_drain(tmp_path: Path) -> None:
    assert load_drains(tmp_path / "none.json") == {}


def test_a_mistyped_nodes_file_is_an_error_not_no_nodes(tmp_path: Path) -> None:
    missing = tmp_path / "nodse.yaml"
    with pytest.raises(ConfigError, match=r"does not exist: check the path") as e:
        load_nodes_file(str(missing))
    assert str(missing) in str(e.value)
    from traitlets.config import Config

    c = Config()
    c.GPUDockerSpawner.nodes_file = str(missing)
    with pytest.raises(ConfigError, match="does not exist"):
        check_config(c)
    assert load_nodes_file("") == []
