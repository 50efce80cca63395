"""The GPU queue: fair-share order, quotas, reservations and estimates (see docs/scheduling.md).

Pure like :mod:`jupyterhub_gpu.core.placement`: plain frozen data in, plain results out, no
I/O. The hub builds a :class:`ClusterState` (snapshot, charges, policies, reservations,
decayed usage) and calls :func:`schedule` when GPUs free up or a request arrives;
:func:`positions` and :func:`estimates` give the progress page its sentences. The
benchmark (``benchmarks/placement.py``) replays the Alibaba trace through the same
:func:`schedule`.
"""

from jupyterhub_gpu.core.scheduling.estimate import Estimate, Release, estimates
from jupyterhub_gpu.core.scheduling.fairshare import (
    PriorityParts,
    Standing,
    advance,
    decayed_usage,
    factor,
    group_standings,
    prioritise,
    user_standings,
)
from jupyterhub_gpu.core.scheduling.order import (
    Decision,
    PlaceFn,
    Position,
    Refused,
    Start,
    Waiting,
    positions,
    schedule,
)
from jupyterhub_gpu.core.scheduling.quota import (
    Allowed,
    Holdings,
    Refuse,
    Wait,
    check_quota,
    gpu_models,
    holdings_of,
    never_fits,
)
from jupyterhub_gpu.core.scheduling.reservations import (
    Conflict,
    assign,
    conflicts,
    fenced,
    reserved_lines,
    validate,
)
from jupyterhub_gpu.core.scheduling.settings import queue_settings
from jupyterhub_gpu.core.scheduling.state import (
    Charge,
    ClusterState,
    GroupPolicy,
    Policies,
    QueuedRequest,
    Quota,
    Reservation,
    SchedulerSettings,
    UsageItem,
    UsageTotals,
)

__all__ = [
    "Allowed",
    "Charge",
    "ClusterState",
    "Conflict",
    "Decision",
    "Estimate",
    "GroupPolicy",
    "Holdings",
    "PlaceFn",
    "Policies",
    "Position",
    "PriorityParts",
    "QueuedRequest",
    "Quota",
    "Refuse",
    "Refused",
    "Release",
    "Reservation",
    "SchedulerSettings",
    "Standing",
    "Start",
    "UsageItem",
    "UsageTotals",
    "Wait",
    "Waiting",
    "advance",
    "assign",
    "check_quota",
    "conflicts",
    "decayed_usage",
    "estimates",
    "factor",
    "fenced",
    "gpu_models",
    "group_standings",
    "holdings_of",
    "never_fits",
    "positions",
    "prioritise",
    "queue_settings",
    "reserved_lines",
    "schedule",
    "user_standings",
    "validate",
]
