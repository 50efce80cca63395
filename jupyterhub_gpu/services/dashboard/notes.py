"""Notes to a server's owner when an admin stops it from the dashboard.

The same small JSON file format as the culler's notes (:mod:`..culler.notes`:
``{"alice": [{"server", "at", "reason"}]}``, newest last, written atomically), in a file of
the dashboard's own: the culler's file means "culled" to accounting, and an admin's stop
is not a cull. The owner reads the note on the dashboard; the spawn form can show it too
(docs/dashboard.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from jupyterhub_gpu.edges.files import load_notes, save_notes
from jupyterhub_gpu.wire.cull_notes import CullNote, add_note, notes_for

SHOWN_FOR = timedelta(days=7)


def stop_reason(admin: str, note: str) -> str:
    """What the file keeps as the reason: who stopped it, and their note."""
    return f"an admin ({admin})" + (f": {note}" if note else "")


def message(note: CullNote) -> str:
    """The sentence the owner reads."""
    which = f"Your server '{note.server}'" if note.server else "Your default server"
    when = note.at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{which} was stopped at {when} by {note.reason}"


def record_stop(
    path: str | Path, user: str, server: str, admin: str, note: str, at: datetime, keep: int = 5
) -> None:
    """Append the note for ``user``'s ``server`` (raises ``OSError`` if it can't be written)."""
    entry = CullNote(user, server, at, stop_reason(admin, note))
    save_notes(path, add_note(load_notes(path), entry, keep=keep))


def messages_for(path: str | Path, user: str, now: datetime) -> list[str]:
    """The sentences for ``user``'s recent notes (the last :data:`SHOWN_FOR`), newest first."""
    if not path:
        return []
    notes = notes_for(load_notes(path), user, since=now - SHOWN_FOR)
    return [message(n) for n in reversed(notes)]
