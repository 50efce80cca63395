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
from dataclasses import dataclass, field, replace

from .accounting.records import AllocationEvent, AllocationRecord, EndReason, EventKind

log = logging.getLogger(__name__)
Listener = Callable[[AllocationEvent], None]

ORPHAN = "orphan:"  # prefix of holds whose server was stopped while its node was unreachable


@dataclass(frozen=True)
class Hold:
    holder: str  # "<username>/<servername>"
    node: str
    since: float = field(default_factory=time.monotonic)
    allocation: str = ""  # a server's allocation id (allocation.py); "" for GPU holds


class GPULedger:
    """GPU uuid -> :class:`Hold`. One per hub process (shared by every spawner)."""

    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}
        self._servers: dict[str, Hold] = {}  # holder -> the node its server is placed on
        self._open: dict[str, tuple[str, tuple[str, ...]]] = {}  # allocation -> node, GPUs
        self._listeners: list[Listener] = []

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

    def allocations(self) -> dict[str, str]:
        """uuid -> holder, for placement snapshots."""
        return {uuid: hold.holder for uuid, hold in self._holds.items()}

    def held_by(self, holder: str) -> list[str]:
        return sorted(u for u, h in self._holds.items() if h.holder == holder)

    def holder_of(self, uuid: str) -> str | None:
        hold = self._holds.get(uuid)
        return hold.holder if hold else None

    def holders_on(
        self, node: str, older_than: float = 0.0, taken_before: float | None = None
    ) -> set[str]:
        """Holders of GPUs or servers on ``node`` whose holds are at least ``older_than`` s old
        (and, if given, were taken or last confirmed before ``taken_before``, a monotonic time).
        """
        now = time.monotonic()
        latest = now - older_than if taken_before is None else min(now - older_than, taken_before)
        gpus = {h.holder for h in self._holds.values() if h.node == node and h.since <= latest}
        servers = {
            holder for holder, h in self._servers.items() if h.node == node and h.since <= latest
        }
        return gpus | servers

    def reserve(self, holder: str, node: str, uuids: Iterable[str]) -> None:
        """Take ``uuids`` for ``holder`` or raise ``KeyError`` naming a taken one; all or none."""
        wanted = list(uuids)
        for uuid in wanted:
            current = self._holds.get(uuid)
            if current is not None and current.holder != holder:
                raise KeyError(f"GPU {uuid} is held by {current.holder}")
        for uuid in wanted:
            self._holds[uuid] = Hold(holder, node)

    def adopt(self, holder: str, node: str, uuids: Iterable[str]) -> list[str]:
        """Record holds found in state or labels; returns the uuids held by someone else."""
        conflicts = []
        for uuid in uuids:
            current = self._holds.get(uuid)
            if current is not None and current.holder != holder:
                conflicts.append(uuid)
                continue
            self._holds[uuid] = Hold(holder, node)
        return conflicts

    def held_on(self, holder: str, node: str, taken_before: float) -> list[str]:
        """GPUs ``holder`` holds on ``node`` whose holds were taken before ``taken_before``."""
        return sorted(
            u
            for u, h in self._holds.items()
            if h.holder == holder and h.node == node and h.since <= taken_before
        )

    def release(self, holder: str, uuids: Iterable[str] | None = None) -> list[str]:
        """Free what ``holder`` holds (only those ``uuids`` if given); returns what was freed."""
        targets = self.held_by(holder) if uuids is None else list(uuids)
        freed = []
        for uuid in targets:
            hold = self._holds.get(uuid)
            if hold is not None and hold.holder == holder:
                del self._holds[uuid]
                freed.append(uuid)
        return freed

    def rename(self, holder: str, new_holder: str) -> None:
        """Move every hold of ``holder`` (GPUs and server placement) to ``new_holder``."""
        for uuid, hold in list(self._holds.items()):
            if hold.holder == holder:
                self._holds[uuid] = Hold(new_holder, hold.node, hold.since)
        placed = self._servers.pop(holder, None)
        if placed is not None:
            self._servers[new_holder] = replace(placed, holder=new_holder)

    # servers, with or without GPUs: where each one is placed (CPU-only ones spread by it)
    def place_server(self, holder: str, node: str, allocation: str = "") -> None:
        self._servers[holder] = Hold(holder, node, allocation=allocation)

    def live_allocations(self) -> set[str]:
        """The allocation ids of the servers placed (running or starting), orphans aside:
        an orphan's server was stopped, its container is no longer anyone's."""
        return {
            h.allocation
            for holder, h in self._servers.items()
            if h.allocation and not holder.startswith(ORPHAN)
        }

    def servers_on(self, node: str) -> int:
        return sum(1 for h in self._servers.values() if h.node == node)

    def release_server(self, holder: str) -> None:
        self._servers.pop(holder, None)
