"""The hub's cluster payload as the dashboard reads it (pure data): what
:func:`jupyterhub_gpu.wire.cluster.decode_payload` makes of ``GET /hub/api/gpu/cluster``,
and what the views (:mod:`.view`) and the history (:mod:`.history`) read.

Field for field the JSON's (``wire/cluster.py`` documents the shape), with its times as
aware UTC datetimes and its lists as tuples. The defaults make a payload that says nothing
(no node, no server), as the dashboard shows before its first read of the hub. The
``hidden`` fields are never in the hub's payload: :func:`.view.redact` sets them where a
viewer may not see a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class ShareEntry:
    """One server's share of a GPU held by shares (issue 26): ``count`` of the GPU's
    ``of`` shares, ``memory_mib`` MiB of its memory."""

    holder: str  # the ledger's "user/server"; "" when hidden
    user: str = ""
    server: str = ""  # "" for the default server
    count: int = 1
    of: int = 1
    memory_mib: int = 0
    orphan: bool = False  # a share whose server the hub has let go of
    hidden: bool = False  # redacted: someone else's

    @property
    def fraction(self) -> float:
        """The part of the GPU held (what accounting charges: K/N)."""
        return self.count / self.of


@dataclass(frozen=True)
class GpuEntry:
    uuid: str
    index: int = 0
    model: str = ""
    label: str = ""  # the model's short name ("RTX 3090")
    memory_mib: int = 0
    memory_used_mib: int = 0
    utilization_pct: float = 0.0  # 0 to 100
    temperature_c: float | None = None
    healthy: bool | None = None  # None: the card can't tell
    status: str = "held"  # one of wire.cluster.GPU_STATUSES
    holder: str | None = None  # the ledger's "user/server"; "" when hidden
    orphan: bool = False  # a hold whose server the hub has let go of
    hidden_holder: bool = False  # redacted: the holder is someone else
    share_of: int = 0  # held by shares: the N it is split into; 0: not held by shares
    shares: tuple[ShareEntry, ...] = ()  # who holds which share, by holder

    @property
    def shares_held(self) -> int:
        """The shares held on it (orphans' included)."""
        return sum(s.count for s in self.shares)


@dataclass(frozen=True)
class NodeEntry:
    name: str
    state: str = "up"  # "up", "drained" or "down"
    reachable: bool = True
    schedulable: bool = True
    drained_by: str | None = None  # "admin", "nodes file", "check" (its node check) or None
    drain_note: str = ""  # the admin's note; for "check", what failed and the fix
    driver: str = ""
    cuda: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[GpuEntry, ...] = ()


@dataclass(frozen=True)
class ServerEntry:
    key: str  # "user/server"; "" when hidden
    user: str = ""
    server: str = ""  # "" for the default server
    node: str = ""  # "" while not placed
    gpus: tuple[str, ...] = ()  # GPU uuids
    image: str = ""
    image_name: str = ""
    started: datetime | None = None
    last_activity: datetime | None = None
    ready: bool = False
    pending: str | None = None  # "spawn", "stop", "check": an action in progress
    cull_at: datetime | None = None  # the culler's earliest stop
    hidden: bool = False  # redacted: someone else's
    ssh_sessions: int = 0  # open SSH sessions (shell, command, sftp) into it
    ssh_forwards: int = 0  # open SSH forwarded connections (ssh -L) into it
    ssh_since: datetime | None = None  # the oldest of them opened then
    ssh_from: tuple[str, ...] = ()  # the clients' addresses (admins only)


@dataclass(frozen=True)
class ModelEntry:
    model: str
    label: str = ""
    total: int = 0
    free: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class Totals:
    nodes: int = 0
    nodes_up: int = 0
    gpus: int = 0
    free: int = 0
    held: int = 0


@dataclass(frozen=True)
class QueueEntry:
    """A spawn waiting for GPUs."""

    user: str  # "" when hidden
    server: str = ""
    group: str = ""
    gpus: int = 0
    model: str | None = None  # the one model it may have, else None
    models: tuple[str, ...] | None = None  # the models it may have; None: any
    since: datetime | None = None
    position: int | None = None  # its place in line, once decided
    estimate: str | None = None  # what its progress page says, once decided
    hidden: bool = False  # redacted: someone else's


@dataclass(frozen=True)
class ReservationEntry:
    """GPUs kept for a group (or a user) from ``start`` to ``end``: the GPUs or nodes
    named, or ``count`` GPUs of ``model``."""

    id: str
    group: str = ""
    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    model: str | None = None
    count: int = 0
    start: datetime | None = None  # the JSON's "from"
    end: datetime | None = None  # the JSON's "to"
    user: str | None = None  # None: not in the JSON (the hub's are for groups)
    note: str | None = None  # None: not in the JSON
    hidden: bool = False  # redacted: someone else's


@dataclass(frozen=True)
class PrePullEntry:
    """One node as the hub's pre-puller sees it (docs/prepull.md): the chosen catalog
    slugs it has and still needs, the one it pulls now (``""``: none) and how far, its last
    error, and the GiB of catalog images it holds against its budget (0: none)."""

    node: str
    has: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    pulling: str = ""
    percent: int = 0
    last_error: str = ""
    used_gib: float = 0.0
    budget_gib: float = 0.0


@dataclass(frozen=True)
class ClusterPayload:
    version: int = 1
    generated_at: datetime | None = None
    fresh: bool = True  # False: the nodes' states are the last ones known
    hub_prefix: str = "/hub/"
    named_servers: bool = False
    named_server_limit: int = 0  # 0: no limit
    nodes: tuple[NodeEntry, ...] = ()
    servers: tuple[ServerEntry, ...] = ()
    models: tuple[ModelEntry, ...] = ()
    totals: Totals = Totals()
    queue: tuple[QueueEntry, ...] = ()
    reservations: tuple[ReservationEntry, ...] = ()
    message: str = ""  # why there is nothing to show ("": not in the JSON)
    prepull: tuple[PrePullEntry, ...] = ()  # the pre-puller's nodes (none: not in the JSON)
