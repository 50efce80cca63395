"""A short history of each GPU's utilisation, kept in the dashboard service (pure: time is
passed in). One ring buffer per GPU; a GPU absent from the payloads for longer than the
window is forgotten. What is drawn from a GPU's history (its sparkline, how long it has
been idle) changes only when a reading arrives, so it is computed once per reading, not
once per viewer and request.

Each sample carries the holding it was taken under (the holder's ``user/server`` and its
start): how long a GPU "has been idle" counts only its current holder's samples, so a
server that just got a GPU never inherits the previous holder's idle minutes."""

from __future__ import annotations

from collections import deque
from datetime import datetime

from jupyterhub_gpu.core.dashboard.charts import downsample, sparkline
from jupyterhub_gpu.core.dashboard.payload import ClusterPayload

IDLE_BELOW = 10.0  # % utilisation, the culler's default gpu_threshold
MIN_SPAN = 60.0  # s: a fresh history is drawn over at least this span


def holding(holder: str | None, started: datetime | None) -> str:
    """One holding of a GPU: who holds it and since when (a server started again, or the
    next holder of the same name, is another holding); ``""`` when nobody does."""
    if not holder:
        return ""
    return f"{holder}@{started.isoformat() if started else ''}"


class History:
    """``(time, utilisation %)`` samples per GPU uuid, at most ``points`` each, over at
    most ``window`` seconds."""

    def __init__(self, window: float = 600.0, points: int = 120) -> None:
        self.window = window
        self.points = max(points, 2)
        self._samples: dict[str, deque[tuple[float, float, str]]] = {}
        self._at = 0.0  # the latest record's time
        self._drawn: dict[str, tuple[str, float | None]] = {}

    def __len__(self) -> int:
        return len(self._samples)

    def record(self, payload: ClusterPayload, at: float) -> None:
        """Add every GPU's utilisation now (``at``: seconds, monotonic or epoch) from a
        payload whose node answered; a node that is down adds nothing (its readings are old)."""
        started = {s.key: s.started for s in payload.servers if s.key}
        for node in payload.nodes:
            if not node.reachable:
                continue
            for gpu in node.gpus:
                buffer = self._samples.setdefault(gpu.uuid, deque(maxlen=self.points))
                value = min(max(gpu.utilization_pct, 0.0), 100.0)
                buffer.append((at, value, holding(gpu.holder, started.get(gpu.holder or ""))))
        self._at = at
        self._drawn.clear()
        for uuid in [u for u, b in self._samples.items() if b and b[-1][0] < at - self.window]:
            del self._samples[uuid]

    def series(self, uuid: str, now: float) -> list[tuple[float, float]]:
        """The samples of ``uuid`` within the window before ``now``, oldest first."""
        return [(at, v) for at, v, _ in self._samples.get(uuid, ()) if at >= now - self.window]

    def idle_for(self, uuid: str, now: float, threshold: float = IDLE_BELOW) -> float | None:
        """How long the GPU's samples under its current holding have stayed under
        ``threshold`` % (a lower bound: the window, the samples or the holding end there);
        None when its latest sample is at or above it or there is none."""
        samples = [s for s in self._samples.get(uuid, ()) if s[0] >= now - self.window]
        if not samples or samples[-1][1] >= threshold:
            return None
        since, current = samples[-1][0], samples[-1][2]
        for at, value, held in reversed(samples):
            if value >= threshold or held != current:
                break
            since = at
        return max(now - since, 0.0)

    def drawn(self, uuid: str) -> tuple[str, float | None]:
        """``(sparkline points, idle seconds)`` of ``uuid`` as of the latest record: the
        line spans the window once it is full, until then what there is (at least
        :data:`MIN_SPAN`), so a fresh dashboard does not draw a dot in a corner."""
        cached = self._drawn.get(uuid)
        if cached is None:
            samples = self.series(uuid, self._at)
            span = self.window
            if samples:
                span = min(self.window, max(self._at - samples[0][0], MIN_SPAN))
            cached = (sparkline(downsample(samples), self._at, span), self.idle_for(uuid, self._at))
            self._drawn[uuid] = cached
        return cached
