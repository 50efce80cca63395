"""Fold one GPU's readings into the rolling summary the judgement reads. Pure, no I/O.

The service polls each node agent every few seconds and feeds every GPU's reading to its
tracker; the benchmark feeds the trace's samples the same way. A reading is *active* when
the mean utilisation over the last ``window`` seconds reaches ``threshold`` (so one
monitoring blip is not activity, and a GPU busy half the time at 30% is), or when the
memory in use moved by ``memory_change`` MiB or more since the previous reading (a
process allocating or freeing). A gap longer than ``max_gap`` between readings breaks
the observation: what happened in it is unknown, so idle time counts again from the
next reading. So does :meth:`interrupt`, which the service calls when a poll of the GPU's
agent failed or the agent stopped listing the GPU, however short the gap.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Any

from jupyterhub_gpu.core.culling.idleness import GpuSummary


class GpuTracker:
    """The running state of one GPU; :meth:`summary` is what the judgement sees."""

    def __init__(
        self,
        uuid: str,
        *,
        threshold: float,
        window: float,
        memory_change: float,
        max_gap: float,
    ) -> None:
        self.uuid = uuid
        self.threshold = threshold
        self.window = window
        self.memory_change = memory_change
        self.max_gap = max_gap
        self._samples: deque[tuple[datetime, float]] = deque()
        self._sum = 0.0
        self._last_memory: float | None = None
        self.last_sample_at: datetime | None = None
        self.observed_since: datetime | None = None
        self.last_active_at: datetime | None = None
        self.last_busy_at: datetime | None = None  # newest single reading >= threshold
        self.longest_pause_s = 0.0
        self.mean_pct = 0.0
        self.interrupted = False  # readings were missed since the last one

    def add(self, at: datetime, utilization_pct: float, memory_used_mib: float | None) -> bool:
        """Record one reading; returns whether it counted as active. Old readings are ignored."""
        if self.last_sample_at is not None and at <= self.last_sample_at:
            return False
        gap = None if self.last_sample_at is None else (at - self.last_sample_at).total_seconds()
        if gap is None or gap > self.max_gap or self.interrupted:
            self.interrupted = False
            self.observed_since = at
            self._samples.clear()
            self._sum = 0.0
            self._last_memory = None
        self._samples.append((at, utilization_pct))
        self._sum += utilization_pct
        while (at - self._samples[0][0]).total_seconds() >= self.window:
            self._sum -= self._samples.popleft()[1]
        self.mean_pct = max(self._sum / len(self._samples), 0.0)
        moved = (
            memory_used_mib is not None
            and self._last_memory is not None
            and abs(memory_used_mib - self._last_memory) >= self.memory_change
        )
        if utilization_pct >= self.threshold:
            self.last_busy_at = at
        active = self.mean_pct >= self.threshold or moved
        if active:
            if self.last_active_at is not None:
                pause = (at - self.last_active_at).total_seconds()
                self.longest_pause_s = max(self.longest_pause_s, pause)
            self.last_active_at = at
        if memory_used_mib is not None:
            self._last_memory = memory_used_mib
        self.last_sample_at = at
        return active

    def interrupt(self) -> None:
        """Readings were missed (the agent did not answer, or did not list this GPU): what
        happened meanwhile is unknown, so the next reading starts a new observation."""
        self.interrupted = True

    def forget_before(self, started: datetime) -> None:
        """A server that started at ``started`` now holds this GPU: what happened before
        belongs to another server (or to none), so it neither counts as this server's
        activity nor as one of its pauses. Readings since ``started`` are kept."""
        if self.observed_since is not None and self.observed_since < started:
            self.observed_since = started
        if self.last_active_at is not None and self.last_active_at < started:
            self.last_active_at = None
            self.longest_pause_s = 0.0
        if self.last_busy_at is not None and self.last_busy_at < started:
            self.last_busy_at = None

    def summary(self) -> GpuSummary | None:
        """The rolling summary, or ``None`` before the first reading."""
        if self.last_sample_at is None or self.observed_since is None:
            return None
        return GpuSummary(
            uuid=self.uuid,
            last_sample_at=self.last_sample_at,
            observed_since=self.observed_since,
            last_active_at=self.last_active_at,
            utilization_pct=self.mean_pct,
            memory_used_mib=self._last_memory,
            longest_pause_s=self.longest_pause_s,
            last_busy_at=self.last_busy_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """What survives a restart of the culler (JSON-ready)."""

        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat()

        return {
            "uuid": self.uuid,
            "samples": [[t.isoformat(), u] for t, u in self._samples],
            "last_memory": self._last_memory,
            "last_sample_at": iso(self.last_sample_at),
            "observed_since": iso(self.observed_since),
            "last_active_at": iso(self.last_active_at),
            "longest_pause_s": self.longest_pause_s,
            "last_busy_at": iso(self.last_busy_at),
            "interrupted": self.interrupted,
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load :meth:`to_dict` output; raises ``ValueError``/``KeyError``/``TypeError`` if bad."""

        def parse(v: Any) -> datetime | None:
            return None if v is None else datetime.fromisoformat(v)

        samples = deque((datetime.fromisoformat(t), float(u)) for t, u in data["samples"])
        memory = data["last_memory"]
        stamps = [parse(data[k]) for k in ("last_sample_at", "observed_since", "last_active_at")]
        longest = float(data["longest_pause_s"])
        self.last_sample_at, self.observed_since, self.last_active_at = stamps
        self.longest_pause_s = longest
        self.last_busy_at = parse(data.get("last_busy_at"))  # absent in older files
        self.interrupted = bool(data.get("interrupted", False))  # absent in older files
        self._last_memory = None if memory is None else float(memory)
        self._samples = samples
        self._sum = sum(u for _, u in samples)
        self.mean_pct = self._sum / len(samples) if samples else 0.0
