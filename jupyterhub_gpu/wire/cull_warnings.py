"""The culler's warnings before a cull: a small JSON file, rewritten each round.

``{"alice/": {"at": ISO, "idle_since": ISO, "issued": ISO, "postponable": true}}``: one
entry per server (``user/server``) the culler will stop at ``at`` at the earliest if it
stays idle (:class:`~jupyterhub_gpu.core.culling.warning.CullWarning`). The culler writes
it atomically; the hub's notices API reads it and shows each warning on its user's pages
with "I'm still here" while ``postponable`` (both through :mod:`jupyterhub_gpu.edges.files`,
which reads a missing, stale, unreadable or oversized file as empty, at most
:data:`MAX_FILE` bytes). Bad entries are skipped: a warning is a courtesy, never a gate
for the hub (the culler keeps its own warnings in memory and acts on those).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.wire.by_server import decode_by_server, encode_by_server, utc_text

MAX_FILE = 1 << 20  # bytes read at most
_TIMES = ("at", "idle_since", "issued")


def _entry(w: CullWarning) -> dict[str, Any]:
    return {
        "at": utc_text(w.at),
        "idle_since": utc_text(w.idle_since),
        "issued": utc_text(w.issued),
        "postponable": w.postponable,
    }


def encode_cull_warnings(warnings: Mapping[str, CullWarning]) -> bytes:
    """The file's bytes."""
    return encode_by_server(warnings, _entry)


def _warning(holder: str, item: Any) -> CullWarning | None:
    at, idle_since, issued = (datetime.fromisoformat(item[k]) for k in _TIMES)
    postponable = item["postponable"]
    if "/" not in holder or not isinstance(postponable, bool):
        return None
    if any(t.tzinfo is None for t in (at, idle_since, issued)):
        return None
    return CullWarning(
        at.astimezone(timezone.utc),
        idle_since.astimezone(timezone.utc),
        issued.astimezone(timezone.utc),
        postponable,
    )


def decode_cull_warnings(text: str | bytes) -> dict[str, CullWarning]:
    """holder -> :class:`CullWarning`; ``{}`` when ``text`` is not a JSON object; bad
    entries (a time without its zone, a holder without ``/``) skipped."""
    return decode_by_server(text, _warning)
