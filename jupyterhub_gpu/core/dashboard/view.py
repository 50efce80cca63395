"""What one person sees of the cluster (pure): the hub's payload (typed, as
:func:`jupyterhub_gpu.wire.cluster.decode_payload` reads it), the viewer and the privacy
setting in; plain view objects for the templates out.

:func:`redact` is applied first and alone decides what a viewer may know: a viewer who is
not an admin, on a site that hides names (``show_names`` off), gets a payload where every
other user's name and server name is gone (not hidden by the page: absent), so neither the
HTML, nor the live fragment, nor the JSON can leak them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

from jupyterhub_gpu.core.dashboard.history import IDLE_BELOW, History
from jupyterhub_gpu.core.dashboard.payload import (
    ClusterPayload,
    GpuEntry,
    NodeEntry,
    PrePullEntry,
    QueueEntry,
    ReservationEntry,
    ServerEntry,
    ShareEntry,
)
from jupyterhub_gpu.core.progress import gib
from jupyterhub_gpu.core.words import duration

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
def redact(payload: ClusterPayload, viewer: Viewer, show_names: bool) -> ClusterPayload:
    """The payload as ``viewer`` may see it (a new one where names go; the payload is
    frozen, so the argument is not changed). What is someone else's loses its names to
    ``""`` and says ``hidden``; a GPU someone else holds loses its holder
    (``hidden_holder``), a share someone else holds its holder's names. SSH clients'
    addresses (``ssh_from``) are for admins only, on every server."""
    if viewer.admin:
        return payload
    payload = replace(payload, servers=tuple(replace(s, ssh_from=()) for s in payload.servers))
    if show_names:
        return payload
    own_prefix = f"{viewer.name}/"

    def share(s: ShareEntry) -> ShareEntry:
        if s.user == viewer.name:
            return s
        return replace(s, holder="", user="", server="", hidden=True)

    def gpu(g: GpuEntry) -> GpuEntry:
        if g.shares:
            g = replace(g, shares=tuple(share(s) for s in g.shares))
        if g.holder and not g.holder.startswith(own_prefix):
            return replace(g, holder="", hidden_holder=True)
        return g

    def server(s: ServerEntry) -> ServerEntry:
        if s.user == viewer.name:
            return s
        return replace(s, key="", user="", server="", hidden=True)

    def waiting(q: QueueEntry) -> QueueEntry:
        if q.user == viewer.name:
            return q
        return replace(q, user="", server="", estimate="", hidden=True)

    def reservation(r: ReservationEntry) -> ReservationEntry:
        if not r.user or r.user == viewer.name:
            return r  # a group's, or the viewer's own
        note = None if r.note is None else ""
        return replace(r, user="", note=note, hidden=True)

    return replace(
        payload,
        nodes=tuple(replace(n, gpus=tuple(gpu(g) for g in n.gpus)) for n in payload.nodes),
        servers=tuple(server(s) for s in payload.servers),
        queue=tuple(waiting(q) for q in payload.queue),
        reservations=tuple(reservation(r) for r in payload.reservations),
    )


# ---------------------------------------------------------------------- text helpers
def ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "unknown"
    seconds = (now - then).total_seconds()
    return "just now" if seconds < 5 else f"{duration(seconds)} ago"


def memory_text(used_mib: int, total_mib: int) -> str:
    return f"{gib(used_mib)} / {gib(total_mib)}"


def spawn_link(payload: ClusterPayload, viewer: Viewer, model: str) -> str | None:
    """Where "Start a server on this kind of GPU" goes: the spawn form of the viewer's
    default server, or of a new named one when that runs, with the model in the fragment
    (the hub starts a server at once when the spawn URL has a query; a fragment only tells
    the form what to preselect, docs/dashboard.md). None when the viewer can't start one."""
    prefix = payload.hub_prefix or "/hub/"
    fragment = "#" + urlencode({"gpu_model": model}, quote_via=quote)
    mine = {s.server for s in payload.servers if s.user == viewer.name}
    if "" not in mine:
        return f"{prefix}spawn{fragment}"
    limit = payload.named_server_limit
    if not payload.named_servers or (limit and len(mine - {""}) >= limit):
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
    since: str  # "2 h 05 min ago"
    since_iso: str  # "2026-12-05T14:20:00Z" (the page shows it in the browser's zone), or ""
    activity: str  # "3 min ago"
    cull: str  # what the culler will do, in words (:func:`cull_words`)
    can_stop: bool  # an admin's, or the viewer's own
    share: str = ""  # the shares it holds in words (:func:`share_words`); "": whole GPUs
    since_utc: str = "unknown"  # "2026-12-05 14:20 UTC": what the page shows without script
    cull_iso: str = ""  # the culler's earliest stop (ISO, UTC), or ""
    cull_utc: str = ""
    open_url: str = ""  # the viewer's own running server: where JupyterLab is
    ssh: str = ""  # its open SSH sessions in words (:func:`ssh_words`); "": none


@dataclass(frozen=True)
class ShareView:
    """One holder of a shared GPU: "alice (6.0 GiB)", its part and its server."""

    label: str  # "alice", "alice/train", "another user" (or "you"); an orphan says so
    memory: str  # "6.0 GiB"
    part: str  # "1/4"
    server: ServerView | None  # its server, when the viewer may see it


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
    shared: str = ""  # "shared 2 of 4" for a GPU held by shares, else ""
    shares: tuple[ShareView, ...] = ()


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
    prepull: list[dict[str, str]] = field(default_factory=list)
    generated_iso: str = ""


def iso(t: datetime | None) -> str:
    """``2026-12-05T14:20:00Z`` (a ``<time datetime>`` the page shows in local time)."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""


def utc_text(t: datetime | None) -> str:
    """``2026-12-05 14:20 UTC``: what a page without script shows."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "unknown"


def cull_words(s: ServerEntry) -> str:
    """What the idle culler will do with a server, in words (the time, when the culler
    has written one, is the template's ``<time>``: "stops it at the earliest at ...").
    A server it has not judged yet (just started: its GPUs have
    no readings yet) is not "unknown": the culler stops a server only once it is idle."""
    if s.pending == "spawn" or not s.ready:
        return "judges it once it runs"
    if s.cull_at is not None:
        return f"stops it at the earliest at {utc_text(s.cull_at)}"
    return "stops it only after it has been idle for a while; not measured yet"


def server_url(prefix: str, user: str, server: str) -> str:
    """Where a user's running server is: ``/user/alice/`` or ``/user/alice/train/``."""
    path = f"user/{quote(user, safe='')}/" + (f"{quote(server, safe='')}/" if server else "")
    return prefix + path


def server_view(
    s: ServerEntry, viewer: Viewer, now: datetime, share: str = "", prefix: str = "/"
) -> ServerView:
    hidden = s.hidden
    mine = not hidden and s.user == viewer.name
    label = HIDDEN if hidden else (s.user + (f"/{s.server}" if s.server else ""))
    started, activity = s.started, s.last_activity
    pending = s.pending
    state = {"spawn": "starting", "stop": "stopping"}.get(pending or "", pending or "running")
    cull = s.cull_at
    return ServerView(
        user="" if hidden else s.user,
        server="" if hidden else s.server,
        label=f"{label} (you)" if mine else label,
        mine=mine,
        hidden=hidden,
        image=s.image_name or s.image or "unknown",
        node=s.node,
        state=state if s.ready or pending else "not ready",
        since=ago(started, now),
        since_iso=iso(started),
        activity=ago(activity, now),
        cull=cull_words(s),
        can_stop=(viewer.admin or mine) and not hidden,
        share=share,
        since_utc=utc_text(started),
        cull_iso=iso(cull) if s.ready and s.pending != "spawn" else "",
        cull_utc=utc_text(cull) if cull else "",
        open_url=server_url(prefix, s.user, s.server) if mine and s.ready and not pending else "",
        ssh=ssh_words(s, now),
    )


def ssh_words(s: ServerEntry, now: datetime) -> str:
    """``SSH: 2 sessions, 1 forward, since 3 min ago (from 203.0.113.7:51234)``; "" when
    none is open. The addresses only where the payload still has them (admins)."""
    if not (s.ssh_sessions or s.ssh_forwards):
        return ""
    parts = []
    for n, what in ((s.ssh_sessions, "session"), (s.ssh_forwards, "forward")):
        if n:
            parts.append(f"{n} {what}{'' if n == 1 else 's'}")
    text = f"SSH: {', '.join(parts)}, since {ago(s.ssh_since, now)}"
    if s.ssh_from:
        text += f" (from {', '.join(s.ssh_from)})"
    return text


def _reserved_for(r: ReservationEntry) -> str:
    """Whom a reservation is for, in words: a user, or a group."""
    if r.hidden:
        return HIDDEN
    if r.user:
        return r.user
    return f"group {r.group}" if r.group else "someone"


def _reserved(
    reservations: Sequence[ReservationEntry], nodes: Sequence[NodeEntry]
) -> dict[str, str]:
    """GPU uuid -> whom it is reserved for, from reservations naming GPUs or nodes (one
    naming a model and a count holds no GPU in particular until it is needed)."""
    gpus_of = {n.name: [g.uuid for g in n.gpus] for n in nodes}
    out = {}
    for r in reservations:
        uuids = list(r.gpus)
        for node in r.nodes:
            uuids += gpus_of.get(node, [])
        out.update(dict.fromkeys(uuids, _reserved_for(r)))
    return out


@dataclass(frozen=True)
class _Context:
    """What every GPU row needs besides its own data."""

    payload: ClusterPayload
    viewer: Viewer
    now: datetime
    servers: Mapping[str, ServerView]  # GPU uuid -> the server holding it
    reserved: Mapping[str, str]
    history: History
    links: dict[str, str | None] = field(default_factory=dict)
    by_key: Mapping[str, ServerView] = field(default_factory=dict)  # "user/server" -> it

    def link(self, model: str) -> str | None:
        if model not in self.links:
            self.links[model] = spawn_link(self.payload, self.viewer, model)
        return self.links[model]


def _health(healthy: object) -> str:
    return "ok" if healthy is True else ("unhealthy" if healthy is False else "unknown")


def _holder_text(gpu: GpuEntry) -> str:
    if gpu.hidden_holder:
        return HIDDEN
    holder = gpu.holder or ""
    if holder and gpu.orphan:
        return f"{holder} (stopped; its node must answer before the GPU is free)"
    return holder


def share_view(share: ShareEntry, ctx: _Context) -> ShareView:
    """A share's holder as the viewer may see it (:func:`redact` has run)."""
    server = None if share.hidden else ctx.by_key.get(share.holder)
    if share.hidden:
        label = HIDDEN
    else:
        label = share.user + (f"/{share.server}" if share.server else "")
        if share.user == ctx.viewer.name:
            label += " (you)"
    if share.orphan:
        label += " (stopped; its node must answer before the share is free)"
    return ShareView(
        label=label,
        memory=gib(share.memory_mib),
        part=f"{share.count}/{share.of}",
        server=None if share.orphan else server,
    )


def share_words(share: ShareEntry, gpu: GpuEntry) -> str:
    """``1 of 4 shares of GPU 2 (RTX 3090), 6.0 GiB``: a share as its holder's server
    list says it (the GPU's index on its node, its model's short name, the share's memory)."""
    parts = f"{share.count} of {share.of} {'share' if share.of == 1 else 'shares'}"
    card = gpu.label or gpu.model or "GPU"
    return f"{parts} of GPU {gpu.index} ({card}), {gib(share.memory_mib)}"


def _shares_by_holder(nodes: Sequence[NodeEntry]) -> dict[str, str]:
    """Server key ("user/server") -> the shares it holds in words, ``"; "``-joined (one
    per GPU; a server holds a share of one GPU, but the payload does not forbid more).
    Hidden shares have no key and orphans no server: neither is listed."""
    words: dict[str, list[str]] = {}
    for node in nodes:
        for gpu in node.gpus:
            for s in gpu.shares:
                if s.holder and not s.hidden and not s.orphan:
                    words.setdefault(s.holder, []).append(share_words(s, gpu))
    return {key: "; ".join(texts) for key, texts in words.items()}


def _gpu_idle(status: str, idle: float | None) -> str:
    if status != "held" or idle is None:
        return ""
    return f"GPU under {IDLE_BELOW:g}% for at least {duration(idle)}"


def gpu_view(gpu: GpuEntry, ctx: _Context, known: bool = True) -> GPUView:
    uuid, status = gpu.uuid, gpu.status
    total, used = gpu.memory_mib, gpu.memory_used_mib
    temperature = gpu.temperature_c
    spark, idle = ctx.history.drawn(uuid)
    return GPUView(
        uuid=uuid,
        index=gpu.index,
        label=gpu.label or gpu.model or "GPU",
        memory=memory_text(used, total),
        memory_total=gib(total),
        memory_pct=round(100.0 * used / total, 1) if total else 0.0,
        utilization=gpu.utilization_pct,
        known=known,
        spark=spark,
        temperature="-" if temperature is None or not known else f"{temperature:.0f} °C",
        health=_health(gpu.healthy if known else None),
        status=status,
        status_label="shared" if gpu.share_of else _STATUS_LABELS.get(status, status),
        holder=None if gpu.share_of else ctx.servers.get(uuid),
        holder_text=_holder_text(gpu),
        spawn_link=ctx.link(gpu.model) if status == "free" else None,
        gpu_idle=_gpu_idle(status, idle),
        reserved_for=ctx.reserved.get(uuid, ""),
        shared=f"shared {gpu.shares_held} of {gpu.share_of}" if gpu.share_of else "",
        shares=tuple(share_view(s, ctx) for s in gpu.shares),
    )


def _state_label(node: NodeEntry) -> str:
    if node.state == "down":
        return "down: its engine or agent does not answer"
    if node.state == "drained":
        note = node.drain_note
        if node.drained_by == "check":
            return "no new servers: the hub's node check failed" + (f": {note}" if note else "")
        by = node.drained_by or "admin"
        return f"drained by the {by}" + (f": {note}" if note else "")
    return "up"


def node_view(node: NodeEntry, ctx: _Context, cpu: list[ServerView]) -> NodeView:
    known = node.reachable
    gpus = [gpu_view(g, ctx, known) for g in node.gpus]
    by = node.drained_by or ""
    return NodeView(
        name=node.name,
        state=node.state,
        state_label=_state_label(node),
        drained_by=by,
        drain_note=node.drain_note,
        can_drain=ctx.viewer.admin and by != "admin",
        can_undrain=ctx.viewer.admin and by == "admin",
        driver=node.driver,
        labels=", ".join(f"{k}={v}" for k, v in sorted(node.labels.items())),
        gpus=gpus,
        cpu_servers=cpu,
        free=sum(g.status == "free" for g in gpus),
    )


def _queue_rows(queue: Sequence[QueueEntry], now: datetime) -> list[dict[str, str]]:
    """Who waits for what (the queue's entries: user, server, group, gpus, model in
    words, position, since, estimate)."""
    rows = []
    for q in queue:
        who = HIDDEN if q.hidden else q.user
        kind = q.model if q.model not in (None, "any") else ""
        if not kind and q.models:
            kind = f"one of {len(q.models)} models"
        rows.append(
            {
                "position": str(q.position) if q.position else "-",
                "who": who + (f"/{q.server}" if q.server and not q.hidden else ""),
                "wants": f"{q.gpus} GPU(s), {kind or 'any model'}",
                "waiting": ago(q.since, now),
                "estimate": q.estimate or "unknown",
            }
        )
    return rows


def _when(t: datetime | None) -> str:
    """A reservation's bound as the hub wrote it (ISO 8601 UTC, seconds), or "?"."""
    return t.isoformat(timespec="seconds") if t else "?"


def _reservation_rows(items: Sequence[ReservationEntry]) -> list[dict[str, str]]:
    """Reservations (user or group, nodes, GPUs or a model and a count, from, to, note)."""
    rows = []
    for r in items:
        if r.gpus:
            what = f"{len(r.gpus)} GPU(s)"
        elif r.count:
            what = f"{r.count} x {r.model or 'any model'}"
        else:
            what = "all GPUs"
        rows.append(
            {
                "who": _reserved_for(r),
                "node": ", ".join(r.nodes) if r.nodes else "any",
                "gpus": what,
                "from": _when(r.start),
                "to": _when(r.end),
                "note": r.note or "",
            }
        )
    return rows


def cluster_view(
    payload: ClusterPayload,
    viewer: Viewer,
    history: History,
    *,
    now: datetime,
) -> ClusterView:
    """The view of a (:func:`redact`-ed) payload for ``viewer`` at ``now`` (aware UTC)."""
    shares = _shares_by_holder(payload.nodes)
    hub = payload.hub_prefix or "/hub/"
    prefix = hub[: -len("hub/")] if hub.endswith("hub/") else "/"
    servers = [server_view(s, viewer, now, shares.get(s.key, ""), prefix) for s in payload.servers]
    by_uuid: dict[str, ServerView] = {}
    by_key: dict[str, ServerView] = {}
    cpu_only: dict[str, list[ServerView]] = {}
    for entry, view in zip(payload.servers, servers, strict=True):
        if entry.key:
            by_key[entry.key] = view
        for uuid in entry.gpus:
            by_uuid[uuid] = view
        if not entry.gpus:
            cpu_only.setdefault(entry.node, []).append(view)
    reserved = _reserved(payload.reservations, payload.nodes)
    ctx = _Context(payload, viewer, now, by_uuid, reserved, history, by_key=by_key)
    models = [{**asdict(m), "link": ctx.link(m.model) if m.free else None} for m in payload.models]
    generated = payload.generated_at
    return ClusterView(
        viewer=viewer,
        generated=generated.strftime("%H:%M:%S UTC") if generated else "unknown",
        generated_iso=iso(generated),
        fresh=payload.fresh,
        message=payload.message,
        totals=asdict(payload.totals),
        models=models,
        nodes=[node_view(n, ctx, cpu_only.get(n.name, [])) for n in payload.nodes],
        queue=_queue_rows(payload.queue, now),
        reservations=_reservation_rows(payload.reservations),
        own_servers=[s for s in servers if s.mine],
        prepull=_prepull_rows(payload.prepull),
    )


def _prepull_rows(entries: Sequence[PrePullEntry]) -> list[dict[str, str]]:
    """One row per node of the pre-puller: has, needs, pulling, disk, last error."""
    rows = []
    for e in entries:
        budget = f" of {e.budget_gib:.1f}" if e.budget_gib else ""
        rows.append(
            {
                "node": e.node,
                "has": ", ".join(e.has) or "-",
                "needs": ", ".join(e.needs) or "-",
                "pulling": f"{e.pulling} ({e.percent}%)" if e.pulling else "-",
                "disk": f"{e.used_gib:.1f}{budget} GiB",
                "error": e.last_error or "",
            }
        )
    return rows
