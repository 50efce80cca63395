"""Plain data describing GPU nodes: what the probes produce and placement consumes.

Nothing here does I/O. Every probe (NVML, declared inventory, a node agent's JSON)
produces a :class:`NodeInventory`; the hub combines them into a
:class:`~jupyterhub_gpu.core.snapshot.ClusterSnapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def parse_version(text: str) -> tuple[int, ...]:
    """``"535.104.05"`` -> ``(535, 104, 5)``; raises ``ValueError`` on anything else."""
    parts = str(text).strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted version number: {text!r}")
    return tuple(int(p) for p in parts)


def parse_compute_capability(text: str | float | tuple[int, int]) -> tuple[int, int]:
    """``"8.6"`` (or ``8.6``, ``(8, 6)``) -> ``(8, 6)``."""
    if isinstance(text, tuple):
        major, minor = text
        return int(major), int(minor)
    parts = str(text).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"compute capability must look like '8.6', got {text!r}")
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on a GPU, as the node agent reports it.

    ``container`` is its Docker container id, ``""`` when it is in none (or its cgroup
    could not be read). ``memory_mib`` / ``utilization_pct`` are ``None`` when NVML can't
    tell (NOT_SUPPORTED, no sample yet)."""

    pid: int
    container: str = ""
    memory_mib: int | None = None
    utilization_pct: float | None = None


@dataclass(frozen=True)
class GPU:
    """One physical GPU (or MIG instance) as a probe sees it."""

    uuid: str
    index: int
    model: str
    memory_mib: int
    compute_capability: tuple[int, int]
    # live readings (a declared inventory may set them at run time)
    utilization_pct: float = 0.0
    memory_used_mib: int = 0
    temperature_c: float | None = None
    # True: healthy, False: broken, None: the card can't tell (NOT_SUPPORTED)
    healthy: bool | None = True
    # ids of containers running compute processes on this GPU ("" = a host process)
    process_containers: tuple[str, ...] = ()
    # each compute process with its container, memory and utilisation; None: the probe
    # (or an older agent) reports no per-process data (core/attribution attributes them)
    processes: tuple[GpuProcess, ...] | None = None
    # GPUs with the same topology group share a PCIe switch / NVLink (None: unknown)
    topology_group: str | None = None

    @property
    def memory_free_mib(self) -> int:
        return max(self.memory_mib - self.memory_used_mib, 0)


@dataclass(frozen=True)
class NodeInventory:
    """Everything a probe knows about one node's GPUs."""

    name: str
    driver_version: str
    gpus: tuple[GPU, ...] = ()
    cuda_driver_version: str | None = None  # e.g. "12.4": the newest CUDA the driver runs
    labels: Mapping[str, str] = field(default_factory=dict)

    def gpu(self, uuid: str) -> GPU | None:
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        return None


@dataclass(frozen=True)
class NodeState:
    """A node as placement sees it: its inventory plus the hub's view of it.

    ``images`` are the identities of the images its engine holds (tags, repo digests and
    IDs, spelled as :mod:`jupyterhub_gpu.core.placement.locality` spells them), as last
    read; empty when unknown.
    """

    inventory: NodeInventory
    schedulable: bool = True  # False when drained by an admin
    reachable: bool = True  # False when its engine or agent did not answer in time
    images: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.inventory.name
