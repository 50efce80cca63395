"""What one person sees of the cluster (pure): the hub's payload, the viewer and the privacy
setting in; plain view objects for the templates out.

:func:`redact` is applied first and alone decides what a viewer may know: a viewer who is
not an admin, on a site that hides names (``show_names`` off), gets a payload where every
other user's name and server name is gone (not hidden by the page: absent), so neither the
HTML, nor the live fragment, nor the JSON can leak them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from jupyterhub_gpu.core.culling.idleness import fmt_duration
from jupyterhub_gpu.core.dashboard.history import IDLE_BELOW, History
from jupyterhub_gpu.core.progress import gib
from jupyterhub_gpu.services.culler.client import parse_time

HIDDEN = "another user"
_STATUS_LABELS = {
    "free": "free",
    "held": "in use",
    "foreign": "used outside the hub",
    "broken": "unhealthy",
    "offline": "node down",
    "drained": "node drained",
}


@dataclass(frozen=True)
class Viewer:
    name: str
    admin: bool = False


# ---------------------------------------------------------------------- privacy
def _hide_user(item: dict[str, Any], viewer: Viewer, keys: Iterable[str]) -> dict[str, Any]:
    """``item`` without the named fields when they are someone else's (``hidden`` set)."""
    if item.get("user") == viewer.name:
        return item
    out = {**item, "hidden": True}
    for key in keys:
        if key in out:
            out[key] = ""
    return out


def redact(payload: Mapping[str, Any], viewer: Viewer, show_names: bool) -> dict[str, Any]:
    """The payload as ``viewer`` may see it (a deep copy; the argument is not changed)."""
    out = copy.deepcopy(dict(payload))
    if viewer.admin or show_names:
        return out
    own_prefix = f"{viewer.name}/"
    for node in out.get("nodes", []):
        for gpu in node.get("gpus", []):
            holder = gpu.get("holder")
            if holder and not holder.startswith(own_prefix):
                gpu["holder"], gpu["hidden_holder"] = "", True
    out["servers"] = [
        _hide_user(s, viewer, ("key", "user", "server")) for s in out.get("servers", [])
    ]
    out["queue"] = [
        _hide_user(dict(q), viewer, ("user", "server", "id", "estimate"))
        for q in out.get("queue", [])
        if isinstance(q, Mapping)
    ]
    out["reservations"] = [
        _hide_user(dict(r), viewer, ("user", "note")) if r.get("user") else dict(r)
        for r in out.get("reservations", [])
        if isinstance(r, Mapping)
    ]
    return out


# ---------------------------------------------------------------------- text helpers
def ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "unknown"
    seconds = (now - then).total_seconds()
    return "just now" if seconds < 5 else f"{fmt_duration(seconds)} ago"


def memory_text(used_mib: int, total_mib: int) -> str:
    return f"{gib(used_mib)} / {gib(total_mib)}"


def spawn_link(payload: Mapping[str, Any], viewer: Viewer, model: str) -> str | None:
    """Where "Start a server on this kind of GPU" goes: the spawn form of the viewer's
    default server, or of a new named one when that runs, with the model in the fragment
    (the hub starts a server at once when the spawn URL has a query; a fragment only tells
    the form what to preselect, docs/dashboard.md). None when the viewer can't start one."""
    prefix = str(payload.get("hub_prefix") or "/hub/")
    fragment = "#" + urlencode({"gpu_model": model}, quote_via=quote)
    mine = {s["server"] for s in payload.get("servers", []) if s.get("user") == viewer.name}
    if "" not in mine:
        return f"{prefix}spawn{fragment}"
    limit = int(payload.get("named_server_limit") or 0)
    if not payload.get("named_servers") or (limit and len(mine - {""}) >= limit):
        return None
    name = next(n for n in ("gpu", *(f"gpu-{i}" for i in range(2, 1000))) if n not in mine)
    return f"{prefix}spawn/{quote(viewer.name, safe='')}/{name}{fragment}"


# ---------------------------------------------------------------------- view objects
@dataclass(frozen=True)
class ServerView:
    user: str  # "" when hidden
    server: str
    label: str  # "alice", "alice/train", "another user" (or "you")
    mine: bool
    hidden: bool
    image: str
    node: str
    state: str  # "running", "starting", "stopping", ...
    since: str  # "2h05m ago"
    since_iso: str
    activity: str  # "3m00s ago"
    cull: str
    can_stop: bool


@dataclass(frozen=True)
class GPUView:
    uuid: str
    index: int
    label: str
    memory: str  # used / total
    memory_total: str
    memory_pct: float
    utilization: float
    known: bool  # False when its node does not answer: the readings are old
    spark: str
    temperature: str
    health: str
    status: str
    status_label: str
    holder: ServerView | None
    holder_text: str  # for a hold without a known server ("orphan", hand-made)
    spawn_link: str | None
    gpu_idle: str
    reserved_for: str


@dataclass(frozen=True)
class NodeView:
    name: str
    state: str
    state_label: str
    drained_by: str
    drain_note: str
    can_drain: bool
    can_undrain: bool
    driver: str
    labels: str
    gpus: list[GPUView]
    cpu_servers: list[ServerView]
    free: int


@dataclass
class ClusterView:
    viewer: Viewer
    generated: str
    fresh: bool
    message: str
    totals: Mapping[str, int]
    models: list[dict[str, Any]]
    nodes: list[NodeView]
    queue: list[dict[str, str]]
    reservations: list[dict[str, str]]
    own_servers: list[ServerView] = field(default_factory=list)


def server_view(s: Mapping[str, Any], viewer: Viewer, now: datetime) -> ServerView:
    hidden = bool(s.get("hidden"))
    mine = not hidden and s.get("user") == viewer.name
    label = HIDDEN if hidden else (s["user"] + (f"/{s['server']}" if s.get("server") else ""))
    started, activity = parse_time(s.get("started")), parse_time(s.get("last_activity"))
    pending = s.get("pending")
    state = {"spawn": "starting", "stop": "stopping"}.get(pending or "", pending or "running")
    cull = parse_time(s.get("cull_at"))
    return ServerView(
        user="" if hidden else str(s.get("user", "")),
        server="" if hidden else str(s.get("server", "")),
        label=f"{label} (you)" if mine else label,
        mine=mine,
        hidden=hidden,
        image=str(s.get("image_name") or s.get("image") or "unknown"),
        node=str(s.get("node") or ""),
        state=state if s.get("ready") or pending else "not ready",
        since=ago(started, now),
        since_iso=started.strftime("%Y-%m-%d %H:%M UTC") if started else "unknown",
        activity=ago(activity, now),
        cull=cull.strftime("%Y-%m-%d %H:%M UTC") if cull else "unknown",
        can_stop=viewer.admin and not hidden,
    )


def _reserved_for(r: Mapping[str, Any]) -> str:
    """Whom a reservation is for, in words: a user, or a group."""
    if r.get("hidden"):
        return HIDDEN
    if r.get("user"):
        return str(r["user"])
    return f"group {r['group']}" if r.get("group") else "someone"


def _reserved(
    reservations: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """GPU uuid -> whom it is reserved for, from reservations naming GPUs or nodes (one
    naming a model and a count holds no GPU in particular until it is needed)."""
    gpus_of = {str(n.get("name")): [str(g["uuid"]) for g in n.get("gpus", [])] for n in nodes}
    out = {}
    for r in reservations:
        uuids = [str(u) for u in r.get("gpus", []) if isinstance(r.get("gpus"), list)]
        for node in r.get("nodes", []) if isinstance(r.get("nodes"), list) else []:
            uuids += gpus_of.get(str(node), [])
        out.update(dict.fromkeys(uuids, _reserved_for(r)))
    return out


@dataclass(frozen=True)
class _Context:
    """What every GPU row needs besides its own data."""

    payload: Mapping[str, Any]
    viewer: Viewer
    now: datetime
    servers: Mapping[str, ServerView]  # GPU uuid -> the server holding it
    reserved: Mapping[str, str]
    history: History
    links: dict[str, str | None] = field(default_factory=dict)

    def link(self, model: str) -> str | None:
        if model not in self.links:
            self.links[model] = spawn_link(self.payload, self.viewer, model)
        return self.links[model]


def _health(healthy: object) -> str:
    return "ok" if healthy is True else ("unhealthy" if healthy is False else "unknown")


def _holder_text(gpu: Mapping[str, Any]) -> str:
    if gpu.get("hidden_holder"):
        return HIDDEN
    holder = str(gpu.get("holder") or "")
    if holder and gpu.get("orphan"):
        return f"{holder} (stopped; its node must answer before the GPU is free)"
    return holder


def _gpu_idle(status: str, idle: float | None) -> str:
    if status != "held" or idle is None:
        return ""
    return f"GPU under {IDLE_BELOW:g}% for at least {fmt_duration(idle)}"


def gpu_view(gpu: Mapping[str, Any], ctx: _Context, known: bool = True) -> GPUView:
    uuid, status = str(gpu["uuid"]), str(gpu.get("status", "held"))
    total, used = int(gpu.get("memory_mib") or 0), int(gpu.get("memory_used_mib") or 0)
    temperature = gpu.get("temperature_c")
    healthy = gpu.get("healthy")
    spark, idle = ctx.history.drawn(uuid)
    return GPUView(
        uuid=uuid,
        index=int(gpu.get("index", 0)),
        label=str(gpu.get("label") or gpu.get("model") or "GPU"),
        memory=memory_text(used, total),
        memory_total=gib(total),
        memory_pct=round(100.0 * used / total, 1) if total else 0.0,
        utilization=float(gpu.get("utilization_pct") or 0.0),
        known=known,
        spark=spark,
        temperature="-" if temperature is None or not known else f"{float(temperature):.0f} °C",
        health=_health(healthy if known else None),
        status=status,
        status_label=_STATUS_LABELS.get(status, status),
        holder=ctx.servers.get(uuid),
        holder_text=_holder_text(gpu),
        spawn_link=ctx.link(str(gpu.get("model", ""))) if status == "free" else None,
        gpu_idle=_gpu_idle(status, idle),
        reserved_for=ctx.reserved.get(uuid, ""),
    )


def _state_label(node: Mapping[str, Any]) -> str:
    if node.get("state") == "down":
        return "down: its engine or agent does not answer"
    if node.get("state") == "drained":
        by = node.get("drained_by") or "admin"
        note = node.get("drain_note") or ""
        return f"drained by the {by}" + (f": {note}" if note else "")
    return "up"


def node_view(node: Mapping[str, Any], ctx: _Context, cpu: list[ServerView]) -> NodeView:
    known = bool(node.get("reachable", True))
    gpus = [gpu_view(g, ctx, known) for g in node.get("gpus", [])]
    by = str(node.get("drained_by") or "")
    labels = node.get("labels") or {}
    return NodeView(
        name=str(node["name"]),
        state=str(node.get("state", "up")),
        state_label=_state_label(node),
        drained_by=by,
        drain_note=str(node.get("drain_note") or ""),
        can_drain=ctx.viewer.admin and by != "admin",
        can_undrain=ctx.viewer.admin and by == "admin",
        driver=str(node.get("driver") or ""),
        labels=", ".join(f"{k}={v}" for k, v in sorted(labels.items())),
        gpus=gpus,
        cpu_servers=cpu,
        free=sum(g.status == "free" for g in gpus),
    )


def _queue_rows(queue: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, str]]:
    """Who waits for what (the queue's entries: user, server, group, gpus, model or kind
    in words, position, since, estimate)."""
    rows = []
    for q in queue:
        hidden = bool(q.get("hidden"))
        who = HIDDEN if hidden else str(q.get("user", "?"))
        kind = q.get("kind") or (q.get("model") if q.get("model") not in (None, "any") else "")
        if not kind and isinstance(q.get("models"), list) and q["models"]:
            kind = f"one of {len(q['models'])} models"
        rows.append(
            {
                "position": str(q["position"]) if q.get("position") else "-",
                "who": who + (f"/{q['server']}" if q.get("server") and not hidden else ""),
                "wants": f"{q.get('gpus', '?')} GPU(s), {kind or 'any model'}",
                "waiting": ago(parse_time(q.get("since")), now),
                "estimate": str(q.get("estimate") or "unknown"),
            }
        )
    return rows


def _reservation_rows(items: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Reservations (user or group, nodes, GPUs or a model and a count, from, to, note)."""
    rows = []
    for r in items:
        gpus, nodes = r.get("gpus"), r.get("nodes")
        if isinstance(gpus, list) and gpus:
            what = f"{len(gpus)} GPU(s)"
        elif r.get("count"):
            what = f"{r['count']} x {r.get('model') or 'any model'}"
        else:
            what = "all GPUs"
        rows.append(
            {
                "who": _reserved_for(r),
                "node": ", ".join(map(str, nodes)) if isinstance(nodes, list) and nodes else "any",
                "gpus": what,
                "from": str(r.get("from") or "?"),
                "to": str(r.get("to") or "?"),
                "note": str(r.get("note") or ""),
            }
        )
    return rows


def cluster_view(
    payload: Mapping[str, Any],
    viewer: Viewer,
    history: History,
    *,
    now: datetime,
) -> ClusterView:
    """The view of a (:func:`redact`-ed) payload for ``viewer`` at ``now`` (aware UTC)."""
    servers = [server_view(s, viewer, now) for s in payload.get("servers", [])]
    by_uuid: dict[str, ServerView] = {}
    cpu_only: dict[str, list[ServerView]] = {}
    for raw, view in zip(payload.get("servers", []), servers, strict=True):
        for uuid in raw.get("gpus", []):
            by_uuid[str(uuid)] = view
        if not raw.get("gpus"):
            cpu_only.setdefault(str(raw.get("node") or ""), []).append(view)
    reserved = _reserved(payload.get("reservations", []), payload.get("nodes", []))
    ctx = _Context(payload, viewer, now, by_uuid, reserved, history)
    models = [
        {**m, "link": ctx.link(str(m["model"])) if m.get("free") else None}
        for m in payload.get("models", [])
    ]
    generated = parse_time(payload.get("generated_at"))
    return ClusterView(
        viewer=viewer,
        generated=generated.strftime("%H:%M:%S UTC") if generated else "unknown",
        fresh=bool(payload.get("fresh", True)),
        message=str(payload.get("message") or ""),
        totals=payload.get("totals", {}),
        models=models,
        nodes=[node_view(n, ctx, cpu_only.get(str(n["name"]), [])) for n in payload["nodes"]],
        queue=_queue_rows(payload.get("queue", []), now),
        reservations=_reservation_rows(payload.get("reservations", [])),
        own_servers=[s for s in servers if s.mine],
    )
