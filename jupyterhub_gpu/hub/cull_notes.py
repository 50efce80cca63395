"""What the idle culler's notes file says about one server, for the spawn form (why it was
stopped) and for accounting (was this stop a cull?)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.edges.files import load_notes
from jupyterhub_gpu.wire.cull_notes import notes_for


def form_notes(path: str, user: str, server: str, last_activity: datetime | None) -> list[str]:
    """Why the culler stopped ``user``'s ``server``, if it did and the server has not run
    since (``path``: ``GPUCluster.cull_notes_file``, "" off). The hub sets
    ``last_activity`` when a server starts and when it stops; the stop that follows a cull
    comes within seconds of the culler's note, a later start after."""
    if not path:
        return []
    since = last_activity - timedelta(minutes=10) if last_activity else None  # naive UTC
    notes = notes_for(load_notes(path), user, since=since)
    mine = [n for n in notes if n.server == server]
    return [mine[-1].message()] if mine else []


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


__all__ = ["culled_just_now", "form_notes"]
