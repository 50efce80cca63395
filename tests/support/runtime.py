"""Give the spawners of a unit test a cluster of the test's making: the process-wide
runtime that spawners outside a hub use (``jupyterhub_gpu.hub.runtime``)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.hub import runtime
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.queue import SpawnQueue


def use_cluster(monkeypatch: pytest.MonkeyPatch, cluster: Cluster | None) -> runtime.HubRuntime:
    """Spawners made in this test use ``cluster`` (None: they build their own)."""
    made = runtime.HubRuntime.of(cluster) if cluster is not None else runtime.HubRuntime()
    monkeypatch.setattr(runtime, "_PROCESS", made)
    return made


def queue_of(monkeypatch_runtime: runtime.HubRuntime) -> SpawnQueue:
    assert monkeypatch_runtime.queue is not None
    return monkeypatch_runtime.queue
