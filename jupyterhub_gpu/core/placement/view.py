"""One decision's view of a snapshot: the cached index plus what is taken right now."""

from __future__ import annotations

from collections.abc import Mapping

from jupyterhub_gpu.core.placement.index import ClusterIndex, Device, index_for
from jupyterhub_gpu.core.placement.request import Placement, PlacementRequest
from jupyterhub_gpu.core.snapshot import ClusterSnapshot


class View:
    """The index of ``snapshot.nodes`` with this snapshot's allocations and foreign GPUs.

    Built once per decision; ``free_counts[slot]`` is how many GPUs of the slot are free
    (healthy, unallocated, no foreign process). Immutable once built.
    """

    __slots__ = ("allocations", "foreign", "free_counts", "index")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.index: ClusterIndex = index_for(snapshot.nodes)
        self.allocations: Mapping[str, str] = snapshot.allocations
        self.free_counts, self.foreign = self.index.sync(
            snapshot.allocations, snapshot.our_containers
        )

    def free(self, slot: int) -> int:
        """How many GPUs of ``slot`` are free (healthy, unallocated, no foreign process)."""
        return self.free_counts[slot]

    def free_devices(self, slot: int) -> list[Device]:
        """The free GPUs of ``slot``, by GPU index."""
        alloc, foreign = self.allocations, self.foreign
        return [
            d for d in self.index.slot_devices[slot] if d[0] not in alloc and d[0] not in foreign
        ]

    def placement(self, slot: int, devices: list[Device]) -> Placement:
        """The answer for ``devices`` of ``slot``, GPUs in index order."""
        uuids = tuple(d[0] for d in sorted(devices, key=lambda d: d[1]))
        return Placement(node=self.index.node_name[self.index.slot_node[slot]], gpu_uuids=uuids)


def check_request(request: PlacementRequest) -> None:
    """Reject requests no placement can answer (a CPU-only server needs no placement)."""
    if request.gpu_count < 1:
        raise ValueError(f"gpu_count must be >= 1, got {request.gpu_count}")
    if request.shares < 0 or (request.shares and request.gpu_count != 1):
        raise ValueError(
            f"a share request asks for shares >= 1 of one GPU, got shares={request.shares} "
            f"of gpu_count={request.gpu_count}"
        )
