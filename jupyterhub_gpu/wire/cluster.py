"""The cluster as the dashboard's JSON (pure): node states, holds and servers in, a dict
out (:func:`build_payload`); and that dict read back, typed (:func:`decode_payload`).

The hub's ``GET /hub/api/gpu/cluster`` (:mod:`.hub`) calls :func:`build_payload` with what
the hub process holds (the cluster's last snapshot, its nodes' specs and admin drains, the
running servers); the benchmark calls it with declared data. Everything in the result is
JSON: strings, numbers, booleans, ``None``, lists and dicts; times are ISO 8601 UTC.

Shape (version 1)::

    {"version": 1, "generated_at": "...", "fresh": true, "hub_prefix": "/hub/",
     "named_servers": false, "named_server_limit": 0,
     "nodes": [{"name", "state": "up" | "drained" | "down", "reachable", "schedulable",
                "drained_by": "admin" | "nodes file" | "check" | null, "drain_note", "driver",
                "cuda", "labels",
                "gpus": [{"uuid", "index", "model", "label", "memory_mib",
                          "memory_used_mib", "utilization_pct", "temperature_c",
                          "healthy", "status", "holder", "orphan",
                          ["share_of", "shares_held", "shares"]}]}],
     "servers": [{"key": "user/server", "user", "server", "node", "gpus", "image",
                  "image_name", "started", "last_activity", "ready", "pending",
                  "cull_at": null,
                  ["ssh": {"sessions", "forwards", "since", "from": ["ip:port"]}]}],
     "models": [{"model", "label", "total", "free", "memory_mib"}],
     "totals": {"nodes", "nodes_up", "gpus", "free", "held"},
     "queue": [], "reservations": []}

A node's ``drained_by`` is one of :data:`DRAINED_BY` (or null: it takes servers, or it is
down): an admin (``drain_note`` the admin's note), the nodes file's ``drain: true``, or the
hub's node check (``drain_note`` what failed and the fix; it ends when a check passes).
A GPU's ``status`` is one of :data:`GPU_STATUSES`; ``holder`` is the ledger's
``"user/server"`` (``orphan`` true for a hold whose server the hub has let go of, e.g. a
stop that could not reach the node: the GPU stays held until its container is gone).
A GPU held by shares (issue 26, docs/sharing.md) has ``holder`` null, ``orphan`` false and
three more keys, absent on every other GPU (a dashboard of an earlier release ignores
them; this one reads a GPU without them as not shared, so the version stays 1):
``share_of`` (the N it is split into), ``shares_held`` (the shares held on it) and
``shares``, one entry per holder sorted by holder::

    {"holder": "alice/", "user": "alice", "server": "", "count": 1, "fraction": 0.25,
     "memory_mib": 6144, "orphan": false}

(``fraction`` = count / share_of; ``orphan`` as a GPU's: a share kept after its server
was let go of). A server with open SSH sessions or forwards (the SSH gateway's, docs/ssh.md) has
``ssh``: their counts, the oldest one's start and the clients' addresses (``from``, which
the dashboard shows to admins only); absent otherwise. The hub adds ``"message"`` when it
has no cluster to show. The queue's
entries are made by :func:`queue_entries`, the reservations' by :func:`reservation_entry`.

The dashboard service reads it back through :func:`decode_payload` alone, into the typed
:class:`~jupyterhub_gpu.core.dashboard.payload.ClusterPayload` (what its views read), and
answers its own ``api/cluster`` with :func:`payload_json` of the redacted payload.
:func:`payload_json` is the one writer of the shape: :func:`build_payload` makes the typed
payload from the hub's state and writes it through it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.dashboard.payload import (
    ClusterPayload,
    GpuEntry,
    ModelEntry,
    NodeEntry,
    PrePullEntry,
    QueueEntry,
    ReservationEntry,
    ServerEntry,
    ShareEntry,
    Totals,
)
from jupyterhub_gpu.core.form.availability import (
    gpu_is_free,
    gpu_model_availability,
    short_model_name,
)
from jupyterhub_gpu.core.inventory import GPU, NodeState
from jupyterhub_gpu.core.sharing.policy import share_of
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.ssh.census import ServerSSH
from jupyterhub_gpu.core.times import parse_time
from jupyterhub_gpu.errors import BadPayload
from jupyterhub_gpu.wire.nodes_file import NodeSpec

VERSION = 1
#: free: anyone may get it now; held: a server (or an orphan hold) has it; foreign: a
#: process the hub did not start runs on it; broken: the card reports itself unhealthy;
#: offline: its node does not answer; drained: its node takes no new servers
GPU_STATUSES = ("free", "held", "foreign", "broken", "offline", "drained")
NODE_STATES = ("up", "drained", "down")
#: who keeps a node from new servers: an admin, the nodes file, the hub's node check
DRAINED_BY = ("admin", "nodes file", "check")


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
    share_memory_mib: int | None = None  # the MiB of the share it holds (None: whole)
    ssh: ServerSSH | None = None  # its open SSH sessions and forwards (None: none)

    @property
    def key(self) -> str:
        return f"{self.user}/{self.server}"


@dataclass(frozen=True)
class ShareInfo:
    """One share hold of the ledger: ``count`` of the ``of`` shares of its GPU, for the
    server ``holder`` ("user/server"), ``memory_mib`` MiB (None: unknown here, then the
    policy's size on that GPU, or the GPU's memory split evenly)."""

    holder: str
    count: int
    of: int
    memory_mib: int | None = None
    orphan: bool = False


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


def _share(snapshot: ClusterSnapshot, node: NodeState, gpu: GPU, info: ShareInfo) -> ShareEntry:
    memory = info.memory_mib
    if memory is None:
        rule = snapshot.sharing.rule(node.name, gpu.model)
        if rule is not None and rule.shares == info.of:  # the policy still splits it so
            memory = share_of(rule, info.count, gpu.memory_mib).memory_mib
        else:
            memory = gpu.memory_mib * info.count // info.of
    user, _, server = info.holder.partition("/")
    return ShareEntry(
        holder=info.holder,
        user=user,
        server=server,
        count=info.count,
        of=info.of,
        memory_mib=memory,
        orphan=info.orphan,
    )


def _gpu(
    snapshot: ClusterSnapshot,
    node: NodeState,
    gpu: GPU,
    orphans: AbstractSet[str],
    shares: Sequence[ShareInfo] = (),
) -> GpuEntry:
    holder = snapshot.allocations.get(gpu.uuid)
    if shares or holder == SHARED:  # held by shares: no one holder (no placeholder shown)
        holder = None
    return GpuEntry(
        uuid=gpu.uuid,
        index=gpu.index,
        model=gpu.model,
        label=short_model_name(gpu.model),
        memory_mib=gpu.memory_mib,
        memory_used_mib=gpu.memory_used_mib,
        utilization_pct=round(float(gpu.utilization_pct), 1),
        temperature_c=None if gpu.temperature_c is None else round(gpu.temperature_c, 1),
        healthy=gpu.healthy,
        status=gpu_status(snapshot, node, gpu),
        holder=holder,
        orphan=holder is not None and gpu.uuid in orphans,
        share_of=max((s.of for s in shares), default=0),
        shares=tuple(
            _share(snapshot, node, gpu, s) for s in sorted(shares, key=lambda s: s.holder)
        ),
    )


def _node(
    snapshot: ClusterSnapshot,
    node: NodeState,
    spec: NodeSpec | None,
    admin_drains: Mapping[str, str],
    orphans: AbstractSet[str],
    check_failures: Mapping[str, str],
    shares: Mapping[str, Sequence[ShareInfo]],
) -> NodeEntry:
    drained_by, note = None, ""
    if node.name in admin_drains:
        drained_by, note = "admin", admin_drains[node.name]
    elif spec is not None and spec.drain:
        drained_by = "nodes file"
    elif node.name in check_failures:
        drained_by, note = "check", check_failures[node.name]
    state = "down" if not node.reachable else ("drained" if not node.schedulable else "up")
    inventory = node.inventory
    return NodeEntry(
        name=node.name,
        state=state,
        reachable=node.reachable,
        schedulable=node.schedulable,
        drained_by=drained_by,
        drain_note=note,
        driver=inventory.driver_version,
        cuda=inventory.cuda_driver_version,
        labels=dict(spec.labels) if spec is not None else {},
        gpus=tuple(
            _gpu(snapshot, node, g, orphans, shares.get(g.uuid, ()))
            for g in sorted(inventory.gpus, key=lambda g: g.index)
        ),
    )


def _server(info: ServerInfo) -> ServerEntry:
    return ServerEntry(
        key=info.key,
        user=info.user,
        server=info.server,
        node=info.node,
        gpus=tuple(info.gpu_uuids),
        image=info.image,
        image_name=info.image_name or info.image,
        started=info.started,
        last_activity=info.last_activity,
        ready=info.ready,
        pending=info.pending,
        cull_at=info.cull_at,
        **_ssh_fields(info.ssh),
    )


def _ssh_fields(ssh: ServerSSH | None) -> dict[str, Any]:
    if ssh is None or not (ssh.sessions or ssh.forwards):
        return {}
    since = None if ssh.since is None else datetime.fromtimestamp(ssh.since, timezone.utc)
    return {
        "ssh_sessions": ssh.sessions,
        "ssh_forwards": ssh.forwards,
        "ssh_since": since,
        "ssh_from": ssh.peers[:20],
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


def _totals(nodes: Sequence[NodeEntry]) -> Totals:
    gpus = [g for n in nodes for g in n.gpus]
    return Totals(
        nodes=len(nodes),
        nodes_up=sum(n.state == "up" for n in nodes),
        gpus=len(gpus),
        free=sum(g.status == "free" for g in gpus),
        held=sum(g.status == "held" for g in gpus),
    )


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
    check_failures: Mapping[str, str] | None = None,
    prepull: Sequence[Mapping[str, Any]] = (),
    shares: Mapping[str, Sequence[ShareInfo]] | None = None,
) -> dict[str, Any]:
    """The dashboard's JSON for ``snapshot`` (nodes, with the ledger's ``allocations``),
    the nodes' ``specs`` (labels, the nodes file's drain), the active ``servers`` and the
    admins' drains (node -> note). ``orphans``: the held GPUs whose server the hub has let
    go of (the ledger's orphaned holds). ``fresh`` is False when the nodes' states are the last
    ones known because reading them now failed. ``queue`` and ``reservations`` are passed
    through as they are (their own features fill them). ``check_failures``: the nodes
    whose node check keeps servers off them (node -> what failed and the fix,
    ``Cluster.check_failures()``). ``prepull``: the pre-puller's nodes
    (:func:`prepull_entries`; the key is left out when there are none). ``shares``: GPU
    uuid -> the share holds on it (the ledger's), for the GPUs held by shares."""
    by_name = {s.name: s for s in specs}
    failures, held = check_failures or {}, shares or {}
    nodes = tuple(
        _node(snapshot, n, by_name.get(n.name), admin_drains, orphans, failures, held)
        for n in snapshot.nodes
    )
    out = payload_json(
        ClusterPayload(
            version=VERSION,
            generated_at=now,
            fresh=fresh,
            hub_prefix=hub_prefix,
            named_servers=named_servers,
            named_server_limit=named_server_limit,
            nodes=nodes,
            servers=tuple(_server(s) for s in sorted(servers, key=lambda s: (s.user, s.server))),
            models=tuple(
                ModelEntry(
                    model=m.model,
                    label=m.label,
                    total=m.total,
                    free=m.free,
                    memory_mib=m.memory_mib,
                )
                for m in gpu_model_availability(snapshot)
            ),
            totals=_totals(nodes),
        )
    )
    # the queue's, the reservations' and the pre-puller's entries come made by their own
    # features (queue_entries, reservation_entry, prepull_entries): passed through as they are
    out["queue"] = [dict(q) for q in queue]
    out["reservations"] = [dict(r) for r in reservations]
    if prepull:
        out["prepull"] = [dict(p) for p in prepull]
    return out


def prepull_entries(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The payload's ``prepull`` list from the pre-puller's state
    (:meth:`~jupyterhub_gpu.hub.prepull.PrePullRunner.state`), one entry per node."""
    return [
        {
            "node": name,
            "has": list(s.get("has") or ()),
            "needs": list(s.get("needs") or ()),
            "pulling": s.get("pulling") or None,
            "percent": int(s.get("percent") or 0),
            "last_error": s.get("last_error") or None,
            "used_gib": float(s.get("used_gib") or 0.0),
            "budget_gib": float(s.get("budget_gib") or 0.0),
        }
        for name, s in sorted((state.get("nodes") or {}).items())
    ]


# ---------------------------------------------------------------------- the dashboard's side
def decode_payload(raw: object) -> ClusterPayload:
    """The typed payload of ``raw`` (:func:`build_payload`'s JSON, parsed), checked all
    through: every key of the shape above (``message``, and a reservation's ``user`` and
    ``note``, may be absent), of its type, within its bounds (statuses and states known,
    counts and sizes not negative, utilisation 0 to 100, times ISO 8601). Keys it does not
    know are ignored. :class:`~jupyterhub_gpu.errors.BadPayload` names the first bad field
    (``nodes[0].gpus[1].status must be one of ...``)."""
    p = _Reader(raw, "")
    version = p.integer("version", 0)
    if version != VERSION:
        raise _bad("version", f"must be {VERSION}, got {_show(version)}")
    message = p.text_if_present("message")
    return ClusterPayload(
        version=version,
        generated_at=p.time("generated_at"),
        fresh=p.flag("fresh"),
        hub_prefix=p.text("hub_prefix"),
        named_servers=p.flag("named_servers"),
        named_server_limit=p.integer("named_server_limit", 0),
        nodes=tuple(_decode_node(n) for n in p.objects("nodes")),
        servers=tuple(_decode_server(s) for s in p.objects("servers")),
        models=tuple(_decode_model(m) for m in p.objects("models")),
        totals=_decode_totals(p.object("totals")),
        queue=tuple(_decode_queue_entry(q) for q in p.objects("queue")),
        reservations=tuple(_decode_reservation(r) for r in p.objects("reservations")),
        message=message or "",
        prepull=tuple(_decode_prepull(e) for e in p.objects("prepull"))
        if isinstance(raw, dict) and "prepull" in raw
        else (),
    )


def _decode_prepull(e: _Reader) -> PrePullEntry:
    return PrePullEntry(
        node=e.text("node"),
        has=e.texts("has"),
        needs=e.texts("needs"),
        pulling=e.text_or_none("pulling") or "",
        percent=e.integer("percent", 0),
        last_error=e.text_or_none("last_error") or "",
        used_gib=e.number("used_gib", 0.0),
        budget_gib=e.number("budget_gib", 0.0),
    )


def _decode_shares(g: _Reader) -> tuple[int, tuple[ShareEntry, ...]]:
    """A GPU's ``share_of`` and ``shares`` ((0, ()) when it is not held by shares)."""
    if "share_of" not in g.data:
        return 0, ()
    of = g.integer("share_of", 1)
    held = g.integer("shares_held", 1)
    shares = tuple(_decode_share(s, of) for s in g.objects("shares"))
    if held > of or held != sum(s.count for s in shares):
        raise _bad(g.path("shares_held"), f"must be the shares' counts' sum, at most {of}")
    return of, shares


def _decode_share(s: _Reader, of: int) -> ShareEntry:
    count = s.integer("count", 1)
    fraction = s.number("fraction", 0.0, 1.0)
    if count > of or abs(fraction - count / of) > 1e-6:
        raise _bad(s.path("count"), f"and fraction must be K and K/{of} with K <= {of}")
    return ShareEntry(
        holder=s.text("holder"),
        user=s.text("user"),
        server=s.text("server"),
        count=count,
        of=of,
        memory_mib=s.integer("memory_mib", 0),
        orphan=s.flag("orphan"),
    )


def _decode_gpu(g: _Reader) -> GpuEntry:
    share_of_, shares = _decode_shares(g)
    return GpuEntry(
        uuid=g.text("uuid"),
        index=g.integer("index", 0),
        model=g.text("model"),
        label=g.text("label"),
        memory_mib=g.integer("memory_mib", 0),
        memory_used_mib=g.integer("memory_used_mib", 0),
        utilization_pct=g.number("utilization_pct", 0.0, 100.0),
        temperature_c=g.number_or_none("temperature_c"),
        healthy=g.flag_or_none("healthy"),
        status=g.choice("status", GPU_STATUSES),
        holder=g.text_or_none("holder"),
        orphan=g.flag("orphan"),
        share_of=share_of_,
        shares=shares,
    )


def _decode_node(n: _Reader) -> NodeEntry:
    return NodeEntry(
        name=n.text("name"),
        state=n.choice("state", NODE_STATES),
        reachable=n.flag("reachable"),
        schedulable=n.flag("schedulable"),
        drained_by=n.choice_or_none("drained_by", DRAINED_BY),
        drain_note=n.text("drain_note"),
        driver=n.text("driver"),
        cuda=n.text_or_none("cuda"),
        labels=n.labels("labels"),
        gpus=tuple(_decode_gpu(g) for g in n.objects("gpus")),
    )


def _decode_server(s: _Reader) -> ServerEntry:
    return ServerEntry(
        key=s.text("key"),
        user=s.text("user"),
        server=s.text("server"),
        node=s.text("node"),
        gpus=s.texts("gpus"),
        image=s.text("image"),
        image_name=s.text("image_name"),
        started=s.time("started"),
        last_activity=s.time("last_activity"),
        ready=s.flag("ready"),
        pending=s.text_or_none("pending"),
        cull_at=s.time("cull_at"),
        **_decode_ssh(s),
    )


def _decode_ssh(s: _Reader) -> dict[str, Any]:
    """A server's ``ssh`` (absent: no open SSH session, or a hub of an earlier release)."""
    if "ssh" not in s.data:
        return {}
    ssh = s.object("ssh")
    return {
        "ssh_sessions": ssh.integer("sessions", 0),
        "ssh_forwards": ssh.integer("forwards", 0),
        "ssh_since": ssh.time("since"),
        "ssh_from": ssh.texts("from")[:20],
    }


def _decode_model(m: _Reader) -> ModelEntry:
    return ModelEntry(
        model=m.text("model"),
        label=m.text("label"),
        total=m.integer("total", 0),
        free=m.integer("free", 0),
        memory_mib=m.integer("memory_mib", 0),
    )


def _decode_totals(t: _Reader) -> Totals:
    return Totals(**{k: t.integer(k, 0) for k in ("nodes", "nodes_up", "gpus", "free", "held")})


def _decode_queue_entry(q: _Reader) -> QueueEntry:
    models = q.texts_or_none("models")
    return QueueEntry(
        user=q.text("user"),
        server=q.text("server"),
        group=q.text("group"),
        gpus=q.integer("gpus", 0),
        model=q.text_or_none("model"),
        models=models,
        since=q.time("since"),
        position=q.integer_or_none("position", 1),
        estimate=q.text_or_none("estimate"),
    )


def _decode_reservation(r: _Reader) -> ReservationEntry:
    return ReservationEntry(
        id=r.text("id"),
        group=r.text("group"),
        nodes=r.texts("nodes"),
        gpus=r.texts("gpus"),
        model=r.text_or_none("model"),
        count=r.integer("count", 0),
        start=r.time("from"),
        end=r.time("to"),
        user=r.text_if_present("user"),
        note=r.text_if_present("note"),
    )


def payload_json(payload: ClusterPayload) -> dict[str, Any]:
    """``payload`` as JSON again, in :func:`build_payload`'s shape: the inverse of
    :func:`decode_payload` (``payload_json(decode_payload(build_payload(...)))`` is
    ``build_payload(...)``, key order included). The dashboard answers ``api/cluster``
    with it, after :func:`~jupyterhub_gpu.core.dashboard.view.redact`: a redacted entry
    ends with ``"hidden": true`` (a GPU with ``"hidden_holder": true``)."""
    out: dict[str, Any] = {
        "version": payload.version,
        "generated_at": iso(payload.generated_at),
        "fresh": payload.fresh,
        "hub_prefix": payload.hub_prefix,
        "named_servers": payload.named_servers,
        "named_server_limit": payload.named_server_limit,
        "nodes": [_node_json(n) for n in payload.nodes],
        "servers": [_server_json(s) for s in payload.servers],
        "models": [
            {
                "model": m.model,
                "label": m.label,
                "total": m.total,
                "free": m.free,
                "memory_mib": m.memory_mib,
            }
            for m in payload.models
        ],
        "totals": {
            "nodes": payload.totals.nodes,
            "nodes_up": payload.totals.nodes_up,
            "gpus": payload.totals.gpus,
            "free": payload.totals.free,
            "held": payload.totals.held,
        },
        "queue": [_queue_json(q) for q in payload.queue],
        "reservations": [_reservation_json(r) for r in payload.reservations],
    }
    if payload.prepull:
        out["prepull"] = [
            {
                "node": e.node,
                "has": list(e.has),
                "needs": list(e.needs),
                "pulling": e.pulling or None,
                "percent": e.percent,
                "last_error": e.last_error or None,
                "used_gib": e.used_gib,
                "budget_gib": e.budget_gib,
            }
            for e in payload.prepull
        ]
    if payload.message:
        out["message"] = payload.message
    return out


def _hidden(entry: dict[str, Any], hidden: bool, key: str = "hidden") -> dict[str, Any]:
    if hidden:
        entry[key] = True
    return entry


def _gpu_json(g: GpuEntry) -> dict[str, Any]:
    entry = {
        "uuid": g.uuid,
        "index": g.index,
        "model": g.model,
        "label": g.label,
        "memory_mib": g.memory_mib,
        "memory_used_mib": g.memory_used_mib,
        "utilization_pct": g.utilization_pct,
        "temperature_c": g.temperature_c,
        "healthy": g.healthy,
        "status": g.status,
        "holder": g.holder,
        "orphan": g.orphan,
    }
    if g.share_of:
        entry["share_of"] = g.share_of
        entry["shares_held"] = g.shares_held
        entry["shares"] = [_share_json(s) for s in g.shares]
    return _hidden(entry, g.hidden_holder, "hidden_holder")


def _share_json(s: ShareEntry) -> dict[str, Any]:
    entry = {
        "holder": s.holder,
        "user": s.user,
        "server": s.server,
        "count": s.count,
        "fraction": s.fraction,
        "memory_mib": s.memory_mib,
        "orphan": s.orphan,
    }
    return _hidden(entry, s.hidden)


def _node_json(n: NodeEntry) -> dict[str, Any]:
    return {
        "name": n.name,
        "state": n.state,
        "reachable": n.reachable,
        "schedulable": n.schedulable,
        "drained_by": n.drained_by,
        "drain_note": n.drain_note,
        "driver": n.driver,
        "cuda": n.cuda,
        "labels": dict(n.labels),
        "gpus": [_gpu_json(g) for g in n.gpus],
    }


def _server_json(s: ServerEntry) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "key": s.key,
        "user": s.user,
        "server": s.server,
        "node": s.node,
        "gpus": list(s.gpus),
        "image": s.image,
        "image_name": s.image_name,
        "started": iso(s.started),
        "last_activity": iso(s.last_activity),
        "ready": s.ready,
        "pending": s.pending,
        "cull_at": iso(s.cull_at),
    }
    if s.ssh_sessions or s.ssh_forwards:
        entry["ssh"] = {
            "sessions": s.ssh_sessions,
            "forwards": s.ssh_forwards,
            "since": iso(s.ssh_since),
            "from": list(s.ssh_from),
        }
    return _hidden(entry, s.hidden)


def _queue_json(q: QueueEntry) -> dict[str, Any]:
    entry = {
        "user": q.user,
        "server": q.server,
        "group": q.group,
        "gpus": q.gpus,
        "model": q.model,
        "models": None if q.models is None else list(q.models),
        "since": iso(q.since),
        "position": q.position,
        "estimate": q.estimate,
    }
    return _hidden(entry, q.hidden)


def _reservation_json(r: ReservationEntry) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": r.id,
        "group": r.group,
        "nodes": list(r.nodes),
        "gpus": list(r.gpus),
        "model": r.model,
        "count": r.count,
        "from": iso(r.start),
        "to": iso(r.end),
    }
    if r.user is not None:
        entry["user"] = r.user
    if r.note is not None:
        entry["note"] = r.note
    return _hidden(entry, r.hidden)


# ---------------------------------------------------------------------- reading, strictly
def _bad(where: str, what: str) -> BadPayload:
    return BadPayload(f"cluster payload: {where} {what}")


def _show(value: object) -> str:
    """A short description of a bad value, for the error."""
    if isinstance(value, list | dict):
        return f"a {'list' if isinstance(value, list) else 'JSON object'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """One JSON object of the payload being read; every error names the field's path
    (``nodes[0].gpus[1].status``)."""

    def __init__(self, value: object, where: str) -> None:
        if not isinstance(value, Mapping):
            raise _bad(where or "the payload", f"must be a JSON object, got {_show(value)}")
        self.data: Mapping[str, Any] = value
        self.where = where

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def value(self, key: str) -> Any:
        if key not in self.data:
            raise _bad(self.path(key), "is missing")
        return self.data[key]

    def _fail(self, key: str, must: str, value: object) -> BadPayload:
        return _bad(self.path(key), f"must be {must}, got {_show(value)}")

    def text(self, key: str) -> str:
        value = self.value(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def text_if_present(self, key: str) -> str | None:
        """A string, or None when the key is absent."""
        return self.text(key) if key in self.data else None

    def text_or_none(self, key: str) -> str | None:
        value = self.value(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string or null", value)
        return value

    def choice(self, key: str, choices: Sequence[str]) -> str:
        value = self.value(key)
        if value not in choices:
            raise self._fail(key, f"one of {', '.join(choices)}", value)
        return str(value)

    def choice_or_none(self, key: str, choices: Sequence[str]) -> str | None:
        value = self.value(key)
        if value is not None and value not in choices:
            raise self._fail(key, f"one of {', '.join(choices)} or null", value)
        return None if value is None else str(value)

    def flag(self, key: str) -> bool:
        value = self.value(key)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def flag_or_none(self, key: str) -> bool | None:
        value = self.value(key)
        if value is not None and not isinstance(value, bool):
            raise self._fail(key, "true, false or null", value)
        return value

    def integer(self, key: str, low: int) -> int:
        value = self.value(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self._fail(key, f"an integer >= {low}", value)
        return value

    def integer_or_none(self, key: str, low: int) -> int | None:
        return None if self.value(key) is None else self.integer(key, low)

    def number(self, key: str, low: float = -math.inf, high: float = math.inf) -> float:
        value = self.value(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            bounds = f" from {low:g} to {high:g}" if math.isfinite(low) else ""
            raise self._fail(key, f"a finite number{bounds}", value)
        return float(value)

    def number_or_none(self, key: str) -> float | None:
        return None if self.value(key) is None else self.number(key)

    def time(self, key: str) -> datetime | None:
        """An ISO 8601 time (aware UTC), or None for null."""
        value = self.value(key)
        if value is None:
            return None
        at = parse_time(value)
        if at is None:
            raise self._fail(key, "an ISO 8601 time or null", value)
        return at

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.value(key)
        if not isinstance(value, list):
            raise self._fail(key, "a list of strings", value)
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _bad(f"{self.path(key)}[{i}]", f"must be a string, got {_show(item)}")
        return tuple(value)

    def texts_or_none(self, key: str) -> tuple[str, ...] | None:
        return None if self.value(key) is None else self.texts(key)

    def labels(self, key: str) -> dict[str, str]:
        value = self.object(key)
        for name, text in value.data.items():
            if not isinstance(text, str):
                raise _bad(f"{value.path(name)}", f"must be a string, got {_show(text)}")
        return dict(value.data)

    def object(self, key: str) -> _Reader:
        return _Reader(self.value(key), self.path(key))

    def objects(self, key: str) -> list[_Reader]:
        value = self.value(key)
        if not isinstance(value, list):
            raise self._fail(key, "a list", value)
        return [_Reader(item, f"{self.path(key)}[{i}]") for i, item in enumerate(value)]
