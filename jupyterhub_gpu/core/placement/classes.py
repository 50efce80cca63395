"""Choosing among GPU classes: the cross-class fair share and whole big nodes (pure).

Shared by whole placement (``policy.place``, rule 2) and by share placement
(``shares.place_share``, when it opens a GPU): both keep every class's fair share of
free GPUs for the requests that can use only that class, and keep whole free nodes of
``KEEP_WHOLE_GPUS`` or more GPUs for multi-GPU servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from jupyterhub_gpu.core.placement.view import View

KEEP_WHOLE_GPUS = 4  # whole free nodes (of one model) this big are kept for multi-GPU servers


class ClassOption(NamedTuple):
    """One class that can hold the request now: its packed-tightest slot, the class's
    free GPUs and GPUs, and whether that slot is a whole free node ``place`` would
    rather keep whole."""

    slot: int
    free: int
    gpus: int
    breaks_whole: bool = False


def breaks_whole(view: View, slot: int, count: int) -> bool:
    """Whether placing ``count`` GPUs on ``slot`` breaks up a whole free node that the
    class choice would rather keep for a multi-GPU server."""
    size = view.index.slot_size[slot]
    return view.free(slot) == size and size >= max(KEEP_WHOLE_GPUS, count + 1)


def fair_share(options: Sequence[ClassOption], count: int) -> int:
    """The slot of the smallest class left with its fair share of free GPUs (one that
    breaks no whole node first), else the first.

    ``options`` come one per class that fits, smallest class first.
    """
    free_after = sum(o.free for o in options) - count
    gpus = sum(o.gpus for o in options)
    keeping = [o for o in options if o.free - count >= -(-free_after * o.gpus // gpus)]
    intact = [o for o in keeping if not o.breaks_whole]
    return (intact or keeping or options)[0].slot
