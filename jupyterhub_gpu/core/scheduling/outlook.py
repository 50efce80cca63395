"""Where a spawn that does not fit now would stand, for the spawn form (issue 36, pure).

The form asks before Start: with this choice, how many wait ahead of me for the same
GPUs, and when could mine start? :func:`outlook` answers with the very functions the
waiting page's news come from (:func:`~.order.positions` and :func:`~.estimate.estimates`
over the queue as it is, with the would-be request added last), so the form and the
waiting page never disagree. :class:`WaitView` is the queue as plain data: what waits,
the cluster state the queue decides on, the releases it knows of (the culler's
deadlines) and its settings; the hub builds it (``SpawnQueue.wait_view``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from jupyterhub_gpu.core.scheduling.estimate import Release, estimates
from jupyterhub_gpu.core.scheduling.order import positions
from jupyterhub_gpu.core.scheduling.state import ClusterState, QueuedRequest, SchedulerSettings
from jupyterhub_gpu.core.words import UTC, zoned_clock


@dataclass(frozen=True)
class WaitView:
    """The queue as the form sees it: ``waiting`` in arrival order, the ``state`` the
    queue decides on (now, holds, charges, usage, reservations), the known ``releases``."""

    waiting: tuple[QueuedRequest, ...]
    state: ClusterState
    releases: tuple[Release, ...] = ()
    settings: SchedulerSettings = field(default_factory=SchedulerSettings)


@dataclass(frozen=True)
class Outlook:
    """``ahead``: requests before it in line for the same GPUs; ``kind``: what it waits
    for, in words ("an NVIDIA GeForce RTX 3090"); ``at``: when it could start (epoch s;
    None: no estimate yet)."""

    ahead: int
    kind: str
    at: float | None

    def sentence(self, now: float, tz: tzinfo = UTC) -> str:
        """``2 others wait for an NVIDIA GeForce RTX 3090 ahead of you; yours should free
        up around 14:20 UTC.`` (the time in ``tz``, named: the form shows it in the
        browser's zone), or ``... no estimate yet.``"""
        if self.ahead == 0:
            line = f"Nobody waits for {self.kind} ahead of you"
        else:
            verb = "waits" if self.ahead == 1 else "wait"
            others = "other" if self.ahead == 1 else "others"
            line = f"About {self.ahead} {others} {verb} for {self.kind} ahead of you"
        if self.at is None:
            return f"{line}; no estimate yet."
        if self.at <= now:
            return f"{line}; it should start within a minute."
        return f"{line}; yours should free up around {self.said(now, tz)}."

    def said(self, now: float, tz: tzinfo = UTC) -> str:
        """The estimate's time as :meth:`sentence` says it ('' without one)."""
        return zoned_clock(self.at, now, tz) if self.at is not None and self.at > now else ""


def outlook(view: WaitView, request: QueuedRequest) -> Outlook:
    """Where ``request`` (not yet in the queue) would stand if it joined now, and the
    queue's estimate for it: the waiting page's :func:`positions` and :func:`estimates`
    over ``view.waiting`` plus ``request``."""
    queue: Sequence[QueuedRequest] = (*view.waiting, request)
    place = next(
        p for p in positions(queue, view.state, view.settings) if p.request.id == request.id
    )
    known = estimates(queue, view.state, view.releases, view.settings).get(request.id)
    # a request that could never start (refused by the queue) has no estimate either
    return Outlook(place.position - 1, place.kind, known.at if known is not None else None)
