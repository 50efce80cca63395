"""GPU placement: a pure decision over a cluster snapshot (see ``docs/placement.md``).

``place(snapshot, request)`` returns a :class:`Placement` (node + GPU uuids) or a
:class:`NoFit` whose ``reason`` is a sentence for the user; ``availability(snapshot)``
summarises free GPUs per model for the spawn form. :mod:`.locality` says which nodes
hold a request's image (a tie-break of ``place``; the first rule for a server without
GPUs: ``locality.cpu_node``). The baselines in :mod:`.baselines` exist for the benchmark.
"""

from jupyterhub_gpu.core.placement.explain import ModelAvailability, availability
from jupyterhub_gpu.core.placement.index import GPUClass, gpu_class
from jupyterhub_gpu.core.placement.policy import place
from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest

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
