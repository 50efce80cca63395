"""How many GPUs one user may hold at once, across all their servers. Pure.

``max_gpus`` bounds one server; ``max_gpus_per_user`` bounds the sum over every server
of a user (the default one and the named ones), so named servers can't be used to hoard
a node. It is set like the other bounds (``resource_defaults`` and ``group_bounds``;
a user gets the most generous of their groups) and checked by the spawner in the same
synchronous step as the reservation, so two concurrent spawns of one user can't both
pass it.

The ledger's holder of a GPU is the string ``"<username>/<servername>"``;
:func:`holder_user` is the one place that reads it. Quotas count what live servers hold
(``GPULedger.charged``): orphaned holds (a server stopped while its node was unreachable)
are charged to nobody, they have no server to stop and the hub frees them when the node
answers again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jupyterhub_gpu.errors import GPUQuotaExceeded as GPUQuotaExceeded


@dataclass(frozen=True)
class Holdings:
    """What one user holds now: GPUs, and the servers that hold them."""

    gpus: int = 0
    servers: int = 0


@dataclass(frozen=True)
class UserQuota:
    """A user's cap on GPUs held at once; ``limit`` None = no cap. ``source`` says where
    it comes from, for the message: ``"for group ml-lab"`` or ``"per user on this hub"``."""

    limit: int | None
    source: str = "per user on this hub"


NO_QUOTA = UserQuota(None)


def holder_user(holder: str) -> str | None:
    """The username of a ledger holder (``"alice/gpu2"`` -> ``"alice"``); None if not one.

    Usernames never contain ``/`` (JupyterHub refuses them), server names may be empty.
    """
    if "/" not in holder:
        return None
    return holder.split("/", 1)[0]


def holdings_of(allocations: Mapping[str, str], username: str, exclude: str = "") -> Holdings:
    """What ``username`` holds in ``allocations`` (GPU uuid -> holder), not counting the
    holder ``exclude`` (the server being started)."""
    servers: set[str] = set()
    gpus = 0
    for holder in allocations.values():
        if holder != exclude and holder_user(holder) == username:
            gpus += 1
            servers.add(holder)
    return Holdings(gpus=gpus, servers=len(servers))


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _servers(n: int) -> str:
    return f"{n} server" if n == 1 else f"{n} servers"


def quota_refusal(held: Holdings, wanted: int, quota: UserQuota) -> str | None:
    """Why the user may not take ``wanted`` more GPUs, or None when they may.

    A CPU-only server (``wanted == 0``) is always allowed.
    """
    if wanted <= 0 or quota.limit is None or held.gpus + wanted <= quota.limit:
        return None
    cap = f"max {quota.limit} {quota.source}"
    if held.gpus == 0:
        return f"You asked for {_gpus(wanted)} ({cap}); ask for fewer."
    left = max(quota.limit - held.gpus, 0)
    fix = f"ask for {left} or fewer" if left else "start it without GPUs"
    return (
        f"You hold {_gpus(held.gpus)} in {_servers(held.servers)} and asked for {wanted} more "
        f"({cap}); stop one of your servers or {fix}."
    )
