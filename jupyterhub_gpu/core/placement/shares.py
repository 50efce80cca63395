"""Placing a share: ``K`` parts of one GPU (issue 26). Pure; called by ``policy.place``.

The rules, in order:

1. **Feasibility.** The GPU meets the request's static constraints as a whole request of
   one GPU would (model, driver, compute capability, healthy, node schedulable), the
   admin's policy shares it (:class:`~jupyterhub_gpu.core.sharing.ShareRule`), ``K`` is
   at most its ``N`` shares, the ``K`` shares' memory reaches ``min_memory_mib``, and all
   ``N`` shares together fit the GPU's memory (a rule that would overcommit a card is
   never used on it).
2. **Pack.** A GPU already shared (``snapshot.allocations[u] == SHARED`` and
   ``snapshot.shares[u]`` parts held) with ``K`` parts free wins: best fit, the one left
   with the fewest free parts; then the weakest class, the calmest GPU, the node name.
3. **Open.** Else a free GPU is opened for sharing, in the class that one whole GPU of
   the same constraints would come from: the cross-class fair share of
   :func:`~jupyterhub_gpu.core.placement.classes.fair_share`, counted over the GPUs the
   policy shares, whole free nodes of ``KEEP_WHOLE_GPUS`` or more kept while another
   class keeps its share; in that class, the node with the fewest free GPUs of its model
   (whole free nodes last), then the calmest GPU. So "any GPU" shares do not take the
   last GPUs of a small class that pinned requests need (before, a share opened on the
   node with the fewest free GPUs of any class: on the trace replay's seed 4 "any"
   shares took the lone 2-GPU P100 node, and P100-only pods waited 7x longer).

A GPU held whole is never shared (it is in ``allocations`` under another holder), and a
shared GPU is never given whole (``SHARED`` in ``allocations`` makes it taken for the
whole-GPU path): the two never mix.
"""

from __future__ import annotations

from dataclasses import replace

from jupyterhub_gpu.core.placement.classes import ClassOption, breaks_whole, fair_share
from jupyterhub_gpu.core.placement.index import ClusterIndex, index_for
from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest
from jupyterhub_gpu.core.placement.view import View
from jupyterhub_gpu.core.sharing.policy import ShareRule, SharingPolicy, share_of
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot

# per slot that may hold the request's shares: (slot, rule), weakest class first
Eligible = tuple[tuple[int, ShareRule], ...]


def static_request(request: PlacementRequest) -> PlacementRequest:
    """The whole-GPU request whose static constraints a share request shares (one GPU,
    any memory: the share's memory is checked against the rule)."""
    return replace(request, shares=0, gpu_count=1, min_memory_mib=0)


def eligible(index: ClusterIndex, request: PlacementRequest, policy: SharingPolicy) -> Eligible:
    """The slots whose GPUs may hold ``request``'s shares under ``policy`` (cached)."""
    key = (request, policy)
    hit: Eligible | None = index.share_cache.get(key)
    if hit is not None:
        return hit
    found: list[tuple[int, ShareRule]] = []
    for group in index.candidates(static_request(request)):
        for s in group.slots:
            rule = policy.rule(index.node_name[index.slot_node[s]], index.slot_model[s])
            if rule is None or request.shares > rule.most_held:  # more than a server may hold
                continue
            if request.share_of and rule.shares != request.share_of:
                continue
            memory = index.slot_class[s][0]
            if not rule.fits(memory) or share_of(rule, request.shares, memory).memory_mib < (
                request.min_memory_mib
            ):
                continue
            found.append((s, rule))
    result = tuple(found)
    index.remember_shares(key, result)
    return result


def place_share(snapshot: ClusterSnapshot, request: PlacementRequest) -> Placement | NoFit:
    """``request.shares`` parts of one GPU: an already shared one (best fit), else a free one."""
    view = View(snapshot)
    index = view.index
    slots = eligible(index, request, snapshot.sharing)
    if not slots:
        return NoFit(_never(request))
    rules, room = _rooms(index, request, snapshot.sharing, slots)
    chosen = _pack(view, snapshot, room)
    if chosen is None:
        chosen = _open(view, slots)
    if chosen is None:
        return NoFit(_busy(request))
    s, uuid = chosen
    node = index.node_name[index.slot_node[s]]
    return Placement(node, (uuid,), share_of(rules[s], request.shares, index.slot_class[s][0]))


def _rooms(
    index: ClusterIndex, request: PlacementRequest, policy: SharingPolicy, slots: Eligible
) -> tuple[dict[int, ShareRule], dict[int, int]]:
    """Per eligible slot: its rule, and the parts a GPU of it would have left after
    ``request`` if nothing else were on it (cached with :func:`eligible`'s answer)."""
    key = (request, policy, "rooms")
    hit = index.share_cache.get(key)
    if hit is None:
        hit = dict(slots), {s: rule.shares - request.shares for s, rule in slots}
        index.remember_shares(key, hit)
    return hit


def _pack(view: View, snapshot: ClusterSnapshot, parts: dict[int, int]) -> tuple[int, str] | None:
    """The shared GPU that the request's shares fit best (fewest parts left: ``parts`` is
    the room per slot with nothing held), then the weakest class, the calmest GPU, the
    node name, the GPU index; or None."""
    index, alloc = view.index, snapshot.allocations
    slot_of = index.slot_of
    fewest = -1
    fits: list[tuple[int, str]] = []  # the GPUs left with ``fewest`` parts free
    for uuid, held in snapshot.shares.items():
        room = parts.get(slot_of.get(uuid, -1))
        if room is None:
            continue
        left = room - held
        if left < 0 or (fewest >= 0 and left > fewest) or alloc.get(uuid) != SHARED:
            continue
        if left != fewest:
            fewest, fits = left, []
        fits.append((slot_of[uuid], uuid))
    if not fits:
        return None
    device, rank, node, name = index.device_of, index.slot_rank, index.slot_node, index.node_name
    return min(
        fits,
        key=lambda f: (
            rank[f[0]],
            device[f[1]][2],
            name[node[f[0]]],
            device[f[1]][1],
        ),
    )


def _open(view: View, slots: Eligible) -> tuple[int, str] | None:
    """A free GPU to open for sharing: the class as for one whole GPU (the cross-class
    fair share, whole big nodes kept: :func:`~.classes.fair_share`), counted over the
    GPUs the policy shares; in the class, the node with the fewest free GPUs of its
    model; on it, the calmest GPU."""
    index = view.index
    options: list[ClassOption] = []
    rank, best, fewest, free, gpus = -1, -1, 0, 0, 0
    for s, _ in (*slots, (-1, None)):  # slots come grouped by class, smallest first
        r = index.slot_rank[s] if s >= 0 else -1
        if r != rank:
            if best >= 0:
                options.append(ClassOption(best, free, gpus, breaks_whole(view, best, 1)))
            rank, best, fewest, free, gpus = r, -1, 0, 0, 0
        if s < 0:
            break
        n = view.free(s)
        free += n
        gpus += index.slot_size[s]
        if n >= 1 and (best < 0 or n < fewest):
            best, fewest = s, n
    if not options:
        return None
    slot = fair_share(options, 1)
    device = min(view.free_devices(slot), key=lambda d: (d[2], d[1]))
    return slot, device[0]


def never_shares(snapshot: ClusterSnapshot, request: PlacementRequest) -> str | None:
    """Why no GPU of this cluster could ever hold ``request``'s shares, or None."""
    if eligible(index_for(snapshot.nodes), request, snapshot.sharing):
        return None
    return _never(request)


def _what(request: PlacementRequest) -> str:
    parts = "share" if request.shares == 1 else f"{request.shares} shares"
    models = sorted(request.allowed_models or ())
    return f"{parts} of {' or '.join(models) if models else 'a GPU'}"


def _never(request: PlacementRequest) -> str:
    return (
        f"No GPU here may be shared as {_what(request)}"
        + (
            f" with at least {request.min_memory_mib / 1024:g} GiB"
            if request.min_memory_mib
            else ""
        )
        + ". Choose a whole GPU, or fewer shares."
    )


def _busy(request: PlacementRequest) -> str:
    return f"No GPU has room for {_what(request)} right now. It waits in the queue."
