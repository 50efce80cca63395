"""What the culler tells users of shares over their memory: a small JSON file, rewritten
each round (issue #26).

``{"alice/": {"at": "2026-01-01T14:20:00+00:00", "gpu": "GPU-...", "message": "..."}}``:
one entry per share server (``user/server``) whose own processes hold more GPU memory than
its share (:func:`~jupyterhub_gpu.core.attribution.memory.judge_memory`). The culler
writes it atomically; the hub's notices API reads it and shows each entry on its user's
pages. A missing, stale (the culler stopped writing) or unreadable file reads as empty,
bad entries are skipped, and every read is bounded: a notice is a warning, never a gate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.wire.cull_notes import write_json_atomic

MAX_FILE = 1 << 20  # bytes read at most
MAX_MESSAGE = 500  # characters of one message


@dataclass(frozen=True)
class ShareNotice:
    at: datetime  # since when the share is over its memory
    gpu: str
    message: str


def save_share_notices(path: str | Path, notices: Mapping[str, ShareNotice]) -> None:
    data = {
        holder: {
            "at": n.at.astimezone(timezone.utc).isoformat(),
            "gpu": n.gpu,
            "message": n.message[:MAX_MESSAGE],
        }
        for holder, n in sorted(notices.items())
    }
    write_json_atomic(path, data, mode=0o644)


def load_share_notices(
    path: str | Path, now: datetime | None = None, max_age: float = 600.0
) -> dict[str, ShareNotice]:
    """holder -> :class:`ShareNotice`; ``{}`` when the file is missing, unreadable, larger
    than :data:`MAX_FILE` or older than ``max_age`` s."""
    file = Path(path)
    try:
        stat = file.stat()
        if stat.st_size > MAX_FILE:
            return {}
        written = datetime.fromtimestamp(stat.st_mtime, timezone.utc)
        with file.open("rb") as f:
            data: Any = json.loads(f.read(MAX_FILE).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    if (now or datetime.now(timezone.utc)) - written > timedelta(seconds=max_age):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, ShareNotice] = {}
    for holder, item in data.items():
        try:
            at = datetime.fromisoformat(item["at"])
            gpu, message = item["gpu"], item["message"]
        except (KeyError, TypeError, ValueError):
            continue
        if not (isinstance(gpu, str) and isinstance(message, str)) or at.tzinfo is None:
            continue
        out[str(holder)] = ShareNotice(at, gpu[:128], message[:MAX_MESSAGE])
    return out
