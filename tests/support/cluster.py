"""The local test cluster (scripts/cluster.sh): engines as simulated GPU nodes."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
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


@contextmanager
def cluster_lock() -> Iterator[None]:
    """Serialises starting and stopping engines across test sessions sharing the engines:
    two concurrent ``cluster.sh`` starts of one engine leave it without pidfile and socket."""
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "cluster.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cluster_sh(*args: str) -> None:
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), *args], check=True)


def cluster_up(n: int) -> list[Engine]:
    """Run the idempotent set-up script for ``n`` engines and return them."""
    with cluster_lock():
        _cluster_sh("up", str(n))
    return engines(n)


def stop_engine(engine: Engine) -> None:
    with cluster_lock():
        _cluster_sh("stop-node", engine.name)


def start_engine(engine: Engine) -> None:
    with cluster_lock():
        _cluster_sh("start-node", engine.name)


def _engine_pids(engine: Engine) -> list[int]:
    """The engine's dockerd and containerd, from their pidfiles (checked against /proc)."""
    root = STATE / "engines" / engine.name
    pids = []
    for pidfile in (root / "docker.pid", root / "exec" / "containerd" / "containerd.pid"):
        try:
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if str(root).encode() in cmdline:
            pids.append(pid)
    return pids


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def engine_running(engine: Engine) -> bool:
    return any(not _gone(pid) for pid in _engine_pids(engine))


@contextmanager
def engine_crashed(engine: Engine) -> Iterator[None]:
    """The engine dies at once (``kill -9`` of its dockerd and containerd) for the body of
    the ``with``, then starts again, whatever happens in the body.

    As on a host that crashed or dropped off the network, the containers keep running
    (under their shims) while nothing answers for the node; when dockerd starts again it
    kills and, for auto-remove containers, removes them. (``stop_engine`` is a clean stop:
    dockerd stops and removes the containers first, still answering open connections.)
    Holds :func:`cluster_lock` meanwhile, so no other session's ``cluster_up`` restarts
    the engine early.
    """
    with cluster_lock():
        try:
            pids = _engine_pids(engine)
            assert pids, f"{engine.name}: no running dockerd to kill"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not all(_gone(pid) for pid in pids):
                assert time.monotonic() < deadline, f"{engine.name}: dockerd survived SIGKILL"
                time.sleep(0.05)
            yield
        finally:
            _cluster_sh("start-node", engine.name)


def remove_hub_containers(engine: Engine, hub_id: str) -> None:
    """Remove the hub's containers (one may vanish meanwhile: auto-remove, a stopping hub)."""
    with engine.client() as client:
        listing = client.api.containers(all=True, filters={"label": f"jupyterhub-gpu.hub={hub_id}"})
        for c in listing:
            with suppress(docker.errors.NotFound):
                client.api.remove_container(c["Id"], force=True)


def container_env(engine: Engine, name: str) -> dict[str, str]:
    """The environment of the container's main process (the single-user server).

    Read from /proc/1/environ: the engine adds NVIDIA_VISIBLE_DEVICES for a
    DeviceRequest to the main process only, not to ``docker exec`` processes.
    """
    with engine.client() as client:
        out = client.containers.get(name).exec_run(["cat", "/proc/1/environ"]).output.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
