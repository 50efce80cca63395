"""The local test cluster (scripts/cluster.sh): simulated GPU nodes, each a network
namespace with its own Docker engine; the hub stays in this machine's namespace and the
nodes reach it at :data:`SITE_ADDRESS`."""

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
TLS_NODE = "node-c"  # its engine also listens on tcp://<address>:2376 with TLS client certs
TEST_IMAGE = "jupyterhub-gpu/singleuser-test:6.1.1"
#: this machine (the hub's) as the nodes see it: on lo, routed from every node namespace
SITE_ADDRESS = "10.250.0.1"
USER_NETWORK = "jupyterhub-gpu-users"  # GPUCluster.user_network's default
TLS_DIR = STATE / "tls"


@dataclass(frozen=True)
class Engine:
    name: str
    socket: Path
    address: str  # the node's address (10.250.N.2), its end of the veth link

    @property
    def netns(self) -> str:
        return f"jhgpu-{self.name}"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def tls(self) -> dict[str, str]:
        """The hub's client certificates for this node's TLS endpoint ({} without one)."""
        if self.name != TLS_NODE:
            return {}
        return {
            "ca_cert": str(TLS_DIR / "ca.pem"),
            "client_cert": str(TLS_DIR / "hub-cert.pem"),
            "client_key": str(TLS_DIR / "hub-key.pem"),
        }

    @property
    def tcp(self) -> str:
        """The TLS endpoint of the TLS node (tcp://10.250.3.2:2376)."""
        assert self.tls, f"{self.name} has no TCP endpoint (only {TLS_NODE} has, with TLS)"
        return f"tcp://{self.address}:2376"

    def node_config(self, **extra: object) -> dict[str, object]:
        """This node as an entry of ``GPUCluster.nodes``: the TLS node over TLS, the
        others over their unix sockets, as a site would (never plain TCP)."""
        if self.tls:
            entry: dict[str, object] = {"docker_url": self.tcp, "tls": self.tls}
        else:
            entry = {"docker_url": self.url}
        return {"name": self.name, **entry, "address": self.address, **extra}

    def client(self) -> closing[docker.DockerClient]:
        """Use as ``with engine.client() as client:`` (closed afterwards)."""
        return closing(docker.DockerClient(base_url=self.url, version="auto", timeout=30))

    def nsenter(self, *command: str) -> list[str]:
        """``command`` run in this node's network namespace (as a node-side process)."""
        return ["nsenter", f"--net=/var/run/netns/{self.netns}", *command]


def engines(n: int) -> list[Engine]:
    return [
        Engine(name, STATE / "engines" / name / "docker.sock", f"10.250.{i + 1}.2")
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
    """Remove the hub's containers (one may vanish meanwhile: auto-remove, a stopping hub),
    its node checks' probes included (a hub stopped during a check leaves its probe)."""
    with engine.client() as client:
        listing = client.api.containers(all=True, filters={"label": f"jupyterhub-gpu.hub={hub_id}"})
        probes = f"jupyterhub-gpu.check-node.owner={hub_id}"  # core.nodecheck.PROBE_OWNER_LABEL
        listing += client.api.containers(all=True, filters={"label": probes})
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
