"""The local test cluster (scripts/cluster.sh): engines as simulated GPU nodes."""

from __future__ import annotations

import os
import subprocess
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
NODE_NAMES = ("node-a", "node-b", "node-c")
TEST_IMAGE = "jupyterhub-gpu/singleuser-test:6.1.1"


@dataclass(frozen=True)
class Engine:
    name: str
    socket: Path
    tcp: str

    @property
    def address(self) -> str:
        """The loopback address standing for this node's IP (127.0.0.2, .3, .4)."""
        return self.tcp.split("//", 1)[1].split(":", 1)[0]

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> closing[docker.DockerClient]:
        """Use as ``with engine.client() as client:`` (closed afterwards)."""
        return closing(docker.DockerClient(base_url=self.url, version="auto", timeout=30))


def engines(n: int) -> list[Engine]:
    return [
        Engine(name, STATE / "engines" / name / "docker.sock", f"tcp://127.0.0.{i + 2}:2375")
        for i, name in enumerate(NODE_NAMES[:n])
    ]


def cluster_up(n: int) -> list[Engine]:
    """Run the idempotent set-up script for ``n`` engines and return them."""
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), "up", str(n)], check=True)
    return engines(n)


def stop_engine(engine: Engine) -> None:
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), "stop-node", engine.name], check=True)


def start_engine(engine: Engine) -> None:
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), "start-node", engine.name], check=True)


def remove_hub_containers(engine: Engine, hub_id: str) -> None:
    with engine.client() as client:
        for c in client.containers.list(
            all=True, filters={"label": f"jupyterhub-gpu.hub={hub_id}"}
        ):
            c.remove(force=True)


def container_env(engine: Engine, name: str) -> dict[str, str]:
    """The environment of the container's main process (the single-user server).

    Read from /proc/1/environ: the engine adds NVIDIA_VISIBLE_DEVICES for a
    DeviceRequest to the main process only, not to ``docker exec`` processes.
    """
    with engine.client() as client:
        out = client.containers.get(name).exec_run(["cat", "/proc/1/environ"]).output.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
