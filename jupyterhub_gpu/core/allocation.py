"""What the hub writes on a server's container, and how it reads it back (pure).

Every container the spawner creates carries labels (``jupyterhub-gpu.*``): the hub, the
owner and server, the node, the GPUs, the image, and since issue 15 the **allocation
id** (a uuid4 made when the GPUs are reserved, before the container exists, and kept in
the spawner's state) and a **seal**: HMAC-SHA256 over the canonical form of hub id,
allocation id, owner, server, node and GPUs, keyed by a secret derived from the hub's
cookie secret. Only this hub can write a valid seal, so reconciliation can tell

- a container this hub created for a spawn it no longer knows (a spawn interrupted by a
  crash, a failed clean-up, a stop that could not finish): sealed, its allocation held
  by no server and no spawn in progress -> removed, its GPUs freed;
- a container someone else made with our labels (an admin reserving a GPU by hand,
  docs/nodes.md): no valid seal -> respected while it runs, as always.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.sharing.policy import parse_share

LABEL = "jupyterhub-gpu"
ALLOCATION_LABEL = f"{LABEL}.allocation"
SEAL_LABEL = f"{LABEL}.seal"
# issue 26: a share of one GPU: "K/N" (K shares held of the N the GPU is split into) and
# the share's memory in MiB; a whole-GPU allocation has neither
SHARE_LABEL = f"{LABEL}.share"
SHARE_MEMORY_LABEL = f"{LABEL}.share_memory_mib"
_KEY_CONTEXT = b"jupyterhub-gpu allocation seal v1"


def new_allocation_id() -> str:
    return uuid.uuid4().hex


def seal_key(cookie_secret: bytes | str | None) -> bytes | None:
    """The sealing key derived from the hub's cookie secret (None without one): stable
    across restarts, never the cookie secret itself, never sent anywhere."""
    if not cookie_secret:
        return None
    secret = cookie_secret.encode() if isinstance(cookie_secret, str) else bytes(cookie_secret)
    return hmac.new(secret, _KEY_CONTEXT, hashlib.sha256).digest()


@dataclass(frozen=True)
class Allocation:
    """One server's claim on a node and its GPUs, as its container's labels record it."""

    hub_id: str
    id: str
    owner: str
    server: str
    node: str
    gpus: tuple[str, ...]
    share: str = ""  # "K/N" for a share of its one GPU (SHARE_LABEL), "" when whole
    share_memory_mib: int = 0

    def canonical(self) -> bytes:
        """An unambiguous encoding (a JSON array: no field can run into the next). A
        share adds its ``K/N`` and memory (a whole allocation's form is the one of before
        shares, so seals written then stay valid)."""
        fields: list[object] = [
            self.hub_id, self.id, self.owner, self.server, self.node, list(self.gpus)
        ]  # fmt: skip
        if self.share:
            fields += [self.share, self.share_memory_mib]
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()

    def seal(self, key: bytes) -> str:
        return hmac.new(key, self.canonical(), hashlib.sha256).hexdigest()

    def sealed_by(self, key: bytes | None, seal: str) -> bool:
        """Whether ``seal`` is this allocation's seal under ``key`` (never without a key,
        an id or a seal)."""
        if key is None or not self.id or not seal:
            return False
        return hmac.compare_digest(self.seal(key), seal)


@dataclass(frozen=True)
class LabelledContainer:
    node: str
    id: str
    holder: str
    gpus: tuple[str, ...]
    running: bool
    owner: str = ""
    server: str = ""
    allocation: str = ""
    seal: str = ""
    share: str = ""  # the SHARE_LABEL's value as found ("" for a whole GPU)
    share_memory_mib: int = 0

    def claim(self, hub_id: str) -> Allocation:
        return Allocation(
            hub_id,
            self.allocation,
            self.owner,
            self.server,
            self.node,
            self.gpus,
            self.share,
            self.share_memory_mib,
        )

    @property
    def shares(self) -> tuple[int, int] | None:
        """``(K, N)`` of a well-formed share on one GPU; ``None``: it holds its GPUs whole."""
        if not self.share or len(self.gpus) != 1:
            return None
        return parse_share(self.share)


def containers_from_docker(node: str, listing: list[dict[str, Any]]) -> list[LabelledContainer]:
    """Pure: the ``docker ps`` JSON of one node -> our labelled containers."""
    out = []
    for c in listing:
        labels = c.get("Labels") or {}
        owner = labels.get(f"{LABEL}.owner")
        if owner is None:
            continue
        server = labels.get(f"{LABEL}.server", "")
        gpus = tuple(g for g in labels.get(f"{LABEL}.gpus", "").split(",") if g)
        # a paused (or restarting) container still holds its GPUs
        alive = c.get("State") in ("running", "paused", "restarting")
        allocation, seal = labels.get(ALLOCATION_LABEL, ""), labels.get(SEAL_LABEL, "")
        memory = labels.get(SHARE_MEMORY_LABEL, "")
        out.append(
            LabelledContainer(
                node,
                c["Id"],
                f"{owner}/{server}",
                gpus,
                alive,
                owner,
                server,
                allocation,
                seal,
                labels.get(SHARE_LABEL, ""),
                int(memory) if memory.isdigit() else 0,
            )
        )
    return out


def interrupted(
    found: Iterable[LabelledContainer],
    *,
    hub_id: str,
    key: bytes | None,
    live: Set[str],
    pending: Set[str],
) -> list[LabelledContainer]:
    """The running containers this hub sealed whose allocation no server holds (``live``:
    the allocation ids of the servers the hub runs or is starting) and whose holder no
    spawn in progress is for (``pending``). The caller passes what was live or pending
    when its listing began *and* since, so a server started or stopped meanwhile is
    never among them. Unsealed containers (made by hand, or before seals) never are."""
    return [
        c
        for c in found
        if c.running
        and c.allocation not in live
        and c.holder not in pending
        and c.claim(hub_id).sealed_by(key, c.seal)
    ]
