"""The hub's checkpoints as its own database knows them (docs/culler.md, "Suspend
instead of stop"): what one node's hold (:func:`held_on`, for
``GPUCluster.suspend_node_gib``), and the sweep of expired ones.

A suspended server's checkpoint takes its node's disk (about its container's memory)
until its user starts it again. One who never comes back would hold it for ever: every
``GPUCluster.suspend_sweep_interval`` s the hub looks, in its own database, for stopped
servers whose state keeps a suspension older than ``GPUCluster.suspend_keep_days``
(:func:`~jupyterhub_gpu.core.suspend.checkpoint_expired`), and forgets each as its next
start would (``SuspendingSpawnerMixin.forget_expired``: the container and its checkpoint
removed from the node, the old server token revoked); their files are kept. A server
that runs or is starting is never touched; one whose node does not answer is swept again
next time. Started by the first spawner's ``start`` or ``poll`` (:func:`start_sweeping`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.suspend import checkpoint_expired
from jupyterhub_gpu.wire.server_state import decode_suspension

DAY = 86400.0


def _orm() -> Any:
    from jupyterhub import orm  # the hub's own tables: this runs inside the hub

    return orm


def held_on(db: Any, node: str) -> int:
    """Bytes the checkpoints of the stopped servers suspended on ``node`` hold (their
    containers' memory when suspended), from the hub's own database."""
    orm = _orm()
    held = 0
    for row in db.query(orm.Spawner).filter(orm.Spawner.server_id.is_(None)).all():
        saved, _ = decode_suspension(row.state or {})
        if saved is not None and saved.node == node:
            held += max(saved.size_bytes, 0)
    return held


async def sweep_expired(
    users: Any, db: Any, keep_for_s: float, now: datetime, log: Any
) -> list[str]:
    """Forget every stopped server's expired suspension; the holders swept
    (``user/name``). ``users``: the hub's users (``settings["users"]``); ``db``: its
    database session."""
    if not keep_for_s:
        return []
    orm = _orm()
    swept: list[str] = []
    rows = db.query(orm.Spawner.id).filter(orm.Spawner.server_id.is_(None)).all()
    for (spawner_id,) in rows:  # each row read again: the sweep awaits between them
        row = db.get(orm.Spawner, spawner_id)
        if row is None or row.server_id is not None or row.user is None:
            continue
        saved, _ = decode_suspension(row.state or {})
        if saved is None or not checkpoint_expired(saved, now, keep_for_s):
            continue
        holder = f"{row.user.name}/{row.name}"
        try:
            spawner = users[row.user].spawners[row.name]
            if spawner.active or spawner.pending or spawner.suspended != saved:
                continue  # started again meanwhile, or another suspension now
            await spawner.forget_expired()
        except Exception:  # its node did not answer, its user went: next time
            log.exception("%s: the expired checkpoint could not be removed; next sweep", holder)
            continue
        row.state = spawner.get_state()
        db.commit()
        swept.append(holder)
    return swept


async def sweep_forever(settings: Mapping[str, Any], site: Any, log: Any) -> None:
    """Sweep every ``site.suspend_sweep_interval`` s (read each time) while it is > 0."""
    while True:
        interval = float(site.suspend_sweep_interval)
        if interval <= 0:
            return
        await asyncio.sleep(interval)
        try:
            swept = await sweep_expired(
                settings["users"],
                settings["db"],
                float(site.suspend_keep_days) * DAY,
                datetime.now(timezone.utc),
                log,
            )
        except Exception:
            log.exception("The sweep of expired checkpoints failed; will retry")
            continue
        if swept:
            log.info("Removed %d expired checkpoint(s): %s", len(swept), ", ".join(swept))


def start_sweeping(runtime: Any, settings: Mapping[str, Any], site: Any, log: Any) -> None:
    """Start the sweep of this hub (its runtime, its tornado ``settings``) if it isn't
    running and suspending is on (needs the event loop)."""
    # not only while suspend is on: checkpoints made before an admin turned it off expire too
    if float(site.suspend_keep_days) <= 0 or float(site.suspend_sweep_interval) <= 0:
        return
    if "users" not in settings or "db" not in settings:
        return  # not inside a hub (a unit test's spawner)
    running = runtime.suspend_sweep
    if running is not None and not running.done():
        return
    with contextlib.suppress(RuntimeError):  # no running loop: the next call starts it
        runtime.suspend_sweep = asyncio.ensure_future(sweep_forever(settings, site, log))


__all__ = ["held_on", "start_sweeping", "sweep_expired", "sweep_forever"]
