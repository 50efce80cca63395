"""max_gpus_per_user across named servers, and names too long, against a real hub and engine.

Not run by the author of this file (the test cluster was being rebuilt); the unit tests in
tests/unit/test_quota.py and tests/unit/test_names.py cover the decisions themselves.
"""

from __future__ import annotations

import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
QUOTA = """
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 3
c.GPUDockerSpawner.resource_defaults = {
    "max_gpus": 4, "max_gpus_per_user": 2,
    "max_cpu": 2, "max_mem_gib": 4, "default_cpu": 1, "default_mem_gib": 1,
}
"""


def _containers(engine: Engine, hub, owner: str) -> list[str]:
    with engine.client() as client:
        return [
            c.name
            for c in client.containers.list(
                ignore_removed=True,
                all=True,
                filters={
                    "label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={owner}"]
                },
            )
        ]


def _refused(hub, r, fragment: str, name: str, server: str = "") -> None:
    """The spawn failed, and said why (in the answer or, for a slow spawn, the log)."""
    if r.status_code in (201, 202):
        with pytest.raises(RuntimeError):
            hub.wait_ready(name, server)
    assert fragment in r.text or fragment in hub.log_tail(200)


def test_named_servers_cannot_hoard_gpus(make_hub, engine: Engine) -> None:
    inventory = [gpu_inventory(engine.name, "aaaaaaaa", [RTX] * 4)]
    hub = make_hub([engine], inventory, QUOTA)
    hub.create_user("alice")
    assert hub.spawn("alice", {"gpu_count": 1}).status_code in (201, 202)
    hub.wait_ready("alice")
    assert hub.spawn("alice", {"gpu_count": 1}, server="second").status_code in (201, 202)
    hub.wait_ready("alice", "second")

    r = hub.spawn("alice", {"gpu_count": 1}, server="third")
    _refused(
        hub, r, "You hold 2 GPUs in 2 servers and asked for 1 more (max 2 per", "alice", "third"
    )
    assert len(_containers(engine, hub, "alice")) == 2
    # a CPU-only server is still allowed, and another user is not affected
    assert hub.spawn("alice", {"gpu_count": 0}, server="third").status_code in (201, 202)
    hub.wait_ready("alice", "third")
    hub.create_user("bob")
    assert hub.spawn("bob", {"gpu_count": 2}).status_code in (201, 202)
    hub.wait_ready("bob")


def test_a_username_too_long_is_refused_before_anything_is_created(
    make_hub, engine: Engine
) -> None:
    hub = make_hub([engine], [gpu_inventory(engine.name, "bbbbbbbb", [RTX])])
    name = "x" * 250
    assert hub.create_user(name).status_code in (200, 201)
    r = hub.spawn(name, {"gpu_count": 0})
    _refused(hub, r, "Your username is 250 characters; this hub's containers allow", name)
    assert _containers(engine, hub, name) == []
