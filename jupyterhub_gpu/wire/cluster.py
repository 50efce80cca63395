"""The cluster as the dashboard's JSON (pure): node states, holds and servers in, a dict out.

The hub's ``GET /hub/api/gpu/cluster`` (:mod:`.hub`) calls :func:`build_payload` with what
the hub process holds (the cluster's last snapshot, its nodes' specs and admin drains, the
running servers); the benchmark calls it with declared data. Everything in the result is
JSON: strings, numbers, booleans, ``None``, lists and dicts; times are ISO 8601 UTC.

Shape (version 1)::

    {"version": 1, "generated_at": "...", "fresh": true, "hub_prefix": "/hub/",
     "named_servers": false, "named_server_limit": 0,
     "nodes": [{"name", "state": "up" | "drained" | "down", "reachable", "schedulable",
                "drained_by": "admin" | "nodes file" | null, "drain_note", "driver",
                "cuda", "labels",
                "gpus": [{"uuid", "index", "model", "label", "memory_mib",
                          "memory_used_mib", "utilization_pct", "temperature_c",
                          "healthy", "status", "holder", "orphan"}]}],
     "servers": [{"key": "user/server", "user", "server", "node", "gpus", "image",
                  "image_name", "started", "last_activity", "ready", "pending",
                  "cull_at": null}],
     "models": [{"model", "label", "total", "free", "memory_mib"}],
     "totals": {"nodes", "nodes_up", "gpus", "free", "held"},
     "queue": [], "reservations": []}

A GPU's ``status`` is one of :data:`GPU_STATUSES`; ``holder`` is the ledger's
``"user/server"`` (``orphan`` true for a hold whose server the hub has let go of, e.g. a
stop that could not reach the node: the GPU stays held until its container is gone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.form.availability import (
    gpu_is_free,
    gpu_model_availability,
    short_model_name,
)
from jupyterhub_gpu.core.inventory import GPU, ClusterSnapshot, NodeState
from jupyterhub_gpu.wire.nodes_file import NodeSpec

VERSION = 1
#: free: anyone may get it now; held: a server (or an orphan hold) has it; foreign: a
#: process the hub did not start runs on it; broken: the card reports itself unhealthy;
#: offline: its node does not answer; drained: its node takes no new servers
GPU_STATUSES = ("free", "held", "foreign", "broken", "offline", "drained")


@dataclass(frozen=True)
class ServerInfo:
    """One active server as the hub knows it (its spawner and the hub's database)."""

    user: str
    server: str  # "" for the default server
    node: str  # "" while not placed
    gpu_uuids: tuple[str, ...] = ()
    image: str = ""  # the catalog slug the user chose ("" unknown)
    image_name: str = ""  # the catalog's display name ("" unknown)
    started: datetime | None = None  # aware UTC
    last_activity: datetime | None = None  # aware UTC, the hub's activity record
    ready: bool = False
    pending: str | None = None  # "spawn", "stop", "check": an action in progress
    cull_at: datetime | None = None  # the culler's earliest stop (its deadlines file)

    @property
    def key(self) -> str:
        return f"{self.user}/{self.server}"


def iso(t: datetime | None) -> str | None:
    """An aware (or naive UTC) datetime as ISO 8601 UTC, seconds precision."""
    if t is None:
        return None
    aware = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    return aware.isoformat(timespec="seconds")


def gpu_status(snapshot: ClusterSnapshot, node: NodeState, gpu: GPU) -> str:
    """One of :data:`GPU_STATUSES`; "free" exactly when the spawn form counts it free."""
    if gpu.uuid in snapshot.allocations:
        return "held"
    if gpu_is_free(snapshot, node, gpu):
        return "free"
    if gpu.healthy is False:
        return "broken"
    if not node.reachable:
        return "offline"
    if not node.schedulable:
        return "drained"
    return "foreign"


def _gpu(
    snapshot: ClusterSnapshot, node: NodeState, gpu: GPU, orphans: AbstractSet[str]
) -> dict[str, Any]:
    holder = snapshot.allocations.get(gpu.uuid)
    return {
        "uuid": gpu.uuid,
        "index": gpu.index,
        "model": gpu.model,
        "label": short_model_name(gpu.model),
        "memory_mib": gpu.memory_mib,
        "memory_used_mib": gpu.memory_used_mib,
        "utilization_pct": round(float(gpu.utilization_pct), 1),
        "temperature_c": None if gpu.temperature_c is None else round(gpu.temperature_c, 1),
        "healthy": gpu.healthy,
        "status": gpu_status(snapshot, node, gpu),
        "holder": holder,
        "orphan": holder is not None and gpu.uuid in orphans,
    }


def _node(
    snapshot: ClusterSnapshot,
    node: NodeState,
    spec: NodeSpec | None,
    admin_drains: Mapping[str, str],
    orphans: AbstractSet[str],
) -> dict[str, Any]:
    drained_by = None
    if node.name in admin_drains:
        drained_by = "admin"
    elif spec is not None and spec.drain:
        drained_by = "nodes file"
    state = "down" if not node.reachable else ("drained" if not node.schedulable else "up")
    inventory = node.inventory
    return {
        "name": node.name,
        "state": state,
        "reachable": node.reachable,
        "schedulable": node.schedulable,
        "drained_by": drained_by,
        "drain_note": admin_drains.get(node.name, ""),
        "driver": inventory.driver_version,
        "cuda": inventory.cuda_driver_version,
        "labels": dict(spec.labels) if spec is not None else {},
        "gpus": [
            _gpu(snapshot, node, g, orphans) for g in sorted(inventory.gpus, key=lambda g: g.index)
        ],
    }


def _server(info: ServerInfo) -> dict[str, Any]:
    return {
        "key": info.key,
        "user": info.user,
        "server": info.server,
        "node": info.node,
        "gpus": list(info.gpu_uuids),
        "image": info.image,
        "image_name": info.image_name or info.image,
        "started": iso(info.started),
        "last_activity": iso(info.last_activity),
        "ready": info.ready,
        "pending": info.pending,
        "cull_at": iso(info.cull_at),
    }


def reservation_entry(r: Any) -> dict[str, Any]:
    """A ``scheduling.Reservation`` as a payload entry (times ISO UTC)."""

    def when(t: float) -> str | None:
        return iso(datetime.fromtimestamp(t, timezone.utc))

    return {
        "id": str(r.id),
        "group": str(r.group),
        "nodes": sorted(r.nodes),
        "gpus": sorted(r.gpu_uuids),
        "model": r.model,
        "count": int(r.count),
        "from": when(r.start),
        "to": when(r.end),
    }


def queue_entries(
    waiting: Sequence[Any], standings: Mapping[str, tuple[int, str]] | None = None
) -> list[dict[str, Any]]:
    """The queue's waiting spawns (``SpawnQueue.waiting()``: ``QueuedRequest``s, in arrival
    order, with ``id`` = "user/server", ``user``, ``group``, ``request.gpu_count``,
    ``request.allowed_models``, ``enqueued_at`` in epoch seconds) as payload entries, with
    their place in line for the GPUs they wait for (fair share decides it, not arrival)
    and what their progress page says (``SpawnQueue.standings()``; None until decided)."""
    out = []
    for item in waiting:
        position, words = (standings or {}).get(str(item.id), (0, ""))
        models = item.request.allowed_models
        model = next(iter(models)) if models is not None and len(models) == 1 else None
        since = datetime.fromtimestamp(float(item.enqueued_at), timezone.utc)
        out.append(
            {
                "user": str(item.user),
                "server": str(item.id).rpartition("/")[2],
                "group": str(item.group),
                "gpus": int(item.request.gpu_count),
                "model": model,
                "models": None if models is None else sorted(models),
                "since": iso(since),
                "position": position or None,
                "estimate": words or None,
            }
        )
    return out


def _totals(nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    gpus = [g for n in nodes for g in n["gpus"]]
    return {
        "nodes": len(nodes),
        "nodes_up": sum(n["state"] == "up" for n in nodes),
        "gpus": len(gpus),
        "free": sum(g["status"] == "free" for g in gpus),
        "held": sum(g["status"] == "held" for g in gpus),
    }


def build_payload(
    snapshot: ClusterSnapshot,
    specs: Sequence[NodeSpec],
    servers: Sequence[ServerInfo],
    admin_drains: Mapping[str, str],
    *,
    now: datetime,
    hub_prefix: str = "/hub/",
    named_servers: bool = False,
    named_server_limit: int = 0,
    fresh: bool = True,
    orphans: AbstractSet[str] = frozenset(),
    queue: Sequence[Mapping[str, Any]] = (),
    reservations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The dashboard's JSON for ``snapshot`` (nodes, with the ledger's ``allocations``),
    the nodes' ``specs`` (labels, the nodes file's drain), the active ``servers`` and the
    admins' drains (node -> note). ``orphans``: the held GPUs whose server the hub has let
    go of (the ledger's orphaned holds). ``fresh`` is False when the nodes' states are the last
    ones known because reading them now failed. ``queue`` and ``reservations`` are passed
    through as they are (their own features fill them)."""
    by_name = {s.name: s for s in specs}
    nodes = [_node(snapshot, n, by_name.get(n.name), admin_drains, orphans) for n in snapshot.nodes]
    return {
        "version": VERSION,
        "generated_at": iso(now),
        "fresh": fresh,
        "hub_prefix": hub_prefix,
        "named_servers": named_servers,
        "named_server_limit": named_server_limit,
        "nodes": nodes,
        "servers": [_server(s) for s in sorted(servers, key=lambda s: (s.user, s.server))],
        "models": [
            {
                "model": m.model,
                "label": m.label,
                "total": m.total,
                "free": m.free,
                "memory_mib": m.memory_mib,
            }
            for m in gpu_model_availability(snapshot)
        ],
        "totals": _totals(nodes),
        "queue": [dict(q) for q in queue],
        "reservations": [dict(r) for r in reservations],
    }
