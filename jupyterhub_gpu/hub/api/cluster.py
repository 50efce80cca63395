"""The dashboard's side inside the hub process: a JSON API over the live cluster
(added by :func:`jupyterhub_gpu.hub.extensions.configure_dashboard`).

- ``GET  /hub/api/gpu/cluster`` (scope ``custom:gpu-cluster:read``): the payload of
  :func:`jupyterhub_gpu.wire.cluster.build_payload` for the cluster, its servers, its drains
  and the nodes its node checks keep servers off (``drained_by: "check"``);
- ``POST /hub/api/gpu/nodes/{node}/drain`` ``{"note": "...", "by": "admin name"}`` and
  ``DELETE`` of the same path (scope ``custom:gpu-cluster:admin``): an admin's drain of a
  node (no new servers there; running ones untouched), kept in ``Cluster.admin_drains``
  and in ``GPUCluster.drains_file``, so that a restart keeps it.

Registered with ``c.JupyterHub.extra_handlers`` (JupyterHub adds the hub prefix). The
custom scopes must exist before ``needs_scope`` is applied to the handlers (at import), so
importing this module defines them; ``configure_dashboard`` declares the same definitions in
``c.JupyterHub.custom_scopes``, which the hub then accepts as already known.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import define_custom_scopes, needs_scope
from tornado import web

from jupyterhub_gpu.core.dashboard.inputs import BadInput, clean_note, known_node
from jupyterhub_gpu.core.saving.entries import is_saved_slug
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.ssh.census import per_server
from jupyterhub_gpu.edges.files import load_deadlines
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.runtime import runtime_of
from jupyterhub_gpu.wire.agent_list import encode_agent_list
from jupyterhub_gpu.wire.cluster import (
    ServerInfo,
    ShareInfo,
    build_payload,
    prepull_entries,
    queue_entries,
    reservation_entry,
)

log = logging.getLogger("jupyterhub_gpu.hub.api")  # outside a handler; the hub's otherwise

READ_SCOPE = "custom:gpu-cluster:read"
ADMIN_SCOPE = "custom:gpu-cluster:admin"
CUSTOM_SCOPES: dict[str, dict[str, Any]] = {
    READ_SCOPE: {
        "description": "Read the GPU cluster: nodes, GPUs, who holds them since when, the queue."
    },
    ADMIN_SCOPE: {"description": "Drain and undrain GPU nodes."},
}
AGENTS_SCOPE = "custom:gpu-agents:read"
AGENTS_SCOPES: dict[str, dict[str, Any]] = {
    AGENTS_SCOPE: {"description": "Read the GPU nodes' agent URLs (no secrets)."}
}
define_custom_scopes({**CUSTOM_SCOPES, **AGENTS_SCOPES})  # before needs_scope checks them

CLUSTER_NOT_LOADED = (
    "The hub has not read its GPU nodes yet: that happens at the first spawn form or server "
    "start after the hub starts. Open the spawn form once, then reload."
)


def _utc(t: datetime | None) -> datetime | None:
    """The hub's database keeps naive UTC datetimes."""
    if t is None:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


class _Images:
    """Catalog display names, the catalog read once per request (it is a file)."""

    def __init__(self) -> None:
        self._catalog: Any = None
        self._read = False

    def name(self, spawner: Any, slug: str) -> str:
        if not self._read:
            self._read = True
            with contextlib.suppress(Exception):  # another spawner class, or a bad catalog
                self._catalog = spawner.catalog
        entry = self._catalog.get(slug) if self._catalog is not None and slug else None
        return str(entry.display_name) if entry is not None else slug


def server_info(user: str, name: str, spawner: Any, images: _Images) -> ServerInfo:
    """What the dashboard shows of one active server (any spawner class; what it lacks
    reads as unknown)."""
    options = spawner.user_options if isinstance(spawner.user_options, dict) else {}
    slug = options.get("image")
    # what the user asked for is shown only once the spawner has validated it (a pending
    # spawn's raw options may be anything, of any size)
    validated = bool(getattr(spawner, "node_name", "")) and isinstance(slug, str)
    slug = slug[:200] if validated and isinstance(slug, str) else ""
    name_shown = images.name(spawner, slug)
    if is_saved_slug(slug):  # its name and owner are the owner's (private unless shared)
        slug, name_shown = "saved-image", "a saved image (My images)"
    orm = getattr(spawner, "orm_spawner", None)
    share = getattr(spawner, "share", None)
    share_mib = getattr(share, "memory_mib", None)
    return ServerInfo(
        user=user,
        server=name,
        node=str(getattr(spawner, "node_name", "") or ""),
        gpu_uuids=tuple(str(u) for u in getattr(spawner, "gpu_uuids", ()) or ()),
        image=slug,
        image_name=name_shown,
        started=_utc(getattr(orm, "started", None)),
        last_activity=_utc(getattr(orm, "last_activity", None)),
        ready=bool(spawner.ready),
        pending=spawner.pending or None,
        share_memory_mib=share_mib if isinstance(share_mib, int) else None,
    )


def active_servers(users: Iterable[Any], log: logging.Logger = log) -> list[ServerInfo]:
    """Every active (running, starting or stopping) server of the hub's loaded users."""
    images = _Images()
    found = []
    for user in list(users):
        for name, spawner in list(user.spawners.items()):
            try:
                if spawner.active:
                    found.append(server_info(user.name, name, spawner, images))
            except Exception:  # one odd spawner never hides the cluster
                log.exception("GPU dashboard: could not read server %s/%s", user.name, name)
    return found


def share_holds(ledger: GPULedger, servers: Iterable[ServerInfo]) -> dict[str, list[ShareInfo]]:
    """GPU uuid -> the ledger's share holds on it, each with its server's share memory
    (its spawner's; unknown for an orphan, whose server is gone)."""
    memory = {s.key: s.share_memory_mib for s in servers if s.share_memory_mib is not None}
    out: dict[str, list[ShareInfo]] = {}
    for uuid, holder in ledger.allocations().items():
        if holder != SHARED:
            continue
        out[uuid] = [
            ShareInfo(
                holder=h.holder,
                count=h.share[0],
                of=h.share[1],
                memory_mib=None if h.orphaned else memory.get(h.holder),
                orphan=h.orphaned,
            )
            for h in ledger.shares_on(uuid)
            if h.share is not None
        ]
    return out


class SnapshotCache:
    """The cluster's snapshot, taken at most every ``max_age`` s however often the API is
    read, one at a time; a snapshot that takes longer than ``timeout`` s (nodes that do not
    answer) is not waited for: the last one is used and the answer says it is not fresh."""

    def __init__(self, max_age: float = 5.0, timeout: float = 5.0) -> None:
        self.max_age, self.timeout = max_age, timeout
        self._cluster: Cluster | None = None
        self._snapshot: ClusterSnapshot | None = None
        self._at = float("-inf")
        self._task: asyncio.Future[ClusterSnapshot] | None = None
        self._failing = False
        self._check_changes = 0  # the cluster's check_changes when the snapshot was asked

    def __deepcopy__(self, memo: dict[int, Any]) -> SnapshotCache:
        # traitlets deep-copies configuration values (extra_handlers' kwargs): the hub
        # keeps this very object, which the JupyterLab readouts share (HubRuntime.snapshots)
        return self

    def invalidate(self) -> None:
        self._at = float("-inf")

    async def get(self, cluster: Cluster) -> tuple[ClusterSnapshot, bool, frozenset[str]]:
        """The snapshot (with the ledger's holds now), whether it is fresh, and the
        held GPUs whose hold is an orphan's."""
        if cluster is not self._cluster:
            self._cluster, self._snapshot, self._task = cluster, None, None
            self.invalidate()
        changes = getattr(cluster, "check_changes", 0)
        if changes != self._check_changes:  # a node check changed whether a node takes servers
            self._check_changes = changes
            self.invalidate()
        fresh = time.monotonic() - self._at < self.max_age
        if not fresh:
            if self._task is None or self._task.done():
                self._task = asyncio.ensure_future(cluster.snapshot())
                self._task.add_done_callback(self._keep)
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.timeout)
                fresh = True
            except asyncio.TimeoutError:
                self._failed(f"no answer within {self.timeout:g} s")
            except Exception as e:
                self._failed(str(e) or type(e).__name__)
        snapshot = self._snapshot or ClusterSnapshot(nodes=cluster.last_nodes())
        # holds change with every spawn: always the ledger's now
        held, charged = cluster.ledger.allocations(), cluster.ledger.charged()
        # a GPU held by shares has no one holder: its shares say which are orphans
        orphans = frozenset(u for u, h in held.items() if u not in charged and h != SHARED)
        return replace(snapshot, allocations=held), fresh, orphans

    def _keep(self, task: asyncio.Future[ClusterSnapshot]) -> None:
        """A snapshot that finished, late or not, is the one to show (and a failure is
        read here, so it is never "never retrieved")."""
        if task.cancelled() or task.exception() is not None:
            return
        self._snapshot, self._at = task.result(), time.monotonic()
        if self._failing:
            (self._cluster.log if self._cluster else log).info(
                "GPU dashboard: the nodes are read again"
            )
            self._failing = False

    def _failed(self, why: str) -> None:
        if not self._failing:
            (self._cluster.log if self._cluster else log).warning(
                "GPU dashboard: reading the nodes failed or is slow (%s)", why
            )
        self._failing = True


def _not_kept(cluster: Cluster, error: OSError) -> str:
    cluster.log.error(
        "GPU dashboard: the drains file %s could not be written: %s",
        cluster.settings.drains_file,
        error,
    )
    return (
        "The hub could not save the change in its drains file (see the hub's log); nothing "
        "changed. An admin must make GPUCluster.drains_file writable by the hub."
    )


def _prepull(runner: Any) -> list[dict[str, Any]]:
    """The pre-puller's nodes for the payload (none while it is off or not started)."""
    if runner is None or not runner.settings.enabled:
        return []
    return prepull_entries(runner.state())


def with_ssh(servers: list[ServerInfo], settings: Any) -> list[ServerInfo]:
    """``servers`` with their open SSH sessions (the SSH gateway's last report)."""
    ssh = per_server(runtime_of(settings).ssh.current(time.monotonic()))
    return [replace(s, ssh=ssh[(s.user, s.server)]) if (s.user, s.server) in ssh else s
            for s in servers]  # fmt: skip


class _GPUAPIHandler(APIHandler):
    def initialize(self, cache: SnapshotCache) -> None:
        self.cache = cache


class ClusterAPIHandler(_GPUAPIHandler):
    """``GET /hub/api/gpu/cluster``"""

    @needs_scope(READ_SCOPE)
    async def get(self) -> None:
        runtime = runtime_of(self.settings)
        cluster, queue = runtime.cluster, runtime.queue
        limit = self.named_server_limit_per_user
        common = {
            "now": datetime.now(timezone.utc),
            "hub_prefix": self.hub.base_url,
            "named_servers": bool(self.allow_named_servers),
            "named_server_limit": limit if isinstance(limit, int) else 0,
        }
        servers = with_ssh(active_servers(self.users.values(), self.log), self.settings)
        if queue is not None and queue.deadlines_file:
            deadlines = load_deadlines(queue.deadlines_file)
            servers = [
                replace(s, cull_at=deadlines[s.key].at) if s.key in deadlines else s
                for s in servers
            ]
        if cluster is None:
            payload = build_payload(ClusterSnapshot(nodes=()), (), servers, {}, **common)
            payload["message"] = CLUSTER_NOT_LOADED
        else:
            snapshot, fresh, orphans = await self.cache.get(cluster)
            waiting = queue_entries(queue.waiting(), queue.standings()) if queue else []
            payload = build_payload(
                snapshot,
                cluster.specs(),
                servers,
                cluster.admin_drains,
                fresh=fresh,
                orphans=orphans,
                queue=waiting,
                reservations=[reservation_entry(r) for r in queue.reservations] if queue else [],
                check_failures=cluster.check_failures(),
                prepull=_prepull(runtime.prepuller),
                shares=share_holds(cluster.ledger, servers),
                **common,
            )
        self.write(json.dumps(payload))


class AgentsAPIHandler(APIHandler):
    """``GET /hub/api/gpu/agents``: the nodes' agent URLs, for the idle culler
    (:mod:`jupyterhub_gpu.wire.agent_list`); the hub's nodes are the one list."""

    @needs_scope(AGENTS_SCOPE)
    async def get(self) -> None:
        cluster = runtime_of(self.settings).cluster
        if cluster is None:
            self.write(json.dumps(encode_agent_list((), loaded=False)))
            return
        nodes = [(s.name, s.agent_url) for s in cluster.specs()]
        self.write(json.dumps(encode_agent_list(nodes, loaded=True)))


class NodeDrainAPIHandler(_GPUAPIHandler):
    """``POST`` (drain, with a note) and ``DELETE`` (undrain) ``/hub/api/gpu/nodes/{node}/drain``"""

    def _node(self, node: str) -> tuple[Cluster, str]:
        """The cluster and the node's known name; HTTPError (JSON, JupyterHub's) if not."""
        cluster = runtime_of(self.settings).cluster
        if cluster is None:
            raise web.HTTPError(503, CLUSTER_NOT_LOADED)
        try:
            return cluster, known_node(node, {s.name for s in cluster.specs()})
        except BadInput as e:
            raise web.HTTPError(e.status, str(e)) from None

    def _who(self, body: dict[str, Any]) -> str:
        by = body.get("by")
        actor = getattr(self.current_user, "name", "?")
        return f"{by} (through {actor})" if isinstance(by, str) and by else str(actor)

    @needs_scope(ADMIN_SCOPE)
    async def post(self, node: str) -> None:
        cluster, name = self._node(node)
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, 'Send a JSON object: {"note": "why"}.')
        try:
            note = clean_note(body.get("note"))
        except BadInput as e:
            raise web.HTTPError(e.status, str(e)) from None
        try:
            cluster.drain(name, note)
        except OSError as e:
            raise web.HTTPError(503, _not_kept(cluster, e)) from None
        self.cache.invalidate()
        self.log.info(
            "GPU dashboard: node %s drained by %s: %s", name, self._who(body), note or "-"
        )
        message = f"Node {name} is drained: it takes no new servers; running ones go on."
        self.write(json.dumps({"node": name, "drained": True, "note": note, "message": message}))

    @needs_scope(ADMIN_SCOPE)
    async def delete(self, node: str) -> None:
        cluster, name = self._node(node)
        try:
            was = cluster.undrain(name)
        except OSError as e:
            raise web.HTTPError(503, _not_kept(cluster, e)) from None
        self.cache.invalidate()
        who = self._who({"by": self.get_argument("by", "")})
        self.log.info("GPU dashboard: node %s undrained by %s", name, who)
        if any(s.name == name and s.drain for s in cluster.specs()):
            message = f"Node {name} stays drained: the nodes file drains it (drain: true)."
        elif was is None:
            message = f"Node {name} was not drained by an admin; nothing changed."
        else:
            message = f"Node {name} takes new servers again."
        self.write(json.dumps({"node": name, "drained": False, "message": message}))


__all__ = [
    "ADMIN_SCOPE",
    "AGENTS_SCOPE",
    "AGENTS_SCOPES",
    "CUSTOM_SCOPES",
    "READ_SCOPE",
    "AgentsAPIHandler",
    "ClusterAPIHandler",
    "NodeDrainAPIHandler",
    "SnapshotCache",
    "active_servers",
    "share_holds",
]
