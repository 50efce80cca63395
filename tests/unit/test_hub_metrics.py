"""The hub's Prometheus series (issue 11), read from the default registry that
JupyterHub's ``/hub/metrics`` serves, parsed by prometheus_client's own parser."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.runtime import HubRuntime
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from tests.unit.test_quota import _snapshot

pytestmark = pytest.mark.unit


def samples() -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_gpus_allocations_and_gpu_seconds() -> None:
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    cluster = Cluster(ClusterSettings(nodes=nodes), GPUDockerSpawner().log)
    HubRuntime.of(cluster)  # as in the hub: the runtime attaches the collector
    snap = _snapshot()
    unhealthy = replace(snap.nodes[0].inventory.gpus[7], healthy=False)
    inventory = replace(
        snap.nodes[0].inventory, gpus=(*snap.nodes[0].inventory.gpus[:7], unhealthy)
    )
    cluster._nodes = (replace(snap.nodes[0], inventory=inventory),)
    model = "NVIDIA GeForce RTX 3090"
    for i, group in enumerate(("ml", "ml", "vision")):
        gpus = (f"GPU-{2 * i}", f"GPU-{2 * i + 1}")
        cluster.ledger.reserve(f"u{i}/", "n1", gpus)
        rec = AllocationRecord(f"a{i}", f"u{i}", "", group, "n1", gpus, model, "pt", "12.1")
        cluster.ledger.open_allocation(rec)
    cluster.ledger.release("u2/")
    cluster.ledger.end_allocation("a2", EndReason.STOPPED)
    # a server re-joined after a restart counts too (from its spawner state)
    cluster.ledger.rejoin_allocation(
        AllocationRecord("a3", "u3", "", "ml", "n1", ("GPU-6",), model, "", "")
    )

    m = samples()
    allocated = {s[0]["uuid"]: s[1] for s in m["jupyterhub_gpu_allocated"]}
    assert allocated == {f"GPU-{i}": (1.0 if i < 4 else 0.0) for i in range(8)}
    assert all(set(s[0]) == {"node", "uuid", "model"} for s in m["jupyterhub_gpu_allocated"])
    states = {s[0]["state"]: s[1] for s in m["jupyterhub_gpu_gpus"]}
    assert states == {"allocated": 4, "free": 3, "unavailable": 1}
    assert {s[0]["group"]: s[1] for s in m["jupyterhub_gpu_allocations"]} == {"ml": 3}
    seconds = {s[0]["group"]: s[1] for s in m["jupyterhub_gpu_allocated_gpu_seconds_total"]}
    assert set(seconds) == {"ml", "vision"} and all(v >= 0 for v in seconds.values())
    assert m["jupyterhub_gpu_accounting_backlog"][0][1] == 0
    names = " ".join(m)
    assert "user" not in {k for series in m.values() for labels, _ in series for k in labels}, names
