"""What is free now, per GPU model, for the spawn form ("RTX 3090: 2 of 4 free"). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jupyterhub_gpu.core.inventory import GPU, NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

_PREFIXES = ("NVIDIA ", "GeForce ")


def short_model_name(model: str) -> str:
    """``"NVIDIA GeForce RTX 3090"`` -> ``"RTX 3090"``; ``"NVIDIA A100-SXM4-80GB"`` ->
    ``"A100-SXM4-80GB"``."""
    name = model
    for prefix in _PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
    return name


@dataclass(frozen=True)
class ModelAvailability:
    """One GPU model across the cluster: how many exist, how many are free now."""

    model: str
    total: int
    free: int
    memory_mib: int  # the largest memory among GPUs of this model

    @property
    def label(self) -> str:
        return short_model_name(self.model)

    @property
    def text(self) -> str:
        return f"{self.label}: {self.free} of {self.total} free"

    @property
    def memory_gib(self) -> int:
        return self.memory_mib // 1024


def gpu_is_free(snapshot: ClusterSnapshot, node: NodeState, gpu: GPU) -> bool:
    """Free: node up and schedulable, GPU healthy (or unknown), not handed out by the
    ledger, and no process of a container that is not ours (or of the host) on it."""
    if not (node.reachable and node.schedulable) or gpu.healthy is False:
        return False
    if gpu.uuid in snapshot.allocations:
        return False
    return all(c in snapshot.our_containers for c in gpu.process_containers)


def gpu_model_availability(
    snapshot: ClusterSnapshot, free_counts: Mapping[str, int] | None = None
) -> tuple[ModelAvailability, ...]:
    """Every model in the cluster with its total and free counts, sorted by name.

    Offline nodes' and broken GPUs count in the total, never as free. ``free_counts``
    (model -> free GPUs, e.g. from placement's ``explain.availability``) overrides the
    free counts computed here by :func:`gpu_is_free`, so the form and placement agree.
    """
    totals: dict[str, int] = {}
    free: dict[str, int] = {}
    memory: dict[str, int] = {}
    for node in snapshot.nodes:
        for gpu in node.inventory.gpus:
            totals[gpu.model] = totals.get(gpu.model, 0) + 1
            free[gpu.model] = free.get(gpu.model, 0) + int(gpu_is_free(snapshot, node, gpu))
            memory[gpu.model] = max(memory.get(gpu.model, 0), gpu.memory_mib)
    if free_counts is not None:
        free = {m: min(int(free_counts.get(m, 0)), totals[m]) for m in totals}
    return tuple(
        ModelAvailability(model=m, total=totals[m], free=free[m], memory_mib=memory[m])
        for m in sorted(totals)
    )


def find_model(models: Iterable[ModelAvailability], name: str) -> ModelAvailability | None:
    for m in models:
        if m.model == name:
            return m
    return None
