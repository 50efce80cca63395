"""Suspend instead of stop (issue 35, docs/culler.md): the pure decisions.

When the culler reclaims an idle server the hub may checkpoint its container (CRIU,
through Docker) instead of removing it, free its GPUs and its allocation as a stop does,
and on its user's next start start the same container from that checkpoint, with its
kernels and their variables. This module decides, over plain data:

- :class:`SuspendedServer`: what the hub keeps of a suspended server (in its spawner's
  state, ``wire/server_state.py``);
- :func:`suspend_refusal`: whether the hub may suspend a server now, or the sentence why
  not (the culler then stops it);
- :func:`resume_or_fresh`: on the next start, resume it (:class:`Resume`, on the same
  node and the same GPUs) or start afresh (:class:`Fresh`, with the sentence the progress
  page shows); a resume is a start like any other, so what the admission decision
  (core/scheduling/admission.py) says of this start comes first: refused (the
  checkpoint is kept: :func:`kept_line`), or wait in the GPU queue like any start;
- the words users read (:func:`suspended_words`, :data:`RESUMING`, :func:`fresh_line`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.culling.warning import WarningWords, because_of, said_at
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.progress import gib
from jupyterhub_gpu.core.scheduling.admission import Admission, Queue, Refused
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.words import duration

#: the progress page's line while a suspended server is started from its checkpoint
RESUMING = "Resuming your server where you left it"


@dataclass(frozen=True)
class SuspendedServer:
    """A server checkpointed by the hub: its exited container ``container_id`` on
    ``node`` holds the checkpoint ``checkpoint`` (Docker keeps it with the container),
    taken at ``at`` in ``seconds``; ``size_bytes``: the container's memory then (what
    the checkpoint holds, about its size on the node's disk). ``gpu_uuids`` and
    ``share``: what it held, to hold again. ``allocation``: the allocation id its
    container's labels carry (sealed when it was created), so that a resumed server's
    container is known as that server's. ``options_key``: its start's options
    (:func:`options_key`). ``token``: the server's API token, which the restored
    process still uses (the hub keeps it: ``Spawner.will_resume``)."""

    node: str
    container_id: str
    checkpoint: str
    at: datetime  # aware UTC
    size_bytes: int
    seconds: float
    gpu_uuids: tuple[str, ...] = ()
    share: Share | None = None
    allocation: str = ""
    options_key: str = ""
    token: str = ""

    def __repr__(self) -> str:  # never the token
        return (
            f"SuspendedServer(node={self.node!r}, container={self.container_id[:12]!r}, "
            f"checkpoint={self.checkpoint!r}, at={self.at.isoformat()!r})"
        )


@dataclass(frozen=True)
class Resume:
    """Start the suspended container again: hold ``placement`` (its node and GPUs)."""

    placement: Placement


@dataclass(frozen=True)
class Fresh:
    """Start a new server; ``why``: the clause after "could not be resumed" (for the
    progress page's line and the log)."""

    why: str


def options_key(options: Mapping[str, Any] | None) -> str:
    """A fingerprint of a start's options (the spawn form's answers): a resumed server
    must have been started with the same ones."""
    text = json.dumps(dict(options or {}), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def checkpoint_name(now: datetime) -> str:
    """The checkpoint's name (Docker's rule: letters, digits, ``_.-``)."""
    return "jhgpu-" + now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def suspend_refusal(
    *,
    enabled: bool,
    node: str,
    checkpoints: bool,
    memory_bytes: int | None,
    max_bytes: int,
    node_held_bytes: int = 0,
    node_max_bytes: int = 0,
) -> str | None:
    """Why the hub will not suspend a server on ``node`` now (a sentence for the log
    and the culler, which stops the server instead), or None. ``checkpoints``: the
    node's engine can checkpoint (``dockerd --experimental``); ``memory_bytes``: the
    container's memory (None: unknown); ``max_bytes``: the budget (0: none);
    ``node_held_bytes``: what the node's suspended servers' checkpoints hold already,
    ``node_max_bytes`` the node's budget for them (0: none)."""
    if not enabled:
        return "suspending servers is off on this hub (GPUCluster.suspend)"
    if not checkpoints:
        return (
            f"node {node}'s Docker engine cannot checkpoint containers (it runs without "
            "--experimental)"
        )
    if max_bytes and memory_bytes is not None and memory_bytes > max_bytes:
        return (
            f"it holds {gib(memory_bytes // 2**20)} of memory, more than a checkpoint may take "
            f"(GPUCluster.suspend_max_gib, {gib(max_bytes // 2**20)})"
        )
    if node_max_bytes and node_held_bytes + (memory_bytes or 0) > node_max_bytes:
        return (
            f"node {node}'s suspended servers hold {gib(node_held_bytes // 2**20)} of its disk "
            f"already; this one's {gib((memory_bytes or 0) // 2**20)} would pass its budget "
            f"(GPUCluster.suspend_node_gib, {gib(node_max_bytes // 2**20)})"
        )
    return None


def _gpus_free(saved: SuspendedServer, snapshot: ClusterSnapshot) -> str | None:
    """Why ``saved``'s GPUs cannot be held again on its node (None: they can)."""
    node = next((n for n in snapshot.nodes if n.name == saved.node), None)
    assert node is not None
    for uuid in saved.gpu_uuids:
        gpu = node.inventory.gpu(uuid)
        if gpu is None:
            return f"its GPU is no longer on node {saved.node}"
        if gpu.healthy is False:
            return f"its GPU on node {saved.node} is not healthy"
        holder = snapshot.allocations.get(uuid)
        share = saved.share
        if share is None and holder is not None:
            return "its GPU is in use by another server now"
        if share is not None:
            used = snapshot.shares.get(uuid, 0) if holder == SHARED else 0
            if (holder is not None and holder != SHARED) or used + share.count > share.of:
                return "its share of a GPU is in use by other servers now"
    return None


def checkpoint_expired(saved: SuspendedServer, now: datetime, keep_for_s: float) -> bool:
    """Whether ``saved``'s checkpoint is older than it is kept (``keep_for_s``, 0: no
    limit): its next start is a fresh one, and the hub's sweep removes it before then."""
    return bool(keep_for_s) and (now - saved.at).total_seconds() > keep_for_s


def resume_or_fresh(
    saved: SuspendedServer,
    snapshot: ClusterSnapshot,
    *,
    now: datetime,
    options: str,
    keep_for_s: float,
    admission: Admission | None = None,
    fenced: frozenset[str] = frozenset(),
    allowed_models: frozenset[str] | None = None,
) -> Resume | Fresh | Queue | Refused:
    """Resume ``saved``, start afresh, or neither now. ``snapshot``: the cluster with the
    ledger's holds laid over it; ``options``: this start's :func:`options_key`;
    ``keep_for_s``: how long a checkpoint is kept (0: no limit).

    ``admission``: what :func:`~jupyterhub_gpu.core.scheduling.admission.admit` says of
    this start as any start of its size (the user's GPU cap, the group's quota, others
    waiting in the GPU queue, a reservation coming): a resume takes no shortcut. Refused
    is returned as it is: the start is refused and the checkpoint kept (a fresh start
    would be refused too, so dropping it would lose the kernels for nothing). Queue: the
    start waits in line like any, and resumes if its GPUs are free when its turn comes.
    ``fenced``: GPUs an active reservation keeps from this user's group;
    ``allowed_models``: the GPU models the group's quota leaves room on now (None: any)."""
    if checkpoint_expired(saved, now, keep_for_s):
        age = (now - saved.at).total_seconds()
        return Fresh(f"it was suspended {duration(age)} ago, longer than it is kept")
    if saved.gpu_uuids and isinstance(admission, Refused):
        return admission  # whatever else holds, a start now is refused: keep it
    if options != saved.options_key:
        return Fresh("you chose other options than the suspended server's")
    node = next((n for n in snapshot.nodes if n.name == saved.node), None)
    if node is None:
        return Fresh(f"its node {saved.node} is no longer in the cluster")
    if not node.reachable:
        return Fresh(f"its node {saved.node} does not answer")
    if not node.schedulable:
        return Fresh(f"its node {saved.node} is drained")
    if saved.gpu_uuids and isinstance(admission, Queue):
        return admission
    if fenced.intersection(saved.gpu_uuids):
        return Fresh("its GPU is reserved for another group now")
    models = {g.model for u in saved.gpu_uuids if (g := node.inventory.gpu(u)) is not None}
    if allowed_models is not None and not models <= allowed_models:
        return Fresh("your group has no room left on its GPU model now")
    taken = _gpus_free(saved, snapshot)
    if taken:
        return Fresh(taken)
    return Resume(Placement(saved.node, saved.gpu_uuids, saved.share))


def kept_line(refusal: str, lasting: bool = False) -> str:
    """What a user reads when the start of her suspended server is refused (her GPU
    cap, her group's quota): the refusal, then that nothing of it is lost. ``lasting``:
    the refusal will not pass by itself (over an absolute cap): a start with other
    options is a new server."""
    if lasting:
        return (
            f"{refusal.rstrip('.')}. Your suspended server is kept until it expires, but it "
            "holds more than you may now: a start with fewer GPUs starts a new server."
        )
    return (
        f"{refusal.rstrip('.')}. Your suspended server is kept: start it again once this "
        "allows, and it resumes where you left it."
    )


def fresh_line(why: str) -> str:
    """The progress page's one line when a suspended server is not resumed."""
    return (
        f"Your suspended server could not be resumed: {why}. Starting a new one: your "
        "files are kept, your kernels and their variables are not."
    )


def suspended_words(server: str, at: datetime, reason: str, now: datetime) -> WarningWords:
    """What a user reads about a suspended server (the home page, the spawn form), e.g.
    "Your server was suspended at 14:05 UTC because it had been idle for 1 h 02 min
    (the limit is 30 min). Start it again to resume where you left it, with your
    kernels and their variables." (``reason``: the culler's one-line decision, "" if
    none)."""
    which = f"Your server '{server}'" if server else "Your server"
    said = said_at(at, now)
    because = f" {because_of(reason)}" if reason.strip() else ""
    text = (
        f"{which} was suspended at {said}{because}. Start it again to resume where you "
        "left it, with your kernels and their variables."
    )
    return WarningWords(text, said, False)


__all__ = [
    "RESUMING",
    "Fresh",
    "Resume",
    "SuspendedServer",
    "checkpoint_expired",
    "checkpoint_name",
    "fresh_line",
    "kept_line",
    "options_key",
    "resume_or_fresh",
    "suspend_refusal",
    "suspended_words",
]
