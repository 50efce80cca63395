"""Prometheus metrics over the agent's cached snapshot (no probe read per scrape).

Per GPU, labelled ``node``, ``uuid``, ``index``, ``model``:

- ``jupyterhub_gpu_utilization_percent``
- ``jupyterhub_gpu_memory_used_bytes``, ``jupyterhub_gpu_memory_total_bytes``
- ``jupyterhub_gpu_temperature_celsius`` (absent when the card doesn't report it)
- ``jupyterhub_gpu_healthy`` (1 healthy, 0 broken; absent when the card can't tell)
- ``jupyterhub_gpu_process_containers``: containers with compute processes on the GPU
- ``jupyterhub_gpu_host_processes``: 1 when a process outside any container uses it
- ``jupyterhub_gpu_container_memory_used_bytes`` and
  ``jupyterhub_gpu_container_utilization_percent``, also labelled ``container`` (its
  first 12 hex digits, ``""`` for host processes): what each container's processes use
  of the GPU (issue #26: who uses which share), when the probe reads per-process data
  and NVML could tell

Per node: ``jupyterhub_gpu_node_info`` (driver versions), ``jupyterhub_gpu_agent_snapshot_
timestamp_seconds`` (when the GPUs were last read) and ``jupyterhub_gpu_agent_read_errors_total``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from jupyterhub_gpu.core.attribution.processes import container_totals
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.services.agent.poller import SnapshotPoller

_MIB = 1024 * 1024
_GPU_LABELS = ["node", "uuid", "index", "model"]
_CONTAINER_LABELS = [*_GPU_LABELS, "container"]


class SnapshotCollector(Collector):
    """Turns the poller's latest snapshot into metric families on every scrape."""

    def __init__(self, poller: SnapshotPoller) -> None:
        self.poller = poller

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        snapshot = self.poller.snapshot
        node = snapshot.inventory.name if snapshot else ""
        errors = CounterMetricFamily(
            "jupyterhub_gpu_agent_read_errors",
            "Failed GPU readings since the agent started",
            labels=["node"],
        )
        errors.add_metric([node], self.poller.read_errors)
        yield errors
        if snapshot is None:
            return
        inv = snapshot.inventory
        info = InfoMetricFamily("jupyterhub_gpu_node", "The node's NVIDIA driver", labels=["node"])
        info.add_metric(
            [node],
            {
                "driver_version": inv.driver_version,
                "cuda_driver_version": inv.cuda_driver_version or "",
            },
        )
        yield info
        stamp = GaugeMetricFamily(
            "jupyterhub_gpu_agent_snapshot_timestamp_seconds",
            "When the agent last read the GPUs (Unix time)",
            labels=["node"],
        )
        stamp.add_metric([node], snapshot.time)
        yield stamp
        yield from self._gpu_families(node, snapshot.inventory)
        yield from self._container_families(node, snapshot.inventory)

    @staticmethod
    def _container_families(node: str, inv: NodeInventory) -> Iterator[GaugeMetricFamily]:
        memory = GaugeMetricFamily(
            "jupyterhub_gpu_container_memory_used_bytes",
            "GPU memory held by a container's processes ('' = host processes)",
            labels=_CONTAINER_LABELS,
        )
        util = GaugeMetricFamily(
            "jupyterhub_gpu_container_utilization_percent",
            "SM utilisation of a container's processes ('' = host processes)",
            labels=_CONTAINER_LABELS,
        )
        for g in inv.gpus:
            for container, (mib, pct) in container_totals(g.processes or ()).items():
                labels = [node, g.uuid, str(g.index), g.model, container[:12]]
                if mib is not None:
                    memory.add_metric(labels, mib * _MIB)
                if pct is not None:
                    util.add_metric(labels, pct)
        yield memory
        yield util

    @staticmethod
    def _gpu_families(node: str, inv: NodeInventory) -> Iterator[GaugeMetricFamily]:
        families = {
            "util": GaugeMetricFamily(
                "jupyterhub_gpu_utilization_percent", "GPU utilisation", labels=_GPU_LABELS
            ),
            "used": GaugeMetricFamily(
                "jupyterhub_gpu_memory_used_bytes", "GPU memory in use", labels=_GPU_LABELS
            ),
            "total": GaugeMetricFamily(
                "jupyterhub_gpu_memory_total_bytes", "GPU memory", labels=_GPU_LABELS
            ),
            "temp": GaugeMetricFamily(
                "jupyterhub_gpu_temperature_celsius", "GPU temperature", labels=_GPU_LABELS
            ),
            "healthy": GaugeMetricFamily(
                "jupyterhub_gpu_healthy",
                "1 healthy, 0 broken (absent when the card can't tell)",
                labels=_GPU_LABELS,
            ),
            "procs": GaugeMetricFamily(
                "jupyterhub_gpu_process_containers",
                "Containers running compute processes on the GPU (a host process counts one)",
                labels=_GPU_LABELS,
            ),
            "host": GaugeMetricFamily(
                "jupyterhub_gpu_host_processes",
                "1 when a process outside any container uses the GPU",
                labels=_GPU_LABELS,
            ),
        }
        for g in inv.gpus:
            labels = [node, g.uuid, str(g.index), g.model]
            families["util"].add_metric(labels, g.utilization_pct)
            families["used"].add_metric(labels, g.memory_used_mib * _MIB)
            families["total"].add_metric(labels, g.memory_mib * _MIB)
            if g.temperature_c is not None:
                families["temp"].add_metric(labels, g.temperature_c)
            if g.healthy is not None:
                families["healthy"].add_metric(labels, 1.0 if g.healthy else 0.0)
            families["procs"].add_metric(labels, len(g.process_containers))
            families["host"].add_metric(labels, 1.0 if "" in g.process_containers else 0.0)
        yield from families.values()


def make_registry(poller: SnapshotPoller) -> CollectorRegistry:
    """A registry of its own (not the global one): only the agent's GPU metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(poller))
    return registry
