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

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.culling.idleness import Deadline
from jupyterhub_gpu.wire.by_server import decode_by_server, encode_by_server, utc_text

WHY = ("idle", "max_age")


def _entry(d: Deadline | None) -> dict[str, Any] | None:
    return None if d is None else {"at": utc_text(d.at), "why": d.why}


def encode_deadlines(deadlines: Mapping[str, Deadline | None]) -> bytes:
    """The file's bytes; a server with no deadline (``None``) is left out."""
    return encode_by_server(deadlines, _entry)


def _deadline(holder: str, item: Any) -> Deadline | None:
    at = datetime.fromisoformat(item["at"])
    why = str(item["why"])
    if "/" in holder and why in WHY and at.tzinfo is not None:
        return Deadline(at.astimezone(timezone.utc), why)
    return None


def decode_deadlines(text: str | bytes) -> dict[str, Deadline]:
    """holder -> :class:`Deadline`; ``{}`` when ``text`` is not a JSON object; bad entries
    skipped."""
    return decode_by_server(text, _deadline)
