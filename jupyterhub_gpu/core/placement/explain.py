"""Words for people: why nothing fits, and what is free (the spawn form's summary).

``explain`` walks the request's constraints one at a time, so the sentence names the
first one that rules everything out ("no node has a driver new enough", "none is free"),
then lists what IS free and says what the user can do about it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import NamedTuple

from jupyterhub_gpu.core.placement.index import ClusterIndex, GPUClass, required_driver
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.placement.view import View
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

_FREE_LISTED = 3


class ModelAvailability(NamedTuple):
    """One line of the spawn form: ``model``: ``free`` of ``total`` free."""

    model: str
    free: int
    total: int


def availability(snapshot: ClusterSnapshot) -> list[ModelAvailability]:
    """Per GPU model: how many are free for a new server now, out of how many exist.

    ``total`` counts every GPU of the model in the snapshot (broken, drained or busy ones
    too); ``free`` counts the ones placement could hand out now. Smallest class first.
    """
    view = View(snapshot)
    index = view.index
    total: Counter[str] = Counter()
    free: Counter[str] = Counter()
    order: dict[str, GPUClass] = {}
    for s, model in enumerate(index.slot_model):
        total[model] += index.slot_size[s]
        order.setdefault(model, index.slot_class[s])
        if index.node_ok[index.slot_node[s]]:
            free[model] += view.free(s)
    for (_, model), n in index.unhealthy.items():
        total[model] += n
    return sorted(
        (ModelAvailability(m, free[m], total[m]) for m in total),
        key=lambda a: (order.get(a.model, (1 << 62, (0, 0))), a.model),
    )


def _gib(mib: int) -> str:
    return f"{mib / 1024:g} GiB"


def _models(request: PlacementRequest) -> str:
    if not request.allowed_models:
        return "GPU"
    names = sorted(request.allowed_models)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _memory(request: PlacementRequest) -> str:
    return f" with at least {_gib(request.min_memory_mib)}" if request.min_memory_mib > 0 else ""


def _image_bound(request: PlacementRequest) -> bool:
    return request.min_driver_version is not None or (
        request.min_compute_capability is not None or request.max_compute_capability is not None
    )


def _what(request: PlacementRequest) -> str:
    """``"NVIDIA GeForce RTX 3090 with at least 20 GiB that can run this image"``."""
    image = " that can run this image" if _image_bound(request) else ""
    return _models(request) + _memory(request) + image


def _gpus(request: PlacementRequest) -> str:
    """``"NVIDIA TITAN X (Pascal) GPUs"``, ``"GPUs with at least 40 GiB"``."""
    models = f"{_models(request)} GPUs" if request.allowed_models else "GPUs"
    return models + _memory(request)


def _cc_range(lo: tuple[int, int] | None, hi: tuple[int, int] | None) -> str:
    if lo is not None and hi is not None:
        return f"from {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}"
    if lo is not None:
        return f"{lo[0]}.{lo[1]} or newer"
    assert hi is not None
    return f"{hi[0]}.{hi[1]} or older"


def _names(index: ClusterIndex, slots: list[int]) -> str:
    nodes = sorted({index.node_name[index.slot_node[s]] for s in slots})
    return ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")


def _drivers(index: ClusterIndex, slots: list[int]) -> str:
    nodes = sorted({index.slot_node[s] for s in slots}, key=lambda n: index.node_name[n])
    shown = [f"{index.node_name[n]} runs {index.nodes[n].inventory.driver_version}" for n in nodes]
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")


def _static_gap(view: View, request: PlacementRequest) -> tuple[str, str | None] | None:
    """The first constraint no GPU meets, as (phrase, what to ask instead); None if some
    GPU could hold the request. No advice (None) when waiting may help."""
    index, req = view.index, request
    slots = [
        s
        for s in range(len(index.slot_node))
        if req.allowed_models is None or index.slot_model[s] in req.allowed_models
    ]
    if not slots:
        return f"This cluster has no working {_models(req)}", "Choose another GPU model."
    big = [s for s in slots if index.slot_class[s][0] >= req.min_memory_mib]
    if not big:
        most = max(index.slot_class[s][0] for s in slots)
        gap = f"No {_models(req)} here has {_gib(req.min_memory_mib)} (at most {_gib(most)})"
        return gap, f"Ask for at most {_gib(most)}."
    lo, hi = req.min_compute_capability, req.max_compute_capability
    fit = [s for s in big if (lo is None or index.slot_class[s][1] >= lo)]
    fit = [s for s in fit if hi is None or index.slot_class[s][1] <= hi]
    if not fit:
        return (
            f"This image needs compute capability {_cc_range(lo, hi)}, "
            f"and no {_models(req)}{_memory(req)} here has it"
        ), "Choose another image."
    driver = required_driver(req)
    new = [
        s for s in fit if driver is None or (index.node_driver[index.slot_node[s]] or ()) >= driver
    ]
    if not new:
        return (
            f"This image needs NVIDIA driver {req.min_driver_version} or newer, and every node "
            f"with {_gpus(req)} is older ({_drivers(index, fit)})"
        ), "Choose another image."
    up = [s for s in new if index.node_ok[index.slot_node[s]]]
    if not up:
        return (
            f"Every node with {_gpus(req)} ({_names(index, new)}) is drained or unreachable",
            None,
        )
    if not any(index.slot_size[s] >= req.gpu_count for s in up):
        most = max(index.slot_size[s] for s in up)
        gap = f"No node has {req.gpu_count} x {_what(req)} (at most {most} on one node)"
        return gap, f"Ask for at most {most} GPUs."
    return None


def _busy_gap(view: View, request: PlacementRequest) -> str:
    slots = [s for group in view.index.candidates(request) for s in group.slots]
    if request.gpu_count == 1:
        return f"No {_what(request)} is free"
    best = max(slots, key=lambda s: (view.free(s), -s))
    node = view.index.node_name[view.index.slot_node[best]]
    return (
        f"No node has {request.gpu_count} x {_what(request)} free at once "
        f"(at most {view.free(best)}, on {node})"
    )


def free_now(view: View) -> str | None:
    """``"2 x NVIDIA TITAN X (Pascal) on gpu-b, 1 x ... and 3 more"``, most first; None if none."""
    index, free = view.index, view.free_counts
    counts: Counter[tuple[str, str]] = Counter()
    for s in [s for s, n in enumerate(free) if n]:
        node = index.slot_node[s]
        if index.node_ok[node]:
            counts[(index.slot_model[s], index.node_name[node])] += free[s]
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{n} x {model} on {node}" for (model, node), n in ranked[:_FREE_LISTED]]
    rest = sum(n for _, n in ranked[_FREE_LISTED:])
    text = ", ".join(parts)
    return text + (f" and {rest} more" if rest else "")


def _fits_now(view: View, request: PlacementRequest) -> bool:
    return any(
        view.free(s) >= request.gpu_count
        for group in view.index.candidates(request)
        for s in group.slots
    )


def _advice(view: View, request: PlacementRequest, instead: str | None) -> str:
    """What to do: relax the model, change the image, ask for less (``instead``) or wait."""
    later = "" if instead else " or try later"
    count, memory = request.gpu_count, request.min_memory_mib
    any_model = PlacementRequest(
        count,
        memory,
        None,
        request.min_driver_version,
        request.min_compute_capability,
        request.max_compute_capability,
    )
    if request.allowed_models is not None and _fits_now(view, any_model):
        return f"Choose 'any GPU'{later}."
    if _image_bound(request) and _fits_now(view, PlacementRequest(count, memory)):
        return f"Those can't run this image: choose another image{later}."
    return instead or "Try later."


def explain(view: View, request: PlacementRequest) -> str:
    """Why ``request`` does not fit in ``view`` now, what is free, and what to do."""
    static = None if view.index.candidates(request) else _static_gap(view, request)
    gap, instead = static if static is not None else (_busy_gap(view, request), None)
    free = free_now(view)
    if free is None:
        plain = replace(request, image=frozenset())  # the image never decides a fit
        if static is None and plain == PlacementRequest(request.gpu_count):
            return f"No GPU is free right now. {instead or 'Try later.'}"
        return f"{gap}, and no other GPU is free right now. {instead or 'Try later.'}"
    return f"{gap}; free now: {free}. {_advice(view, request, instead)}"
