"""Suspend a server instead of stopping it (docs/culler.md, "Suspend instead of stop").

    POST /hub/api/gpu/users/{user}/suspend                  (the default server)
    POST /hub/api/gpu/users/{user}/servers/{name}/suspend   (a named server)

Scope :data:`SUSPEND_SCOPE`, which only the idle culler's role holds
(``configure_culler``): users get no new right (they stop their own servers as before).
The hub checkpoints the server's container on its node (hub/suspend.py), then stops the
server as JupyterHub stops any (its proxy route removed, its GPUs and allocation freed);
the next start resumes it. While the checkpoint runs JupyterHub sees the server stopping
(a stop or start asked meanwhile waits for it).

Answers: 200 with ``{"node", "checkpoint", "seconds", "size_bytes"}``; 409 with the
sentence why the hub will not (``GPUCluster.suspend`` off, an engine without checkpoints,
over ``GPUCluster.suspend_max_gib``, not running) and 503 when the checkpoint failed:
either way the server keeps running, and the culler stops it instead; 404 for no such
server.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import define_custom_scopes, needs_scope
from tornado import web

from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.errors import NodeError, SuspendFailed, SuspendRefused

SUSPEND_SCOPE = "custom:gpu-servers:suspend"
SUSPEND_SCOPES: dict[str, dict[str, Any]] = {
    SUSPEND_SCOPE: {
        "description": "Suspend a server to disk instead of stopping it (the idle culler)."
    }
}
define_custom_scopes(SUSPEND_SCOPES)  # before needs_scope checks it


class SuspendServerAPIHandler(APIHandler):
    """Checkpoint one server and stop it, keeping the checkpoint for its next start."""

    @needs_scope(SUSPEND_SCOPE)
    async def post(self, user_name: str, server_name: str = "") -> None:
        user = self.find_user(user_name)
        if user is None or server_name not in user.orm_user.orm_spawners:
            raise web.HTTPError(404, "That server does not exist.")
        spawner = user.spawners[server_name]
        holder = f"{user.name}/{server_name}"
        if spawner.pending or not spawner.ready:
            raise web.HTTPError(409, "Not suspended: it is not running (or starting or stopping).")
        if not callable(getattr(spawner, "suspend_server", None)):
            raise web.HTTPError(409, "Not suspended: this hub's spawner cannot suspend servers.")
        spawner._stop_pending = True  # JupyterHub's pages and API see it stopping meanwhile
        try:
            saved = await spawner.suspend_server()
        except SuspendRefused as e:
            self.log.info("Not suspending %s: %s", holder, e)
            raise web.HTTPError(409, f"Not suspended: {e}.") from None
        except (SuspendFailed, NodeError) as e:
            self.log.warning("Suspending %s failed, it keeps running: %s", holder, e)
            raise web.HTTPError(503, f"Not suspended: {one_line(str(e))[:300]}") from None
        finally:
            spawner._stop_pending = False
        await self.stop_single_user(user, server_name)  # route removed, GPUs freed
        self.write(
            json.dumps(
                {
                    "node": saved.node,
                    "checkpoint": saved.checkpoint,
                    "seconds": round(saved.seconds, 2),
                    "size_bytes": saved.size_bytes,
                }
            )
        )


HANDLERS: list[tuple[str, type]] = [
    (r"/api/gpu/users/(?P<user_name>[^/]+)/suspend", SuspendServerAPIHandler),
    (r"/api/gpu/users/(?P<user_name>[^/]+)/servers/(?P<server_name>[^/]+)/suspend",
     SuspendServerAPIHandler),
]  # fmt: skip

__all__ = ["HANDLERS", "SUSPEND_SCOPE", "SUSPEND_SCOPES", "SuspendServerAPIHandler"]
