"""When would the culler stop each server it keeps? A small JSON file, rewritten each round.

``{"alice/": {"at": "2026-01-01T14:20:00+00:00", "why": "idle"}, "bob/train": {...}}``:
for each kept server (``user/server``) the earliest time it would be culled
(:func:`~.idleness.earliest_cull`: ``max_age`` is certain, ``idle`` holds if nothing in it
is active from now on). The culler writes it atomically; the hub reads it for the GPU
queue's estimates and the dashboard. A missing, stale or unreadable file reads as empty:
an estimate is then "not known", never wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.culling.idleness import Deadline
from jupyterhub_gpu.wire.cull_notes import write_json_atomic

WHY = ("idle", "max_age")


def save_deadlines(path: str | Path, deadlines: Mapping[str, Deadline | None]) -> None:
    data = {
        holder: {"at": d.at.astimezone(timezone.utc).isoformat(), "why": d.why}
        for holder, d in sorted(deadlines.items())
        if d is not None
    }
    write_json_atomic(path, data, mode=0o644)


def load_deadlines(
    path: str | Path, now: datetime | None = None, max_age: float = 600.0
) -> dict[str, Deadline]:
    """holder -> :class:`Deadline`; ``{}`` when the file is missing, unreadable, or older
    than ``max_age`` s (a culler that stopped writing says nothing); bad entries skipped."""
    file = Path(path)
    try:
        written = datetime.fromtimestamp(file.stat().st_mtime, timezone.utc)
        data: Any = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if (now or datetime.now(timezone.utc)) - written > timedelta(seconds=max_age):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for holder, item in data.items():
        try:
            at = datetime.fromisoformat(item["at"])
            why = str(item["why"])
        except (KeyError, TypeError, ValueError):
            continue
        if "/" in str(holder) and why in WHY and at.tzinfo is not None:
            out[str(holder)] = Deadline(at.astimezone(timezone.utc), why)
    return out
