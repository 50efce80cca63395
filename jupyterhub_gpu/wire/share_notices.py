"""What the culler tells users of shares over their memory: a small JSON file, rewritten
each round (issue #26).

``{"alice/": {"at": "2026-01-01T14:20:00+00:00", "gpu": "GPU-...", "message": "..."}}``:
one entry per share server (``user/server``) whose own processes hold more GPU memory than
its share (:func:`~jupyterhub_gpu.core.attribution.memory.judge_memory`). The culler
writes it atomically; the hub's notices API reads it and shows each entry on its user's
pages (both through :mod:`jupyterhub_gpu.edges.files`, which reads a missing, stale (the
culler stopped writing), unreadable or oversized file as empty, and at most
:data:`MAX_FILE` bytes). Bad entries are skipped: a notice is a warning, never a gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jupyterhub_gpu.wire.by_server import decode_by_server, encode_by_server, utc_text

MAX_FILE = 1 << 20  # bytes read at most
MAX_MESSAGE = 500  # characters of one message


@dataclass(frozen=True)
class ShareNotice:
    at: datetime  # since when the share is over its memory
    gpu: str
    message: str


def _entry(n: ShareNotice) -> dict[str, Any]:
    return {"at": utc_text(n.at), "gpu": n.gpu, "message": n.message[:MAX_MESSAGE]}


def encode_share_notices(notices: Mapping[str, ShareNotice]) -> bytes:
    """The file's bytes; each message cut to :data:`MAX_MESSAGE` characters."""
    return encode_by_server(notices, _entry)


def _notice(holder: str, item: Any) -> ShareNotice | None:
    at = datetime.fromisoformat(item["at"])
    gpu, message = item["gpu"], item["message"]
    if not (isinstance(gpu, str) and isinstance(message, str)) or at.tzinfo is None:
        return None
    return ShareNotice(at, gpu[:128], message[:MAX_MESSAGE])


def decode_share_notices(text: str | bytes) -> dict[str, ShareNotice]:
    """holder -> :class:`ShareNotice`; ``{}`` when ``text`` is not a JSON object; bad
    entries skipped, GPU names and messages cut short."""
    return decode_by_server(text, _notice)
