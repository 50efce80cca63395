"""The allocation ledger: which GPU each server holds.

The source of truth is the containers themselves (their labels on every node) and the
spawners' persisted state; this in-memory ledger is a cache rebuilt from them and kept
in line by reconciliation. Reservations are made synchronously (no ``await`` between
checking and taking), so concurrent spawns on the hub's event loop can't both take
the same GPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from jupyterhub_gpu.core.accounting.records import (
    AllocationEvent,
    AllocationRecord,
    EndReason,
    EventKind,
)
from jupyterhub_gpu.core.holds import Hold, NodeHolds, latest
from jupyterhub_gpu.core.placement.journal import Allocations
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.scheduling.admission import overlay
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot

log = logging.getLogger(__name__)
Listener = Callable[[AllocationEvent], None]


class GPULedger:
    """GPU uuid -> :class:`Hold`. One per hub process (shared by every spawner).

    A GPU is held whole (``_holds``) or by shares (``_shared``: uuid -> one hold per
    server, orphans by their key), never both; the shares on a GPU never add up to more
    than its ``N``, and every share on it agrees on ``N``.
    """

    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}
        self._shared: dict[str, dict[str, Hold]] = {}  # uuid -> share key -> hold
        self._servers: dict[str, Hold] = {}  # holder -> the node its server is placed on
        self._orphans: dict[str, Hold] = {}  # Hold.key -> where an orphaned server was
        # holder -> the allocation its container's labels carry when it is not the server's
        # own: a server resumed from a checkpoint runs in the container it was created in
        self._labelled: dict[str, str] = {}
        self._open: dict[str, tuple[str, tuple[str, ...]]] = {}  # allocation -> node, GPUs
        self._listeners: list[Listener] = []
        # what allocations() answers, kept journaled as holds change (see _touch)
        self._alloc = Allocations()

    # ------------------------------------------------------------------ allocation events
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with every :class:`AllocationEvent` (reserve, start, release)."""
        self._listeners.append(listener)

    def _announce(self, event: AllocationEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # a listener never breaks a spawn
                log.exception("Allocation listener %r failed on %s", listener, event.kind)

    def open_allocation(self, record: AllocationRecord) -> None:
        self._open[record.id] = (record.node, record.gpu_uuids)
        self._announce(AllocationEvent(EventKind.RESERVED, record.id, record=record))

    def rejoin_allocation(self, record: AllocationRecord) -> None:
        """An allocation found again (spawner state after a restart): open, announced as
        REJOINED (its record holds what the state kept; the store has the rest)."""
        if record.id:
            self._open[record.id] = (record.node, record.gpu_uuids)
            self._announce(AllocationEvent(EventKind.REJOINED, record.id, record=record))

    def allocation_started(self, allocation: str) -> None:
        if allocation:
            self._announce(AllocationEvent(EventKind.STARTED, allocation))

    def end_allocation(self, allocation: str, reason: EndReason) -> None:
        """Announce the end of ``allocation`` (idempotent downstream: the first end stands)."""
        if allocation:
            self._open.pop(allocation, None)
            self._announce(AllocationEvent(EventKind.RELEASED, allocation, reason=reason))

    def open_allocations(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """allocation id -> (node, GPU uuids) of what this hub knows as open."""
        return dict(self._open)

    def allocation_of(self, holder: str) -> str:
        placed = self._servers.get(holder)
        return placed.allocation if placed else ""

    def allocations(self) -> Allocations:
        """uuid -> holder of every held GPU, orphans included (for placement: taken); a
        GPU held by shares is :data:`~jupyterhub_gpu.core.snapshot.SHARED`.

        A copy (a C-level dict copy), journaled: the placement index re-checks only the
        GPUs that changed since the copy it saw last."""
        return self._alloc.fork()

    def _touch(self, uuid: str) -> None:
        """Bring ``uuid``'s entry of :meth:`allocations` in line with the holds."""
        hold = self._holds.get(uuid)
        want = SHARED if uuid in self._shared else hold.holder if hold is not None else None
        if want is None:
            self._alloc.pop(uuid, None)
        elif self._alloc.get(uuid) != want:
            self._alloc[uuid] = want

    def overlay(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with this ledger's holds laid over it (the one overlay:
        :func:`~jupyterhub_gpu.core.scheduling.admission.overlay`)."""
        return overlay(snapshot, self.allocations(), self.share_use())

    def share_use(self) -> dict[str, int]:
        """uuid -> the shares held on it, orphans included (for placement)."""
        return {
            u: sum(h.share[0] for h in hs.values() if h.share) for u, hs in self._shared.items()
        }

    def charged(self) -> dict[str, str]:
        """uuid -> holder of the GPUs live servers hold whole (what quotas count; no
        orphans). Shares: :meth:`charged_shares`."""
        return {uuid: h.holder for uuid, h in self._holds.items() if not h.orphaned}

    def charged_shares(self) -> list[tuple[str, str, float]]:
        """(uuid, holder, fraction of the GPU) of every share a live server holds."""
        return [
            (u, h.holder, h.share[0] / h.share[1])
            for u, hs in self._shared.items()
            for h in hs.values()
            if h.share and not h.orphaned
        ]

    def hold_of(self, uuid: str) -> Hold | None:
        return self._holds.get(uuid)

    def shares_on(self, uuid: str) -> list[Hold]:
        """The share holds on ``uuid`` (orphans included)."""
        return list(self._shared.get(uuid, {}).values())

    def _all(self) -> list[tuple[str, Hold]]:
        """(uuid, hold) of every hold, whole and shares."""
        out = list(self._holds.items())
        out += [(u, h) for u, hs in self._shared.items() for h in hs.values()]
        return out

    def rejoin_server(
        self, holder: str, record: AllocationRecord, share: Share | None
    ) -> list[str]:
        """A server the hub's database says runs (after a restart): its GPUs (a share as a
        share), its place on the node and its open allocation held again; returns the
        GPUs others hold."""
        node, uuids, allocation = record.node, list(record.gpu_uuids), record.id
        if share is None or len(uuids) != 1:
            conflicts = self.adopt(holder, node, uuids, allocation)
        else:
            held = (share.count, share.of)
            ok = self.adopt_share(holder, node, uuids[0], held, allocation)
            conflicts = [] if ok else uuids
        self.place_server(holder, node, allocation)
        self.rejoin_allocation(record)
        return conflicts

    def held_by(self, holder: str) -> list[str]:
        """The GPUs ``holder``'s live server holds, whole or a share (its orphans aside)."""
        return sorted(u for u, h in self._all() if h.holder == holder and not h.orphaned)

    def on_node(self, node: str) -> NodeHolds:
        """``node``'s holds as plain data (what reconciliation decides over)."""
        return NodeHolds(
            gpus=tuple((u, h) for u, h in self._all() if h.node == node),
            servers=tuple(h for h in self._servers.values() if h.node == node),
            orphans=tuple(h for h in self._orphans.values() if h.node == node),
        )

    def holders_on(
        self, node: str, older_than: float = 0.0, taken_before: float | None = None
    ) -> set[str]:
        """Holders of live GPU holds or servers on ``node`` whose holds are at least
        ``older_than`` s old (and, if given, were taken or last confirmed before
        ``taken_before``, a monotonic time). Orphans: :meth:`orphans_on`."""
        return self.on_node(node).holders(latest(time.monotonic(), older_than, taken_before))

    def orphans_on(
        self, node: str, older_than: float = 0.0, taken_before: float | None = None
    ) -> dict[str, Hold]:
        """Orphans on ``node`` (key -> one of its holds) as old as :meth:`holders_on` asks."""
        return self.on_node(node).orphans_by_key(latest(time.monotonic(), older_than, taken_before))

    def reserve(self, holder: str, node: str, uuids: Iterable[str], allocation: str = "") -> None:
        """Take ``uuids`` for ``holder`` or raise ``KeyError`` naming a taken one; all or none.
        An orphan is someone else, even one of the same holder."""
        wanted = list(uuids)
        for uuid in wanted:
            current = self._holds.get(uuid)
            if current is not None and (current.holder != holder or current.orphaned):
                raise KeyError(f"GPU {uuid} is held by {current.holder}")
            if self._shared.get(uuid):
                raise KeyError(f"GPU {uuid} is shared")
        for uuid in wanted:
            self._holds[uuid] = Hold(holder, node, allocation=allocation)
            self._touch(uuid)

    def reserve_placement(self, holder: str, decision: Placement, allocation: str) -> None:
        """Take what admission placed for ``holder`` (its GPUs whole, or its share of one)
        and its place on the node; ``KeyError`` when another spawn took them first."""
        share = decision.share
        if share is None:
            self.reserve(holder, decision.node, decision.gpu_uuids, allocation)
        else:
            (uuid,) = decision.gpu_uuids
            self.reserve_share(holder, decision.node, uuid, (share.count, share.of), allocation)
        self.place_server(holder, decision.node, allocation)

    def reserve_share(
        self, holder: str, node: str, uuid: str, share: tuple[int, int], allocation: str = ""
    ) -> None:
        """Take ``share`` = (K, N) of ``uuid`` for ``holder``, or raise ``KeyError`` saying
        why not: the GPU is held whole, split otherwise, or has fewer than K shares free.
        Synchronous: two spawns racing for the last share can't both get it."""
        reason = self._share_conflict(uuid, share, holder)
        if reason:
            raise KeyError(reason)
        self._shared.setdefault(uuid, {})[holder] = Hold(
            holder, node, allocation=allocation, share=share
        )
        self._touch(uuid)

    def _share_conflict(self, uuid: str, share: tuple[int, int], own: str) -> str | None:
        """Why ``share`` can't be held on ``uuid`` besides the others (``own``: the key of
        the hold it would replace), or None."""
        count, of = share
        if uuid in self._holds:
            return f"GPU {uuid} is held whole by {self._holds[uuid].holder}"
        others = [h for key, h in self._shared.get(uuid, {}).items() if key != own]
        if any(h.share and h.share[1] != of for h in others):
            return f"GPU {uuid} is split into other shares than {of}"
        used = sum(h.share[0] for h in others if h.share)
        if used + count > of:
            return f"GPU {uuid} has {of - used} of {of} shares free, {count} asked"
        return None

    @staticmethod
    def _share_key(holder: str, orphaned: bool, key: str) -> str:
        return f"orphan:{key}" if orphaned else holder

    def adopt(
        self,
        holder: str,
        node: str,
        uuids: Iterable[str],
        allocation: str = "",
        orphaned: bool = False,
    ) -> list[str]:
        """Record holds found in state or labels (as orphans with ``orphaned``); returns the
        uuids held by someone else (an orphan and a live server are two holders)."""
        conflicts = []
        for uuid in uuids:
            if self._shared.get(uuid):
                conflicts.append(uuid)  # a whole hold on a shared GPU
                continue
            current = self._holds.get(uuid)
            if current is not None and (current.holder, current.orphaned) != (holder, orphaned):
                conflicts.append(uuid)
                continue
            self._holds[uuid] = Hold(holder, node, allocation=allocation, orphaned=orphaned)
            self._touch(uuid)
        return conflicts

    def adopt_share(
        self,
        holder: str,
        node: str,
        uuid: str,
        share: tuple[int, int],
        allocation: str = "",
        orphaned: bool = False,
    ) -> bool:
        """Record a share found in state or labels; False (nothing recorded) when it
        conflicts: the GPU held whole, split otherwise, or its shares all taken."""
        hold = Hold(holder, node, allocation=allocation, orphaned=orphaned, share=share)
        key = self._share_key(holder, orphaned, hold.key)
        if self._share_conflict(uuid, share, key):
            return False
        self._shared.setdefault(uuid, {})[key] = hold
        self._touch(uuid)
        return True

    def release_placement(
        self, holder: str, uuids: Iterable[str], allocation: str, ended: EndReason | None
    ) -> list[str]:
        """A server's GPUs and place on its node freed (its allocation ended for ``ended``
        first, if given); returns the GPUs freed."""
        if ended is not None:
            self.end_allocation(allocation, ended)
        freed = self.release(holder, uuids)
        self.release_server(holder)
        return freed

    def release(self, holder: str, uuids: Iterable[str] | None = None) -> list[str]:
        """Free what ``holder``'s live server holds (only those ``uuids`` if given); returns
        what was freed. Its orphans stay: :meth:`release_orphan`."""
        targets = self.held_by(holder) if uuids is None else list(uuids)
        freed = []
        for uuid in targets:
            hold = self._holds.get(uuid)
            if hold is not None and hold.holder == holder and not hold.orphaned:
                del self._holds[uuid]
                self._touch(uuid)
                freed.append(uuid)
            elif self._drop_share(uuid, holder):
                freed.append(uuid)
        return freed

    def _drop_share(self, uuid: str, key: str) -> bool:
        shares = self._shared.get(uuid, {})
        if shares.pop(key, None) is None:
            return False
        if not shares:
            del self._shared[uuid]
            self._touch(uuid)
        return True

    def orphan(self, holder: str) -> None:
        """The hub lets go of ``holder``'s server while its container may still run: its
        GPUs and its place on the node stay held, as an orphan (see :class:`Hold`)."""
        placed = self._servers.pop(holder, None)
        self._labelled.pop(holder, None)  # its container is no one's now
        allocation = placed.allocation if placed is not None else ""
        for uuid, hold in list(self._holds.items()):
            if hold.holder == holder and not hold.orphaned:
                self._holds[uuid] = replace(
                    hold, orphaned=True, allocation=hold.allocation or allocation
                )
        for shares in self._shared.values():
            mine = shares.pop(holder, None)
            if mine is not None:
                mine = replace(mine, orphaned=True, allocation=mine.allocation or allocation)
                shares[self._share_key(holder, True, mine.key)] = mine
        if placed is not None:
            orphan = replace(placed, orphaned=True)
            self._orphans[orphan.key] = orphan

    def release_orphan(self, key: str) -> list[str]:
        """Free the orphan ``key`` (its container is gone); returns the GPUs freed."""
        self._orphans.pop(key, None)
        freed = sorted(u for u, h in self._holds.items() if h.orphaned and h.key == key)
        for uuid in freed:
            del self._holds[uuid]
            self._touch(uuid)
        shared = sorted(u for u in list(self._shared) if self._drop_share(u, f"orphan:{key}"))
        return sorted(freed + shared)

    # servers, with or without GPUs: where each one is placed (CPU-only ones spread by it)
    def place_server(self, holder: str, node: str, allocation: str = "") -> None:
        self._servers[holder] = Hold(holder, node, allocation=allocation)

    def label_allocation(self, holder: str, allocation: str) -> None:
        """``holder``'s server runs in a container whose (sealed) labels carry
        ``allocation``, not the server's own: a server resumed from a checkpoint
        (hub/suspend.py). It counts as live while the server is placed, so reconciliation
        never takes that container for an interrupted spawn's."""
        if allocation:
            self._labelled[holder] = allocation

    def live_allocations(self) -> set[str]:
        """The allocation ids of the servers placed (running or starting), and those their
        containers' labels carry (:meth:`label_allocation`); orphans are not: their server
        was let go of, their container is no longer anyone's."""
        live = {h.allocation for h in self._servers.values() if h.allocation}
        return live | {a for h, a in self._labelled.items() if h in self._servers}

    def servers_on(self, node: str) -> int:
        """Servers placed on ``node``, orphans included (their containers still run)."""
        placed = [*self._servers.values(), *self._orphans.values()]
        return sum(1 for h in placed if h.node == node)

    def release_server(self, holder: str) -> None:
        self._servers.pop(holder, None)
        self._labelled.pop(holder, None)
