"""A server's GPU readout in its JupyterLab's status bar (core/gpu_readout.py, and which
servers the hub's lab-notices answer gives one: hub/api/notices.py's server_readouts).
The browser's side runs for real in tests/integration/test_dashboard.py."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.attribution.labels import Share
from jupyterhub_gpu.core.gpu_readout import NO_READING, server_readout
from jupyterhub_gpu.core.inventory import GPU, GpuProcess, NodeInventory, NodeState
from jupyterhub_gpu.hub.api.notices import server_readouts

pytestmark = pytest.mark.unit

MINE, OTHER = "a" * 64, "b" * 64


def _gpu(i: int, util: float, used: int, **more: Any) -> GPU:
    return GPU(
        uuid=f"GPU-{i}aaaaaaa-0000-4000-8000-000000000000", index=i,
        model="NVIDIA GeForce RTX 3090", memory_mib=24576, compute_capability=(8, 6),
        utilization_pct=util, memory_used_mib=used, **more,
    )  # fmt: skip


def _node(*gpus: GPU, reachable: bool = True) -> NodeState:
    return NodeState(NodeInventory("gpu-a", "550.54.15", gpus), reachable=reachable)


def test_a_whole_gpu_reads_the_card() -> None:
    node = _node(_gpu(0, 95, 4096), _gpu(1, 3, 100))
    got = server_readout(node, [node.inventory.gpus[0].uuid], MINE)
    assert got is not None
    assert got.text == "RTX 3090 · 95 % · 4.0 of 24 GiB"
    lines = got.title.splitlines()
    assert lines[0] == "Your server's GPUs on node gpu-a, as its agent read them:"
    assert lines[1] == (
        "GPU 0 (RTX 3090, GPU-0aaaaaaa): 95 % busy, 4.0 of 24 GiB of memory in use."
    )


def test_two_gpus_each_busy_and_memory_summed() -> None:
    node = _node(_gpu(0, 95, 4096), _gpu(1, 10, 4096))
    got = server_readout(node, [g.uuid for g in node.inventory.gpus], MINE)
    assert got is not None and got.text == "2x RTX 3090 · 95 %, 10 % · 8.0 of 48 GiB"
    assert len(got.title.splitlines()) == 4  # the head, a line per GPU, the foot


def test_a_share_reads_its_own_processes_out_of_its_memory() -> None:
    procs = (
        GpuProcess(1, MINE, memory_mib=3072, utilization_pct=35.0),
        GpuProcess(2, OTHER, memory_mib=9000, utilization_pct=60.0),
    )
    node = _node(_gpu(0, 95, 12072, processes=procs))
    share = Share(held=1, of=4, memory_mib=6144)
    got = server_readout(node, [node.inventory.gpus[0].uuid], MINE, share)
    assert got is not None and got.text == "RTX 3090, your share · 35 % · 3.0 of 6.0 GiB"
    assert "(your share's processes)" in got.title
    # an agent without per-process figures: the whole card's, and the words say so
    bare = _node(replace(node.inventory.gpus[0], processes=None))
    got = server_readout(bare, [node.inventory.gpus[0].uuid], MINE, share)
    assert got is not None and got.text == "RTX 3090, shared card · 95 % · 12 of 24 GiB"
    assert "(the whole card: shared with others)" in got.title


def test_no_reading_is_said_never_an_old_figure() -> None:
    node = _node(_gpu(0, 95, 4096), reachable=False)
    uuid = node.inventory.gpus[0].uuid
    got = server_readout(node, [uuid], MINE)
    assert got is not None and got.text == f"GPU · {NO_READING}" and "95" not in got.title
    assert server_readout(None, [uuid, "GPU-x"], MINE).text == f"2 GPUs · {NO_READING}"  # type: ignore[union-attr]
    gone = server_readout(_node(_gpu(1, 0, 0)), [uuid], MINE)  # not in its inventory now
    assert gone is not None and gone.text == f"GPU · {NO_READING}"


def test_a_fault_says_save_your_work() -> None:
    node = _node(_gpu(0, 0, 0, healthy=False))
    got = server_readout(node, [node.inventory.gpus[0].uuid], MINE)
    assert got is not None and got.text == "RTX 3090 · fault: save your work"
    assert "reports a fault: save your work and tell your admin." in got.title


def test_no_gpu_no_readout() -> None:
    assert server_readout(_node(_gpu(0, 50, 1)), [], MINE) is None


def test_the_answer_names_each_running_server_with_gpus() -> None:
    node = _node(_gpu(0, 95, 4096), _gpu(1, 10, 1024))
    a, b = (g.uuid for g in node.inventory.gpus)

    def spawner(active: bool, gpus: list[str], on: str = "gpu-a") -> Any:
        return SimpleNamespace(active=active, gpu_uuids=gpus, node_name=on, container_id=MINE)

    user = SimpleNamespace(spawners={
        "": spawner(True, [a]), "cpu": spawner(True, []), "old": spawner(False, [b]),
        "elsewhere": spawner(True, [b], on="gpu-z"),
    })  # fmt: skip
    got = server_readouts(user, (node,))
    assert sorted(got) == ["", "elsewhere"]
    assert got[""]["text"] == "RTX 3090 · 95 % · 4.0 of 24 GiB"
    assert got["elsewhere"]["text"] == f"GPU · {NO_READING}"
    assert set(got[""]) == {"text", "title"}
