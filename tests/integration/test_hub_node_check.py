"""The hub's own node check (issue 23) on a namespaced node: a hub with
``check_nodes`` on sees node-c without its node firewall, says so in its log and on the
dashboard's API, and places nothing there (a spawn that only node-c could take waits in
line) while node-a still takes servers; once the firewall is back, a re-check passes and
the waiting spawn starts on node-c.

Test hubs run without node checks (tests/support/hub.py): this one turns them on.
Run under the cluster lock: ``flock /tmp/jhgpu-cluster.lock .venv/bin/pytest -q
-p no:cacheprovider tests/integration/test_hub_node_check.py``.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import REPO, SITE_ADDRESS, Engine
from tests.support.hub import Hub, free_port
from tests.support.waiting import wait_until

# alone: it removes a node's firewall or changes the node's networks and engine while
# it runs, which other tests' containers on that node would see (scripts/test.sh)
pytestmark = [pytest.mark.integration, pytest.mark.alone]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
A100 = ("NVIDIA A100-SXM4-40GB", 40960, "8.0")
OPTIONS = {"image": "demo-cuda12", "gpu_count": 1, "cpu": 0.5, "mem_gib": 1}
METADATA = "169.254.169.254"
FIREWALL_SH = str(REPO / "scripts" / "node-firewall.sh")
# the allowances scripts/cluster.sh gives every node (the demo's and the test hubs' API)
FIREWALL = ["--bridge", "jhgpu-users", "--allow", f"{SITE_ADDRESS}:8081"]
FIREWALL += ["--allow", f"{SITE_ADDRESS}:20000-20999"]
CHECK_S = 3  # node_check_interval: a fixed node is seen within seconds
# a stand-in for the single-user server (tests/integration/test_multinode.py's): what
# this test checks is where servers go, not the server
STUB_SERVER = """
import http.server, os, signal, sys, urllib.parse
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
url = urllib.parse.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((url.hostname, url.port), Ok).serve_forever()
"""
EXTRA = f"""
c.JupyterHub.log_level = "DEBUG"  # "Node node-c checked: failed", once per check
c.GPUCluster.check_nodes = True
c.GPUCluster.node_check_interval = {CHECK_S}
c.GPUDockerSpawner.max_queue_wait = 300
c.GPUDockerSpawner.cmd = ['python3', '-c', {STUB_SERVER!r}]
from jupyterhub_gpu.hub.extensions import configure_dashboard
configure_dashboard(c, url="http://127.0.0.1:{free_port()}")
# the test's own service reads the cluster, as the dashboard does
c.JupyterHub.load_roles.append({{
    "name": "tester-gpu", "scopes": ["custom:gpu-cluster:read"], "services": ["tester"],
}})
"""


@pytest.fixture
def metadata_here() -> Iterator[None]:
    """169.254.169.254 on this machine's loopback while node-c has no firewall: what a
    probe tries there stays on this machine (tests/integration/test_check_node.py)."""
    added = subprocess.run(["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"]).returncode == 0
    try:
        yield
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{METADATA}/32", "dev", "lo"], check=False)


def firewall(node: Engine, *args: str) -> None:
    subprocess.run(node.nsenter(FIREWALL_SH, *args), check=True, capture_output=True)


def cluster_node(hub: Hub, name: str) -> dict[str, Any]:
    r = hub.api("GET", "/gpu/cluster")
    r.raise_for_status()
    (node,) = [n for n in r.json()["nodes"] if n["name"] == name]
    return dict(node)


def log_line(hub: Hub, needle: str) -> str:
    return next(line for line in hub.log_since(0).splitlines() if needle in line)


def test_a_node_without_its_firewall_takes_no_servers_until_a_check_passes(
    make_hub: Callable[..., Hub], engines: list[Engine], metadata_here: None
) -> None:
    node_a, node_c = engines[0], engines[2]
    inventory = [
        gpu_inventory(node_a.name, "a0a0a0a0", [RTX, RTX]),
        gpu_inventory(node_c.name, "c0c0c0c0", [A100]),
    ]
    started = time.monotonic()
    firewall(node_c, "--remove")
    restored = False
    try:
        hub = make_hub([node_a, node_c], inventory, EXTRA)
        for user in ("alice", "bob", "carol"):
            hub.create_user(user)
        # the hub reads its nodes at its first spawn, and checks them in the background
        assert hub.spawn("alice", {**OPTIONS, "gpu_model": RTX[0]}).status_code in (201, 202)
        failed = f"Node {node_c.name} failed its firewall check: a user's container reached"
        end = hub.wait_log(re.escape(failed), 0, timeout=60)
        line = log_line(hub, failed)
        assert f"{node_c.address}:2376" in line, line  # its Docker TLS port, reached
        assert "Fix: apply the node firewall" in line and "jupyterhub-gpu firewall --bridge" in line
        assert "No new servers there until a check passes" in line
        assert hub.wait_ready("alice")["state"]["node"] == node_a.name

        node = cluster_node(hub, node_c.name)
        assert (node["state"], node["schedulable"], node["drained_by"]) == (
            "drained",
            False,
            "check",
        ), node
        assert "firewall check failed" in node["drain_note"]
        assert "jupyterhub-gpu firewall --bridge jhgpu-users" in node["drain_note"], node

        # a spawn only node-c could take waits in line; node-a still takes servers
        assert hub.spawn("bob", {**OPTIONS, "gpu_model": A100[0]}).status_code == 202
        assert hub.spawn("carol", {**OPTIONS, "gpu_model": RTX[0]}).status_code in (201, 202)
        assert hub.wait_ready("carol")["state"]["node"] == node_a.name
        # re-checks every CHECK_S s find the same failure: no new warning (one per change)
        hub.wait_log(rf"Node {node_c.name} checked: failed", end, timeout=30)
        assert hub.log_since(0).count(failed) == 1
        bob = hub.server("bob")
        assert bob is not None and bob["pending"] == "spawn" and not bob["ready"], bob
        assert not bob["state"].get("node"), bob

        firewall(node_c, *FIREWALL)
        restored = True
        passed = f"Node {node_c.name} passed its checks (engine, user network, firewall) again"
        hub.wait_log(re.escape(passed), end, timeout=60)
        bob = hub.wait_ready("bob", timeout=60)  # the queue's next decision places it
        assert bob["state"]["node"] == node_c.name, bob
        wait_until(
            lambda: cluster_node(hub, node_c.name)["drained_by"] is None, 15, "node-c up again"
        )
        node = cluster_node(hub, node_c.name)
        assert (node["state"], node["drain_note"]) == ("up", ""), node
        for user in ("alice", "bob", "carol"):
            hub.stop_server(user)
    finally:
        if not restored:
            firewall(node_c, *FIREWALL)
    print(f"took {time.monotonic() - started:.1f} s")
