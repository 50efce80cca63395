"""An allocation as a record, and the events the ledger announces about it (pure).

An allocation is one server's claim on one node and (possibly zero) GPUs, from the moment
the hub reserves them to the moment it lets them go. Its id is made at reservation, before
the container exists, kept in the spawner's state and written into the container's labels
(:mod:`jupyterhub_gpu.core.allocation`), so a restarted hub finds the same record again.
Times are wall-clock UTC (a report is read by people; ``time.monotonic`` resets with the
hub).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class EventKind(str, enum.Enum):
    RESERVED = "reserved"  # GPUs taken for a spawn; the container does not exist yet
    STARTED = "started"  # the server's container runs
    RELEASED = "released"  # the GPUs are free again (with an :class:`EndReason`)
    REJOINED = "rejoined"  # found again after a hub restart (record from spawner state)


class EndReason(str, enum.Enum):
    STOPPED = "stopped"  # the user or an admin stopped the server
    CULLED = "culled"  # the idle culler stopped it
    DIED = "died"  # the container exited by itself (poll saw it gone)
    FAILED = "failed"  # the spawn failed after the reservation
    NODE_LOST = "node_lost"  # the node left the cluster while the server held GPUs
    INTERRUPTED = "interrupted"  # a spawn or stop cut off by a hub crash (issue 15)
    MISSED = "missed"  # ended while the hub was down: closed when reconciliation saw it
    PREEMPTED = "preempted"  # stopped: its GPUs' reservation for another group began
    SUSPENDED = "suspended"  # checkpointed by the hub (the culler's suspend); a resume is new


@dataclass(frozen=True)
class AllocationRecord:
    """What is known of an allocation when it is reserved. ``gpu_uuids`` may be empty
    (a CPU-only server still has a record: it holds a node's CPU and memory)."""

    id: str
    user: str
    server: str
    group: str  # the charge group ("" when the user has none)
    node: str
    gpu_uuids: tuple[str, ...]
    gpu_model: str  # "" for a CPU-only server
    image: str  # the catalog slug the user chose
    cuda: str  # the image's CUDA version ("" for CPU images)
    cpus: float | None = None
    mem_gib: float | None = None
    started_at: datetime = field(default_factory=utcnow)
    hub: str = ""  # the hub that made it (GPUCluster.hub_id): hubs may share a database
    gpu_fraction: float = 1.0  # the part of each GPU held: a share's K/N (issue 26), else 1
    kind: str = "server"  # or "job" (issue 32)

    @property
    def gpus(self) -> int:
        return len(self.gpu_uuids)

    @property
    def gpu_amount(self) -> float:
        """GPUs as charged: a share of one GPU is its fraction of it."""
        return self.gpus * self.gpu_fraction


@dataclass(frozen=True)
class AllocationEvent:
    """What the ledger announces. ``record`` comes with RESERVED (after a hub restart a
    release may know only the id: the store has the rest)."""

    kind: EventKind
    allocation: str
    at: datetime = field(default_factory=utcnow)
    record: AllocationRecord | None = None
    reason: EndReason | None = None  # RELEASED only


def charge_group(groups: Iterable[str], configured: Iterable[str]) -> str:
    """The group an allocation is charged to by default: the first (by name) of the user's
    groups that the site configures (``group_bounds``), else the first of the user's
    groups, else "" (a user in no group)."""
    mine = chargeable_groups(groups, configured)
    return mine[0] if mine else ""


def chargeable_groups(groups: Iterable[str], configured: Iterable[str]) -> tuple[str, ...]:
    """The groups a user may charge a server to (Slurm's accounts), the default first:
    their groups that the site configures (``group_bounds``, ``queue_policy.groups``), by
    name; a user in none of those has one choice, their first group (none in no group)."""
    mine, known = sorted(set(groups)), set(configured)
    chosen = tuple(g for g in mine if g in known)
    return chosen or tuple(mine[:1])


def stop_reason(never_answered: bool, culled: bool) -> EndReason:
    """Why a server's allocation ends when the hub stops it: it never answered within
    ``http_timeout`` (JupyterHub stops it then: the spawn failed), the culler stopped it,
    or a user or admin did."""
    if never_answered:
        return EndReason.FAILED
    return EndReason.CULLED if culled else EndReason.STOPPED
