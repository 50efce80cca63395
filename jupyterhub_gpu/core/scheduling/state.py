"""Plain data for the queue: what waits, who may hold what, and what is reserved (pure).

Times are POSIX seconds (``float``, wall clock, UTC based) everywhere in this package:
``time.time()`` in the hub, ``datetime.timestamp()`` from the accounting records, the
simulated clock in the benchmark. Durations are seconds too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import tzinfo

from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import UTC


@dataclass(frozen=True)
class QueuedRequest:
    """One spawn waiting for GPUs.

    ``group`` is the group it is charged to (the user's choice in the form; Slurm's
    "account"); its admin priority and quotas come from :class:`Policies`, so one
    setting changes every waiting request of the group at once.
    """

    id: str
    user: str
    group: str
    request: PlacementRequest
    enqueued_at: float


@dataclass(frozen=True)
class Charge:
    """Who a held GPU is charged to: the group and user of the server that holds it;
    ``fraction``: the part of the GPU (a share's K/N, issue 26; 1 for a whole GPU)."""

    group: str
    user: str
    fraction: float = 1.0


SHARE_KEY = "#"  # charges of shares are keyed "uuid#holder" (a GPU has several holders)


@dataclass(frozen=True)
class Quota:
    """GPUs held at once: ``max_gpus`` over every model (None: no cap) and a cap per
    model name (a model not listed has no cap of its own; 0 forbids it)."""

    max_gpus: int | None = None
    per_model: Mapping[str, int] = field(default_factory=dict)

    @property
    def unlimited(self) -> bool:
        return self.max_gpus is None and not self.per_model


@dataclass(frozen=True)
class GroupPolicy:
    """What an admin sets for one group.

    ``priority`` (>= 0) is the admin priority, normalised by the highest of any group;
    ``shares`` (>= 0) its part of the cluster for fair share (default equal for all);
    ``quota`` caps the group's servers together, ``user_quota`` each of its users.
    ``max_queue_wait_s`` is how long the hub lets the group's spawns wait in the queue (0:
    never, refused at once; None: the hub's default, ``GPUDockerSpawner.max_queue_wait``);
    :func:`~.queue.schedule` does not read it.
    """

    priority: float = 0.0
    shares: float = 1.0
    quota: Quota = Quota()
    user_quota: Quota = Quota()
    max_queue_wait_s: float | None = None


@dataclass(frozen=True)
class Policies:
    """Per-group policies; groups not listed get ``default``. ``users`` overrides the
    per-user quota for named users, whatever group they charge."""

    groups: Mapping[str, GroupPolicy] = field(default_factory=dict)
    default: GroupPolicy = GroupPolicy()
    users: Mapping[str, Quota] = field(default_factory=dict)

    def group(self, name: str) -> GroupPolicy:
        return self.groups.get(name, self.default)

    def user_quota(self, user: str, group: str) -> Quota:
        return self.users.get(user, self.group(group).user_quota)

    def max_priority(self) -> float:
        return max([self.default.priority, *(g.priority for g in self.groups.values())])


@dataclass(frozen=True)
class Reservation:
    """GPUs kept for one group from ``start`` to ``end`` (``start <= t < end``).

    Either ``model`` and ``count`` (any ``count`` GPUs of that model, chosen when needed,
    see :func:`~.reservations.assign`), or explicit ``nodes`` (all their GPUs) and/or
    ``gpu_uuids``.
    """

    id: str
    group: str
    start: float
    end: float
    model: str | None = None
    count: int = 0
    nodes: frozenset[str] = frozenset()
    gpu_uuids: frozenset[str] = frozenset()

    def active(self, t: float) -> bool:
        return self.start <= t < self.end

    def overlaps(self, other: Reservation) -> bool:
        return self.start < other.end and other.start < self.end

    @property
    def explicit(self) -> bool:
        return bool(self.nodes or self.gpu_uuids)


@dataclass(frozen=True)
class UsageItem:
    """Past use for fair share: ``gpu_hours`` of ``model`` by ``user`` charged to
    ``group``, ended at ``ended_at`` (a running server: its hours so far, ended now)."""

    group: str
    user: str
    model: str
    gpu_hours: float
    ended_at: float


@dataclass(frozen=True)
class UsageTotals:
    """Decayed, model-weighted GPU-hours as of ``at``: per group, and per (group, user).
    Made by :func:`~.fairshare.decayed_usage` and :func:`~.fairshare.advance`."""

    at: float
    groups: Mapping[str, float] = field(default_factory=dict)
    users: Mapping[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulerSettings:
    """Every knob of the queue (Slurm's multifactor names in brackets).

    priority = ``weight_fairshare`` x group factor + ``weight_user_fairshare`` x user
    factor + ``weight_admin`` x admin priority + ``weight_age`` x min(waited /
    ``max_age_s``, ``age_cap``); ties go to the earlier request. ``backfill_claims`` is
    off by default (it measured badly on the trace replay: docs/scheduling.md).
    """

    half_life_s: float = 7 * 86400.0  # PriorityDecayHalfLife
    model_weights: Mapping[str, float] = field(default_factory=dict)  # TRESBillingWeights
    weight_fairshare: float = 1.0  # PriorityWeightFairshare
    weight_user_fairshare: float = 0.1  # users within a group (Fair Tree's second level)
    weight_admin: float = 1.0  # PriorityWeightQOS
    weight_age: float = 1.0  # PriorityWeightAge
    max_age_s: float = 3600.0  # PriorityMaxAge
    age_cap: float | None = 1.0  # None: the age term grows without bound (no starvation)
    backfill: bool = True  # False: strict order, nothing passes a blocked request
    backfill_claims: int = 0  # blocked requests (highest first) that claim a node
    claim_after_s: float = 4 * 3600.0  # a blocked request claims only once it waited this long
    reservation_lookahead_s: float = 3600.0  # avoid GPUs reserved this soon, if possible
    reservation_notice_s: float = 86400.0  # tell users of reservations starting this soon
    timezone: tzinfo = UTC  # of the clock times in messages

    def __post_init__(self) -> None:
        if not self.half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0 seconds, got {self.half_life_s}")
        if not self.max_age_s > 0:
            raise ValueError(
                f"max_age_s must be > 0 seconds (inf: age never counts), got {self.max_age_s}"
            )
        weights = (
            self.weight_fairshare,
            self.weight_user_fairshare,
            self.weight_admin,
            self.weight_age,
        )
        if min(weights) < 0 or min(self.model_weights.values(), default=0.0) < 0:
            raise ValueError("priority and model weights must be >= 0")
        if self.backfill_claims < 0:
            raise ValueError(f"backfill_claims must be >= 0, got {self.backfill_claims}")

    @classmethod
    def fifo(cls, backfill: bool = True) -> SchedulerSettings:
        """First come, first served: arrival order only, plain backfill (no claims)."""
        return cls(
            weight_fairshare=0.0,
            weight_user_fairshare=0.0,
            weight_admin=0.0,
            weight_age=0.0,
            max_age_s=math.inf,
            backfill=backfill,
            backfill_claims=0,
        )

    def weight(self, model: str) -> float:
        return self.model_weights.get(model, 1.0)


@dataclass(frozen=True)
class ClusterState:
    """Everything the queue decision reads, at one instant ``now``.

    ``charges`` maps a held GPU's uuid to the group and user it is charged to (GPUs
    without one, such as an admin's hand-made hold, count against nobody's quota);
    ``usage`` is the decayed use as of ``now`` (None: no history, every factor is 1).
    """

    snapshot: ClusterSnapshot
    now: float
    charges: Mapping[str, Charge] = field(default_factory=dict)
    policies: Policies = Policies()
    reservations: tuple[Reservation, ...] = ()
    usage: UsageTotals | None = None
