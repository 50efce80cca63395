"""GPU processes attributed to containers and allocations (pure: plain data in and out).

The node agent reads, per GPU, NVML's compute processes (host pid, memory) and their
utilisation, and each pid's ``/proc/<pid>/cgroup``. :func:`container_id_from_cgroup` is
the one parser of that file (cgroup v1 and v2; Docker's ``systemd`` driver names a
container ``.../docker-<64 hex>.scope``, its ``cgroupfs`` driver ``/docker/<64 hex>``).
:func:`attribute` then folds the readings with the containers of ours (their labels) into
each container's use of each GPU, and lists every process it could not attribute:

- ``host``: in no container (or its cgroup could not be read): someone on the host;
- ``foreign``: in a container that is not one of ours (no allocation label);
- ``unfenced``: in one of our containers, on a GPU its ``jupyterhub-gpu.gpus`` label does
  not name (the fence leaked, or the labels lie).

Every unattributed process means its GPU is busy; none of them is ever charged to (or
excuses) a share. A share's use is only what its own container's processes do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jupyterhub_gpu.core.attribution.labels import (
    ALLOCATION_LABEL,
    Share,
    labelled_gpus,
    parse_share,
)
from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.errors import ShareLabelError

_CONTAINER_RE = re.compile(r"(?:/docker-([0-9a-f]{64})\.scope|/docker/([0-9a-f]{64}))(?=/|$)")
#: Most bytes of a ``/proc/<pid>/cgroup`` text read (v1 hosts list ~13 lines of ~100).
MAX_CGROUP_TEXT = 64 * 1024


def container_id_from_cgroup(text: str) -> str | None:
    """The Docker container id in a ``/proc/<pid>/cgroup`` text, or ``None`` (host process).

    Lines are ``hierarchy-id:controllers:path`` (v2 has the single line ``0::path``).
    Matches ``.../docker-<64 hex>.scope`` (systemd driver) and ``/docker/<64 hex>``
    (cgroupfs driver), in v1 and v2 layouts. With nested containers the outermost one
    (the one the host's engine knows) wins. Text beyond :data:`MAX_CGROUP_TEXT` is ignored.
    """
    for line in text[:MAX_CGROUP_TEXT].splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        match = _CONTAINER_RE.search(parts[2])
        if match:
            return match.group(1) or match.group(2)
    return None


@dataclass(frozen=True)
class Container:
    """One of the node's containers with its labels (as the engine lists them)."""

    id: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class ContainerUse:
    """What one container's processes use of one GPU.

    ``memory_mib`` / ``utilization_pct`` are sums over its processes (utilisation capped
    at 100); ``None`` when any of its processes has no such reading (a partial sum would
    understate the use). ``share`` is ``None`` for a whole-GPU allocation; ``share_error``
    says why the share labels were refused (the container is then judged as a whole)."""

    container: str
    gpu: str
    allocation: str
    share: Share | None
    pids: tuple[int, ...]
    memory_mib: int | None
    utilization_pct: float | None
    share_error: str = ""


@dataclass(frozen=True)
class Unattributed:
    """A process charged to no allocation, and why (``host``, ``foreign``, ``unfenced``)."""

    gpu: str
    process: GpuProcess
    reason: str


@dataclass(frozen=True)
class Attribution:
    uses: tuple[ContainerUse, ...]
    unattributed: tuple[Unattributed, ...]

    def use_of(self, container: str, gpu: str) -> ContainerUse | None:
        for u in self.uses:
            if u.container == container and u.gpu == gpu:
                return u
        return None

    def busy_gpus(self) -> frozenset[str]:
        """GPUs with a process that belongs to no allocation of ours."""
        return frozenset(u.gpu for u in self.unattributed)


def _sum_memory(procs: Iterable[GpuProcess]) -> int | None:
    values = [p.memory_mib for p in procs]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _sum_util(procs: Iterable[GpuProcess]) -> float | None:
    values = [p.utilization_pct for p in procs]
    if any(v is None for v in values):
        return None
    return min(sum(v for v in values if v is not None), 100.0)


def container_totals(
    processes: Iterable[GpuProcess],
) -> dict[str, tuple[int | None, float | None]]:
    """One GPU's processes summed per container (``""``: host processes): memory MiB and
    utilisation %, each ``None`` when one of its processes has no such reading."""
    groups: dict[str, list[GpuProcess]] = {}
    for p in processes:
        groups.setdefault(p.container, []).append(p)
    return {c: (_sum_memory(ps), _sum_util(ps)) for c, ps in sorted(groups.items())}


def attribute(
    processes: Mapping[str, Iterable[GpuProcess]], containers: Iterable[Container]
) -> Attribution:
    """Fold each GPU's processes (``{gpu uuid: processes}``) with our ``containers``.

    A container is ours when it has an allocation label. Its processes on a GPU its
    ``gpus`` label names are its use; anything else is :class:`Unattributed`.
    """
    ours = {c.id: c for c in containers if c.labels.get(ALLOCATION_LABEL)}
    grouped: dict[tuple[str, str], list[GpuProcess]] = {}
    strays: list[Unattributed] = []
    for gpu, procs in sorted(processes.items()):
        for p in procs:
            owner = ours.get(p.container) if p.container else None
            if not p.container:
                strays.append(Unattributed(gpu, p, "host"))
            elif owner is None:
                strays.append(Unattributed(gpu, p, "foreign"))
            elif gpu not in labelled_gpus(owner.labels):
                strays.append(Unattributed(gpu, p, "unfenced"))
            else:
                grouped.setdefault((p.container, gpu), []).append(p)
    uses = []
    for (cid, gpu), procs in sorted(grouped.items()):
        labels = ours[cid].labels
        try:
            share, error = parse_share(labels), ""
        except ShareLabelError as e:
            share, error = None, str(e)
        uses.append(
            ContainerUse(
                container=cid,
                gpu=gpu,
                allocation=labels[ALLOCATION_LABEL],
                share=share,
                pids=tuple(sorted(p.pid for p in procs)),
                memory_mib=_sum_memory(procs),
                utilization_pct=_sum_util(procs),
                share_error=error,
            )
        )
    return Attribution(tuple(uses), tuple(strays))


@dataclass(frozen=True)
class ShareReading:
    """One server's reading of one GPU for the culler: its own processes' use when the
    agent reports per-process data, else the whole GPU's (``own`` says which)."""

    utilization_pct: float
    memory_used_mib: float | None
    own: bool


def share_reading(
    processes: Iterable[GpuProcess] | None,
    container: str,
    gpu_utilization_pct: float,
    gpu_memory_used_mib: float | None,
) -> ShareReading:
    """The reading a share's idleness is judged by, from one GPU's agent reading.

    ``processes=None`` (an agent that reports no per-process data) or a process of the
    container without a utilisation sample: the whole GPU's reading, which can only make
    the share look busier, never idler (no server is culled on a guess). Otherwise the sum
    over ``container``'s own processes: none running = 0 % and 0 MiB.
    """
    if processes is None:
        return ShareReading(gpu_utilization_pct, gpu_memory_used_mib, own=False)
    mine = [p for p in processes if p.container == container]
    util = _sum_util(mine)
    if util is None:
        return ShareReading(gpu_utilization_pct, gpu_memory_used_mib, own=False)
    memory = _sum_memory(mine)
    return ShareReading(util, None if memory is None else float(memory), own=True)
