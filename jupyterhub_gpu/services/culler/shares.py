"""The culler's view of GPU shares (issue #26): each share judged by its own processes.

A share server's spawner state names its share (``share``: ``[count, of, memory_mib,
mode]``) and its container (``object_id``). Its GPU's readings then feed, besides the
GPU's own tracker, a tracker of that server's processes alone
(:func:`~jupyterhub_gpu.core.attribution.processes.share_reading`), keyed
``"<gpu uuid>@<container id>"``. The idleness judgement reads that one, so a
neighbour's training never keeps an idle share, and an idle GPU never hides a share's
work. Where the agent reports no per-process data (an older agent, a card without
per-process utilisation) the share's reading is the whole GPU's: it can only keep a
server longer, never cull one early.

Memory: each round a share's own processes' memory is judged against its share
(:func:`~jupyterhub_gpu.core.attribution.memory.judge_memory`) when it is known to be its
own (never on the GPU-wide fallback). Its episodes over memory are saved in the culler's
state file (:meth:`ShareWatch.episodes`, :meth:`ShareWatch.restore`): a restart continues
the same server's grace instead of starting it again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jupyterhub_gpu.core.attribution.labels import (
    STATE_CONTAINER,
    Share,
    ShareLabelError,
    state_share,
)
from jupyterhub_gpu.core.attribution.memory import (
    Episode,
    MemoryPolicy,
    MemoryState,
    MemoryVerdict,
    continued_episode,
    judge_memory,
)
from jupyterhub_gpu.core.attribution.processes import ShareReading, share_reading
from jupyterhub_gpu.core.culling.tracker import GpuTracker
from jupyterhub_gpu.services.culler.client import GpuReading
from jupyterhub_gpu.wire.share_notices import ShareNotice

SEPARATOR = "@"
_CONTAINER_RE = re.compile(r"^[0-9a-f]{64}$")


def share_key(uuid: str, container: str) -> str:
    """The tracker key of one share server's use of one GPU."""
    return f"{uuid}{SEPARATOR}{container}"


def gpu_of_key(key: str) -> str:
    return key.split(SEPARATOR, 1)[0]


def share_of_state(state: Mapping[str, Any]) -> tuple[Share, str] | None:
    """A server's share and its container id from its spawner state; ``None`` for a
    whole-GPU server; :class:`ShareLabelError` for a malformed share or one without its
    container id (64 hex digits, DockerSpawner's ``object_id``)."""
    share = state_share(state)
    if share is None:
        return None
    container = state.get(STATE_CONTAINER)
    if not isinstance(container, str) or not _CONTAINER_RE.match(container):
        raise ShareLabelError(
            f"a share's spawner state needs its container id ({STATE_CONTAINER}, 64 hex "
            "digits) to find its processes"
        )
    return share, container


@dataclass(frozen=True)
class OverMemory:
    """A share over its memory on one GPU: warn (``OVER``) or stop (``STOP``)."""

    state: MemoryState
    message: str
    notice: ShareNotice


@dataclass
class ShareWatch:
    """Which (GPU, container) pairs are share servers, and their latest own readings."""

    def __post_init__(self) -> None:
        self._watched: dict[str, set[str]] = {}  # uuid -> containers of share servers
        self._last: dict[str, ShareReading] = {}  # share key -> its latest reading
        self._episodes: dict[str, Episode] = {}  # holder -> its episode over its memory
        self._restored: dict[str, Episode] = {}  # holder -> a saved one, not yet judged
        self._seen: set[str] = set()  # share keys asked for this round
        self._judged: set[str] = set()  # holders judged this round

    def watch(self, uuid: str, container: str) -> str:
        """Track ``container``'s own use of ``uuid`` from the next poll; returns its key."""
        self._watched.setdefault(uuid, set()).add(container)
        key = share_key(uuid, container)
        self._seen.add(key)
        return key

    def feed(self, reading: GpuReading, at: datetime, tracker: Callable[[str], GpuTracker]) -> None:
        """Feed one GPU reading to the trackers of the shares watched on that GPU."""
        for container in sorted(self._watched.get(reading.uuid, ())):
            own = share_reading(
                reading.processes, container, reading.utilization_pct, reading.memory_used_mib
            )
            key = share_key(reading.uuid, container)
            self._last[key] = own
            tracker(key).add(at, own.utilization_pct, own.memory_used_mib)

    def judge_memory(
        self,
        holder: str,
        key: str,
        started: str,
        share_mib: int,
        now: datetime,
        policy: MemoryPolicy,
    ) -> MemoryVerdict:
        """Judge ``holder``'s use of the GPU of share ``key``, continuing its episode if
        it is this server's (a restored one only once the share has a reading again)."""
        gpu, container = key.split(SEPARATOR, 1)
        last = self._last.get(key)
        if holder not in self._episodes and last is not None:
            restored = self._restored.pop(holder, None)
            if restored is not None:
                self._episodes[holder] = restored
        used = last.memory_used_mib if last is not None and last.own else None
        since = continued_episode(self._episodes.get(holder), gpu, container, started)
        verdict = judge_memory(used, share_mib, since, now, policy)
        if verdict.over_since is None:
            self._episodes.pop(holder, None)
        else:
            self._episodes[holder] = Episode(verdict.over_since, now, gpu, container, started)
        return verdict

    def judge_server(
        self,
        holder: str,
        share: Share,
        container: str,
        uuids: Iterable[str],
        now: datetime,
        policy: MemoryPolicy,
        started: str = "",
    ) -> OverMemory | None:
        """Judge a share server's memory on each of its GPUs; ``None`` when it is within
        its share (or its memory is unknown), else the worst verdict. ``started`` (the
        hub's start time of the server) and ``container`` tell a re-spawn from the same
        server: its episode starts afresh."""
        self._judged.add(holder)
        found: OverMemory | None = None
        for uuid in uuids:
            key = self.watch(uuid, container)
            v = self.judge_memory(holder, key, started, share.memory_mib, now, policy)
            if v.state is MemoryState.OK or v.over_since is None:
                continue
            over = OverMemory(v.state, v.message, ShareNotice(v.over_since, uuid, v.message))
            if found is None or over.state is MemoryState.STOP:
                found = over
        return found

    def episodes(self) -> dict[str, Episode]:
        """The episodes to save: the current ones and those restored, not yet judged."""
        return {**self._restored, **self._episodes}

    def restore(self, episodes: Mapping[str, Episode]) -> None:
        """Saved episodes (:meth:`episodes` before a restart): each goes on only if the
        same server is judged over again, from its first reading after the restart."""
        self._restored = dict(episodes)

    def end_round(self, holders: Iterable[str]) -> frozenset[str]:
        """Forget shares not asked for this round (their servers are gone) and the
        over-memory episodes of servers not judged; returns the share keys still current
        (the culler drops the trackers of the others)."""
        current = frozenset(self._seen)
        for uuid in list(self._watched):
            self._watched[uuid] = {c for c in self._watched[uuid] if share_key(uuid, c) in current}
            if not self._watched[uuid]:
                del self._watched[uuid]
        self._last = {k: v for k, v in self._last.items() if k in current}
        keep = set(holders)
        self._episodes = {h: e for h, e in self._episodes.items() if h in keep}
        # a restored episode waits for its server's first reading, while it is judged
        waiting = keep & self._judged
        self._restored = {h: e for h, e in self._restored.items() if h in waiting}
        self._seen = set()
        self._judged = set()
        return current
