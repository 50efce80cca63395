"""Per-allocation usage: agent samples folded into a few numbers (pure).

Storage grows with allocations, not with time x GPUs: each open allocation keeps one
:class:`Usage` (mean and peak utilisation, peak memory, seconds above the busy threshold,
when it was last busy), updated from every agent reading the hub makes anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

BUSY_PCT = 10.0  # a GPU at or above this utilisation counts as busy (the culler's default)


@dataclass(frozen=True)
class GPUSample:
    utilization_pct: float
    memory_used_mib: int


@dataclass(frozen=True)
class Usage:
    sampled_s: float = 0.0  # seconds covered by samples
    util_pct_seconds: float = 0.0  # sum over samples of mean utilisation x seconds
    peak_util_pct: float = 0.0
    peak_memory_mib: int = 0
    busy_s: float = 0.0  # seconds with any of the allocation's GPUs at or above BUSY_PCT
    last_sample: datetime | None = None
    last_busy: datetime | None = None

    @property
    def mean_util_pct(self) -> float:
        return self.util_pct_seconds / self.sampled_s if self.sampled_s > 0 else 0.0


def fold(
    usage: Usage,
    at: datetime,
    samples: Sequence[GPUSample],
    *,
    max_gap_s: float = 300.0,
    busy_pct: float = BUSY_PCT,
) -> Usage:
    """``usage`` with the reading ``samples`` (one per GPU of the allocation) taken at ``at``.

    The reading stands for the time since the previous one, at most ``max_gap_s`` (a hub
    that was down, or a node that did not answer, is not read as the GPU's last value for
    hours). The first reading only sets the starting point. A reading older than the last
    one (clocks, reordering) is ignored; a reading with no GPU (CPU-only) counts nothing."""
    if not samples:
        return usage
    if usage.last_sample is not None and at <= usage.last_sample:
        return usage
    util = sum(s.utilization_pct for s in samples) / len(samples)
    busy = any(s.utilization_pct >= busy_pct for s in samples)
    dt = 0.0
    if usage.last_sample is not None:
        dt = min((at - usage.last_sample).total_seconds(), max_gap_s)
    return replace(
        usage,
        sampled_s=usage.sampled_s + dt,
        util_pct_seconds=usage.util_pct_seconds + util * dt,
        peak_util_pct=max(usage.peak_util_pct, max(s.utilization_pct for s in samples)),
        peak_memory_mib=max(usage.peak_memory_mib, max(s.memory_used_mib for s in samples)),
        busy_s=usage.busy_s + (dt if busy else 0.0),
        last_sample=at,
        last_busy=at if busy else usage.last_busy,
    )
