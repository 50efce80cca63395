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
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.attribution.labels import parse_share as parse_share_labels
from jupyterhub_gpu.core.sharing.policy import parse_share
from jupyterhub_gpu.errors import ShareLabelError

LABEL = "jupyterhub-gpu"
ALLOCATION_LABEL = f"{LABEL}.allocation"
SEAL_LABEL = f"{LABEL}.seal"
# issue 26: a share of one GPU: "K/N" (K shares held of the N the GPU is split into) and
# the share's memory in MiB; a whole-GPU allocation has neither
SHARE_LABEL = f"{LABEL}.share"
SHARE_MEMORY_LABEL = f"{LABEL}.share_memory_mib"
#: Every label the hub writes on a server's container and reads back. Docker copies an
#: image's labels into its containers unless the create call sets the same key, so
#: :func:`.containers.server_labels` writes each of these on every container ("" where
#: unused): no image's ``LABEL`` line can forge a share, a seal or an owner (issue 30).
OWNED_LABELS = tuple(
    f"{LABEL}.{key}"
    for key in (
        "hub", "owner", "server", "node", "gpus", "image", "started",
        "allocation", "seal", "share", "share_memory_mib",
    )
)  # fmt: skip
#: The longest label value read back (a GPU list of 64 UUIDs fits; anything longer was
#: not written by the hub): such a container is held whole, never parsed further.
MAX_LABEL_CHARS = 4096
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
    share: str = ""  # the SHARE_LABEL's value when it parsed ("" for a whole GPU)
    share_memory_mib: int = 0
    #: why its share labels did not parse ("" when they did): its GPUs are held whole
    label_problem: str = ""

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

    def verified(self, hub_id: str, key: bytes | None) -> Allocation | None:
        """The claim this hub sealed for this container, or ``None`` (not sealed by it).

        A container sealed as a whole-GPU allocation whose share labels say otherwise
        (made before the hub wrote every key of its own, from an image with
        ``LABEL jupyterhub-gpu.share=1/4``) verifies as the whole claim: it holds its
        GPU whole, as it was given, not the share its image claims."""
        claim = self.claim(hub_id)
        if claim.sealed_by(key, self.seal):
            return claim
        whole = Allocation(hub_id, self.allocation, self.owner, self.server, self.node, self.gpus)
        if self.share and whole.sealed_by(key, self.seal):
            return whole
        return None

    def held_whole(self, hub_id: str, key: bytes | None) -> bool:
        """Whether the hub holds this container's GPUs whole (no well-formed share, or a
        share label on a container this hub sealed as whole)."""
        if self.shares is None:
            return True
        verified = self.verified(hub_id, key)
        return verified is not None and not verified.share


def _share_of(labels: Mapping[str, str]) -> tuple[str, int, str]:
    """``(K/N, MiB, problem)`` of a container's share labels, read by the strict parser;
    ``("", 0, why)`` for labels that do not parse (the container holds its GPUs whole)."""
    try:
        share = parse_share_labels(labels)
    except ShareLabelError as e:
        return "", 0, str(e)
    if share is None:
        return "", 0, ""
    return f"{share.held}/{share.of}", share.memory_mib, ""


def containers_from_docker(node: str, listing: list[dict[str, Any]]) -> list[LabelledContainer]:
    """Pure: the ``docker ps`` JSON of one node -> our labelled containers.

    Never raises on what a container's labels say (an image's labels reach its container
    where the hub did not write the key): a value over :data:`MAX_LABEL_CHARS` or not a
    string makes the container one that holds its GPUs whole and is never removed as
    interrupted (its seal cannot verify), with ``label_problem`` saying why."""
    out = []
    for c in listing:
        if not isinstance(c, dict) or not isinstance(c.get("Id"), str):
            continue
        raw = c.get("Labels")
        labels = {
            k: v for k, v in (raw.items() if isinstance(raw, dict) else ()) if k.startswith(LABEL)
        }
        owner = labels.get(f"{LABEL}.owner")
        if owner is None:
            continue
        bad = sorted(
            k for k, v in labels.items() if not isinstance(v, str) or len(v) > MAX_LABEL_CHARS
        )
        if bad:
            labels = {k: ("" if k in bad else v) for k, v in labels.items()}
        server = labels.get(f"{LABEL}.server", "")
        gpus = tuple(g for g in labels.get(f"{LABEL}.gpus", "").split(",") if g)
        # a paused (or restarting) container still holds its GPUs
        alive = c.get("State") in ("running", "paused", "restarting")
        allocation, seal = labels.get(ALLOCATION_LABEL, ""), labels.get(SEAL_LABEL, "")
        share, memory, problem = _share_of(labels)
        if bad:
            problem = f"label(s) {', '.join(bad)} longer than {MAX_LABEL_CHARS} characters"
            share, memory, seal = "", 0, ""  # held whole while it runs, never removed
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
                share,
                memory,
                problem,
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
        and c.verified(hub_id, key) is not None
    ]
