"""GPU-aware idle culler: a pure idleness judgement and the hub-managed service around it.

- :mod:`.idleness`: is this server idle? (pure; plain dataclasses in, a decision out)
- :mod:`.tracker`: folds one GPU's readings into the summary the judgement reads (pure)
- :mod:`.notes`: the small file of recent cull reasons users are shown
- :mod:`.client`: hub API, single-user servers and node agents over HTTP
- :mod:`.service`: the ``GPUIdleCuller`` application (run ``python -m jupyterhub_gpu.culler``)
"""

from .idleness import (
    Decision,
    GpuSummary,
    KernelObservation,
    KernelsObservation,
    Policy,
    ServerObservation,
    Signal,
    judge,
    resolve_policy,
    validate_overrides,
)
from .tracker import GpuTracker

__all__ = [
    "Decision",
    "GpuSummary",
    "GpuTracker",
    "KernelObservation",
    "KernelsObservation",
    "Policy",
    "ServerObservation",
    "Signal",
    "judge",
    "resolve_policy",
    "validate_overrides",
]
