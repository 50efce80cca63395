"""Admission: may a workload start now, must it wait in the GPU queue, or is it refused?
One pure decision (issue 31) for everything that asks for GPUs outside the queue (a
JupyterLab server today; a batch job and an SSH session's server reuse it).

The hub gathers plain data (the cluster's snapshot with the ledger's holds laid over it,
the user's holdings and caps, what the queue says) and only applies the answer:

- :class:`Admit`: the placement to reserve, with no await between this decision and the
  reservation;
- :class:`Queue`: wait in line, with the sentence the progress page starts with;
- :class:`Refused`: one sentence for the user, a reason code for the metrics and an
  HTTP status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from jupyterhub_gpu.core.placement import place
from jupyterhub_gpu.core.placement.locality import cpu_node
from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest
from jupyterhub_gpu.core.scheduling.quota import Allowed, Refuse, Wait, never_fits
from jupyterhub_gpu.core.scheduling.reservations import hide
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

#: why a request is refused (the spawn metrics' reason label)
RefusalCode = Literal["user_gpu_cap", "gpu_quota", "no_capacity"]

QUEUE_AHEAD = "Others are waiting for GPUs before you."
QUEUE_FENCING = "Some GPUs are reserved for a group now or soon."


@dataclass(frozen=True)
class QueueView:
    """What the GPU queue says about a request, as plain data."""

    waiting: int = 0  # requests in line now
    fencing: bool = False  # a reservation is active or starts soon
    fenced: frozenset[str] = frozenset()  # GPUs active reservations keep from this group
    #: ``queue_policy``'s quotas for this request (:func:`.quota.check_quota`); None when
    #: the request asks for no GPU
    quota: Allowed | Wait | Refuse | None = None
    may_wait: bool = True  # the group's ``max_queue_wait`` is not 0


@dataclass(frozen=True)
class Admit:
    placement: Placement


@dataclass(frozen=True)
class Queue:
    reason: str


@dataclass(frozen=True)
class Refused:
    sentence: str
    code: RefusalCode
    status: int


Admission = Admit | Queue | Refused


def overlay(
    snapshot: ClusterSnapshot, allocations: Mapping[str, str], shares: Mapping[str, int]
) -> ClusterSnapshot:
    """``snapshot`` with the ledger's holds laid over it: the one overlay every decision
    reads (the agents' snapshot may be older than the ledger's latest reservation)."""
    return replace(snapshot, allocations=dict(allocations), shares=dict(shares))


def admit(
    snapshot: ClusterSnapshot,
    request: PlacementRequest,
    queue: QueueView,
    *,
    user_cap_refusal: str | None = None,
    servers_on: Mapping[str, int] | None = None,
) -> Admission:
    """The decision for ``request`` on ``snapshot`` (holds already laid over it).

    ``user_cap_refusal``: the user's own GPU cap's sentence when the request goes over it
    (``max_gpus_per_user``); ``servers_on``: servers per node, for a request without GPUs
    (it goes to a node that holds its image, else the least busy one)."""
    if user_cap_refusal:
        return Refused(user_cap_refusal, "user_gpu_cap", 429)
    if request.gpu_count:
        verdict = queue.quota
        if isinstance(verdict, Refuse):
            return Refused(verdict.reason, "gpu_quota", 403)
        if isinstance(verdict, Wait):
            if queue.may_wait:
                return Queue(verdict.reason)
            later = verdict.reason.replace(": it waits in the queue until", ": start it again when")
            return Refused(later, "gpu_quota", 429)
        if isinstance(verdict, Allowed):
            request = verdict.request
    if request.gpu_count == 0:
        found = cpu_node(snapshot, request, dict(servers_on or {}))
        if isinstance(found, NoFit):
            return Refused(found.reason, "no_capacity", 503)
        return Admit(Placement(found.node, ()))
    if queue.may_wait and queue.waiting:
        return Queue(QUEUE_AHEAD)
    if queue.may_wait and queue.fencing:
        return Queue(QUEUE_FENCING)
    # without a queue, GPUs reserved for other groups look taken (a fenced shared GPU
    # takes no more shares either)
    decision = place(hide(snapshot, queue.fenced), request)
    if isinstance(decision, NoFit):
        if queue.may_wait and never_fits(snapshot, request) is None:
            return Queue(decision.reason)
        return Refused(decision.reason, "no_capacity", 503)
    return Admit(decision)
