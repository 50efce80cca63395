"""A share allocation's container labels, read strictly (pure).

A container that holds part of a GPU carries, besides the usual labels
(:func:`jupyterhub_gpu.core.containers.server_labels`)::

    jupyterhub-gpu.share             = "K/N"   # K shares held of the GPU's N, e.g. "1/4"
                                               # ("1/1": a MIG instance held as a share)
    jupyterhub-gpu.share_memory_mib  = "6144"  # the share's memory, MiB

A whole-GPU allocation has neither. :func:`parse_share` is the one reader of the pair:
``None`` for a whole GPU, a :class:`Share` for a share, and :class:`ShareLabelError`
(saying which label is wrong and what it should look like) for anything else, including
one label without the other. Labels are written by the hub but read back from a node's
engine, so they are bounded like any other input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from jupyterhub_gpu.core.sharing.policy import parse_share as parse_fraction
from jupyterhub_gpu.errors import ShareLabelError

SHARE_LABEL = "jupyterhub-gpu.share"
SHARE_MEMORY_LABEL = "jupyterhub-gpu.share_memory_mib"
GPUS_LABEL = "jupyterhub-gpu.gpus"
ALLOCATION_LABEL = "jupyterhub-gpu.allocation"

MAX_SHARES = 64  # shares of one GPU: no policy splits a card finer
MAX_SHARE_MIB = 1 << 24  # 16 TiB, as the agent wire's bound
_MIB_RE = re.compile(r"0|[1-9][0-9]{0,8}", re.ASCII)


@dataclass(frozen=True)
class Share:
    """``held`` shares of a GPU split into ``of``, with ``memory_mib`` of its memory."""

    held: int
    of: int
    memory_mib: int

    @property
    def fraction(self) -> float:
        return self.held / self.of

    def __str__(self) -> str:
        return f"{self.held}/{self.of} ({self.memory_mib} MiB)"


def _show(value: str) -> str:
    text = value[:40]
    return repr(text + ("..." if len(value) > 40 else ""))


def parse_share(labels: Mapping[str, str]) -> Share | None:
    """The share a container's ``labels`` describe, or ``None`` for a whole-GPU one.

    The hub writes both labels on every server's container, empty for a whole GPU (so an
    image's own ``LABEL`` lines never reach its containers: :func:`.containers.server_labels`);
    absent and empty mean the same. ``K/N`` is read by the one strict parser,
    :func:`jupyterhub_gpu.core.sharing.policy.parse_share`."""
    fraction = labels.get(SHARE_LABEL) or None
    memory = labels.get(SHARE_MEMORY_LABEL) or None
    if fraction is None and memory is None:
        return None
    if fraction is None or memory is None:
        present, absent = (
            (SHARE_LABEL, SHARE_MEMORY_LABEL)
            if memory is None
            else (SHARE_MEMORY_LABEL, SHARE_LABEL)
        )
        raise ShareLabelError(
            f"the container has {present} but not {absent}: a share needs both "
            "(the hub writes them together; recreate the server)"
        )
    parsed = parse_fraction(fraction) if isinstance(fraction, str) else None
    if parsed is None:
        raise ShareLabelError(
            f"{SHARE_LABEL} must be 'K/N' with 1 <= K <= N <= {MAX_SHARES} (K shares held "
            f"of N, e.g. '1/4'), got {_show(str(fraction))}"
        )
    held, of = parsed
    if of > MAX_SHARES:
        raise ShareLabelError(
            f"{SHARE_LABEL} must have 1 <= K <= N <= {MAX_SHARES}, got {fraction!r}"
        )
    if not isinstance(memory, str) or not _MIB_RE.fullmatch(memory):
        raise ShareLabelError(
            f"{SHARE_MEMORY_LABEL} must be a whole number of MiB such as '6144', "
            f"got {_show(str(memory))}"
        )
    mib = int(memory)
    if not 1 <= mib <= MAX_SHARE_MIB:
        raise ShareLabelError(f"{SHARE_MEMORY_LABEL} must be 1 to {MAX_SHARE_MIB} MiB, got {mib}")
    return Share(held, of, mib)


def labelled_gpus(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU UUIDs a container's ``jupyterhub-gpu.gpus`` label names (none if absent)."""
    return tuple(u for u in labels.get(GPUS_LABEL, "").split(",") if u)


#: The spawner-state keys the culler reads (the hub's API shows each server's state):
#: ``share`` is ``[count, of, memory_mib, mode]`` as GPUDockerSpawner.get_state writes it
#: (``memory_mib``: the share's memory, all its parts together), ``object_id``
#: DockerSpawner's container id, which the agent's processes are attributed to.
STATE_SHARE = "share"
STATE_CONTAINER = "object_id"


def state_share(state: Mapping[str, object]) -> Share | None:
    """The share a server's spawner state records (``None``: a whole GPU), checked by the
    same rules as the labels; :class:`ShareLabelError` for a malformed one."""
    raw = state.get(STATE_SHARE)
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != 4:
        raise ShareLabelError(
            f"the spawner state's {STATE_SHARE!r} must be [count, of, memory_mib, mode], "
            f"got {_show(repr(raw))}"
        )
    count, of, memory, _mode = raw
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (count, of, memory)):
        raise ShareLabelError(
            f"the spawner state's {STATE_SHARE!r} must hold whole numbers, got {_show(repr(raw))}"
        )
    return parse_share({SHARE_LABEL: f"{count}/{of}", SHARE_MEMORY_LABEL: str(memory)})
