"""The culler's warnings before a cull: a small JSON file, rewritten each round.

``{"alice/": {"at": ISO, "idle_since": ISO, "issued": ISO, "postponable": true,
"suspend": false}}``: one entry per server (``user/server``) the culler will stop (with
``suspend``: suspend) at ``at`` at the earliest if it stays idle
(:class:`~jupyterhub_gpu.core.culling.warning.CullWarning`; a file without ``suspend``
reads as a stop). The culler keeps the same entries, keyed ``user/server@started``, in its
state file (:func:`warnings_to_json`, :func:`warnings_from_json`). The culler writes
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
        "suspend": w.suspend,
    }


def encode_cull_warnings(warnings: Mapping[str, CullWarning]) -> bytes:
    """The file's bytes."""
    return encode_by_server(warnings, _entry)


def _warning(holder: str, item: Any) -> CullWarning | None:
    at, idle_since, issued = (datetime.fromisoformat(item[k]) for k in _TIMES)
    postponable, suspend = item["postponable"], item.get("suspend", False)
    if "/" not in holder or not isinstance(postponable, bool) or not isinstance(suspend, bool):
        return None
    if any(t.tzinfo is None for t in (at, idle_since, issued)):
        return None
    return CullWarning(
        at.astimezone(timezone.utc),
        idle_since.astimezone(timezone.utc),
        issued.astimezone(timezone.utc),
        postponable,
        suspend,
    )


def warnings_to_json(warnings: Mapping[str, CullWarning]) -> dict[str, dict[str, Any]]:
    """The warnings as JSON values, by key (the culler's state file)."""
    return {key: _entry(w) for key, w in sorted(warnings.items())}


def warnings_from_json(data: Any) -> dict[str, CullWarning]:
    """:func:`warnings_to_json`'s value back: key -> :class:`CullWarning`; ``{}`` when
    ``data`` is not an object; bad entries (a time without its zone, a key without ``/``)
    skipped."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, CullWarning] = {}
    for key, item in data.items():
        try:
            found = _warning(str(key), item)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if found is not None:
            out[str(key)] = found
    return out


def decode_cull_warnings(text: str | bytes) -> dict[str, CullWarning]:
    """holder -> :class:`CullWarning`; ``{}`` when ``text`` is not a JSON object; bad
    entries (a time without its zone, a holder without ``/``) skipped."""
    return decode_by_server(text, _warning)
