"""A node's budget for checkpoints counts those being taken there now, not only the
finished ones the hub's database records (GPUCluster.suspend_node_gib): two suspends at
once on a node with room for one are not both let through. The spawner's suspend path
runs for real over a fake engine (hub/suspend.py's SuspendingSpawnerMixin); the finished
checkpoints come from JupyterHub's ORM (held_on)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from jupyterhub import orm

from jupyterhub_gpu.errors import SuspendRefused
from jupyterhub_gpu.hub.runtime import HubRuntime
from jupyterhub_gpu.hub.suspend import SuspendingSpawnerMixin

pytestmark = pytest.mark.unit

GIB = 2**30


class Engine:
    """How many checkpoints a node's engine has begun."""

    def __init__(self) -> None:
        self.started = 0


class Api:
    def __init__(self, memory: int) -> None:
        self.memory = memory

    def info(self) -> dict[str, Any]:
        return {"ExperimentalBuild": True}

    def stats(self, container: str, stream: bool, one_shot: bool) -> dict[str, Any]:
        return {"memory_stats": {"usage": self.memory, "stats": {}}}


def spawner(name: str, runtime: HubRuntime, db: Any, engine: Engine, cluster: Any) -> Any:
    s = SuspendingSpawnerMixin()
    s.__dict__.update(
        holder=f"{name}/", node_name="node-b", object_id="c" * 64, gpu_uuids=[], share=None,
        labelled_allocation="", allocation_id="a" * 32, user_options={}, api_token="t",
        site=SimpleNamespace(suspend=True, suspend_max_gib=32.0, suspend_node_gib=10.0,
                             suspend_timeout=60.0),
        cluster=cluster, runtime=runtime, user=SimpleNamespace(db=db),
    )  # fmt: skip
    return s


async def test_two_suspends_at_once_on_a_node_with_room_for_one() -> None:
    db = orm.new_session_factory("sqlite://")()
    runtime, engine = HubRuntime(), Engine()
    gate = asyncio.Event()

    async def run(node: str, call: Any, timeout: float | None = None) -> Any:
        if getattr(call, "__name__", "") == "<lambda>" and timeout == 60.0:
            engine.started += 1
            await gate.wait()  # the checkpoint takes a while
            return 2.0
        return call()

    cluster = SimpleNamespace(
        client=lambda node: Api(6 * GIB), run=run, pending=set(),
        new_client=lambda node, timeout: SimpleNamespace(close=lambda: None),
    )  # fmt: skip
    first = spawner("alice", runtime, db, engine, cluster)
    second = spawner("bob", runtime, db, engine, cluster)
    first.log = second.log = logging.getLogger("test")
    taking = asyncio.ensure_future(first.suspend_server())
    while engine.started == 0:  # alice's checkpoint is being taken: 6 GiB of 10 counted
        await asyncio.sleep(0)
    assert runtime.suspending_bytes == {"node-b": 6 * GIB}
    with pytest.raises(SuspendRefused, match="would pass its budget"):
        await second.suspend_server()  # bob's 6 GiB more would pass it
    gate.set()
    saved = await taking
    assert saved.size_bytes == 6 * GIB
    first._forget_placement = lambda ended=None: None
    first.clear_state = lambda: None
    first._stop_suspended()  # its record is the state's from now on (held_on)
    assert runtime.suspending_bytes == {"node-b": 0}
