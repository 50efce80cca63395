"""GPU placement: a pure decision over a cluster snapshot (see ``docs/placement.md``).

``place(snapshot, request)`` returns a :class:`Placement` (node + GPU uuids) or a
:class:`NoFit` whose ``reason`` is a sentence for the user; ``availability(snapshot)``
summarises free GPUs per model for the spawn form. The baselines in :mod:`.baselines`
exist for the benchmark.
"""

from .explain import ModelAvailability, availability
from .index import GPUClass, gpu_class
from .model import NoFit, Placement, PlacementRequest
from .policy import place

__all__ = [
    "GPUClass",
    "ModelAvailability",
    "NoFit",
    "Placement",
    "PlacementRequest",
    "availability",
    "gpu_class",
    "place",
]
