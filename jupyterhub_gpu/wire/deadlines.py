"""When would the culler stop each server it keeps? A small JSON file, rewritten each round.

``{"alice/": {"at": "2026-01-01T14:20:00+00:00", "why": "idle"}, "bob/train": {...}}``:
for each kept server (``user/server``) the earliest time it would be culled
(:func:`~.idleness.earliest_cull`: ``max_age`` is certain, ``idle`` holds if nothing in it
is active from now on). The culler writes it atomically; the hub reads it for the GPU
queue's estimates and the dashboard (both through :mod:`jupyterhub_gpu.edges.files`,
which also reads a stale file as empty). Text that is not such a file decodes as empty:
an estimate is then "not known", never wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.culling.idleness import Deadline

WHY = ("idle", "max_age")


def encode_deadlines(deadlines: Mapping[str, Deadline | None]) -> bytes:
    """The file's bytes; a server with no deadline (``None``) is left out."""
    data = {
        holder: {"at": d.at.astimezone(timezone.utc).isoformat(), "why": d.why}
        for holder, d in sorted(deadlines.items())
        if d is not None
    }
    return json.dumps(data, indent=1, sort_keys=True).encode("utf-8")


def decode_deadlines(text: str | bytes) -> dict[str, Deadline]:
    """holder -> :class:`Deadline`; ``{}`` when ``text`` is not a JSON object; bad entries
    skipped."""
    try:
        data: Any = json.loads(text)
    except ValueError:
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
