"""Why was my server stopped? A small JSON file of recent cull reasons, per user.

The culler service appends a note just before it asks the hub to stop a server (and
takes it back if the hub refuses), so the hub's spawner sees it while stopping; the hub
side (home page or spawn form) reads the file and shows the user's notes the next time
they come. The file is
``{"alice": [{"server": "", "at": "2026-01-01T12:00:00+00:00", "reason": "..."}]}``,
newest last, at most ``keep`` notes per user. :mod:`jupyterhub_gpu.edges.files` reads and
writes it (atomically, so a reader never sees half a file; a missing or unreadable file
reads as empty); this module encodes, decodes and edits the notes.
Reasons are the culler's one-line decisions: durations and GPU shares, never secrets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from jupyterhub_gpu.wire.by_server import json_object

Notes = dict[str, list[dict[str, str]]]


@dataclass(frozen=True)
class CullNote:
    user: str
    server: str  # "" for the default server
    at: datetime
    reason: str

    def message(self) -> str:
        """The sentence a user reads, e.g. on the hub's home page."""
        which = f"Your server '{self.server}'" if self.server else "Your server"
        when = _utc(self.at).strftime("%Y-%m-%d %H:%M UTC")
        return f"{which} was stopped at {when} to free its resources: {self.reason}."


def _utc(t: datetime) -> datetime:
    """An aware UTC datetime; a naive one is taken as UTC (as the hub's database keeps)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def add_note(notes: Notes, note: CullNote, keep: int = 5) -> Notes:
    """A copy of ``notes`` with ``note`` appended to its user's list, trimmed to ``keep``."""
    out = {user: list(items) for user, items in notes.items()}
    item = {"server": note.server, "at": note.at.isoformat(), "reason": note.reason}
    out[note.user] = ([*out.get(note.user, []), item])[-max(keep, 1) :]
    return out


def drop_note(notes: Notes, note: CullNote) -> Notes:
    """A copy of ``notes`` without ``note`` (a stop that failed after it was written)."""
    item = {"server": note.server, "at": note.at.isoformat(), "reason": note.reason}
    out = {user: list(items) for user, items in notes.items()}
    out[note.user] = [i for i in out.get(note.user, []) if i != item]
    if not out[note.user]:
        del out[note.user]
    return out


def notes_for(notes: Notes, user: str, since: datetime | None = None) -> list[CullNote]:
    """The user's notes, oldest first, newer than ``since`` if given; bad entries skipped.

    Times are compared in UTC; a naive ``since`` (or a naive time in the file) is UTC."""
    found = []
    for item in notes.get(user, []):
        try:
            at = _utc(datetime.fromisoformat(item["at"]))
            note = CullNote(user, str(item["server"]), at, str(item["reason"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if since is None or at > _utc(since):
            found.append(note)
    return found


def encode_notes(notes: Notes) -> bytes:
    """The notes file's bytes."""
    return json.dumps(notes, indent=1, sort_keys=True).encode("utf-8")


def decode_notes(text: str | bytes) -> Notes:
    """The notes in ``text``; ``{}`` when it is not a JSON object (a user's entry that is
    not a list is left out; bad notes in a list are skipped by :func:`notes_for`)."""
    return {str(u): v for u, v in json_object(text).items() if isinstance(v, list)}
