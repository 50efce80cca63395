"""The placement policy: fair-share best fit across GPU classes, packing within a class.

``place(snapshot, request)`` answers a :class:`Placement` or a :class:`NoFit`. It is a
pure function over plain data (the cached index in :mod:`.index` is memoisation only).

The rules, in order:

1. **Feasibility.** All GPUs on one node and of one model; each GPU healthy (``True`` or
   ``None`` = can't tell), not allocated, not running a process outside our containers;
   the node schedulable and reachable, its driver at least the image's minimum; the model
   allowed, with at least ``min_memory_mib`` and a compute capability in the image's range.
2. **Best fit across classes, with a fair share.** A class is ``(memory_mib, compute
   capability)``, ordered by memory, then capability. The request goes to the smallest
   class that, after the placement, still has at least its *fair share* of free GPUs:
   ``ceil(class GPUs x free fraction over all classes that fit the request)``, so a
   class with any room keeps at least one GPU while other classes have room too. Among
   those classes, one where the request fits on a node already in use goes before one
   where it would break up a whole free node of ``KEEP_WHOLE_GPUS`` (4) or more GPUs:
   whole big nodes stay for multi-GPU servers. If no class keeps its share, the smallest
   class that fits. So big cards stay for big requests, and a small class is not
   drained for requests that could go elsewhere while the people who can only use that
   class (an old image, a pinned model) find none. A request that fits one class only
   simply gets it.
3. **Packing within the class.** The node whose free GPUs of that model would be fewest
   after the placement wins (a perfect fit first, whole free nodes last), keeping whole
   nodes for multi-GPU requests: fragmentation, as in Weng et al., USENIX ATC '23.
4. **Topology** (``gpu_count > 1``): among equally packed nodes, one whose free GPUs share
   a ``topology_group`` wins; on the node, the GPUs come from one group when they can.
5. **Image locality.** Among the nodes still tied (same class, same GPUs left free after
   the placement, and, for several GPUs, a shared topology group if the rule-4 choice has
   one), one that already holds the request's image (``request.image`` meets
   ``NodeState.images``) wins: its start needs no pull of 5-15 GB. It never breaks a whole
   free node (of ``KEEP_WHOLE_GPUS`` or more) that the rule-4 choice would keep.
6. **Least loaded.** Remaining ties go to the node with the lowest live load (mean of
   max(utilisation, memory used) over its GPUs), then node name; on the node, to the GPUs
   with the lowest live load, then the lowest index.

What locality may trade, and what it never does: it replaces only the least-loaded
tie-break (rule 6) between nodes that rules 1-4 find equally good. The class is chosen
before it looks (rule 2 runs on the choice without images), so a heavy request keeps its
strong GPU and a small class keeps its fair share; the packing score is the same
(only nodes with exactly as many free GPUs qualify); a topology group is never given up
for it, since that bandwidth lasts the server's life while a pull is paid once (and the
pre-puller can pay it ahead). Reservations, quotas and the queue's fairness live in
``core.scheduling`` and admission, before ``place``: locality can't reach them. When no
node holds the image (or the request names none) every decision is exactly the one
without locality. A server without GPUs is placed by
:func:`~jupyterhub_gpu.core.placement.locality.cpu_node`, where locality comes first.

A request for shares of one GPU (``request.shares``, issue 26) is placed by
:func:`~jupyterhub_gpu.core.placement.shares.place_share` instead (its own rules: pack
onto shared GPUs, best fit, else open the weakest free one); shared GPUs are in
``allocations``, so the rules above never give one whole.
"""

from __future__ import annotations

from operator import itemgetter

from jupyterhub_gpu.core.placement.classes import (  # noqa: F401 (re-exported)
    KEEP_WHOLE_GPUS,
    ClassOption,
    breaks_whole,
    fair_share,
)
from jupyterhub_gpu.core.placement.explain import explain
from jupyterhub_gpu.core.placement.index import ClassSlots, Device
from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest
from jupyterhub_gpu.core.placement.shares import place_share
from jupyterhub_gpu.core.placement.view import View, check_request
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

_NO_SLOT = -1
_TOPOLOGY_LOOKS = 64  # equally packed nodes examined for a shared topology group


def place(snapshot: ClusterSnapshot, request: PlacementRequest) -> Placement | NoFit:
    """Choose a node and GPUs for ``request``, or say in one sentence why none fits now."""
    check_request(request)
    if request.shares:
        return place_share(snapshot, request)
    view = View(snapshot)
    count = request.gpu_count
    options: list[ClassOption] = []
    groups: dict[int, ClassSlots] = {}
    for group in view.index.candidates(request):
        slot, free = best_slot(view, group, count)
        if slot != _NO_SLOT:
            options.append(ClassOption(slot, free, group.gpus, breaks_whole(view, slot, count)))
            groups[slot] = group
    if not options:
        return NoFit(explain(view, request))
    slot = fair_share(options, count)
    slot = local_slot(view, groups[slot], slot, count)
    return view.placement(slot, choose_devices(view.free_devices(slot), count))


def local_slot(view: View, group: ClassSlots, chosen: int, count: int) -> int:
    """Rule 5: a slot of ``group`` as good as ``chosen`` by rules 1-4 on a node that holds
    the image (the first in the static order), else ``chosen``.

    As good: as many free GPUs (the same packing), no whole free node broken where
    ``chosen`` breaks none, and, for several GPUs, a shared topology group where
    ``chosen`` has one. At most ``_TOPOLOGY_LOOKS`` holders are checked for a group.
    """
    holders = group.holders
    if not holders or chosen in holders:
        return chosen
    free, whole = view.free(chosen), breaks_whole(view, chosen, count)
    grouped = count > 1 and _group_fits(view.free_devices(chosen), count)
    looks = 0
    for s in holders:
        if view.free(s) != free or (breaks_whole(view, s, count) and not whole):
            continue
        if grouped and not _group_fits(view.free_devices(s), count):
            looks += 1
            if looks >= _TOPOLOGY_LOOKS:
                break
            continue
        return s
    return chosen


def best_slot(view: View, group: ClassSlots, count: int) -> tuple[int, int]:
    """The packed-tightest slot of ``group`` with ``count`` free GPUs (or ``-1``), and the
    class's free GPUs.

    The slots come in static tie-break order (live load, node name), so the first slot
    with the smallest leftover wins; for several GPUs, the first of those (up to
    ``_TOPOLOGY_LOOKS``) whose free GPUs share a topology group. List scans, no loop.
    """
    slots = group.slots
    frees = itemgetter(*slots)(view.free_counts) if len(slots) > 1 else (view.free(slots[0]),)
    class_free = sum(frees)
    top = max(frees, default=0)
    for leftover in range(count, top + 1):
        if leftover in frees:
            break
    else:
        return _NO_SLOT, class_free
    first = frees.index(leftover)
    if count > 1:
        at = first
        for _ in range(_TOPOLOGY_LOOKS):
            if _group_fits(view.free_devices(group.slots[at]), count):
                return group.slots[at], class_free
            if leftover not in frees[at + 1 :]:
                break
            at = frees.index(leftover, at + 1)
    return group.slots[first], class_free


def _group_fits(devices: list[Device], count: int) -> bool:
    groups: dict[str, int] = {}
    for d in devices:
        if d[3] is not None:
            groups[d[3]] = groups.get(d[3], 0) + 1
    return any(n >= count for n in groups.values())


def _calm(d: Device) -> tuple[float, int]:
    return (d[2], d[1])


def choose_devices(free: list[Device], count: int) -> list[Device]:
    """``count`` of the ``free`` GPUs of one node: one topology group if possible, calm first.

    The group chosen is the smallest that holds the request (best fit, keeping bigger
    groups whole); without one, whole groups are taken largest first so the server spans
    as few groups as possible.
    """
    if count == 1:
        return [min(free, key=_calm)]
    groups: dict[str | None, list[Device]] = {}
    for d in free:
        groups.setdefault(d[3], []).append(d)
    named = [g for key, g in groups.items() if key is not None]
    fitting = [g for g in named if len(g) >= count]
    if fitting:
        group = min(fitting, key=lambda g: (len(g), sum(d[2] for d in g), str(g[0][3])))
        return sorted(group, key=_calm)[:count]
    ordered = sorted(named, key=lambda g: (-len(g), str(g[0][3])))
    ordered += [[d] for d in sorted(groups.get(None, []), key=_calm)]
    chosen: list[Device] = []
    for g in ordered:
        chosen.extend(sorted(g, key=_calm)[: count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen
