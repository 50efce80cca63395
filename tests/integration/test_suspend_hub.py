"""Suspend instead of stop through a real hub (docs/culler.md, issue 35 item 3).

One hub, one node (node-a's engine, ``--experimental`` and CRIU, as scripts/cluster.sh
runs it), one GPU (declared), and the suspend API the culler calls, by a service holding
its scope alone (a stand-in for the culler, whose side is tests/unit/test_culler_suspend.py):

1. alice's server runs a kernel holding ``x = 42``; she may not suspend it herself (the
   scope is the culler's); the stand-in suspends it: the hub sees it stopped, its GPU is
   free in the cluster API, its allocation ended ``suspended``, its exited container on
   the node keeps the checkpoint, and a reconciliation round leaves it there;
   While bob holds the only GPU, her start is refused as any start would be (the
   admission decision comes first), and the checkpoint is kept;
2. alice starts it again: it is resumed on the same node and GPU, the same kernel
   answers 42, with the same server token; a new allocation is open, the checkpoint is
   gone, and reconciliation rounds keep the resumed container (its labels carry the
   first allocation);
3. suspended again and started with other options: a fresh start, the progress line
   says why, the old container is removed and the old server token no longer opens
   anything.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from jupyterhub_gpu.edges.accounting.store import AccountingStore
from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub
from tests.support.kernels import run_cell, start_kernel
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "mem_gib": 1, "cpu": 0.5}
ROUND = r"Reconciliation round \d+ done"
STANDIN = secrets.token_hex(16)  # the culler's stand-in: the suspend scope alone


def extra_config(accounting: Path) -> str:
    return (
        f"""
c.JupyterHub.log_level = "DEBUG"  # reconciliation rounds are waited for by their lines
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
c.GPUDockerSpawner.max_queue_wait = 0
c.GPUCluster.reconcile_interval = 2
c.GPUCluster.accounting_url = "sqlite:///{accounting}"
c.GPUCluster.suspend = True
from jupyterhub_gpu.hub.extensions import register
from jupyterhub_gpu.hub.api.cluster import CUSTOM_SCOPES, READ_SCOPE
from jupyterhub_gpu.hub.api.cluster import ClusterAPIHandler, SnapshotCache
from jupyterhub_gpu.hub.api.notices import HANDLERS as NOTICES
from jupyterhub_gpu.hub.api.suspend import HANDLERS, SUSPEND_SCOPE, SUSPEND_SCOPES
register(c, [*HANDLERS, *NOTICES,
             (r"/api/gpu/cluster", ClusterAPIHandler, {{"cache": SnapshotCache(0)}})],
         custom_scopes={{**SUSPEND_SCOPES, **CUSTOM_SCOPES}})
c.JupyterHub.services.append({{"name": "culler-standin", "api_token": {STANDIN!r}}})
c.JupyterHub.load_roles.append(
    {{"name": "culler-standin", "scopes": [SUSPEND_SCOPE], "services": ["culler-standin"]}})
c.JupyterHub.load_roles.append(
    {{"name": "cluster-reader", "scopes": [READ_SCOPE], "services": ["tester"]}})
"""
        + TOKEN_ROLE_CONFIG
    )


# -- a kernel, as a notebook uses it ----------------------------------------------------


def kernel_ids(hub: Hub, user: str) -> list[str]:
    r = httpx.get(
        f"{hub.url}/user/{user}/api/kernels",
        headers={"Authorization": f"token {hub.token}"},
        timeout=60,
    )
    r.raise_for_status()
    return [k["id"] for k in r.json()]


# -- what the hub and the node say ------------------------------------------------------


def state_of(hub: Hub, user: str) -> dict[str, Any]:
    """The server's spawner state, running or not (``admin:server_state``)."""
    r = hub.api("GET", f"/users/{user}", params={"include_stopped_servers": "1"})
    r.raise_for_status()
    return dict(r.json()["servers"][""]["state"])


def gpu_of_cluster(hub: Hub, uuid_: str) -> dict[str, Any]:
    r = hub.api("GET", "/gpu/cluster")
    r.raise_for_status()
    gpus = [g for n in r.json()["nodes"] for g in n["gpus"]]
    (gpu,) = [g for g in gpus if g["uuid"] == uuid_]
    return dict(gpu)


def suspend(hub: Hub, user: str, token: str = STANDIN) -> httpx.Response:
    return httpx.post(
        f"{hub.url}/hub/api/gpu/users/{user}/suspend",
        headers={"Authorization": f"token {token}"},
        timeout=300,
    )


def checkpoints(engine: Engine, container: str) -> list[str]:
    with engine.client() as client:
        api = client.api
        answer = api._get(api._url("/containers/{0}/checkpoints", container))
        api._raise_for_status(answer)
        return sorted(c["Name"] for c in answer.json() or [])


def container_status(engine: Engine, container: str) -> str:
    with engine.client() as client:
        try:
            return str(client.containers.get(container).status)
        except docker.errors.NotFound:
            return "gone"


def recorded(db: Path, **wanted: str | None) -> None:
    """Wait until the accounting store has each allocation ``id=end_reason`` (None: open;
    the hub's recorder writes on a thread of its own)."""
    store = AccountingStore(f"sqlite:///{db}")

    def now() -> dict[str, str | None]:
        rows = {a: store.get(a) for a in wanted}
        return {a: (r.end_reason if r else "(none)") for a, r in rows.items()}

    wait_until(
        lambda: now() == wanted, 30, f"allocations recorded as {wanted}", details=lambda: str(now())
    )


def spawn_and_wait(hub: Hub, user: str, options: dict[str, Any]) -> float:
    began = time.monotonic()
    r = hub.spawn(user, options)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, timeout=240)
    return time.monotonic() - began


def test_a_suspended_server_resumes_with_its_kernel_and_its_gpu_is_free_meanwhile(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    node = engines[0]
    inventory = [gpu_inventory(node.name, "5a5a5a5a", [RTX])]
    db = tmp_path / "accounting.sqlite"
    hub = make_hub([node], inventory, extra_config(db))
    hub.create_user("alice")
    spawn_and_wait(hub, "alice", OPTIONS)
    kernel = start_kernel(hub, "alice")
    assert run_cell(hub, "alice", kernel, "x = 42\nprint(x)") == "42"
    before = state_of(hub, "alice")
    (gpu,) = before["gpu_uuids"]
    assert gpu_of_cluster(hub, gpu)["holder"] == "alice/"

    # 1. suspended: not by alice herself (the culler's scope), by the culler's stand-in
    assert suspend(hub, "alice", hub.user_token("alice")).status_code == 403
    began = time.monotonic()
    answer = suspend(hub, "alice")
    suspend_s = time.monotonic() - began
    assert answer.status_code == 200, f"{answer.text}\n{hub.log_tail()}"
    assert hub.server("alice") is None  # JupyterHub sees it stopped, its route removed
    again = suspend(hub, "alice")  # what does not run is not suspended: one sentence
    assert again.status_code == 409, again.text
    assert "Not suspended: it is not running" in again.json()["message"]
    saved = state_of(hub, "alice")["suspended"]
    assert (saved["node"], saved["gpu_uuids"]) == (node.name, [gpu])
    assert saved["allocation"] == before["allocation"] and saved["size_bytes"] > 0
    assert gpu_of_cluster(hub, gpu)["status"] == "free"
    (notice,) = hub.api("GET", "/gpu/users/alice/notices").json()  # every hub page shows it
    assert (
        notice["kind"] == "suspended"
        and notice["message"].startswith("Your server was suspended at ")
        and notice["message"].endswith(
            "resume where you left it, with your kernels and their variables."
        )
    )
    recorded(db, **{before["allocation"]: "suspended"})
    offset = hub.wait_log(ROUND, hub.log_offset(), count=2)
    assert container_status(node, saved["container_id"]) == "exited"  # reconciliation keeps it
    assert checkpoints(node, saved["container_id"]) == [saved["checkpoint"]]

    # 1b. bob takes the only GPU meanwhile: alice's start is refused as any start of hers
    # would be now (no queue here), and nothing is lost: the checkpoint is kept
    hub.create_user("bob")
    spawn_and_wait(hub, "bob", OPTIONS)
    refused = hub.spawn("alice", OPTIONS)
    assert refused.status_code == 503, refused.text
    message = refused.json()["message"]
    assert message.endswith(
        "Your suspended server is kept: start it again once this allows, and it resumes "
        "where you left it."
    ), message
    assert state_of(hub, "alice")["suspended"]["checkpoint"] == saved["checkpoint"]
    assert checkpoints(node, saved["container_id"]) == [saved["checkpoint"]]
    hub.stop_server("bob")
    wait_until(lambda: gpu_of_cluster(hub, gpu)["status"] == "free", 30, "bob's GPU to be free")

    # 2. resumed on the next start: the same kernel answers 42
    resume_s = spawn_and_wait(hub, "alice", OPTIONS)
    hub.wait_log(r"alice/: resumed on node-a from checkpoint", offset)
    assert kernel_ids(hub, "alice") == [kernel]
    assert run_cell(hub, "alice", kernel, "print(x)") == "42"
    after = state_of(hub, "alice")
    assert "suspended" not in after and after["server_token"] == before["server_token"]
    assert after["labelled_allocation"] == before["allocation"] != after["allocation"]
    assert gpu_of_cluster(hub, gpu)["holder"] == "alice/"
    recorded(db, **{before["allocation"]: "suspended", after["allocation"]: None})
    assert checkpoints(node, saved["container_id"]) == []
    hub.wait_log(ROUND, hub.log_offset(), count=2)  # never taken for an interrupted spawn
    assert container_status(node, saved["container_id"]) == "running"
    assert (hub.server("alice") or {}).get("ready")
    checkpoint_s, mib = answer.json()["seconds"], saved["size_bytes"] / 2**20
    print(
        f"\nsuspend through the hub: {suspend_s:.1f} s (checkpoint {checkpoint_s} s, {mib:.0f} MiB)"
    )
    print(f"resume, start to ready: {resume_s:.1f} s")

    # 3. suspended again, then started with other options: a fresh server, said why
    assert suspend(hub, "alice").status_code == 200
    second = state_of(hub, "alice")["suspended"]
    offset = hub.log_offset()
    spawn_and_wait(hub, "alice", {**OPTIONS, "cpu": 1})
    hub.wait_log(r"alice/: not resumed, you chose other options than the suspended", offset)
    assert container_status(node, second["container_id"]) == "gone"
    assert kernel_ids(hub, "alice") == []
    assert "suspended" not in state_of(hub, "alice")
    r = httpx.get(
        f"{hub.url}/hub/api/user",
        headers={"Authorization": f"token {before['server_token']}"},
        timeout=30,
    )
    assert r.status_code == 403, "the suspended server's token outlived its checkpoint"
