"""Reconciliation's decision: one node's listing of our containers against the ledger.

Pure: the hub (``hub/reconciliation.py``) lists the labelled containers of every node,
asks :func:`sort_listing` what each running one is, adopts them into the ledger, then
asks :func:`to_free` what the ledger holds there that no container backs any more, and
applies it (releases, removals, log lines). Nothing here reads a clock or a node.

- a running, sealed container whose allocation no server holds and whose server has no
  spawn in progress is *doomed* (an interrupted spawn or stop,
  :func:`~jupyterhub_gpu.core.allocation.interrupted`): held as an orphan until removed;
- every other running container is *kept*: its server holds exactly the GPUs its labels
  list (what else it holds is *extra*);
- a live server's hold with no running container of its holder is *stale*, and an
  orphan whose container is gone is *gone*; holds taken after ``latest`` (after the
  listing began, or younger than the grace) and servers with a spawn in progress are
  never freed.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from jupyterhub_gpu.core.allocation import LabelledContainer, interrupted
from jupyterhub_gpu.core.holds import Hold, NodeHolds


@dataclass(frozen=True)
class NodeListing:
    """What one node's listing shows: its running containers, split into the doomed
    (interrupted spawns) and the kept, and the ids of those that stopped."""

    running: tuple[LabelledContainer, ...]
    doomed: tuple[LabelledContainer, ...]
    kept: tuple[LabelledContainer, ...]
    stopped: frozenset[str]


def sort_listing(
    found: Iterable[LabelledContainer],
    *,
    hub_id: str,
    key: bytes | None,
    live: AbstractSet[str],
    pending: AbstractSet[str],
) -> NodeListing:
    """Split a node's listing (``live``: the allocation ids of servers the hub runs or
    starts; ``pending``: holders with a spawn in progress, both since the listing began)."""
    found = list(found)
    running = [c for c in found if c.running]
    doomed = interrupted(running, hub_id=hub_id, key=key, live=live, pending=pending)
    return NodeListing(
        running=tuple(running),
        doomed=tuple(doomed),
        kept=tuple(c for c in running if c not in doomed),
        stopped=frozenset(c.id for c in found if not c.running),
    )


@dataclass(frozen=True)
class Frees:
    """What to free on one node: GPUs kept containers hold beyond their labels, the
    holders whose server no container backs, and the orphans whose container is gone."""

    extra: tuple[tuple[LabelledContainer, tuple[str, ...]], ...] = ()
    stale: tuple[str, ...] = ()
    gone: tuple[Hold, ...] = ()


def to_free(
    listing: NodeListing, holds: NodeHolds, *, pending: AbstractSet[str], latest: float
) -> Frees:
    """What the ledger holds on the node (``holds``, after the listing's containers were
    adopted) that the listing no longer backs; only holds taken by ``latest`` count, and
    nothing of a holder in ``pending``."""
    extra = []
    for c in listing.kept:
        if c.holder in pending:
            continue
        beyond = tuple(u for u in holds.held_on(c.holder, latest) if u not in c.gpus)
        if beyond:
            extra.append((c, beyond))
    backed = {c.holder for c in listing.kept}
    stale = sorted(h for h in holds.holders(latest) if h not in backed and h not in pending)
    present = {c.allocation or c.holder for c in listing.running}
    gone = [h for k, h in holds.orphans_by_key(latest).items() if k not in present]
    return Frees(extra=tuple(extra), stale=tuple(stale), gone=tuple(gone))


__all__ = ["Frees", "NodeListing", "sort_listing", "to_free"]
