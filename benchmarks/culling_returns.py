"""Returning users: what a cull really costs on sessions whose users come back (issue 35).

``benchmarks/culling.py --returns`` replays sessions through a culling policy, and when a
culled session's user comes back (a later visit of the same user to the same server) the
server restarts at that moment, with a fresh kernel (its state lost) and a fresh GPU
history, and the culler judges it again from there. What a cull freed is the time from the
cull to the return (or to the session's end when nobody returns).

Measures (:func:`score`, :func:`oracle_after_last`, :func:`oracle_all_gaps`; pure):

- ``interrupted_gpu_minutes``: GPU work that was running at the cull (launched before it
  and not finished), its minutes from the cull to its end. Must stay 0.
- ``forced_restarts``: culls followed by the same user's return.
- ``freed_gpu_hours``: GPU-idle time from each cull to the user's return, or to the
  session's end (GPU work the cull killed, in that stretch, is not idle time and not
  counted); ``freed_before_return_gpu_hours`` is the part freed by culls the user came
  back to.
- ``lost_state_gpu_minutes``: GPU work done in the killed kernel since its (re)start, summed
  over forced restarts: an upper bound on what the user re-runs to rebuild its state.
- ``restart_start_minutes``: ``forced_restarts`` times the measured spawn time.
- ``oracle_after_last_gpu_hours``: per session, the time after its last GPU work, less the
  grace (the policy's timeout): what a culler that knew the future frees without any restart.
- ``oracle_all_gaps_gpu_hours``: every GPU-idle gap (before the first work, between two,
  after the last) longer than the grace, less the grace: what suspend-and-restore could free
  with nothing lost.

``suspend`` (issue 35, item 4) is the product's own judge at the first idle gap (the
timeout alone: no memory-held waits, no pause-based wait), where a cull writes the server
to disk (:class:`SuspendCosts`: CRIU's measured seconds per GiB, docs/culler.md "Suspend
instead of stop") instead of stopping it, and the user's return restores it with its
kernels: ``restores`` and ``restore_wait_minutes`` (the user waits for the restore) are
counted, ``forced_restarts`` only for restores that failed (``failure_rate``, 0 by
default), each with its lost state; the GPU is freed from the end of the checkpoint.

The policies see what the service sees, tick by tick: the hub's ``last_activity`` (the
user's visits and the kernel's messages), the kernels (busy while a cell runs), and the
GPU's readings folded by the product's own :class:`GpuTracker`; ``ours`` is decided by the
product's own :func:`judge` (not a re-implementation).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from jupyterhub_gpu.core.culling.idleness import (
    KernelObservation,
    KernelsObservation,
    Policy,
    ServerObservation,
    first_gap,
    judge,
)
from jupyterhub_gpu.core.culling.tracker import GpuTracker

TICK_S = 60.0
THRESHOLD = 10.0
#: a server's start time (s): the pooled p50 of benchmarks/spawn.py (docs: benchmarks/README.md)
SPAWN_S = 4.2

Interval = tuple[float, float]


@dataclass(frozen=True)
class Work:
    """One stretch of GPU work: busy from ``start`` to ``end``; ``launched`` is when its
    user started it (for a process that resumes after a pause: when the process started)."""

    start: float
    end: float
    launched: float
    util: float = 80.0


@dataclass(frozen=True)
class Samples:
    """Recorded GPU readings (a trace): times, utilisation %, memory MiB (or None)."""

    times: Sequence[float]
    util: Sequence[float]
    mem_mib: Sequence[float | None]


@dataclass(frozen=True)
class Timeline:
    """One server session: what its user and its GPU did, from its start to its end.

    ``visits``: the user's presence (HTTP activity), sorted, not overlapping. ``cells``:
    kernel busy spans (a notebook cell running; kernel messages at both ends). ``samples``:
    recorded readings, or ``None`` to derive them from ``work`` at each tick (utilisation of
    the running work, else 0; memory ``held_mib`` from the kernel's first work on when
    ``memory_held``, else during work only). A restart empties the kernel: derived memory
    is held again only from the first work after it.
    """

    name: str
    start: float
    end: float
    work: tuple[Work, ...]
    visits: tuple[Interval, ...]
    cells: tuple[Interval, ...] = ()
    samples: Samples | None = None
    memory_held: bool = True
    held_mib: float = 4096.0


@dataclass(frozen=True)
class Cull:
    at: float
    returned: float | None  # the user's next visit (the server restarts then), or None
    restored: bool = False  # suspended, and restored at the return with its state
    checkpoint_s: float = 0.0  # the GPU stays held while the server is written to disk
    restore_s: float = 0.0  # the user waits this long at the return (a restore tried)


@dataclass(frozen=True)
class SuspendCosts:
    """Suspend instead of stop: what a checkpoint and a restore cost, and how often a
    restore fails (docs/culler.md, "Suspend instead of stop": 28.4 s to checkpoint and
    17.5 s to restore 1 GiB on the test cluster). ``gib``: the memory written per server
    (the notebook model's 4 GiB of GPU memory, moved to host memory by cuda-checkpoint)."""

    checkpoint_s_per_gib: float = 28.4
    restore_s_per_gib: float = 17.5
    gib: float = 4.0
    failure_rate: float = 0.0
    seed: int = 0

    @property
    def checkpoint_s(self) -> float:
        return self.checkpoint_s_per_gib * self.gib

    @property
    def restore_s(self) -> float:
        return self.restore_s_per_gib * self.gib

    def fails(self, session: str, index: int) -> bool:
        """Whether restore ``index`` of ``session`` fails (seeded, the same for every
        policy and timeout that reaches it)."""
        if self.failure_rate <= 0:
            return False
        draw = random.Random(f"restore:{self.seed}:{session}:{index}").random()
        return draw < self.failure_rate


class Decider(Protocol):
    """One policy's running state for one (re)started server."""

    def feed(self, at: float, util: float, mem_mib: float | None) -> None: ...

    def cull(
        self, t: float, hub_last: float, kernel_busy: bool, kernel_last: float | None
    ) -> bool: ...


# -- the policies ---------------------------------------------------------------------------


class Ours:
    """The product: :class:`GpuTracker` folds the readings, :func:`judge` decides."""

    def __init__(self, name: str, policy: Policy, started: float) -> None:
        self.name, self.policy = name, policy
        self.started = datetime.fromtimestamp(started, timezone.utc)
        self.tracker = GpuTracker(
            name,
            threshold=policy.gpu_threshold,
            window=policy.gpu_window,
            memory_change=policy.gpu_memory_change,
            max_gap=policy.gpu_stale_after,
        )

    def feed(self, at: float, util: float, mem_mib: float | None) -> None:
        self.tracker.add(datetime.fromtimestamp(at, timezone.utc), util, mem_mib)

    def observe(
        self, hub_last: float, kernel_busy: bool, kernel_last: float | None
    ) -> ServerObservation:
        """What the service hands :func:`judge`: the hub's activity, one kernel, one GPU."""
        utc = timezone.utc
        kernel = KernelObservation(
            "busy" if kernel_busy else "idle",
            None if kernel_last is None else datetime.fromtimestamp(kernel_last, utc),
        )
        return ServerObservation(
            name=self.name,
            started=self.started,
            last_activity=datetime.fromtimestamp(hub_last, utc),
            gpus={self.name: self.tracker.summary()},
            kernels=KernelsObservation((kernel,)),
        )

    def cull(self, t: float, hub_last: float, kernel_busy: bool, kernel_last: float | None) -> bool:
        obs = self.observe(hub_last, kernel_busy, kernel_last)
        return judge(obs, self.policy, datetime.fromtimestamp(t, timezone.utc)).cull


class KernelWork(Ours):
    """The product's suspend: :func:`judge` with ``suspending`` (the first idle gap when
    the GPU's work was the kernels': its last busy reading no later than the kernels'
    last message, plus one ``gpu_window``; else ``policy``'s memory-held waits, as a
    process outside the kernels, a serving loop in a terminal, may resume by itself and
    freezing it would interrupt it). Issue 35, item 4; the culler applies it when it
    suspends (``GPUIdleCuller.suspend_reclaims_cells``)."""

    def cull(self, t: float, hub_last: float, kernel_busy: bool, kernel_last: float | None) -> bool:
        utc = timezone.utc
        obs = self.observe(hub_last, kernel_busy, kernel_last)
        return judge(obs, self.policy, datetime.fromtimestamp(t, utc), suspending=True).cull


class Stock:
    """jupyterhub-idle-culler: the hub's last_activity older than the timeout."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s

    def feed(self, at: float, util: float, mem_mib: float | None) -> None:
        pass

    def cull(self, t: float, hub_last: float, kernel_busy: bool, kernel_last: float | None) -> bool:
        return t - hub_last >= self.timeout_s


class GpuThreshold:
    """Every reading of the last timeout under the threshold (at least one in it)."""

    def __init__(self, timeout_s: float, started: float) -> None:
        self.timeout_s, self.started = timeout_s, started
        self.last_busy: float | None = None
        self.last_at: float | None = None

    def feed(self, at: float, util: float, mem_mib: float | None) -> None:
        self.last_at = at
        if util >= THRESHOLD:
            self.last_busy = at

    def cull(self, t: float, hub_last: float, kernel_busy: bool, kernel_last: float | None) -> bool:
        has_data = self.last_at is not None and self.last_at > t - self.timeout_s
        quiet = self.last_busy is None or self.last_busy <= t - self.timeout_s
        return t - self.started >= self.timeout_s and has_data and quiet


# -- replay ---------------------------------------------------------------------------------


def next_return(tl: Timeline, after: float) -> float | None:
    """When the user is next at the server at or after ``after`` (``after`` itself when a
    visit is under way), or None if never before the session's end."""
    for a, z in tl.visits:
        if a <= after < z:
            return after
        if a >= after:
            return a if a < tl.end else None
    return None


def _last_point(intervals: Sequence[Interval], starts: Sequence[float], t: float) -> float | None:
    """The latest moment in ``intervals`` at or before ``t`` (``t`` itself inside one)."""
    i = bisect.bisect_right(starts, t) - 1
    if i < 0:
        return None
    return min(intervals[i][1], t)


def _kernel(
    tl: Timeline, starts: Sequence[float], since: float, t: float
) -> tuple[bool, float | None]:
    """Whether a cell started since ``since`` runs at ``t``, and the kernel's last message
    (cells are sorted and do not overlap: one kernel runs one cell at a time)."""
    i = bisect.bisect_right(starts, t) - 1
    if i < 0 or tl.cells[i][0] < since:
        return False, None
    a, z = tl.cells[i]
    return (True, a) if t < z else (False, z)


def _derived_reading(
    tl: Timeline, starts: Sequence[float], since: float, t: float, kernel: float | None = None
) -> tuple[float, float]:
    """The reading at ``t`` of a server (re)started at ``since`` whose kernel lives since
    ``kernel`` (``since`` after a restart; earlier after a restore, which keeps it)."""
    i = bisect.bisect_right(starts, t) - 1
    born = since if kernel is None else kernel
    loaded = i >= 0 and bisect.bisect_left(starts, born) <= i  # a work in this kernel
    util = tl.work[i].util if i >= 0 and t < tl.work[i].end and tl.work[i].start >= since else 0.0
    held = util > 0 or (tl.memory_held and loaded)
    return util, (tl.held_mib if held else 0.0)


def first_cull(
    tl: Timeline, decider: Decider, since: float, kernel: float | None = None
) -> float | None:
    """The first tick after ``since`` (a start, restart or restore) at which ``decider``
    culls; ``kernel``: since when the kernel lives (a restore keeps the earlier one)."""
    visit_starts = [a for a, _ in tl.visits]
    cell_starts = [a for a, _ in tl.cells]
    work_starts = [w.start for w in tl.work]
    k = bisect.bisect_right(tl.samples.times, since) if tl.samples else 0
    t = since + TICK_S
    while t <= tl.end:
        if tl.samples is not None:
            s = tl.samples
            while k < len(s.times) and s.times[k] <= t:
                decider.feed(s.times[k], s.util[k], s.mem_mib[k])
                k += 1
        else:
            decider.feed(t, *_derived_reading(tl, work_starts, since, t, kernel))
        seen = _last_point(tl.visits, visit_starts, t)
        busy, kernel_last = _kernel(tl, cell_starts, since, t)
        hub_last = max(since, seen if seen is not None else since, kernel_last or since)
        if decider.cull(t, hub_last, busy, kernel_last):
            return t
        t += TICK_S
    return None


def replay(
    tl: Timeline, make: Callable[[float], Decider], suspend: SuspendCosts | None = None
) -> list[Cull]:
    """Every cull of one session; after each, the server restarts at its user's return,
    or, with ``suspend``, is restored then with its kernel (a fresh one if the restore
    failed)."""
    culls: list[Cull] = []
    since = kernel = tl.start
    while True:
        at = first_cull(tl, make(since), since, kernel)
        if at is None:
            return culls
        back = next_return(tl, at)
        if suspend is None:
            culls.append(Cull(at, back))
            restored = False
        else:
            restored = back is not None and not suspend.fails(tl.name, len(culls))
            tried = suspend.restore_s if back is not None else 0.0
            culls.append(Cull(at, back, restored, suspend.checkpoint_s, tried))
        if back is None:
            return culls
        since = back
        if not restored:
            kernel = back


# -- the measures (pure) --------------------------------------------------------------------


@dataclass
class Measures:
    culls: int = 0
    interrupted_gpu_minutes: float = 0.0
    forced_restarts: int = 0
    freed_gpu_hours: float = 0.0
    freed_before_return_gpu_hours: float = 0.0
    lost_state_gpu_minutes: float = 0.0
    oracle_after_last_gpu_hours: float = 0.0
    oracle_all_gaps_gpu_hours: float = 0.0
    restores: int = 0  # suspended servers restored at their user's return (state kept)
    restore_wait_minutes: float = 0.0  # what the returning users waited for restores

    def add(self, other: Measures) -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {k: round(v, 1) for k, v in vars(self).items()}
        out["restart_start_minutes"] = round(self.forced_restarts * SPAWN_S / 60, 1)
        out["freed_share_of_oracle_all_gaps"] = (
            round(self.freed_gpu_hours / self.oracle_all_gaps_gpu_hours, 3)
            if self.oracle_all_gaps_gpu_hours
            else 0.0
        )
        return out


def score(tl: Timeline, culls: Sequence[Cull]) -> Measures:
    """The honest measures of one session's culls (see the module docstring)."""
    m = Measures(culls=len(culls))
    since = tl.start  # the kernel's start: its GPU work is what a lost kernel loses
    for c in culls:
        for w in tl.work:
            if w.launched < c.at < w.end:
                m.interrupted_gpu_minutes += (w.end - max(w.start, c.at)) / 60
        until = tl.end if c.returned is None else c.returned
        freed_from = min(c.at + c.checkpoint_s, until)  # the GPU is held while it is written
        busy = sum(max(0.0, min(w.end, until) - max(w.start, freed_from)) for w in tl.work)
        freed = max(0.0, until - freed_from - busy) / 3600
        m.freed_gpu_hours += freed
        if c.returned is None:
            continue
        m.freed_before_return_gpu_hours += freed
        m.restore_wait_minutes += c.restore_s / 60
        if c.restored:
            m.restores += 1
            continue
        m.forced_restarts += 1  # a stop, or a restore that failed: a fresh kernel
        m.lost_state_gpu_minutes += sum(
            (min(w.end, c.at) - w.start) / 60 for w in tl.work if since <= w.start < c.at
        )
        since = c.returned
    return m


def oracle_after_last(tl: Timeline, grace_s: float) -> float:
    """GPU-hours after the session's last GPU work, less the grace."""
    last = max((w.end for w in tl.work), default=tl.start)
    return max(0.0, tl.end - last - grace_s) / 3600


def idle_gaps(tl: Timeline) -> list[Interval]:
    """The session's GPU-idle stretches: before its first work, between two, after its last."""
    gaps, edge = [], tl.start
    for w in sorted(tl.work, key=lambda w: w.start):
        if w.start > edge:
            gaps.append((edge, w.start))
        edge = max(edge, w.end)
    if tl.end > edge:
        gaps.append((edge, tl.end))
    return gaps


def oracle_all_gaps(tl: Timeline, grace_s: float) -> float:
    """GPU-hours of every idle gap longer than the grace, less the grace."""
    return sum(max(0.0, z - a - grace_s) for a, z in idle_gaps(tl)) / 3600


def measure(
    tl: Timeline,
    make: Callable[[float], Decider],
    grace_s: float,
    suspend: SuspendCosts | None = None,
) -> Measures:
    """Replay one session under one policy and score it, with both oracles at ``grace_s``."""
    m = score(tl, replay(tl, make, suspend))
    m.oracle_after_last_gpu_hours = oracle_after_last(tl, grace_s)
    m.oracle_all_gaps_gpu_hours = oracle_all_gaps(tl, grace_s)
    return m


# -- the cases ------------------------------------------------------------------------------


Maker = Callable[[Timeline], Callable[[float], Decider]]


def first_gap_policy(timeout_s: float) -> Policy:
    """Suspend's policy: the product's judge at the first idle gap, every signal idle for
    the timeout (no memory-held waits, no pause-based wait: a suspended kernel keeps its
    state, so they have nothing left to protect)."""
    return first_gap(Policy(gpu_timeout=timeout_s, timeout=timeout_s))


def makers(timeout_min: float) -> dict[str, tuple[Maker, bool]]:
    """Each policy at one timeout: per session, a factory of fresh deciders per (re)start,
    and whether its culls suspend (True) or stop."""
    s = 60 * timeout_min
    policy = Policy(gpu_timeout=s, timeout=s)
    gap = first_gap_policy(s)
    return {
        "ours": (lambda tl: lambda since: Ours(tl.name, policy, since), False),
        "stock": (lambda tl: lambda since: Stock(s), False),
        "gpu_threshold": (lambda tl: lambda since: GpuThreshold(s, since), False),
        "suspend": (lambda tl: lambda since: Ours(tl.name, gap, since), True),
        "suspend_kernel": (lambda tl: lambda since: KernelWork(tl.name, policy, since), True),
    }


def total(
    timelines: Sequence[Timeline],
    make: Maker,
    grace_s: float,
    suspend: SuspendCosts | None = None,
) -> dict[str, float]:
    """One policy's measures summed over ``timelines``."""
    out = Measures()
    for tl in timelines:
        out.add(measure(tl, make(tl), grace_s, suspend))
    return out.as_dict()


def run_case(
    timelines: Sequence[Timeline],
    timeouts_min: Sequence[float],
    suspend: SuspendCosts | None = None,
) -> dict[str, object]:
    """Every policy at every timeout over ``timelines``: {policy: {timeout: measures}}."""
    costs = suspend or SuspendCosts()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m in timeouts_min:
        for name, (make, suspends) in makers(m).items():
            cell = total(timelines, make, 60 * m, costs if suspends else None)
            out.setdefault(name, {})[f"{m:g}"] = cell
    hours = sum(tl.end - tl.start for tl in timelines) / 3600
    busy = sum(w.end - w.start for tl in timelines for w in tl.work) / 3600
    gaps = sorted(z - a for tl in timelines for a, z in idle_gaps(tl))

    def pct(q: float) -> float:
        return round(gaps[min(len(gaps) - 1, int(q * len(gaps)))] / 60, 1) if gaps else 0.0

    info = {
        "sessions": len(timelines),
        "session_gpu_hours": round(hours, 1),
        "gpu_work_hours": round(busy, 1),
        "idle_gap_minutes_p50_p90_p99": [pct(0.5), pct(0.9), pct(0.99)],
        "sessions_with_a_gap_over_8h": sum(
            any(z - a > 8 * 3600 for a, z in idle_gaps(tl)) for tl in timelines
        ),
    }
    return {"info": info, "policies": out}


def run_grid(
    timelines: Sequence[Timeline],
    timeouts_min: Sequence[float],
    held_h: Sequence[float],
    loaded_h: Sequence[float],
) -> dict[str, dict[str, float]]:
    """``ours`` (stop) at every timeout x ``gpu_held_idle`` x ``gpu_loaded_idle`` (hours;
    all else as shipped): {"T/held/loaded": measures}, the tuning of issue 35's item 4."""
    out = {}
    for m in timeouts_min:
        for held in held_h:
            for loaded in loaded_h:
                policy = Policy(
                    gpu_timeout=60 * m,
                    timeout=60 * m,
                    gpu_held_idle=3600 * held,
                    gpu_loaded_idle=3600 * loaded,
                )

                def make(tl: Timeline, p: Policy = policy) -> Callable[[float], Decider]:
                    return lambda since: Ours(tl.name, p, since)

                out[f"{m:g}/{held:g}/{loaded:g}"] = total(timelines, make, 60 * m)
    return out


def print_case(title: str, case: dict[str, object]) -> None:
    info = case["info"]
    print(f"\n{title}: {info}")
    head = (
        "policy",
        "timeout",
        "culls",
        "interr.",
        "forced",
        "freed h",
        "..to return",
        "lost min",
        "restores",
        "oracle last h",
        "oracle gaps h",
        "freed/gaps",
    )
    print("".join(f"{h:>14}" for h in head))
    policies = case["policies"]
    assert isinstance(policies, dict)
    for name, by in policies.items():
        for m, c in by.items():
            row = (
                name,
                m + "m",
                c["culls"],
                c["interrupted_gpu_minutes"],
                c["forced_restarts"],
                c["freed_gpu_hours"],
                c["freed_before_return_gpu_hours"],
                c["lost_state_gpu_minutes"],
                c["restores"],
                c["oracle_after_last_gpu_hours"],
                c["oracle_all_gaps_gpu_hours"],
                c["freed_share_of_oracle_all_gaps"],
            )
            print("".join(f"{v!s:>14}" for v in row))
