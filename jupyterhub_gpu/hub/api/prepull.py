"""The pre-puller's state and a round on demand (added by
:func:`jupyterhub_gpu.hub.extensions.configure_prepuller`):

- ``GET  /hub/api/gpu/prepull`` (scope ``custom:gpu-cluster:read``): the policy and, per
  node, the chosen images it has, those it needs, the one it is pulling (with its
  percentage), why others are not for it, and its last error
  (:meth:`~jupyterhub_gpu.hub.prepull.PrePullRunner.state`);
- ``POST /hub/api/gpu/prepull`` (scope ``custom:gpu-cluster:admin``): a round now (after
  a catalog edit, say); answers the state once the round has planned and started the
  nodes' workers (their pulls go on in the background).
"""

from __future__ import annotations

import json

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyterhub_gpu.hub.api.cluster import ADMIN_SCOPE, READ_SCOPE
from jupyterhub_gpu.hub.runtime import runtime_of

NOT_RUNNING = (
    "The pre-puller has not started yet: it starts once the hub runs, when "
    "c.PrePuller.enabled is set (configure_prepuller)."
)


class PrePullAPIHandler(APIHandler):
    """``GET`` (state) and ``POST`` (a round now) ``/hub/api/gpu/prepull``"""

    @needs_scope(READ_SCOPE)
    async def get(self) -> None:
        runner = runtime_of(self.settings).prepuller
        if runner is None:
            self.write(json.dumps({"enabled": False, "message": NOT_RUNNING, "nodes": {}}))
            return
        self.write(json.dumps(runner.state()))

    @needs_scope(ADMIN_SCOPE)
    async def post(self) -> None:
        runner = runtime_of(self.settings).prepuller
        if runner is None:
            raise web.HTTPError(503, NOT_RUNNING)
        if not runner.settings.enabled:
            raise web.HTTPError(409, "The pre-puller is off (c.PrePuller.enabled is False).")
        await runner.round()
        self.log.info("Pre-puller round asked by %s", getattr(self.current_user, "name", "?"))
        self.write(json.dumps(runner.state()))


HANDLERS = [(r"/api/gpu/prepull", PrePullAPIHandler)]

__all__ = ["HANDLERS", "PrePullAPIHandler"]
