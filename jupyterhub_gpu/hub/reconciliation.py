"""Reconciliation: the ledger brought in line with the labelled containers of every node.

The decision is pure (:mod:`jupyterhub_gpu.core.reconciliation`: a node's listing sorted
into kept and doomed containers, then what the ledger holds there that nothing backs);
this module lists the nodes (through the :class:`~.cluster.Cluster`'s Docker calls),
adopts, frees, removes the containers of interrupted spawns, logs each change and counts
it (``RECONCILIATION``), every ``reconcile_interval`` s and before the first placement.
docs/architecture.md says why each rule is what it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Set as AbstractSet

from jupyterhub_gpu.core.accounting.records import EndReason
from jupyterhub_gpu.core.allocation import LABEL, LabelledContainer, containers_from_docker
from jupyterhub_gpu.core.reconciliation import NodeListing, sort_listing, to_free
from jupyterhub_gpu.errors import NotOnNode
from jupyterhub_gpu.hub.cluster_settings import NodeAccess
from jupyterhub_gpu.hub.metrics import RECONCILIATION


class Reconciler:
    """The reconciliation of one cluster: its rounds and what they remember (the
    containers of ours seen running, per node, and those whose bad labels were logged).
    ``pending``: the holders whose spawn is in progress (the spawners keep it)."""

    def __init__(self, cluster: NodeAccess) -> None:
        self.cluster = cluster
        self.pending: set[str] = set()
        self.our_containers: set[str] = set()
        self.reconciled = False
        self.rounds = 0  # finished rounds; each logs one DEBUG line
        self._label_problems: set[str] = set()  # containers whose bad labels were logged
        self._ids_on: dict[str, set[str]] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def ensure_reconciled(self) -> None:
        if not self.reconciled:
            await self.reconcile()
        self.start()

    def start(self) -> None:
        """Start the periodic rounds if they aren't running (needs the event loop)."""
        if self._task is None and self.cluster.settings.reconcile_interval > 0:
            self._task = asyncio.ensure_future(self._forever())

    async def _forever(self) -> None:
        cluster = self.cluster
        while True:
            await asyncio.sleep(cluster.settings.reconcile_interval)
            try:
                await self.reconcile()
            except Exception:
                cluster.log.exception("GPU ledger reconciliation failed; will retry")
            try:  # fresh node states for metrics, and usage for accounting
                snapshot = await cluster.snapshot()
                if cluster.accounting is not None:
                    await cluster.accounting.sample_usage(snapshot)
            except Exception:
                cluster.log.exception("Reading the nodes for metrics and usage failed; will retry")

    async def _list(self, node: str) -> list[LabelledContainer] | None:
        cluster = self.cluster
        if not await cluster.engine_ok(node):
            return None
        hub = f"{LABEL}.hub={cluster.settings.hub_id}"
        try:
            listing = await cluster.run(
                node, lambda: cluster.client(node).containers(filters={"label": hub})
            )
        except Exception as e:
            cluster.log.warning("Listing containers on node %s failed: %s", node, e)
            return None
        return containers_from_docker(node, listing)

    async def reconcile(self) -> None:
        """Bring the ledger in line with the labelled containers on every reachable node."""
        cluster, ledger = self.cluster, self.cluster.ledger
        async with self._lock:
            # What the listings can't have seen is left alone: holds taken after they began
            # and spawns in progress then (their container may be created after the listing).
            # Likewise a server the hub ran or was starting then (or now) keeps its container.
            began, pending = time.monotonic(), set(self.pending)
            live = ledger.live_allocations()
            nodes = [s.name for s in cluster.specs()] + cluster.retired_names()
            listings = await asyncio.gather(*(self._list(n) for n in nodes))
            doomed: list[LabelledContainer] = []
            for node, found in zip(nodes, listings, strict=True):
                if found is not None:
                    live_now = live | ledger.live_allocations()
                    doomed += self.apply(node, found, began, pending | self.pending, live_now)
            await asyncio.gather(*(self._remove_interrupted(c) for c in doomed))
            if cluster.accounting is not None:
                cluster.accounting.close_missed(nodes, listings, live | ledger.live_allocations())
            self.reconciled = True
            self.rounds += 1
            RECONCILIATION.labels("round").inc()
            cluster.log.debug(
                "Reconciliation round %d done: %d of %d node(s) listed",
                self.rounds,
                sum(found is not None for found in listings),
                len(nodes),
            )

    def apply(
        self,
        node: str,
        found: list[LabelledContainer],
        began: float,
        pending: set[str],
        live: AbstractSet[str] = frozenset(),
    ) -> list[LabelledContainer]:
        """Adopt what the listing of ``node`` shows, free what it no longer shows; returns
        the containers of interrupted spawns, whose GPUs stay held (as orphans) until
        :meth:`_remove_interrupted` has removed them."""
        settings = self.cluster.settings
        listing = sort_listing(
            found, hub_id=settings.hub_id, key=settings.seal_key, live=live, pending=pending
        )
        self._remember(node, listing)
        for c in listing.running:
            self._adopt(c, node, orphaned=c in listing.doomed)
        ledger = self.cluster.ledger
        latest = min(time.monotonic() - settings.reconcile_grace, began)
        frees = to_free(listing, ledger.on_node(node), pending=pending, latest=latest)
        for c, extra in frees.extra:  # a running server holds exactly what its labels list
            if ledger.release(c.holder, extra):
                RECONCILIATION.labels("extra").inc()
                self.cluster.log.info(
                    "Reconciliation: container %s of %s on %s does not use %s; freed",
                    c.id[:12],
                    c.holder,
                    node,
                    ", ".join(extra),
                )
        for holder in frees.stale:  # its spawner's poll ends its allocation
            freed = ledger.release(holder)
            ledger.release_server(holder)
            self._log_freed(holder, node, freed)
        for hold in frees.gone:  # a stop that could not reach the node
            freed = ledger.release_orphan(hold.key)
            ledger.end_allocation(hold.allocation, EndReason.NODE_LOST)
            self._log_freed(f"{hold.holder} (orphaned)", node, freed)
        return list(listing.doomed)

    def _remember(self, node: str, listing: NodeListing) -> None:
        """Which containers of ours run (the snapshot's ``our_containers``), and one log
        line for each whose labels do not parse, while it runs."""
        self.our_containers.difference_update(listing.stopped | self._ids_on.get(node, set()))
        self._ids_on[node] = {c.id for c in listing.running}
        self.our_containers.update(self._ids_on[node])
        self._label_problems &= self.our_containers  # logged once while they run, no more
        for c in listing.running:
            if c.label_problem and c.id not in self._label_problems:
                self._label_problems.add(c.id)
                self.cluster.log.warning(
                    "Container %s of %s on %s: its labels do not parse (%s); its GPUs are "
                    "held whole while it runs",
                    c.id[:12],
                    c.holder,
                    node,
                    c.label_problem,
                )

    def _adopt(self, c: LabelledContainer, node: str, orphaned: bool) -> None:
        """Hold what ``c``'s labels list (a share as a share: issue 26); a GPU that others
        hold too (not an orphan of the same server) is logged as a conflict."""
        settings, ledger = self.cluster.settings, self.cluster.ledger
        share = c.shares
        # whole GPUs: no share, a malformed share label, or a share label on a container
        # this hub sealed as whole (an image's forged LABEL, before every key was ours)
        if share is None or c.held_whole(settings.hub_id, settings.seal_key):
            taken = ledger.adopt(c.holder, node, c.gpus, c.allocation, orphaned)
        else:
            (uuid,) = c.gpus
            ok = ledger.adopt_share(c.holder, node, uuid, share, c.allocation, orphaned)
            taken = [] if ok else [uuid]
        conflicts = [u for u in taken if not self._own_orphan(u, c)]
        if conflicts:
            RECONCILIATION.labels("conflict").inc()
            self.cluster.log.error(
                "Container %s on %s holds GPUs also held by others: %s",
                c.id[:12],
                node,
                conflicts,
            )

    def _own_orphan(self, uuid: str, c: LabelledContainer) -> bool:
        """Is ``uuid`` held by an orphan of ``c``'s server (not a conflict: the same GPU)?"""
        ledger = self.cluster.ledger
        hold = ledger.hold_of(uuid)
        if hold is None:
            return any(h.orphaned and h.holder == c.holder for h in ledger.shares_on(uuid))
        return hold.orphaned and hold.holder == c.holder

    def _log_freed(self, holder: str, node: str, freed: list[str]) -> None:
        if freed:
            RECONCILIATION.labels("freed").inc()
            self.cluster.log.info(
                "Reconciliation: no container of %s on %s; freed %s",
                holder,
                node,
                ", ".join(freed),
            )

    async def _remove_interrupted(self, c: LabelledContainer) -> None:
        """Remove a container of an interrupted spawn (or stop) and free its GPUs."""
        cluster, ledger = self.cluster, self.cluster.ledger
        if c.holder in self.pending:
            return  # a new spawn of that server began meanwhile: next round decides
        try:
            await cluster.run(
                c.node, lambda: cluster.client(c.node).remove_container(c.id, force=True)
            )
        except NotOnNode:  # removed meanwhile (a failed start's clean-up)
            ledger.release_orphan(c.allocation or c.holder)
            ledger.end_allocation(c.allocation, EndReason.INTERRUPTED)
            return
        except Exception as e:
            cluster.log.warning(
                "Reconciliation: could not remove container %s of an interrupted spawn of %s "
                "on %s: %s; its GPUs stay held, next round retries",
                c.id[:12],
                c.holder,
                c.node,
                e,
            )
            return
        ledger.release_orphan(c.allocation or c.holder)  # a spawn or stop cut short
        ledger.end_allocation(c.allocation, EndReason.INTERRUPTED)
        RECONCILIATION.labels("removed_interrupted").inc()
        cluster.log.info(
            "Reconciliation: removed container %s of user %s, server %r on node %s, GPUs %s: "
            "the hub has no such server (a spawn or stop interrupted by a hub crash or a "
            "failed clean-up); GPUs freed",
            c.id[:12],
            c.owner,
            c.server,
            c.node,
            ", ".join(c.gpus) or "none",
        )


__all__ = ["Reconciler"]
