"""check_config: the hub refuses to start on a bad setting, naming entry and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from traitlets.config import Config, PyFileConfigLoader

from jupyterhub_gpu.agent.app import GPUAgent
from jupyterhub_gpu.config import check_config
from jupyterhub_gpu.culler.service import GPUIdleCuller
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


def test_demo_runs_node_a_agent_and_the_culler_as_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo hub's services start with settings that fit together: the culler reads
    the agent the hub starts, with its token, and writes the notes the spawn form reads."""
    monkeypatch.setenv("JHGPU_DEMO_DIR", str(tmp_path))
    monkeypatch.setenv("JHGPU_DEMO_CULL_TIMEOUT", "120")
    monkeypatch.delenv("JUPYTERHUB_GPU_AGENT_TOKEN", raising=False)
    c = PyFileConfigLoader(
        "jupyterhub_config.py", path=str(REPO / "scripts" / "demo")
    ).load_config()
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {"gpu-agent-node-a", "gpu-culler"}
    token = (tmp_path / "agent_token").read_text().strip()
    assert len(token) >= 32 and (tmp_path / "agent_token").stat().st_mode & 0o077 == 0

    agent_cmd = services["gpu-agent-node-a"]["command"]
    assert agent_cmd[1:3] == ["-m", "jupyterhub_gpu.agent"]
    agent = GPUAgent()
    agent.parse_command_line(agent_cmd[3:])
    nodes = yaml.safe_load(Path(agent.inventory).read_text())["nodes"]
    assert agent.probe == "declared" and agent.node in {n["name"] for n in nodes}
    assert services["gpu-agent-node-a"]["environment"]["JUPYTERHUB_GPU_AGENT_TOKEN"] == token

    culler_cmd, env = services["gpu-culler"]["command"], services["gpu-culler"]["environment"]
    assert culler_cmd[1:3] == ["-m", "jupyterhub_gpu.culler"]
    for key, value in {**env, "JUPYTERHUB_API_TOKEN": "from-the-hub"}.items():
        monkeypatch.setenv(key, value)
    culler = GPUIdleCuller()
    culler.initialize(culler_cmd[3:])
    culler.check_config()
    assert culler.agent_urls == {agent.node: f"http://127.0.0.1:{agent.port}"}
    assert culler.agent_token == token
    assert culler.timeout == culler.gpu_timeout == 120
    assert culler.notes_file == c.GPUDockerSpawner.cull_notes_file
    (role,) = c.JupyterHub.load_roles
    assert role["services"] == ["gpu-culler"]
    assert {"list:users", "admin:server_state", "delete:servers", "access:servers"} <= set(
        role["scopes"]
    )


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
