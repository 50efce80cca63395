"""Notices for a user's running servers, on every hub page (an edge: the hub's API).

    GET /hub/api/gpu/users/{user}/notices   [{"server": "", "at": ISO, "message": "..."}]

Three kinds. The culler's warnings before a cull and notes after one
(:func:`~jupyterhub_gpu.hub.api.cull.cull_notices`, with "I'm still here"). A GPU share
whose own processes hold more memory than its share, as the culler's share notices file
says (``GPUCluster.share_notices_file``, issue #26:
"Your default server (GPU-3b1a9f6e) holds 8000 MiB of GPU memory, more than its
share's 6144 MiB: ..."). And a reservation of another group that will take a running server's GPUs
within ``queue_policy``'s ``reservation_notice_hours`` ("Your server 'big' is on GPUs
reserved for group ml-lab from 14:00 to 18:00 UTC: it will be stopped at 14:00. Save your
work before then."). The spawn page and form say it for new servers; this says it to
servers that were already running when the reservation was made. The hub's page
template (``hub/templates/page.html``) shows them above every page. Scope:
``read:servers`` (a user's own; a server's token has none). Added by
:func:`jupyterhub_gpu.hub.extensions.configure_reservations` (and ``configure_culler``).

    GET /hub/gpu/lab-notices   {"notices": [...], "readout": {...}, "xsrf": "...", "every_s": 30}

The same notices for the signed-in user's JupyterLab tabs (the ``jupyterhub-gpu-lab``
extension, images/lab; docs/culler.md), with the hub's XSRF token for "I'm still here"
and how often to read again (``GPUCluster.lab_notices_interval``). ``readout``: for each
of her running servers with GPUs, the words of its JupyterLab's status bar
(:mod:`jupyterhub_gpu.core.gpu_readout`: "RTX 3090 · 95 % · 4.0 of 24 GiB" and a tooltip),
from the cluster's snapshot, read at most every 5 s however many tabs ask.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timezone
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyterhub_gpu.core.gpu_readout import server_readout
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.edges.files import load_share_notices
from jupyterhub_gpu.hub.api.cluster import SnapshotCache
from jupyterhub_gpu.hub.api.cull import cull_notices
from jupyterhub_gpu.hub.queue import SpawnQueue
from jupyterhub_gpu.hub.runtime import runtime_of
from jupyterhub_gpu.wire.share_notices import ShareNotice


def server_notices(
    user: Any, queue: SpawnQueue, nodes: tuple[NodeState, ...], now: float
) -> list[dict[str, Any]]:
    """The notices of ``user``'s active servers (their spawners' GPUs, the queue's
    reservations; no I/O)."""
    found: list[dict[str, Any]] = []
    for name, spawner in sorted(user.spawners.items()):
        gpus = list(getattr(spawner, "gpu_uuids", None) or ())
        if not spawner.active or not gpus:
            continue
        holder = f"{user.name}/{name}"
        for conflict in queue.upcoming(holder, gpus, nodes, now=now):
            start = conflict.reservation.start
            found.append(
                {
                    "server": name,
                    "at": datetime.fromtimestamp(start, timezone.utc).isoformat(),
                    "message": conflict.running_notice(name, now, queue.settings.timezone),
                }
            )
    return sorted(found, key=lambda n: str(n["at"]))


def share_notices(user: Any, now: datetime) -> list[dict[str, Any]]:
    """The notices of ``user``'s active share servers over their memory
    (``GPUCluster.share_notices_file``, read once per file; a missing or stale file says
    nothing)."""
    found: list[dict[str, Any]] = []
    files: dict[str, dict[str, ShareNotice]] = {}
    for name, spawner in sorted(user.spawners.items()):
        site = getattr(spawner, "site", None)  # c.GPUCluster, as the spawner reads it
        path = str(getattr(site, "share_notices_file", "") or "")
        if not spawner.active or not path:
            continue
        if path not in files:
            files[path] = load_share_notices(path, now)
        notice = files[path].get(f"{user.name}/{name}")
        if notice is None:
            continue
        which = f"server '{name}'" if name else "default server"
        found.append(
            {
                "server": name,
                "at": notice.at.isoformat(),
                "message": f"Your {which} ({notice.gpu[:12]}): {notice.message}",
            }
        )
    return found


async def all_notices(settings: Any, user: Any) -> list[dict[str, Any]]:
    """Every notice of ``user``'s servers: shares over their memory, the culler's warnings
    and notes, the reservations that will take their GPUs."""
    runtime = runtime_of(settings)
    cluster, queue = runtime.cluster, runtime.queue
    now = datetime.now(timezone.utc)
    shares = share_notices(user, now) + cull_notices(user, now)
    if cluster is None or queue is None:  # no spawner since the hub started: no server
        return shares
    with contextlib.suppress(Exception):  # the last reservations read serves
        await queue.refresh()
    nodes = cluster.last_nodes() or (await cluster.snapshot()).nodes
    return shares + server_notices(user, queue, nodes, time.time())


class NoticesAPIHandler(APIHandler):
    @needs_scope("read:servers")
    async def get(self, user_name: str) -> None:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No user {user_name!r}.")
        self.write(json.dumps(await all_notices(self.settings, user)))


def server_readouts(user: Any, nodes: tuple[NodeState, ...]) -> dict[str, dict[str, str]]:
    """The status-bar words of each of ``user``'s running servers that holds GPUs, by
    server name (no I/O)."""
    by_name = {n.name: n for n in nodes}
    found: dict[str, dict[str, str]] = {}
    for name, spawner in sorted(user.spawners.items()):
        gpus = list(getattr(spawner, "gpu_uuids", None) or ())
        if not spawner.active or not gpus:
            continue
        node = by_name.get(str(getattr(spawner, "node_name", "") or ""))
        container = str(getattr(spawner, "container_id", "") or "")
        readout = server_readout(node, gpus, container, getattr(spawner, "share", None))
        if readout is not None:
            found[name] = readout.to_json()
    return found


LAB_NOTICES_EVERY_S = 30.0  #: GPUCluster.lab_notices_interval's default


class LabNoticesHandler(BaseHandler):
    """``GET /hub/gpu/lab-notices``: the signed-in user's notices, for her JupyterLab
    (the ``jupyterhub-gpu-lab`` extension, docs/culler.md), with the hub's XSRF token
    that "I'm still here" sends to the keep API.

    A page of the hub, not its API: the JupyterLab page is on the hub's origin but under
    ``/user/...``, where it can't read the hub's ``_xsrf`` cookie (its path is the hub's),
    and a cookie-authenticated API request needs that token even to read. The token is
    the one every hub page already writes into its HTML for its scripts; other origins
    can't read this answer (no CORS header). Her own notices only, as the API's scope
    ``read:servers`` on herself allows. With them, her servers' GPU readouts."""

    def initialize(self, cache: SnapshotCache | None = None) -> None:
        self.cache = cache or SnapshotCache()

    async def readouts(self, user: Any) -> dict[str, dict[str, str]]:
        cluster = runtime_of(self.settings).cluster
        if cluster is None or not any(
            s.active and getattr(s, "gpu_uuids", None) for s in user.spawners.values()
        ):
            return {}
        cache = runtime_of(self.settings).snapshots or self.cache  # the dashboard's, if any
        snapshot, fresh, _ = await cache.get(cluster)
        # nodes not read now: "no reading now", never the last figures as if new
        return server_readouts(user, snapshot.nodes if fresh else ())

    @web.authenticated
    async def get(self) -> None:
        user = self.current_user
        notices = await all_notices(self.settings, user)
        readout = await self.readouts(user)
        site = runtime_of(self.settings).site
        every = site.lab_notices_interval if site is not None else LAB_NOTICES_EVERY_S
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        answer = {
            "xsrf": self.xsrf_token.decode("ascii"),
            "notices": notices,
            "readout": readout,
            "every_s": min(600.0, max(5.0, float(every))),  # when to read again
        }
        self.write(json.dumps(answer))


#: one reading of the nodes every 5 s for every JupyterLab tab of the hub
HANDLERS: list[tuple[Any, ...]] = [
    (r"/api/gpu/users/(?P<user_name>[^/]+)/notices", NoticesAPIHandler),
    (r"/gpu/lab-notices", LabNoticesHandler, {"cache": SnapshotCache(max_age=5.0)}),
]
