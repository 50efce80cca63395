"""The SSH gateway's open sessions, as it sends them to the hub (docs/ssh.md)::

    PUT /hub/api/gpu/ssh/sessions   (scope custom:gpu-ssh:sessions, the gateway's only)
    {"interval": 30,
     "channels": [{"user": "alice", "server": "", "kind": "shell",
                   "since": "2026-12-06T00:50:01Z", "peer": "203.0.113.7:51234"}]}

The whole list each time (it replaces the last one); ``interval``: the gateway sends
again within this many seconds. Every field is bounded on reading (:func:`decode_sessions`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.ssh.census import KINDS, MAX_CHANNELS, OpenChannel
from jupyterhub_gpu.errors import BadInput

MAX_NAME = 255
MAX_PEER = 80


def encode_sessions(channels: list[OpenChannel], interval: float) -> dict[str, Any]:
    return {
        "interval": interval,
        "channels": [
            {
                "user": c.user,
                "server": c.server,
                "kind": c.kind,
                "since": datetime.fromtimestamp(c.since, timezone.utc)
                .isoformat()
                .replace("+00:00", "Z"),
                "peer": c.peer,
            }
            for c in channels
        ],
    }


def _text(item: dict[str, Any], key: str, limit: int, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or len(value) > limit:
        raise BadInput(f"{where}.{key} must be a string of at most {limit} characters.")
    return value


def decode_sessions(raw: object) -> tuple[list[OpenChannel], float]:
    """(the channels, the interval); :class:`BadInput` naming the field if not that."""
    if not isinstance(raw, dict):
        raise BadInput("The SSH sessions must be a JSON object.")
    interval = raw.get("interval")
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise BadInput("interval must be a number of seconds.")
    if not 1 <= interval <= 3600:
        raise BadInput("interval must be from 1 to 3600 seconds.")
    items = raw.get("channels")
    if not isinstance(items, list) or len(items) > MAX_CHANNELS:
        raise BadInput(f"channels must be a list of at most {MAX_CHANNELS} entries.")
    out = []
    for i, item in enumerate(items):
        where = f"channels[{i}]"
        if not isinstance(item, dict):
            raise BadInput(f"{where} must be an object.")
        kind = item.get("kind")
        if kind not in KINDS:
            raise BadInput(f"{where}.kind must be one of {', '.join(KINDS)}.")
        since = _text(item, "since", 40, where)
        try:
            at = datetime.fromisoformat(since.replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"{where}.since must be an ISO 8601 time.") from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        out.append(
            OpenChannel(
                user=_text(item, "user", MAX_NAME, where),
                server=_text(item, "server", MAX_NAME, where),
                kind=str(kind),
                since=at.timestamp(),
                peer=_text(item, "peer", MAX_PEER, where),
            )
        )
    return out, float(interval)


__all__ = ["decode_sessions", "encode_sessions"]
