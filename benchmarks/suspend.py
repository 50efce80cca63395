"""Suspend benchmark: a JupyterLab server's kernel survives a checkpoint and a restore on
another node (issue 35's spike for suspend-instead-of-stop).

Run from the repository root (after ``scripts/test.sh`` has set up the test cluster: its
node engines run with ``--experimental`` and ``scripts/criu/build.sh`` installed CRIU)::

    .venv/bin/python benchmarks/suspend.py --json              # 1 GiB in the kernel
    .venv/bin/python benchmarks/suspend.py --json --smoke      # 16 MiB (the CI test)

What it does, with :mod:`jupyterhub_gpu.edges.suspend` (the same calls the product will
make): on the first node, a Jupyter server (the test image's, as uid 10001:5000, every
capability dropped, no new privileges, no network but its loopback, its home a folder of
this machine mounted on both nodes as a shared home is) starts a kernel through its REST
API and runs ``x = 42`` and ``arr = bytearray(os.urandom(1 MiB) * N)``; the benchmark
reads back the kernel's id, ``x`` and the SHA-256 of ``arr``. The container is
checkpointed into a folder (``checkpoint_s``, ``checkpoint_mib``) and removed; the same
container is created on the second node and restored from that folder (``restore_s``);
the same kernel (same id, found through the same server) is asked ``x`` and the SHA-256
again. ``state_kept`` is true only when all three match. Everything is removed at the end.

Keys: ``array_mib``, ``checkpoint_s``, ``checkpoint_mib``, ``restore_s``,
``kernel_answer_after_restore_s`` (from the restore's end to the kernel's answer),
``state_kept``, ``from_node``, ``to_node``, ``criu``, ``kernel``.

``--bridge`` is the product's case instead (hub/suspend.py): the server on the user
bridge with its port published on the node's address, two established HTTP connections
to it from this machine (where the hub and its proxy run) and its kernel's on its
loopback, checkpointed with ``Exit`` and started again from the checkpoint in the same
container on the same node; ``--occupy``: two other containers start on the bridge
meanwhile and take the addresses free then (the server's own among them). More keys:
``address_before``, ``address_after``, ``port_before``, ``port_after``, ``memory_mib``
(``docker stats``' figure before the checkpoint, what the hub records as its size),
``checkpoint_mib`` (on the node's disk), ``error`` (the engine's, when the restore
failed). Whether it works depends on the node's ``/etc/criu/runc.conf``
(``criu_options``): docs/culler.md has the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from jupyterhub_gpu.core.usernet import network_options  # noqa: E402
from jupyterhub_gpu.edges.suspend import (  # noqa: E402
    checkpoint,
    checkpoint_in_place,
    restore,
    start_from_checkpoint,
)
from jupyterhub_gpu.errors import SuspendFailed  # noqa: E402
from tests.support.cluster import (  # noqa: E402
    STATE,
    TEST_IMAGE,
    USER_NETWORK,
    Engine,
    cluster_up,
)

UID, GID = 10001, 5000
BRIDGE = "jhgpu-users"  # GPUCluster.user_bridge's default (scripts/cluster.sh's firewall)
TOKEN = "suspend-bench"  # the server listens on its container's loopback only
#: run inside the container (docker exec): the first kernel of the server (started if
#: there is none) runs argv[1]; prints one JSON line {"kernel": id, "out": stdout}
KERNEL_CLIENT = r"""
import glob, json, os, sys, time, urllib.request
from jupyter_client import BlockingKernelClient
base, hdr = "http://127.0.0.1:8888/api/kernels", {"Authorization": "token TOKEN"}
def call(method, url=base):
    data = b"{}" if method == "POST" else None
    req = urllib.request.Request(url, method=method, headers=hdr, data=data)
    return json.load(urllib.request.urlopen(req, timeout=30))
kernels = call("GET") or [call("POST")]
kid = kernels[0]["id"]
cf = glob.glob(os.path.expanduser(f"~/.local/share/jupyter/runtime/kernel-{kid}.json"))[0]
kc = BlockingKernelClient(connection_file=cf)
kc.load_connection_file()
kc.start_channels()
deadline = time.monotonic() + 120
while True:  # a client that connects before the kernel's first heartbeat reads it as dead
    try:
        kc.wait_for_ready(timeout=30)
        break
    except RuntimeError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
out = []
def hook(msg):
    if msg["msg_type"] == "stream":
        out.append(msg["content"]["text"])
    elif msg["msg_type"] == "error":
        out.append("ERROR " + msg["content"]["ename"])
kc.execute_interactive(sys.argv[1], timeout=600, output_hook=hook)
kc.stop_channels()
print(json.dumps({"kernel": kid, "out": "".join(out).strip()}))
""".replace("TOKEN", TOKEN)

FILL = "import hashlib, os\nx = 42\narr = bytearray(os.urandom(1 << 20) * {mib})\n"
ASK = "import hashlib\nprint(x, hashlib.sha256(arr).hexdigest())"


def server_config(name: str, home: Path) -> dict[str, Any]:
    """The container, as the product runs a user's server: never root, nothing extra."""
    return {
        "image": TEST_IMAGE,
        "name": name,
        "entrypoint": ["jupyter"],
        "command": [
            "server", "--ip=127.0.0.1", "--port=8888", f"--IdentityProvider.token={TOKEN}",
            "--ServerApp.root_dir=/home/alice", "--no-browser",
        ],
        "user": f"{UID}:{GID}",
        "environment": {"HOME": "/home/alice"},
        "working_dir": "/home/alice",
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "volumes": {str(home): {"bind": "/home/alice", "mode": "rw"}},
        "labels": {"jupyterhub-gpu.bench": "suspend"},
        "detach": True,
    }  # fmt: skip


def wait_listening(container: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if b"is running at" in container.logs():
            return
        container.reload()
        if container.status == "exited":
            raise RuntimeError(f"the server exited: {container.logs()[-2000:]!r}")
        time.sleep(0.2)
    raise RuntimeError("the server did not start listening in time")


def ask_kernel(container: Any, code: str) -> dict[str, str]:
    rc, out = container.exec_run(["python3", "-c", KERNEL_CLIENT, code], user=f"{UID}:{GID}")
    text = out.decode(errors="replace").strip()
    if rc != 0:
        raise RuntimeError(f"the kernel client failed ({rc}): {text[-2000:]}")
    answer: dict[str, str] = json.loads(text.splitlines()[-1])
    return answer


def criu_version() -> str:
    try:
        out = subprocess.run(["criu", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "none"
    return out.stdout.splitlines()[0].removeprefix("Version: ").strip()


def run(source: Engine, target: Engine, array_mib: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="suspend-", dir=STATE))
    home, folder = work / "home", work / "checkpoints"
    home.mkdir()
    os.chown(home, UID, GID)
    name = f"jhgpu-suspend-{secrets.token_hex(4)}"
    result: dict[str, Any] = {
        "array_mib": array_mib, "from_node": source.name, "to_node": target.name,
        "criu": criu_version(), "kernel": platform.release(),
    }  # fmt: skip
    a = docker.DockerClient(base_url=source.url, version="auto", timeout=600)
    b = docker.DockerClient(base_url=target.url, version="auto", timeout=600)
    try:
        first = a.containers.run(**server_config(name, home))
        wait_listening(first)
        ask_kernel(first, FILL.format(mib=array_mib))
        before = ask_kernel(first, ASK)
        saved = checkpoint(a, first.id, folder, "suspend")
        first.remove(force=True)
        result["checkpoint_s"] = round(saved.seconds, 2)
        result["checkpoint_mib"] = round(saved.size_bytes / 2**20, 1)
        config = server_config(name, home)
        config.pop("detach")
        second = b.containers.create(**config)
        data_root = Path(b.info()["DockerRootDir"])
        result["restore_s"] = round(restore(b, second.id, saved, data_root), 2)
        started = time.monotonic()
        after = ask_kernel(second, ASK)
        result["kernel_answer_after_restore_s"] = round(time.monotonic() - started, 2)
        result["before"], result["after"] = before, after
        result["state_kept"] = before == after and before["out"].startswith("42 ")
        return result
    finally:
        for client in (a, b):
            for c in client.containers.list(all=True, filters={"name": name}):
                c.remove(force=True)
            client.close()
        shutil.rmtree(work, ignore_errors=True)


def size_of(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def keep_alive(address: str, port: int) -> socket.socket:
    """An HTTP/1.1 connection to the server, left open after its first answer."""
    conn = socket.create_connection((address, port), timeout=30)
    conn.sendall(
        f"GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: token {TOKEN}\r\n\r\n".encode()
    )
    if not conn.recv(4096).startswith(b"HTTP/1.1 200"):
        raise RuntimeError("the server did not answer /api/status")
    return conn


def published(container: Any) -> tuple[str, int]:
    container.reload()
    settings = container.attrs["NetworkSettings"]
    address = settings["Networks"][USER_NETWORK]["IPAddress"]
    port = int(settings["Ports"]["8888/tcp"][0]["HostPort"]) if settings["Ports"] else 0
    return address, port


def run_bridge(engine: Engine, occupy: bool) -> dict[str, Any]:
    """The product's case: the same container restored on its node (module docstring)."""
    work = Path(tempfile.mkdtemp(prefix="suspend-", dir=STATE))
    home = work / "home"
    home.mkdir()
    os.chown(home, UID, GID)
    name = f"jhgpu-suspend-{secrets.token_hex(4)}"
    conf = Path("/etc/criu/runc.conf")
    options = conf.read_text().split() if conf.exists() else []
    result: dict[str, Any] = {"node": engine.name, "occupy": occupy, "criu_options": options}
    client = docker.DockerClient(base_url=engine.url, version="auto", timeout=600)
    if not client.networks.list(names=[USER_NETWORK]):  # as the hub makes it (cluster.py)
        client.networks.create(USER_NETWORK, driver="bridge", options=network_options(BRIDGE))
    config = server_config(name, home)
    config["command"][1] = "--ip=0.0.0.0"
    config.update(network=USER_NETWORK, ports={"8888/tcp": (engine.address, None)})
    config.pop("network_mode")
    try:
        server = client.containers.run(**config)
        wait_listening(server)
        before = ask_kernel(server, FILL.format(mib=16) + "print(x)")
        result["address_before"], result["port_before"] = published(server)
        connections = [keep_alive(engine.address, result["port_before"]) for _ in range(2)]
        stats = client.api.stats(server.id, stream=False, one_shot=True)["memory_stats"]
        cache = stats.get("stats", {}).get("inactive_file", 0)
        result["memory_mib"] = round((stats["usage"] - cache) / 2**20, 1)
        saved = checkpoint_in_place(client.api, server.id, "suspend")
        result["checkpoint_s"] = round(saved, 2)
        folder = Path(client.info()["DockerRootDir"]) / "containers" / server.id / "checkpoints"
        result["checkpoint_mib"] = round(size_of(folder / "suspend") / 2**20, 1)
        for conn in connections:
            conn.close()
        for i in range(2 if occupy else 0):
            client.containers.run(TEST_IMAGE, ["sleep", "600"], name=f"{name}-other{i}",
                                  entrypoint=[], network=USER_NETWORK, detach=True)  # fmt: skip
        try:
            result["restore_s"] = round(start_from_checkpoint(client.api, server.id, "suspend"), 2)
        except SuspendFailed as e:
            result["error"], result["state_kept"] = str(e)[:300], False
            return result
        result["address_after"], result["port_after"] = published(server)
        started = time.monotonic()
        after = ask_kernel(server, ASK)
        result["kernel_answer_after_restore_s"] = round(time.monotonic() - started, 2)
        keep_alive(engine.address, result["port_after"]).close()  # it takes new ones
        result["state_kept"] = after["kernel"] == before["kernel"] and after["out"].startswith(
            "42 "
        )
        return result
    finally:
        for c in client.containers.list(all=True, filters={"name": name}):
            c.remove(force=True)
        client.close()
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--array-mib", type=int, default=1024, help="the kernel's array (MiB)")
    ap.add_argument("--smoke", action="store_true", help="a 16 MiB array (the CI test)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--bridge", action="store_true", help="the product's case (same node)")
    ap.add_argument("--occupy", action="store_true", help="with --bridge: addresses taken")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    source, target = cluster_up(3)[1:3]
    if args.bridge:
        result = run_bridge(source, args.occupy)
    else:
        result = run(source, target, 16 if args.smoke else args.array_mib)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    return 0 if result["state_kept"] else 1


if __name__ == "__main__":
    sys.exit(main())
