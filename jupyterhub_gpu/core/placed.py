"""What a placement decided becomes (pure): the spawn page's line naming the node and
GPUs, and the allocation's record for accounting."""

from __future__ import annotations

from jupyterhub_gpu.core.accounting.records import AllocationRecord
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.progress import describe_gpus
from jupyterhub_gpu.core.snapshot import ClusterSnapshot


def describe_placement(snapshot: ClusterSnapshot, decision: Placement) -> str:
    """ "node gpu-b, GPU 1 (RTX 3090, 24 GiB)" for ``decision`` on ``snapshot``'s nodes."""
    node = next(n for n in snapshot.nodes if n.name == decision.node)
    gpus = [node.inventory.gpu(u) for u in decision.gpu_uuids]
    return describe_gpus(decision.node, [(g.index, g.model, g.memory_mib) for g in gpus if g])


def placed_record(
    snapshot: ClusterSnapshot,
    decision: Placement,
    *,
    allocation: str,
    user: str,
    server: str,
    group: str,
    image: str,
    cuda: str,
    cpus: float | None,
    mem_gib: float | None,
    hub: str,
) -> AllocationRecord:
    """The record of the allocation ``decision`` reserves (its GPUs' model as the node's
    inventory names it; a share's fraction of its one GPU)."""
    node = next(n for n in snapshot.nodes if n.name == decision.node)
    models = [g.model for g in map(node.inventory.gpu, decision.gpu_uuids) if g]
    return AllocationRecord(
        id=allocation,
        user=user,
        server=server,
        group=group,
        node=decision.node,
        gpu_uuids=tuple(decision.gpu_uuids),
        gpu_model=models[0] if models else "",
        gpu_fraction=decision.share.fraction if decision.share else 1.0,
        image=image,
        cuda=cuda,
        cpus=cpus,
        mem_gib=mem_gib,
        hub=hub,
    )


__all__ = ["describe_placement", "placed_record"]
