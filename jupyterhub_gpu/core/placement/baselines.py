"""Baseline policies for the benchmark, with the same signature and feasibility as ``place``.

They obey every constraint :func:`~.policy.place` obeys (one node, one model, health,
drivers, foreign processes, allocations) and give the same ``NoFit`` sentences; only the
choice among the fits differs:

- :func:`first_fit`: the first node in declared order with room, its first free GPUs;
- :func:`random_fit`: a uniformly random fitting node (slot), random free GPUs on it;
- :func:`spread`: the node with the most free GPUs of a fitting model (declared order on
  ties), its first free GPUs;
- :func:`best_fit`: ``place`` without its fair-share rule: always the smallest class with
  room (then the same packing, topology and load rules). It shows what the fair share buys.
"""

from __future__ import annotations

import random

from jupyterhub_gpu.core.placement.explain import explain
from jupyterhub_gpu.core.placement.policy import best_slot, choose_devices
from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest
from jupyterhub_gpu.core.placement.view import View, check_request
from jupyterhub_gpu.core.snapshot import ClusterSnapshot


def _fitting(view: View, request: PlacementRequest) -> list[int]:
    """Every slot that fits ``request`` now, in declared order (node, then first GPU)."""
    count = request.gpu_count
    return sorted(
        s for group in view.index.candidates(request) for s in group.slots if view.free(s) >= count
    )


def first_fit(snapshot: ClusterSnapshot, request: PlacementRequest) -> Placement | NoFit:
    """The first node, in the snapshot's order, with room; its lowest-index free GPUs."""
    check_request(request)
    view = View(snapshot)
    fitting = _fitting(view, request)
    if not fitting:
        return NoFit(explain(view, request))
    slot = fitting[0]
    return view.placement(slot, view.free_devices(slot)[: request.gpu_count])


def random_fit(
    snapshot: ClusterSnapshot, request: PlacementRequest, rng: random.Random | None = None
) -> Placement | NoFit:
    """A uniformly random fitting node and random free GPUs on it (``rng`` seeds it)."""
    check_request(request)
    rng = rng if rng is not None else random.Random(0)
    view = View(snapshot)
    fitting = _fitting(view, request)
    if not fitting:
        return NoFit(explain(view, request))
    slot = rng.choice(fitting)
    return view.placement(slot, rng.sample(view.free_devices(slot), request.gpu_count))


def spread(snapshot: ClusterSnapshot, request: PlacementRequest) -> Placement | NoFit:
    """The node with the most free GPUs of a fitting model; its lowest-index free GPUs."""
    check_request(request)
    view = View(snapshot)
    fitting = _fitting(view, request)
    if not fitting:
        return NoFit(explain(view, request))
    slot = max(fitting, key=lambda s: (view.free(s), -s))
    return view.placement(slot, view.free_devices(slot)[: request.gpu_count])


def best_fit(snapshot: ClusterSnapshot, request: PlacementRequest) -> Placement | NoFit:
    """The smallest class with room, packed: ``place`` without the fair share."""
    check_request(request)
    view = View(snapshot)
    for group in view.index.candidates(request):
        slot, _ = best_slot(view, group, request.gpu_count)
        if slot >= 0:
            return view.placement(slot, choose_devices(view.free_devices(slot), request.gpu_count))
    return NoFit(explain(view, request))
