"""What a hub restart (an upgrade, a crash) does, for real: users' servers keep running
and stay reachable through the proxy (``cleanup_servers = False``: docs/upgrade.md), and an
admin's node drain is still in force afterwards (``GPUCluster.drains_file``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
A100 = ("NVIDIA A100-SXM4-40GB", 40960, "8.0")
OPTIONS = {"image": "demo-cuda12", "gpu_count": 1, "gpu_model": RTX[0], "cpu": 0.5, "mem_gib": 1}
EXTRA = (
    TOKEN_ROLE_CONFIG
    + f"""
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
c.GPUDockerSpawner.max_queue_wait = 0
from jupyterhub_gpu.hub.extensions import configure_dashboard
configure_dashboard(c, url="http://127.0.0.1:{free_port()}")
# the test's own service may read the cluster and drain nodes, as the dashboard does
c.JupyterHub.load_roles.append({{
    "name": "tester-gpu",
    "scopes": ["custom:gpu-cluster:read", "custom:gpu-cluster:admin"],
    "services": ["tester"],
}})
"""
)


def node_of(hub: Hub, name: str) -> dict[str, object]:
    r = hub.api("GET", "/gpu/cluster")
    r.raise_for_status()
    (node,) = [n for n in r.json()["nodes"] if n["name"] == name]
    return dict(node)


def test_a_restart_keeps_users_servers_and_admins_drains(
    make_hub: Callable[..., Hub], engines: list[Engine]
) -> None:
    node_a, node_b = engines[0], engines[2]
    inventory = [
        gpu_inventory(node_a.name, "aaaaaaaa", [RTX]),
        gpu_inventory(node_b.name, "bbbbbbbb", [A100]),
    ]
    hub = make_hub([node_a, node_b], inventory, EXTRA)
    hub.create_user("alice")
    assert hub.spawn("alice", OPTIONS).status_code in (201, 202)
    before = hub.wait_ready("alice", timeout=240)
    token = hub.user_token("alice")
    status = f"{hub.url}/user/alice/api/status"
    assert httpx.get(status, headers={"Authorization": f"token {token}"}).status_code == 200

    r = hub.api("POST", f"/gpu/nodes/{node_b.name}/drain", json={"note": "new power supply"})
    assert r.status_code == 200, r.text
    assert "drained" in str(node_of(hub, node_b.name)["state"])

    hub.stop()
    hub.start()

    # alice's server went on running: the same server, reached again through the proxy
    after = hub.server("alice")
    assert after is not None and after["ready"], after
    assert after["started"] == before["started"]
    assert after["state"]["gpu_uuids"] == before["state"]["gpu_uuids"]
    assert httpx.get(status, headers={"Authorization": f"token {token}"}).status_code == 200
    # node-b is still drained: a spawn that only its A100 could take is refused
    hub.create_user("bob")
    refused = hub.spawn("bob", {**OPTIONS, "gpu_model": A100[0]})
    server = hub.server("bob")
    assert refused.status_code >= 400 or server is None or not server.get("ready"), refused.text
    node = node_of(hub, node_b.name)
    assert "drained" in str(node["state"]) and node.get("drain_note") == "new power supply", node
    hub.stop_server("alice")


def test_the_hub_keeps_its_drains_in_its_drains_file(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    """An undrain after the restart is kept too (the file follows every change)."""
    node_a = engines[0]
    inventory = [gpu_inventory(node_a.name, "cccccccc", [RTX])]
    drains = tmp_path / "state" / "drains.json"
    drains.parent.mkdir()
    hub = make_hub([node_a], inventory, EXTRA + f"c.GPUCluster.drains_file = {str(drains)!r}\n")
    hub.create_user("carol")
    assert hub.spawn("carol", {**OPTIONS, "gpu_count": 0}).status_code in (201, 202)
    hub.wait_ready("carol", timeout=240)  # the hub has read its nodes
    assert hub.api("POST", f"/gpu/nodes/{node_a.name}/drain", json={"note": "x"}).status_code == 200
    assert node_a.name in drains.read_text()
    hub.stop()
    hub.start()
    assert hub.api("DELETE", f"/gpu/nodes/{node_a.name}/drain").status_code == 200
    assert node_a.name not in drains.read_text()
    hub.stop_server("carol")
