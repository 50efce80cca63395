"""A named server whose very first start failed is removed, as JupyterHub removes a named
server on ``DELETE .../servers/{name}`` with ``{"remove": true}``
(``apihandlers/users.py``): left, its row on the home page offers to start or delete a
server that never was. :class:`NewNamedServerMixin` marks such a spawn in
``run_auth_state_hook`` (the hub calls it just before it stamps the start) and removes the
server when the spawner's ``start`` says it failed (:meth:`first_start_failed`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyterhub.spawner import Spawner
    from jupyterhub.spawner import Spawner as _SpawnerBase
else:  # JupyterHub refuses a Spawner subclass without its own start, stop and poll
    from traitlets.config import LoggingConfigurable as _SpawnerBase


class NewNamedServerMixin(_SpawnerBase):
    """For a spawner: a named server this very spawn made (the form's "Add New Server", or
    a URL naming a new one) goes away again if its first start fails."""

    _new_named = False

    async def run_auth_state_hook(self, auth_state: Any) -> Any:
        orm = self.orm_spawner
        self._new_named = bool(self.name) and orm is not None and orm.last_activity is None
        return await super().run_auth_state_hook(auth_state)

    def first_start_failed(self) -> None:
        """``start`` failed: remove the server if this spawn made it (in the background,
        once the hub has finished with the failure)."""
        if self._new_named:
            self._new_named = False
            asyncio.get_running_loop().create_task(remove_failed_new_server(self))


async def remove_failed_new_server(spawner: Spawner) -> None:
    """Remove ``spawner``'s named server once the hub has finished with the failure (the
    failure's sentence has been shown on the spawn's page by then); nothing if it ran, if
    it runs again, or if the hub holds another spawner for that name now."""
    for _ in range(1200):  # the hub's clean-up of the failure (User.spawn's stop)
        if not (spawner._spawn_pending or spawner._stop_pending or spawner.pending):
            break
        await asyncio.sleep(0.1)
    user, orm, name = spawner.user, spawner.orm_spawner, spawner.name
    holder, log = f"{user.name}/{name}", spawner.log
    if spawner.active or orm is None or orm.server is not None or orm.last_activity is None:
        return
    if getattr(user, "spawners", {}).get(name) is not spawner:
        return  # the hub has another spawner for it now: not ours to remove
    try:
        await user._delete_spawner(spawner)
        user.db.delete(orm)
        user.spawners.pop(name, None)
        user.db.commit()
        # the home page lists the user's loaded spawners; the session keeps objects after
        # a commit (JupyterHub's expire_on_commit=False): read them again
        user.db.expire(user.orm_user, ["_orm_spawners"])
    except Exception:
        log.exception("Could not remove %s after its first start failed", holder)
        return
    log.info("Removed the named server %s: its first start failed", holder)


__all__ = ["NewNamedServerMixin", "remove_failed_new_server"]
