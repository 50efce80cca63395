"""Plain data for placement: what is asked, and what placement answers."""

from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.core.sharing.policy import Share


@dataclass(frozen=True)
class PlacementRequest:
    """What one server needs.

    ``allowed_models`` is ``None`` for "any model"; model names are matched exactly as
    the probe reports them (e.g. ``"NVIDIA GeForce RTX 3090"``).
    ``min_driver_version`` comes from the image's CUDA version (see the catalog);
    ``compute_capabilities`` is the inclusive range of architectures the image was
    built for, ``None`` for any.
    ``image`` holds the identities of the image the server runs
    (:func:`~jupyterhub_gpu.core.placement.locality.wanted`: a catalog entry's reference,
    a saved image's ``repo@digest``); empty when unknown. It never decides whether or on
    which GPUs a request fits, only which of equally good nodes wins (``policy`` rule 5).
    """

    gpu_count: int
    min_memory_mib: int = 0
    allowed_models: frozenset[str] | None = None
    min_driver_version: str | None = None
    min_compute_capability: tuple[int, int] | None = None
    max_compute_capability: tuple[int, int] | None = None
    image: frozenset[str] = frozenset()
    # issue 26: > 0 asks for that many shares of one GPU (gpu_count is then 1); the
    # share's memory (not the GPU's) must reach min_memory_mib. share_of > 0: only GPUs
    # split into that many shares ("a quarter": 1 of 4); 0: any split.
    shares: int = 0
    share_of: int = 0

    @property
    def gpu_amount(self) -> float:
        """How much of a GPU this asks for, as quotas count it: ``gpu_count``, or
        ``shares / share_of`` for a share (a whole GPU when the split is not known)."""
        if self.shares and self.share_of:
            return self.shares / self.share_of
        return float(self.gpu_count)


@dataclass(frozen=True)
class Placement:
    """A decision: put the server on ``node`` with exactly these GPUs (in index order);
    ``share`` when it holds part of its one GPU."""

    node: str
    gpu_uuids: tuple[str, ...]
    share: Share | None = None


@dataclass(frozen=True)
class NoFit:
    """Nothing fits now. ``reason`` is a sentence for a person: what is missing and
    what is free instead ("No RTX 3090 is free; 2 TITAN X are.")."""

    reason: str
