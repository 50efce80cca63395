"""Timestamps as JupyterHub and jupyter-server write them (pure).

Their REST answers carry ISO 8601 strings (``2026-01-01T12:00:00.000000Z``, sometimes
naive UTC); the culler reads them from the hub and single-user servers, the dashboard from
the hub's cluster payload. Turning seconds into words is :func:`~.words.duration`'s job.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp from the hub or jupyter-server as an aware UTC datetime."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
