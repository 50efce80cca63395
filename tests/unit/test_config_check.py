"""check_config: the hub refuses to start on a bad setting, naming entry and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu.config import check_config
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "scripts" / "demo" / "catalog.yaml"


def good() -> Config:
    c = Config()
    c.GPUDockerSpawner.nodes = [{"name": "n1", "docker_url": "unix:///s", "address": "127.0.0.1"}]
    c.GPUDockerSpawner.probe_mode = "declared"
    c.GPUDockerSpawner.inventory_file = str(REPO / "tests" / "data" / "cluster-hetero.yaml")
    c.GPUDockerSpawner.catalog_file = str(CATALOG)
    c.GPUDockerSpawner.home_template = "/mnt/cephfs/home/{username}"
    return c


def test_good_config_passes() -> None:
    check_config(good())


def test_site_example_and_demo_configs_are_checked() -> None:
    for path in (REPO / "jupyterhub_config.py", REPO / "scripts" / "demo" / "jupyterhub_config.py"):
        assert "check_config(c)" in path.read_text()


def _bad_catalog(tmp_path: Path) -> str:
    data = yaml.safe_load(CATALOG.read_text())
    data["images"][1]["cuda_version"] = "twelve"
    f = tmp_path / "catalog.yaml"
    f.write_text(yaml.safe_dump(data))
    return str(f)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "catalog_file", _bad_catalog(t)),
            "images[1] (demo-cuda11).cuda_version",
        ),
        (
            lambda c, t: setattr(
                c.GPUDockerSpawner, "nodes", [{"name": "x", "docker_url": "http://h"}]
            ),
            "nodes[0] (x).docker_url",
        ),
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "resource_defaults", {"max_gpu": 2}),
            "unknown key 'max_gpu'",
        ),
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "home_template", "home/{username}"),
            "absolute folder",
        ),
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "inventory_file", str(t / "missing.yaml")),
            "cannot read",
        ),
        (lambda c, t: setattr(c.DockerSpawner, "default_uid", 0), "never run as root"),
    ],
)
def test_bad_settings_are_refused(mutate, fragment: str, tmp_path: Path) -> None:
    c = good()
    mutate(c, tmp_path)
    with pytest.raises(ConfigError) as e:
        check_config(c)
    assert fragment in str(e.value)
