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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.errors import ConfigError

ACTIONS = ("off", "warn", "stop")


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
