"""Over-memory judgement of a share (pure).

A share is promised ``share_memory_mib`` of its GPU. Under time-slicing nothing stops its
processes from taking more (MPS and MIG do); the node agent still sees what they hold
(NVML's per-process memory), so the culler judges it each round:

- ``off``: never looked at;
- ``warn`` (the default): over its memory, the user is told (a notice on every hub page)
  how much it holds and what to do; nothing is stopped;
- ``stop``: as ``warn``, and a share that stays over for ``grace`` seconds is stopped.

A share is over when its own processes hold more than ``share_memory_mib`` plus
``tolerance_mib``. Unknown memory (NVML can't tell) is never "over": no server is
stopped on a guess. Going back under ends the episode; the next one starts afresh.

An episode (:class:`Episode`) names the server it belongs to (its GPU, container and
start time) and the latest round that saw it over. The culler saves its episodes in its
state file, so a restart does not reset the grace: an episode read back is continued
(:func:`continued_episode`) only for the same server holding the same share, seen over
shortly before the restart (:func:`recent_episodes`); anything else starts afresh.
:func:`episodes_from_json` refuses a malformed section as a whole (``ValueError``): a bad
file never stops a server.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.errors import ConfigError

ACTIONS = ("off", "warn", "stop")
MAX_EPISODES = 10_000  # episodes read back at most (one per share server)
_HOLDER_MAX, _GPU_MAX, _STARTED_MAX = 512, 128, 64  # characters
_CONTAINER_RE = re.compile(r"^[0-9a-f]{64}$")


class MemoryState(str, enum.Enum):
    OK = "ok"
    OVER = "over"  # warn the user
    STOP = "stop"  # over for longer than the grace: stop the server


@dataclass(frozen=True)
class MemoryPolicy:
    action: str = "warn"
    grace: float = 600.0  # s over before ``stop`` stops it
    tolerance_mib: float = 64.0  # MiB over the share before it counts (CUDA context slack)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(
                f"share memory policy: action must be one of {list(ACTIONS)}, got {self.action!r}"
            )
        for name in ("grace", "tolerance_mib"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(
                    f"share memory policy: {name} must be a number >= 0, got {value!r}"
                )


@dataclass(frozen=True)
class MemoryVerdict:
    state: MemoryState
    over_since: datetime | None  # start of the current episode over the share's memory
    message: str  # for the user ("" when OK)


def judge_memory(
    used_mib: float | None,
    share_memory_mib: int,
    over_since: datetime | None,
    now: datetime,
    policy: MemoryPolicy,
) -> MemoryVerdict:
    """Judge one share's memory now; ``over_since`` is the previous verdict's."""
    limit = share_memory_mib + policy.tolerance_mib
    if policy.action == "off" or used_mib is None or used_mib <= limit:
        return MemoryVerdict(MemoryState.OK, None, "")
    since = over_since or now
    over_for = (now - since).total_seconds()
    held = f"{used_mib:.0f} MiB of GPU memory, more than its share's {share_memory_mib} MiB"
    if policy.action == "stop" and over_for >= policy.grace:
        return MemoryVerdict(
            MemoryState.STOP,
            since,
            f"its processes held {held}, for {duration(over_for)} "
            f"(at most {duration(policy.grace)} allowed)",
        )
    fix = "free memory (restart the kernel, smaller batches) or ask for a bigger share"
    if policy.action == "stop":
        left = policy.grace - over_for
        fix += f"; it will be stopped in {duration(left)} if it stays over"
    else:
        fix += "; other users of this GPU may run out of memory"
    return MemoryVerdict(MemoryState.OVER, since, f"it holds {held}: {fix}")


@dataclass(frozen=True)
class Episode:
    """A share server's current episode over its memory, and whose it is."""

    since: datetime  # its start: the grace counts from here
    seen: datetime  # the latest round that judged it over
    gpu: str  # the GPU's uuid
    container: str  # the server's container id: a re-spawn is another container
    started: str  # the server's start time as the hub gives it: a re-spawn is another


def continued_episode(
    episode: Episode | None, gpu: str, container: str, started: str
) -> datetime | None:
    """The start of ``episode`` if it is the one of the server judged now (``gpu``,
    ``container``, ``started``); ``None`` (start afresh) for any other server's."""
    if episode is None or (episode.gpu, episode.container, episode.started) != (
        gpu,
        container,
        started,
    ):
        return None
    return episode.since


def recent_episodes(
    episodes: Mapping[str, Episode], now: datetime, max_gap: float
) -> dict[str, Episode]:
    """The saved ``episodes`` that may go on after a restart at ``now``: those judged
    over at most ``max_gap`` s before (what happened in a longer gap is unknown)."""
    return {h: e for h, e in episodes.items() if 0 <= (now - e.seen).total_seconds() <= max_gap}


def episodes_to_json(episodes: Mapping[str, Episode]) -> dict[str, dict[str, str]]:
    """holder -> its episode, JSON-ready (:func:`episodes_from_json` reads it back)."""
    return {
        holder: {
            "since": e.since.isoformat(),
            "seen": e.seen.isoformat(),
            "gpu": e.gpu,
            "container": e.container,
            "started": e.started,
        }
        for holder, e in sorted(episodes.items())
    }


def _text(item: Mapping[str, Any], name: str, most: int, least: int = 1) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not least <= len(value) <= most:
        raise ValueError(
            f"{name} must be a string of {least} to {most} characters, got {value!r:.60}"
        )
    return value


def _time(item: Mapping[str, Any], name: str, now: datetime) -> datetime:
    at = datetime.fromisoformat(_text(item, name, 64))
    if at.tzinfo is None or at > now:
        raise ValueError(f"{name} must be an ISO time with its zone, not after now, got {at}")
    return at


def _not_before_start(since: datetime, started: str) -> None:
    """An episode cannot begin before its server did (a tampered or mixed-up file would
    otherwise stop a server at its first reading); a start time that is not an ISO time
    with a zone is left to :func:`continued_episode`'s comparison."""
    try:
        start = datetime.fromisoformat(started)
    except ValueError:
        return
    if start.tzinfo is not None and since < start:
        raise ValueError(f"since ({since}) is before the server started ({start})")


def episodes_from_json(data: Any, now: datetime) -> dict[str, Episode]:
    """Read :func:`episodes_to_json`'s output back; ``ValueError`` (one sentence) for
    anything malformed: more than :data:`MAX_EPISODES`, a wrong type, a bad time or one
    after ``now``."""
    if not isinstance(data, dict):
        raise ValueError(f"share episodes must be an object, got {type(data).__name__}")
    if len(data) > MAX_EPISODES:
        raise ValueError(f"{len(data)} share episodes, more than the {MAX_EPISODES} allowed")
    out: dict[str, Episode] = {}
    for holder, item in data.items():
        if not isinstance(holder, str) or not 0 < len(holder) <= _HOLDER_MAX:
            raise ValueError(f"a share episode's server name is malformed: {holder!r:.60}")
        if not isinstance(item, dict):
            raise ValueError(f"share episode {holder!r:.60} must be an object")
        try:
            since, seen = _time(item, "since", now), _time(item, "seen", now)
            container = _text(item, "container", 64)
            if not _CONTAINER_RE.match(container):
                raise ValueError(f"container must be 64 hex digits, got {container!r:.60}")
            if since > seen:
                raise ValueError(f"since ({since}) is after seen ({seen})")
            started = _text(item, "started", _STARTED_MAX, least=0)  # "": the hub gave none
            _not_before_start(since, started)
            out[holder] = Episode(since, seen, _text(item, "gpu", _GPU_MAX), container, started)
        except ValueError as e:
            raise ValueError(f"share episode {holder!r:.60}: {e}") from None
    return out
