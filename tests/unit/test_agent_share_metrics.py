"""The agent's per-container GPU series (issue #26), from a snapshot, without a server."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.services.agent.metrics import SnapshotCollector

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).parent.parent / "data" / "cluster-hetero.yaml"
A, B = "a1" * 32, "b2" * 32


def samples(processes: Any) -> dict[str, dict[tuple[str, str], float]]:
    node = load_inventory_file(CLUSTER)[0]
    gpu = dataclasses.replace(node.gpus[0], processes=processes)
    inv = dataclasses.replace(node, gpus=(gpu, *node.gpus[1:]))
    poller = SimpleNamespace(snapshot=SimpleNamespace(inventory=inv, time=1.0), read_errors=0)
    out: dict[str, dict[tuple[str, str], float]] = {}
    for family in SnapshotCollector(poller).collect():  # type: ignore[arg-type]
        for s in family.samples:
            if "container" in s.labels:
                out.setdefault(s.name, {})[(s.labels["uuid"], s.labels["container"])] = s.value
    return out


def test_each_container_on_a_gpu_has_its_memory_and_utilisation() -> None:
    uuid = load_inventory_file(CLUSTER)[0].gpus[0].uuid
    got = samples(
        (
            GpuProcess(1, A, 1000, 20.0),
            GpuProcess(2, A, 500, 15.0),
            GpuProcess(3, B, 4000, None),  # NVML gave no utilisation sample: no series
            GpuProcess(4, "", 100, 2.0),
        )
    )
    mib = 1024 * 1024
    assert got["jupyterhub_gpu_container_memory_used_bytes"] == {
        (uuid, A[:12]): 1500 * mib,
        (uuid, B[:12]): 4000 * mib,
        (uuid, ""): 100 * mib,
    }
    assert got["jupyterhub_gpu_container_utilization_percent"] == {
        (uuid, A[:12]): 35.0,
        (uuid, ""): 2.0,
    }


def test_no_per_process_data_means_no_container_series() -> None:
    assert samples(None) == {}
