"""When could a waiting request start? An estimate from what is known (pure).

What is known are future releases: a server reaching the culler's idle deadline or its
``max_age``, and reservations ending (``Release``: node, GPUs, time, and why, in words).
The estimate replays them in time order through the same :func:`~.queue.schedule` the hub
uses: after each release the queue is scheduled again at that time (ages grow, usage
decays, reservations start and end), and what starts holds its GPUs from then on (its
end is unknown). A request's estimate is the first release after which it starts.

It is an estimate: servers stopped by their users free GPUs earlier, and requests that
arrive with a higher priority can start before it. When no known release lets it start,
the estimate says that nothing is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo

from jupyterhub_gpu.core.placement import place
from jupyterhub_gpu.core.placement.index import index_for
from jupyterhub_gpu.core.placement.journal import journaled
from jupyterhub_gpu.core.scheduling.fairshare import advance
from jupyterhub_gpu.core.scheduling.order import STARTED, PlaceFn, kind_of, schedule
from jupyterhub_gpu.core.scheduling.state import (
    Charge,
    ClusterState,
    QueuedRequest,
    SchedulerSettings,
)
from jupyterhub_gpu.core.words import UTC, listing, zoned_clock


@dataclass(frozen=True)
class Release:
    """GPUs expected to be freed at ``at``; ``why`` in words ("bob's server reaches its
    idle limit"). ``gpu_uuids`` are freed only if the holder they have now still holds them."""

    node: str
    gpu_uuids: tuple[str, ...]
    at: float
    why: str


@dataclass(frozen=True)
class Estimate:
    """When ``request`` could start (``at``, None: nothing known) and the release that
    lets it (``why``); ``kind`` is what it waits for, in words ("an NVIDIA TITAN X")."""

    request: QueuedRequest
    kind: str
    at: float | None
    why: str | None

    def sentence(self, now: float, tz: tzinfo = UTC) -> str:
        """``An NVIDIA GeForce RTX 3090 is expected to free up by about 14:20 CET (bob's
        server reaches its idle limit).`` (the time in ``tz``, named) or the "nothing is
        known" sentence."""
        kind = self.kind[:1].upper() + self.kind[1:]
        verb = "is" if self.request.request.gpu_count == 1 else "are"
        if self.at is None:
            return (
                f"There is no estimate yet: nothing the hub knows of (idle limits, age "
                f"limits, reservations) frees {self.kind} for this server."
            )
        if self.at <= now:
            return "It should start at the next scheduling round."
        return (
            f"{kind} {verb} expected to free up by about {zoned_clock(self.at, now, tz)} "
            f"({self.why})."
        )


def _events(state: ClusterState, releases: Sequence[Release]) -> list[tuple[float, list[Release]]]:
    """Releases (and reservation ends, as releases of no GPU) grouped by time, in order."""
    ends = [
        Release("", (), r.end, f"group {r.group}'s reservation ends")
        for r in state.reservations
        if r.end > state.now
    ]
    by_time: dict[float, list[Release]] = {}
    for rel in [*releases, *ends]:
        by_time.setdefault(max(rel.at, state.now), []).append(rel)
    return sorted(by_time.items(), key=lambda kv: kv[0])


def estimates(
    queue: Sequence[QueuedRequest],
    state: ClusterState,
    releases: Sequence[Release],
    settings: SchedulerSettings | None = None,
    place_fn: PlaceFn = place,
) -> dict[str, Estimate]:
    """Request id -> :class:`Estimate`, for every request of ``queue``."""
    settings = settings if settings is not None else SchedulerSettings()
    index = index_for(state.snapshot.nodes)
    kinds = {
        q.id: kind_of(q.request, [s for g in index.candidates(q.request) for s in g.slots], index)
        for q in queue
    }
    original = state.snapshot.allocations
    alloc, charges = journaled(original), dict(state.charges)
    pending = list(queue)
    out: dict[str, Estimate] = {}

    def run(t: float, why: str | None) -> None:
        usage = advance(state.usage, (), t, settings) if state.usage is not None else None
        snap = replace(state.snapshot, allocations=alloc.fork())  # shares and sharing kept
        now = replace(state, snapshot=snap, now=t, charges=dict(charges), usage=usage)
        decision = schedule(pending, now, settings, place_fn)
        for s in decision.starts:
            out[s.request.id] = Estimate(s.request, kinds[s.request.id], t, why)
            for u in s.placement.gpu_uuids:
                alloc[u] = STARTED + s.request.id
                charges[u] = Charge(s.request.group, s.request.user)
        gone = {s.request.id for s in decision.starts} | {r.request.id for r in decision.refused}
        pending[:] = [q for q in pending if q.id not in gone]

    run(state.now, None)
    for t, group in _events(state, releases):
        if not pending:
            break
        for rel in group:
            for u in rel.gpu_uuids:
                if u in original and alloc.get(u) == original[u]:
                    del alloc[u]
                    charges.pop(u, None)
        run(t, listing([rel.why for rel in group], limit=2))
    for q in pending:
        out[q.id] = Estimate(q, kinds[q.id], None, None)
    return out
