"""The local test cluster (scripts/cluster.sh): engines as simulated GPU nodes."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
NODE_NAMES = ("node-a", "node-b", "node-c")
TEST_IMAGE = "jupyterhub-gpu/singleuser-test:latest"


@dataclass(frozen=True)
class Engine:
    name: str
    socket: Path
    tcp: str

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, version="auto", timeout=30)


def engines(n: int) -> list[Engine]:
    return [
        Engine(name, STATE / "engines" / name / "docker.sock", f"tcp://127.0.0.{i + 2}:2375")
        for i, name in enumerate(NODE_NAMES[:n])
    ]


def cluster_up(n: int) -> list[Engine]:
    """Run the idempotent set-up script for ``n`` engines and return them."""
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), "up", str(n)], check=True)
    return engines(n)


def remove_hub_containers(engine: Engine, hub_id: str) -> None:
    with engine.client() as client:
        for c in client.containers.list(all=True, filters={"label": f"jupyterhub-gpu.hub={hub_id}"}):
            c.remove(force=True)


def container_env(engine: Engine, name: str) -> dict[str, str]:
    """The environment a process inside the running container really sees."""
    with engine.client() as client:
        out = client.containers.get(name).exec_run(["env"]).output.decode()
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
