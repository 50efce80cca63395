"""What the idle culler's notes file says about one server, for the spawn form (why it was
stopped, what it freed, the notebooks open then) and for accounting (was this stop a
cull?)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.culling.warning import after_cull_words, freed_words
from jupyterhub_gpu.core.form.validation import finite_number
from jupyterhub_gpu.edges.files import load_notes
from jupyterhub_gpu.edges.workspaces import open_notebooks
from jupyterhub_gpu.errors import UnsafePath
from jupyterhub_gpu.wire.cull_notes import CullNote, notes_for


def cull_note(path: str, user: str, server: str, last_activity: datetime | None) -> CullNote | None:
    """Why the culler stopped ``user``'s ``server``, if it did and the server has not run
    since (``path``: ``GPUCluster.cull_notes_file``, "" off). The hub sets
    ``last_activity`` when a server starts and when it stops; the stop that follows a cull
    comes within seconds of the culler's note, a later start after."""
    if not path:
        return None
    since = last_activity - timedelta(minutes=10) if last_activity else None  # naive UTC
    notes = notes_for(load_notes(path), user, since=since)
    mine = [n for n in notes if n.server == server]
    return mine[-1] if mine else None


def culled_just_now(path: str, user: str, server: str, started: datetime | None) -> bool:
    """Whether the culler noted ``user``'s ``server`` in the last two minutes (it writes its
    note before it asks the hub to stop the server), and since it started."""
    if not path:
        return False
    since = datetime.now(timezone.utc) - timedelta(minutes=2)
    if started is not None:  # a note from before this server started is another's
        since = max(since, started.replace(tzinfo=timezone.utc))
    notes = notes_for(load_notes(path), user, since=since)
    return any(n.server == server for n in notes)


def freed_now(options: Mapping[str, Any] | None, gpu_count: int, gpu_model: str) -> str:
    """What a server started with ``options`` (its user_options) gives back when it stops,
    for the note after a cull ("1 GPU (RTX 3090), 2 CPUs and 8 GiB of memory")."""
    options = options or {}
    cpu, mem = finite_number(options.get("cpu")), finite_number(options.get("mem_gib"))
    return freed_words(gpu_count, gpu_model, cpu or 0.0, mem or 0.0)


def culled_and_freed(spawner: Any) -> tuple[bool, str]:
    """Whether the culler just noted ``spawner``'s server (a GPUDockerSpawner about to
    stop: the stop is a cull), and what the server gives back then ("" if not culled)."""
    orm = spawner.orm_spawner
    started = orm.started if orm else None
    if not culled_just_now(spawner.site.cull_notes_file, spawner.user.name, spawner.name, started):
        return False, ""
    options = orm.user_options if orm else None
    return True, freed_now(options, len(spawner.gpu_uuids), spawner._gpu_model)


def after_cull(freed: str, home: Callable[[], Path | None]) -> str:
    """What the form adds to a cull's note: what it freed, the notebooks open then
    (JupyterLab's workspace in the user's ``home``, read bounded, links not followed)."""
    notebooks: tuple[str, ...] = ()
    with contextlib.suppress(UnsafePath):
        where = home()
        if where is not None:
            notebooks = open_notebooks(where)
    return after_cull_words(freed, notebooks)


__all__ = ["after_cull", "cull_note", "culled_and_freed", "culled_just_now", "freed_now"]
