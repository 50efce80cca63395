"""The hub's Prometheus series (issue 11), read from the default registry that
JupyterHub's ``/hub/metrics`` serves, parsed by prometheus_client's own parser."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.hub import metrics
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


def test_two_shares_of_one_gpu_and_a_whole_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: a GPU held by shares is allocated, says how many of its shares are held
    and free, and its shares count as their fractions in the GPUs held and the
    GPU-seconds of their group; a whole GPU counts whole. No series names a user."""
    clock = [1000.0]
    monkeypatch.setattr(metrics, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    cluster = Cluster(ClusterSettings(nodes=nodes), GPUDockerSpawner().log)
    HubRuntime.of(cluster)
    cluster._nodes = _snapshot().nodes
    model = "NVIDIA GeForce RTX 3090"
    ledger = cluster.ledger
    ledger.reserve_share("alice/", "n1", "GPU-2", (1, 4), "a")
    ledger.reserve_share("bob/", "n1", "GPU-2", (2, 4), "b")
    ledger.reserve("carol/", "n1", ["GPU-0"], "c")
    for rid, user, group, gpu, fraction in (
        ("a", "alice", "ml", "GPU-2", 0.25),
        ("b", "bob", "ml", "GPU-2", 0.5),
        ("c", "carol", "vision", "GPU-0", 1.0),
    ):
        rec = AllocationRecord(rid, user, "", group, "n1", (gpu,), model, "pt", "12.1")
        ledger.open_allocation(replace(rec, gpu_fraction=fraction))
    clock[0] += 100.0

    m = samples()
    allocated = {s[0]["uuid"]: s[1] for s in m["jupyterhub_gpu_allocated"]}
    assert allocated == {f"GPU-{i}": (1.0 if i in (0, 2) else 0.0) for i in range(8)}
    shares = {(s[0]["uuid"], s[0]["state"]): s[1] for s in m["jupyterhub_gpu_shares"]}
    assert shares == {("GPU-2", "held"): 3.0, ("GPU-2", "free"): 1.0}
    assert all(set(s[0]) == {"node", "uuid", "model", "state"} for s in m["jupyterhub_gpu_shares"])
    assert {s[0]["state"]: s[1] for s in m["jupyterhub_gpu_gpus"]} == {"allocated": 2, "free": 6}
    held = {(s[0]["group"], s[0]["kind"]): s[1] for s in m["jupyterhub_gpu_held_gpus"]}
    assert held == {("ml", "share"): 0.75, ("vision", "whole"): 1.0}
    seconds = {s[0]["group"]: s[1] for s in m["jupyterhub_gpu_allocated_gpu_seconds_total"]}
    assert seconds == {"ml": 75.0, "vision": 100.0}
    assert {k for series in m.values() for labels, _ in series for k in labels} & {
        "user",
        "server",
    } == set()

    # bob's share ends: one share held, three free; his GPU-seconds stay counted
    ledger.release("bob/")
    ledger.end_allocation("b", EndReason.STOPPED)
    clock[0] += 100.0
    m = samples()
    shares = {(s[0]["uuid"], s[0]["state"]): s[1] for s in m["jupyterhub_gpu_shares"]}
    assert shares == {("GPU-2", "held"): 1.0, ("GPU-2", "free"): 3.0}
    seconds = {s[0]["group"]: s[1] for s in m["jupyterhub_gpu_allocated_gpu_seconds_total"]}
    assert seconds == {"ml": 100.0, "vision": 200.0}
    # the last share ends: the GPU is free, and no longer in the shares' series
    ledger.release("alice/")
    m = samples()
    assert "jupyterhub_gpu_shares" not in m and "GPU-2" not in {
        s[0]["uuid"] for s in m["jupyterhub_gpu_allocated"] if s[1]
    }


# ---------------------------------------------------------------------- the Grafana board
BOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "jupyterhub-gpu.json"
SHARING_PANELS = {"GPU shares", "GPUs held as shares by group"}


def board_targets() -> list[tuple[str, str, str]]:
    """(panel title, expr, legendFormat) of every target of the board, rows' panels too."""
    board = json.loads(BOARD.read_text())
    panels = list(board["panels"])
    panels += [p for row in board["panels"] for p in row.get("panels") or []]
    return [
        (p["title"], t["expr"], t.get("legendFormat", ""))
        for p in panels
        for t in p.get("targets") or []
        if t.get("expr")
    ]


def test_the_boards_hub_queries_use_the_labels_the_hub_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every board query over one of the hub's series groups by, matches on and names in
    its legend only labels that series has, and an exact match (``kind="share"``) names a
    value it takes; the sharing panels are among those checked (a scene with a share and
    a whole GPU). Whether the queries return data in Prometheus is test_grafana's part."""
    monkeypatch.setattr(metrics, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    cluster = Cluster(ClusterSettings(nodes=nodes), GPUDockerSpawner().log)
    HubRuntime.of(cluster)
    cluster._nodes = _snapshot().nodes
    model = "NVIDIA GeForce RTX 3090"
    cluster.ledger.reserve_share("alice/", "n1", "GPU-2", (1, 4), "a")
    cluster.ledger.reserve("carol/", "n1", ["GPU-0"], "c")
    for rid, user, gpu, fraction in (("a", "alice", "GPU-2", 0.25), ("c", "carol", "GPU-0", 1)):
        rec = AllocationRecord(rid, user, "", "ml", "n1", (gpu,), model, "pt", "12.1")
        cluster.ledger.open_allocation(replace(rec, gpu_fraction=fraction))
    m = samples()

    checked: set[str] = set()
    failures = []
    for title, expr, legend in board_targets():
        names = set(re.findall(r"\bjupyterhub_gpu_\w+", expr))
        if len(names) != 1 or not names <= set(m):
            continue  # a join, or an agent's series (or a counter not yet incremented)
        (name,) = names
        labels = {k for labels, _ in m[name] for k in labels}
        used = {x.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for x in by.split(",")}
        used |= set(re.findall(r"\{\{(\w+)\}\}", legend))
        matchers = re.findall(r'(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)"', expr.split(name, 1)[1])
        used |= {k for k, _, _ in matchers}
        if used - labels:
            failures.append(f"{title}: {sorted(used - labels)} not labels of {name}")
        for key, op, value in matchers:
            if op == "=" and value not in {labels.get(key) for labels, _ in m[name]}:
                failures.append(f"{title}: no {name} series has {key}={value!r}")
        checked.add(title)
    assert not failures, "\n".join(failures)
    assert checked >= SHARING_PANELS, checked
