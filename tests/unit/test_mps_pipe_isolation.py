"""Issue 30, finding 3: NVIDIA's default MPS pipe directory reaches every GPU container.

The NVIDIA Container Toolkit mounts ``/tmp/nvidia-mps`` into every container with the
``compute`` capability, and libcuda looks there when ``CUDA_MPS_PIPE_DIRECTORY`` is unset.
So: our daemon's default pipe directory is our own (``/run/jupyterhub-gpu/mps``),
``/tmp/nvidia-mps`` is refused as a setting, every server that is not an MPS share gets
``CUDA_MPS_PIPE_DIRECTORY`` naming a directory that does not exist, and ``check-node``
fails a node where ``/tmp/nvidia-mps`` exists (on the node, or in a GPU container).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
from traitlets.config import Config

from jupyterhub_gpu.cli import check_node as cli
from jupyterhub_gpu.core.containers import server_env
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.sharing.mps import (
    DEFAULT_PIPE_DIRECTORY,
    DEFAULT_SHM_DIRECTORY,
    NO_MPS_PIPE_DIRECTORY,
    NVIDIA_PIPE_DIRECTORY,
    MpsPaths,
    mps_paths,
    nvidia_pipe_check,
)
from jupyterhub_gpu.edges import mps as edge
from jupyterhub_gpu.edges import nodecheck as edge_nodecheck
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.config import check_config
from jupyterhub_gpu.hub.sharing import GPUSharing

if TYPE_CHECKING:
    from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
OURS = "/run/jupyterhub-gpu/mps"
NOWHERE = "/nonexistent/jupyterhub-gpu-no-mps"
RTX = "NVIDIA GeForce RTX 3090"
NODE = NodeInventory("gpu-a", "550.54", (GPU("GPU-aaaa", 0, RTX, 24576, (8, 6)),))


# ---------------------------------------------------------------- 1. the default
def test_the_default_pipe_directory_is_ours_not_nvidias() -> None:
    assert NVIDIA_PIPE_DIRECTORY == "/tmp/nvidia-mps"
    assert DEFAULT_PIPE_DIRECTORY == OURS
    assert MpsPaths() == MpsPaths(OURS, "/run/jupyterhub-gpu/mps-shm")
    assert GPUSharing().mps == MpsPaths(OURS, DEFAULT_SHM_DIRECTORY)
    assert cli.sharing_from(Config())[1] == MpsPaths(OURS, DEFAULT_SHM_DIRECTORY)
    for default in (DEFAULT_PIPE_DIRECTORY, DEFAULT_SHM_DIRECTORY):
        assert not default.startswith("/tmp/nvidia-")
    assert NO_MPS_PIPE_DIRECTORY == NOWHERE


# ---------------------------------------------------------------- 2. refused as a setting
def _good_config() -> Config:
    """A configuration check_config passes (as tests/unit/test_config_check.py's)."""
    c = Config()
    c.GPUDockerSpawner.nodes = [{"name": "n1", "docker_url": "unix:///s", "address": "127.0.0.1"}]
    c.GPUDockerSpawner.probe_mode = "declared"
    c.GPUDockerSpawner.inventory_file = str(REPO / "tests" / "data" / "cluster-hetero.yaml")
    c.GPUDockerSpawner.catalog_file = str(REPO / "scripts" / "demo" / "catalog.yaml")
    return c


NVIDIAS = ["/tmp/nvidia-mps", "/tmp/nvidia-mps/", "/tmp//nvidia-mps", "/tmp/nvidia-mps/pipes"]


@pytest.mark.parametrize("value", NVIDIAS)
@pytest.mark.parametrize("option", ["mps_pipe_directory", "mps_shm_directory"])
def test_nvidias_default_pipe_directory_is_refused_with_why_and_what_instead(
    option: str, value: str
) -> None:
    paths = {"mps_pipe_directory": OURS, "mps_shm_directory": DEFAULT_SHM_DIRECTORY}
    paths[option] = value
    with pytest.raises(ConfigError) as e:
        mps_paths(paths["mps_pipe_directory"], paths["mps_shm_directory"])
    said = str(e.value)
    assert f"GPUSharing.{option}:" in said
    assert "NVIDIA Container Toolkit mounts /tmp/nvidia-mps into every GPU container" in said
    assert f"set GPUSharing.mps_pipe_directory to {OURS}" in said
    with pytest.raises(ConfigError, match="NVIDIA Container Toolkit"):
        setattr(GPUSharing(), option, value)  # the trait's own check
    c = _good_config()
    check_config(c)
    c.GPUSharing[option] = value
    with pytest.raises(ConfigError, match="NVIDIA Container Toolkit"):
        check_config(c)  # the hub's start


def test_a_directory_only_named_like_nvidias_is_not_refused() -> None:
    assert mps_paths("/tmp/nvidia-mps-ours", DEFAULT_SHM_DIRECTORY).pipe_directory == (
        "/tmp/nvidia-mps-ours"
    )


# ---------------------------------------------------------------- 3. every other server
@pytest.mark.parametrize(
    "uuids, share, pipe",
    [
        ((), None, NOWHERE),  # CPU-only
        (("GPU-aaaa",), None, NOWHERE),  # whole GPU
        (("GPU-aaaa", "GPU-bbbb"), None, NOWHERE),
        (("GPU-aaaa",), Share(1, 2, 6144, "time-slicing"), NOWHERE),
        (("MIG-aaaa",), Share(1, 1, 10240, "mig"), NOWHERE),
        (("GPU-aaaa",), Share(1, 4, 6144, "mps"), "/srv/mps-pipes"),
    ],
)
def test_only_an_mps_share_is_told_where_a_daemon_is(
    uuids: tuple[str, ...], share: Share | None, pipe: str
) -> None:
    mps = MpsPaths("/srv/mps-pipes", DEFAULT_SHM_DIRECTORY) if pipe != NOWHERE else None
    env = server_env(uuids, share, mps)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe
    assert list(env)[-2:] == ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == (",".join(uuids) or "void")


def _spawner(c: Config) -> GPUDockerSpawner:
    from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

    hub = SimpleNamespace(
        public_host="", url="/hub/", base_url="/hub/", api_url="http://h:8081/hub/api"
    )
    orm = SimpleNamespace(name="", server=None, user_options={}, last_activity=None)
    user = SimpleNamespace(name="alice", groups=[], url="/user/alice/")
    return GPUDockerSpawner(user=user, orm_spawner=orm, config=c, hub=hub)


def test_the_spawner_points_every_non_mps_server_nowhere_over_any_other_environment() -> None:
    c = Config()
    c.GPUSharing.mps_pipe_directory = "/srv/mps-pipes"
    c.GPUDockerSpawner.environment = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}
    s = _spawner(c)
    s.gpu_uuids = []  # CPU-only
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == NOWHERE
    s.gpu_uuids = ["GPU-aaaa"]  # a whole GPU
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == NOWHERE
    s.share = Share(1, 2, 6144, "time-slicing")
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == NOWHERE
    s.share = Share(1, 4, 6144, "mps")
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == "/srv/mps-pipes"


# ---------------------------------------------------------------- 4. check-node
def test_the_check_fails_where_nvidias_directory_exists_and_says_what_to_do() -> None:
    good = nvidia_pipe_check("gpu-a", "mps.nvidia-default", False, "on the node")
    assert good.ok and "/tmp/nvidia-mps" in good.detail
    bad = nvidia_pipe_check("gpu-a", "mps.nvidia-default", True, "on the node")
    assert not bad.ok and bad.check == "mps.nvidia-default"
    assert "/tmp/nvidia-mps exists on the node" in bad.detail
    assert "every GPU container" in bad.detail
    assert f"CUDA_MPS_PIPE_DIRECTORY={OURS}" in bad.fix and "docs/upgrade.md" in bad.fix


def test_check_node_local_fails_a_node_with_nvidias_directory_even_without_mps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("c.GPUSharing.models = {}\n")  # nothing shared on this node
    nvidias = tmp_path / "nvidia-mps"
    monkeypatch.setattr(edge, "NVIDIA_PIPES", nvidias)
    monkeypatch.setattr(cli, "local_inventory", lambda: (NODE, ""))
    argv = ["--local", "-f", str(config), "--node", "gpu-a", "--only", "mps", "--json"]
    assert cli.main(argv) == 0
    [check] = [c for c in json.loads(capsys.readouterr().out) if c["check"] == "mps.nvidia-default"]
    assert check["ok"]
    nvidias.mkdir()
    assert cli.main(argv) == 1
    failed = [c for c in json.loads(capsys.readouterr().out) if not c["ok"]]
    assert [c["check"] for c in failed] == ["mps.nvidia-default"]
    assert OURS in failed[0]["fix"]


def test_the_gpu_probe_reports_nvidias_directory_in_a_gpu_container(tmp_path: Path) -> None:
    where = tmp_path / "nvidia-mps"

    def probe() -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", edge_nodecheck.GPU_PROBE, str(where)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    assert probe()["nvidia_mps"] is False
    where.mkdir()
    assert probe()["nvidia_mps"] is True

    seen: list[tuple[str, tuple[str, ...]]] = []

    class Probes:
        def run_json(self, script: str, args: tuple[str, ...] = (), **kw: object) -> dict:
            seen.append((script, tuple(args)))
            return {"smi": True, "out": "", "nvidia_mps": True}

    got = edge_nodecheck.gpu_probe(Probes(), ["GPU-aaaa"])  # type: ignore[arg-type]
    assert got.nvidia_mps and seen == [(edge_nodecheck.GPU_PROBE, (NVIDIA_PIPE_DIRECTORY,))]
