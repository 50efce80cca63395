"""The culler's small files keyed by server: one JSON object, ``{"user/server": entry}``.

Its deadlines (:mod:`.deadlines`), its warnings before a cull (:mod:`.cull_warnings`) and
its notices to shares over their memory (:mod:`.share_notices`) are each such a file: the
encoder writes the entries sorted, the decoder reads what it can and skips a bad entry
(a courtesy file is never a gate). Each module says what one entry is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

T = TypeVar("T")
# what an entry's decoder raises for a bad entry (a missing key, a wrong type, a bad time)
BAD_ENTRY = (KeyError, TypeError, ValueError)


def utc_text(when: datetime) -> str:
    """A time as the files write it: ISO 8601 in UTC."""
    return when.astimezone(timezone.utc).isoformat()


def encode_by_server(
    entries: Mapping[str, T], entry: Callable[[T], dict[str, Any] | None]
) -> bytes:
    """The file's bytes: ``entry`` of each value, by holder (a ``None`` is left out)."""
    data = {holder: entry(v) for holder, v in sorted(entries.items())}
    kept = {holder: item for holder, item in data.items() if item is not None}
    return json.dumps(kept, indent=1, sort_keys=True).encode("utf-8")


def json_object(text: str | bytes) -> dict[Any, Any]:
    """``text`` as a JSON object; ``{}`` when it is not one."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def decode_by_server(text: str | bytes, entry: Callable[[str, Any], T | None]) -> dict[str, T]:
    """holder -> ``entry(holder, item)``; ``{}`` when ``text`` is not a JSON object. An
    entry is skipped where ``entry`` returns ``None`` or raises one of :data:`BAD_ENTRY`."""
    out: dict[str, T] = {}
    for holder, item in json_object(text).items():
        try:
            decoded = entry(str(holder), item)
        except BAD_ENTRY:
            continue
        if decoded is not None:
            out[str(holder)] = decoded
    return out
