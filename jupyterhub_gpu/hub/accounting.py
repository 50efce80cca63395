"""The hub's side of accounting: what the store had open at start, each allocation's usage
folded from the GPU readings, and the wait for a record before its container exists.

One :class:`Accounting` per :class:`~jupyterhub_gpu.hub.cluster.Cluster` with an
``accounting_url``; the :class:`~.recorder.Recorder` writes, on its own thread, what the
ledger announces. Reconciliation (``hub/reconciliation.py``) closes, as MISSED, what the
store had open at start and nothing confirms (:meth:`Accounting.close_missed`), and
samples usage after each round (:meth:`Accounting.sample_usage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Set as AbstractSet
from typing import Any

from jupyterhub_gpu.core.accounting.records import EndReason, utcnow
from jupyterhub_gpu.core.accounting.usage import GPUSample, Usage, fold
from jupyterhub_gpu.core.allocation import LabelledContainer
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable, safe_url
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.metrics import RECONCILIATION
from jupyterhub_gpu.hub.recorder import Recorder, close_missed


class Accounting:
    """The recorder of one hub and what it keeps between reconciliation rounds."""

    def __init__(self, url: str, hub_id: str, ledger: GPULedger, log: logging.Logger) -> None:
        self.hub_id, self.ledger, self.log = hub_id, ledger, log
        self.recorder = Recorder(AccountingStore(url), log)
        self._usage: dict[str, Usage] = {}  # open allocation -> its usage so far
        self._unconfirmed: dict[str, str] | None = None  # open in the store at start: id -> node
        self.recorder.submit(lambda store: store.upgrade())
        self.recorder.submit(self._load_unconfirmed)
        ledger.subscribe(self.recorder)
        ledger.subscribe(self._forget_usage)
        log.info("GPU accounting records to %s", safe_url(url))

    def _load_unconfirmed(self, store: AccountingStore) -> None:
        """(worker thread) What the store has open when the hub starts: each is confirmed
        by a server or container, or closed as MISSED by reconciliation."""
        self._unconfirmed = store.open_allocations(hub=self.hub_id)

    def _forget_usage(self, event: Any) -> None:
        if event.reason is not None:
            self._usage.pop(event.allocation, None)

    async def sample_usage(self, snapshot: ClusterSnapshot) -> None:
        """Fold the snapshot's GPU readings into each open allocation's usage and save it
        (nodes that did not answer count nothing: their readings are old). An allocation
        this process has not sampled yet (re-joined after a restart) continues from what
        the store has; until the store has answered for it, it is not sampled at all, so
        a restart never overwrites its usage with a fresh start."""
        open_now = {a: v for a, v in self.ledger.open_allocations().items() if v[1]}
        unknown = [a for a in open_now if a not in self._usage]
        if unknown:
            try:
                stored = await asyncio.wrap_future(self.recorder.call(lambda s: s.usages(unknown)))
            except AccountingUnavailable:
                open_now = {a: v for a, v in open_now.items() if a not in unknown}
            else:
                for allocation in unknown:
                    self._usage.setdefault(allocation, stored.get(allocation, Usage()))
        inventories = {n.name: n.inventory for n in snapshot.nodes if n.reachable}
        at, changed = utcnow(), {}
        for allocation, (node, uuids) in open_now.items():
            inventory = inventories.get(node)
            if inventory is None:
                continue
            samples = [
                GPUSample(g.utilization_pct, g.memory_used_mib)
                for g in (inventory.gpu(u) for u in uuids)
                if g is not None
            ]
            usage = fold(self._usage.get(allocation, Usage()), at, samples)
            self._usage[allocation] = changed[allocation] = usage
        self.recorder.save_usage(changed)

    def close_missed(
        self,
        nodes: list[str],
        listings: list[list[LabelledContainer] | None],
        live: AbstractSet[str],
    ) -> None:
        """Close, as MISSED, what the store had open at start and nothing here confirms:
        no live server, no spawn in progress, no running container with its id on a node
        that answered (a node that did not answer decides nothing)."""
        if not self._unconfirmed:
            return
        seen = set(live) | set(self.ledger.open_allocations())
        answered = {n for n, found in zip(nodes, listings, strict=True) if found is not None}
        known = set(nodes)
        answered |= {node for node in self._unconfirmed.values() if node not in known}
        for found in listings:
            seen |= {c.allocation for c in found or () if c.running and c.allocation}
        confirmed = {a for a in self._unconfirmed if a in seen}
        missed = close_missed(self._unconfirmed, seen, answered)
        for allocation in missed:
            self.log.info(
                "Accounting: allocation %s on node %s ended while the hub was down; closed "
                "now, marked missed",
                allocation,
                self._unconfirmed[allocation],
            )
            self.ledger.end_allocation(allocation, EndReason.MISSED)
            RECONCILIATION.labels("closed_missed").inc()
        for allocation in confirmed | set(missed):
            del self._unconfirmed[allocation]

    async def recorded(self, timeout: float = 10.0) -> bool:
        """Wait until what was announced so far is in the accounting database (a spawn
        calls it between reserving and creating its container, so a hub killed in between
        leaves a record for reconciliation to close). False, with one warning, when the
        database did not take it in ``timeout`` s: the spawn goes on, the record waits."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(self.recorder.flush()), timeout)
        if self.recorder.backlog:
            self.log.warning(
                "Accounting: %d records not yet written (database slow or down); spawning "
                "anyway, they are written when it answers",
                self.recorder.backlog,
            )
            return False
        return True


__all__ = ["Accounting"]
