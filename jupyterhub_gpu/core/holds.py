"""What the ledger holds, as plain data: one :class:`Hold` per GPU (or share) and per
placed server, and one node's holds (:class:`NodeHolds`) with the questions
reconciliation asks of them (:mod:`jupyterhub_gpu.core.reconciliation`). The ledger
itself (``hub/ledger.py``) keeps them; these functions only read them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hold:
    """A GPU (or a server's place on a node) held for one server.

    ``orphaned``: the hub let go of the server while its container may still run (a stop
    that could not reach the node, or a spawn interrupted by a crash). The hold stays, so
    nobody else gets the GPU, but it is charged to nobody and belongs to no live server;
    reconciliation frees it once the container is gone. Orphans are told apart by their
    allocation id (:attr:`key`), so a user's new server of the same name never mixes
    with the old one's leftovers.
    """

    holder: str  # "<username>/<servername>"
    node: str
    since: float = field(default_factory=time.monotonic)
    allocation: str = ""  # the server's allocation id (allocation.py); "" before ids
    orphaned: bool = False
    share: tuple[int, int] | None = None  # (K, N): K of the GPU's N shares; None: whole

    @property
    def key(self) -> str:
        """What tells this orphan apart: its allocation id (the holder before ids)."""
        return self.allocation or self.holder


@dataclass(frozen=True)
class NodeHolds:
    """One node's holds as the ledger has them: (GPU uuid, hold) of every whole GPU and
    share, the servers placed there and the orphaned servers' places."""

    gpus: tuple[tuple[str, Hold], ...] = ()
    servers: tuple[Hold, ...] = ()
    orphans: tuple[Hold, ...] = ()

    def held_on(self, holder: str, latest: float) -> list[str]:
        """GPUs ``holder``'s live server holds here, taken (or confirmed) by ``latest``."""
        return sorted(
            u for u, h in self.gpus if h.holder == holder and h.since <= latest and not h.orphaned
        )

    def holders(self, latest: float) -> set[str]:
        """Holders of live GPU holds or servers here, taken (or confirmed) by ``latest``."""
        gpus = {h.holder for _, h in self.gpus if h.since <= latest and not h.orphaned}
        return gpus | {h.holder for h in self.servers if h.since <= latest}

    def orphans_by_key(self, latest: float) -> dict[str, Hold]:
        """Orphans here (key -> one of its holds), taken (or confirmed) by ``latest``."""
        held = [*(h for _, h in self.gpus), *self.orphans]
        return {h.key: h for h in held if h.orphaned and h.since <= latest}


def latest(now: float, older_than: float, taken_before: float | None) -> float:
    """The latest ``since`` a hold may have to be at least ``older_than`` s old at ``now``
    (and, if given, taken before ``taken_before``)."""
    return now - older_than if taken_before is None else min(now - older_than, taken_before)


__all__ = ["Hold", "NodeHolds", "latest"]
