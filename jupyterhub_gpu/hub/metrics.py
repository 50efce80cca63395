"""The hub's Prometheus series (on JupyterHub's own ``/hub/metrics``, default registry).

Labels are those of the agent's series (``node``, ``uuid``, ``model``), so the two join
``on(node, uuid)``; none is per user (bounded cardinality: nodes x GPUs, groups x models).
A share of a GPU (issue 26) counts as its fraction K/N wherever GPUs are summed (GPUs held,
GPU-seconds), as accounting charges it; who holds which share is the dashboard's to show.
See docs/metrics.md for every series and the dcgm-exporter equivalents.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from jupyterhub_gpu.core.accounting.records import AllocationEvent, EventKind
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.snapshot import SHARED
from jupyterhub_gpu.core.ssh.census import SSHReport
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.recorder import Recorder

SPAWN_DECISIONS = Counter(
    "jupyterhub_gpu_spawn_decisions",
    "Spawn placement decisions: outcome placed or refused, with the refusal's reason",
    ["outcome", "reason"],
)
RECONCILIATION = Counter(
    "jupyterhub_gpu_reconciliation_actions",
    "What reconciliation did: round, freed (holds without a container), extra (GPUs a "
    "container's labels don't list), conflict, removed_interrupted, closed_missed",
    ["action"],
)


class GPUSeconds:
    """Listens to the ledger: GPU-seconds allocated, by charge group and GPU model (a
    share counts as its fraction of its GPU, ``AllocationRecord.gpu_amount``)."""

    def __init__(self) -> None:
        self.closed: dict[tuple[str, str], float] = {}
        # allocation -> group, model, GPUs (a share's fraction), "whole" or "share", since
        self.open: dict[str, tuple[str, str, float, str, float]] = {}

    def __call__(self, event: AllocationEvent) -> None:
        if event.kind in (EventKind.RESERVED, EventKind.REJOINED) and event.record is not None:
            r = event.record
            if r.gpus:
                kind = "share" if r.gpu_fraction < 1.0 else "whole"
                self.open[r.id] = (r.group, r.gpu_model, r.gpu_amount, kind, time.monotonic())
        elif event.kind is EventKind.RELEASED and event.allocation in self.open:
            group, model, gpus, _, since = self.open.pop(event.allocation)
            key = (group, model)
            self.closed[key] = self.closed.get(key, 0.0) + gpus * (time.monotonic() - since)

    def totals(self) -> dict[tuple[str, str], float]:
        now, out = time.monotonic(), dict(self.closed)
        for group, model, gpus, _, since in self.open.values():
            out[(group, model)] = out.get((group, model), 0.0) + gpus * (now - since)
        return out

    def allocations_by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for group, *_ in self.open.values():
            out[group] = out.get(group, 0) + 1
        return out

    def held_by_group(self) -> dict[tuple[str, str, str], float]:
        """(group, model, "whole" or "share") -> GPUs the open allocations hold, a share
        counted as its fraction."""
        out: dict[tuple[str, str, str], float] = {}
        for group, model, amount, kind, _ in self.open.values():
            key = (group, model, kind)
            out[key] = out.get(key, 0.0) + amount
        return out


class ClusterView(Protocol):
    """What the collector reads of the hub's :class:`~jupyterhub_gpu.hub.cluster.Cluster`
    (which imports this module for its own series)."""

    ledger: GPULedger
    recorder: Recorder | None

    def last_nodes(self) -> tuple[NodeState, ...]: ...


class ClusterCollector(Collector):
    """Reads the hub's cluster (its last snapshot and the ledger) at each scrape."""

    def __init__(self) -> None:
        self._cluster: weakref.ReferenceType[ClusterView] | None = None
        self.gpu_seconds = GPUSeconds()

    def attach(self, cluster: ClusterView) -> None:
        self._cluster = weakref.ref(cluster)
        self.gpu_seconds = GPUSeconds()
        cluster.ledger.subscribe(self.gpu_seconds)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        cluster = self._cluster() if self._cluster else None
        if cluster is None:
            return
        held = cluster.ledger.allocations()
        per_gpu = GaugeMetricFamily(
            "jupyterhub_gpu_allocated",
            "1 when the hub has the GPU allocated to a server (or held for one), else 0",
            labels=["node", "uuid", "model"],
        )
        shares = GaugeMetricFamily(
            "jupyterhub_gpu_shares",
            "Shares of a GPU held by shares (issue 26), held or free: held + free is the N "
            "it is split into; only GPUs held by shares appear",
            labels=["node", "uuid", "model", "state"],
        )
        counts = GaugeMetricFamily(
            "jupyterhub_gpu_gpus",
            "GPUs by node, model and state: free, allocated, unavailable (node drained or "
            "not answering, or GPU unhealthy)",
            labels=["node", "model", "state"],
        )
        for state in cluster.last_nodes():
            tally: dict[tuple[str, str], int] = {}
            for g in state.inventory.gpus:
                allocated = g.uuid in held
                per_gpu.add_metric([state.name, g.uuid, g.model], 1.0 if allocated else 0.0)
                if held.get(g.uuid) == SHARED:
                    taken, of = _shares(cluster.ledger, g.uuid)
                    for which, n in (("held", taken), ("free", of - taken)):
                        shares.add_metric([state.name, g.uuid, g.model, which], n)
                usable = state.reachable and state.schedulable and g.healthy is not False
                which = "allocated" if allocated else "free" if usable else "unavailable"
                tally[(g.model, which)] = tally.get((g.model, which), 0) + 1
            for (model, which), n in sorted(tally.items()):
                counts.add_metric([state.name, model, which], n)
        yield per_gpu
        yield shares
        yield counts
        by_group = GaugeMetricFamily(
            "jupyterhub_gpu_allocations",
            "Open GPU allocations by charge group (made since the hub started)",
            labels=["group"],
        )
        for group, n in sorted(self.gpu_seconds.allocations_by_group().items()):
            by_group.add_metric([group], n)
        yield by_group
        held_gpus = GaugeMetricFamily(
            "jupyterhub_gpu_held_gpus",
            "GPUs the open allocations hold by charge group, GPU model and kind (whole or "
            "share): a share counts as its fraction of its GPU",
            labels=["group", "model", "kind"],
        )
        for (group, model, kind), amount in sorted(self.gpu_seconds.held_by_group().items()):
            held_gpus.add_metric([group, model, kind], amount)
        yield held_gpus
        seconds = CounterMetricFamily(
            "jupyterhub_gpu_allocated_gpu_seconds",
            "GPU-seconds allocated by charge group and GPU model (since the hub started)",
            labels=["group", "model"],
        )
        for (group, model), value in sorted(self.gpu_seconds.totals().items()):
            seconds.add_metric([group, model], value)
        yield seconds
        backlog = GaugeMetricFamily(
            "jupyterhub_gpu_accounting_backlog",
            "Accounting writes waiting for the database (0 when it keeps up)",
        )
        backlog.add_metric([], cluster.recorder.backlog if cluster.recorder else 0)
        yield backlog


def _shares(ledger: GPULedger, uuid: str) -> tuple[int, int]:
    """(shares held, the N it is split into) of a GPU held by shares, orphans' included."""
    holds = [h.share for h in ledger.shares_on(uuid) if h.share is not None]
    return sum(k for k, _ in holds), max((n for _, n in holds), default=0)


class SSHCollector(Collector):
    """The SSH gateway's open sessions and forwards by charge group (its last report)."""

    def __init__(self) -> None:
        self._report: weakref.ReferenceType[SSHReport] | None = None

    def attach(self, report: SSHReport) -> None:
        self._report = weakref.ref(report)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        report = self._report() if self._report else None
        groups = report.current_groups(time.monotonic()) if report is not None else {}
        sessions = GaugeMetricFamily(
            "jupyterhub_gpu_ssh_sessions",
            "Open SSH sessions (shell, command, sftp, scp) through the SSH gateway, by the "
            "server's charge group (none: a server without one)",
            labels=["group"],
        )
        forwards = GaugeMetricFamily(
            "jupyterhub_gpu_ssh_forwards",
            "Open SSH forwarded connections (ssh -L) through the SSH gateway, by the "
            "server's charge group",
            labels=["group"],
        )
        for group, (s, f) in sorted(groups.items()):
            sessions.add_metric([group], s)
            forwards.add_metric([group], f)
        yield sessions
        yield forwards


COLLECTOR = ClusterCollector()
REGISTRY.register(COLLECTOR)
SSH_COLLECTOR = SSHCollector()
REGISTRY.register(SSH_COLLECTOR)
