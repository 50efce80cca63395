"""Is this server idle? The culler's judgement: plain data in, a decision out, no I/O.

Three signals, each read by the service and handed in as plain data:

- the hub's ``last_activity`` for the server (proxy traffic and the single-user
  server's own activity reports);
- the server's kernels (``/api/kernels?no_track_activity=1``: execution state and last
  activity per kernel) and ``/api/status`` (last activity of the whole server);
- the server's GPUs, one :class:`GpuSummary` per GPU, folded from node-agent readings
  by :class:`~jupyterhub_gpu.core.culling.tracker.GpuTracker`.

A server is culled only when **every** signal says idle for the timeout. Missing data is
never read as idle: a GPU without a fresh reading, kernels that could not be read or a
server whose GPU assignment is unknown keep the server. A GPU whose mean utilisation over
``gpu_window`` reaches ``gpu_threshold`` (or whose memory use moves) is active, busy kernel
or not. The one exception is ``max_age``: an admin's hard limit that ends any server.

Every "keep" signal is under the server's user's control: the kernels and ``/api/status``
are the server's own answers (her code can write them), its hub activity is what her
server posts with its own token and what her browser sends, its GPU use is what she runs.
They are her claim, believed only up to ``max_age``, which is checked first, so nothing a
server says outlasts it; it is on by default (:data:`DEFAULT_MAX_AGE`, 7 days).

When the culler suspends instead of stopping (docs/culler.md, "Suspend instead of stop"),
a server whose GPU work was its kernels' (:func:`kernels_did_the_gpu_work`) goes at the
first idle gap (:func:`first_gap`): the suspend keeps its kernels' state, which the
memory-held waits protect for a stop. GPU work outside the kernels keeps every wait
(:func:`suspend_policy`; benchmarks/culling_returns.py's ``KernelWork`` measures it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.errors import ConfigError

#: Default ``max_age`` (s): the longest any server lives on what its user's server says.
DEFAULT_MAX_AGE = 7 * 86400.0

#: Kernel execution states that mean "working" (``dead`` and ``idle`` do not).
BUSY_STATES = frozenset({"busy", "starting", "restarting", "autorestarting"})


class Signal(str, enum.Enum):
    """Which signal decided (the first one that keeps the server, or why it goes)."""

    MAX_AGE = "max_age"
    DISABLED = "disabled"
    HUB = "hub"
    GPU = "gpu"
    GPU_MISSING = "gpu_missing"
    KERNELS = "kernels"
    KERNELS_MISSING = "kernels_missing"
    IDLE = "idle"
    SHARE_MEMORY = "share_memory"  # a share over its memory for too long (policy "stop")
    WARNED = "warned"  # idle, but its user was warned less than warn_before ago (warning.py)


@dataclass(frozen=True)
class Policy:
    """Culling settings for one server, group overrides already applied. Seconds and %."""

    timeout: float = 3600.0  # CPU-only servers; 0 turns idle culling off
    gpu_timeout: float = 1800.0  # servers holding GPUs; 0 turns idle culling off
    gpu_threshold: float = 10.0  # mean utilisation over gpu_window at or above this = active
    gpu_window: float = 300.0
    gpu_memory_change: float = 1024.0  # MiB: memory use moving this much = active
    gpu_pause_factor: float = 2.0  # a GPU must stay idle this many times its longest pause
    gpu_pause_cap: float = 7200.0  # ... but never longer than this (or the timeout)
    gpu_loaded_idle: float = 3600.0  # memory held, never busy in this server: 0 = off
    gpu_held_idle: float = 18000.0  # memory held, busy before in this server: 0 = off
    gpu_stale_after: float = 180.0  # a reading older than this is missing data
    max_age: float = DEFAULT_MAX_AGE  # cull any server older than this, busy or not; 0 = off

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"culler policy: {f.name} must be a number >= 0, got {value!r}")
        if self.gpu_window <= 0 or self.gpu_stale_after <= 0:
            raise ConfigError("culler policy: gpu_window and gpu_stale_after must be > 0")


#: Policy fields a group override may change (the tracker's settings are global).
OVERRIDABLE = frozenset(
    {
        "timeout",
        "gpu_timeout",
        "gpu_pause_factor",
        "gpu_pause_cap",
        "gpu_loaded_idle",
        "gpu_held_idle",
        "max_age",
    }
)


@dataclass(frozen=True)
class KernelObservation:
    """One kernel as ``/api/kernels`` lists it."""

    execution_state: str
    last_activity: datetime | None = None
    kernel_id: str = ""


@dataclass(frozen=True)
class KernelsObservation:
    """What the single-user server said about itself."""

    kernels: tuple[KernelObservation, ...] = ()
    server_last_activity: datetime | None = None  # /api/status: API, kernels, terminals


@dataclass(frozen=True)
class GpuSummary:
    """A rolling summary of one GPU's readings (see ``GpuTracker``)."""

    uuid: str
    last_sample_at: datetime  # newest reading
    observed_since: datetime  # start of the unbroken run of readings up to it
    last_active_at: datetime | None  # newest reading that counted as active
    utilization_pct: float  # mean over the window, at the newest reading
    memory_used_mib: float | None = None
    longest_pause_s: float = 0.0  # longest idle stretch between two active readings
    last_busy_at: datetime | None = None  # newest single reading >= threshold, this server


@dataclass(frozen=True)
class ServerObservation:
    """Everything the judgement looks at for one server.

    ``gpus`` maps each GPU uuid the server holds to its summary, or to ``None`` when no
    reading exists (agent unreachable, GPU absent from its answer); ``gpus=None`` means the
    assignment itself is unknown. ``kernels=None`` means the server was not read or did
    not answer.
    """

    name: str
    started: datetime | None
    last_activity: datetime | None
    gpus: Mapping[str, GpuSummary | None] | None = field(default_factory=dict)
    kernels: KernelsObservation | None = None


@dataclass(frozen=True)
class Decision:
    cull: bool
    reason: str  # one line, for the log and for the user
    signal: Signal


#: The old name of :func:`~jupyterhub_gpu.core.words.duration` (tests import it from here).
fmt_duration = duration


def _since(then: datetime | None, now: datetime) -> float | None:
    return None if then is None else (now - then).total_seconds()


def _keep(signal: Signal, reason: str) -> Decision:
    return Decision(False, reason, signal)


def memory_held(summary: GpuSummary, policy: Policy) -> bool:
    """Whether a process still holds this GPU's memory (``gpu_memory_change`` MiB or more)."""
    return (
        summary.memory_used_mib is not None and summary.memory_used_mib >= policy.gpu_memory_change
    )


def gpu_held(summary: GpuSummary, policy: Policy) -> bool:
    """Whether this GPU has been busy since its server started and still holds memory: a
    live process that computed before, e.g. a training or serving loop between phases."""
    return bool(
        policy.gpu_held_idle and summary.last_busy_at is not None and memory_held(summary, policy)
    )


def gpu_required_idle(summary: GpuSummary, policy: Policy, timeout: float) -> float:
    """How long this GPU must stay idle: the timeout, or longer while a process holds it.

    - A GPU that came back after a 40-minute pause may well come back after the next one,
      so it must stay idle ``gpu_pause_factor`` times its longest pause (at most
      ``gpu_pause_cap``).
    - A GPU whose memory a process still holds: ``gpu_loaded_idle`` if it has not computed
      since its server started (a model loaded, its first run not started yet),
      ``gpu_held_idle`` if it has (:func:`gpu_held`: a loop between phases, or a forgotten
      kernel that keeps its memory; the latter is freed after this, not days).
    - Nothing on the GPU (no memory held): the timeout alone.
    """
    patience = min(policy.gpu_pause_factor * summary.longest_pause_s, policy.gpu_pause_cap)
    if gpu_held(summary, policy):
        patience = max(patience, policy.gpu_held_idle)
    elif summary.last_busy_at is None and memory_held(summary, policy):
        patience = max(patience, policy.gpu_loaded_idle)
    return max(timeout, patience)


def _gpu_idle_for(
    uuid: str, s: GpuSummary | None, policy: Policy, timeout: float, now: datetime
) -> float | Decision:
    """Seconds this GPU has been idle, or the decision to keep the server because of it."""
    short = uuid[:12]
    if s is None:
        return _keep(Signal.GPU_MISSING, f"GPU {short}: no reading from its node agent")
    age = (now - s.last_sample_at).total_seconds()
    if age > policy.gpu_stale_after:
        return _keep(Signal.GPU_MISSING, f"GPU {short}: last reading is {duration(age)} old")
    # unobserved time is never idle time: count from the later of activity and observation
    since = s.observed_since
    if s.last_active_at is not None and s.last_active_at > since:
        since = s.last_active_at
    if gpu_held(s, policy) and s.last_busy_at is not None and s.last_busy_at > since:
        since = s.last_busy_at  # a short burst the window's mean did not count
    idle = (now - since).total_seconds()
    required = gpu_required_idle(s, policy, timeout)
    if idle >= required:
        return idle
    if since == s.observed_since and s.last_active_at != since:
        why = f"observed for only {duration(idle)} of {duration(required)}"
    else:
        why = f"active {duration(idle)} ago, needs {duration(required)} idle"
    return _keep(Signal.GPU, f"GPU {short} {why} (now {s.utilization_pct:.0f}%)")


def _kernels_idle_for(
    k: KernelsObservation | None, timeout: float, now: datetime
) -> float | Decision:
    if k is None:
        return _keep(Signal.KERNELS_MISSING, "kernels unknown: the server did not answer")
    busy = [x for x in k.kernels if x.execution_state in BUSY_STATES]
    if busy:
        return _keep(Signal.KERNELS, f"{len(busy)} kernel(s) busy")
    stamps = [x.last_activity for x in k.kernels if x.last_activity is not None]
    if k.server_last_activity is not None:
        stamps.append(k.server_last_activity)
    if not stamps:
        return float("inf")
    idle = (now - max(stamps)).total_seconds()
    if idle < timeout:
        return _keep(Signal.KERNELS, f"kernel/server activity {duration(idle)} ago")
    return idle


def kernels_did_the_gpu_work(obs: ServerObservation, gpu_window: float) -> bool | None:
    """Whether every GPU of ``obs`` did only its kernels' work: its last busy reading
    (``last_busy_at``) is no later than the kernels' last activity plus ``gpu_window``
    (the window a cell's work takes to fall out of the mean), or it has none since its
    server started. ``None`` when the kernels were not read; ``False`` when a GPU computed
    later than that (a process outside the kernels: a serving or training loop in a
    terminal, which may resume by itself), or has no reading (missing data decides
    nothing). Only the kernels' own ``last_activity`` counts, not ``/api/status``'s
    (terminals write that one)."""
    if obs.kernels is None:
        return None
    stamps = [k.last_activity for k in obs.kernels.kernels if k.last_activity is not None]
    kernels_last = max(stamps, default=None)
    for summary in (obs.gpus or {}).values():
        if summary is None:
            return False
        busy = summary.last_busy_at
        if busy is None:
            continue
        if kernels_last is None or busy > kernels_last + timedelta(seconds=gpu_window):
            return False
    return True


def first_gap(policy: Policy) -> Policy:
    """``policy`` without the waits that protect a running process's state: no
    memory-held waits (``gpu_held_idle``, ``gpu_loaded_idle``) and no pause-based wait.
    A suspended server keeps its kernels' state, so for GPU work that was its kernels'
    they have nothing left to protect: every signal idle for the timeout is enough."""
    return replace(policy, gpu_held_idle=0.0, gpu_loaded_idle=0.0, gpu_pause_factor=0.0)


def suspend_policy(obs: ServerObservation, policy: Policy, *, kernels_unknown: bool) -> Policy:
    """The policy a server the culler would suspend (not stop) is judged by: :func:`first_gap`
    when its GPU work was its kernels' (:func:`kernels_did_the_gpu_work`), ``policy`` (the
    stop's waits) when it was not. ``kernels_unknown``: the choice while the kernels are
    unread (:func:`judge` takes the shorter one, as it never culls unread kernels for
    idleness: it only asks for them; :func:`earliest_cull` the longer one)."""
    in_kernels = kernels_did_the_gpu_work(obs, policy.gpu_window)
    if in_kernels is None:
        in_kernels = kernels_unknown
    return first_gap(policy) if in_kernels else policy


def judge(
    obs: ServerObservation, policy: Policy, now: datetime, *, suspending: bool = False
) -> Decision:
    """Keep or cull ``obs`` at ``now`` under ``policy``, with a one-line reason.

    ``suspending``: the culler will suspend this server, not stop it (its kernels' state
    kept): a GPU whose work was its kernels' is reclaimed at the first idle gap, with no
    memory-held or pause-based wait (:func:`suspend_policy`); GPU work outside the kernels
    keeps those waits. A stop (``suspending`` False) keeps them all."""
    if suspending:
        policy = suspend_policy(obs, policy, kernels_unknown=True)
    age = _since(obs.started, now)
    if policy.max_age and age is not None and age >= policy.max_age:
        reason = f"running for {duration(age)}, over the maximum age of "
        return Decision(True, reason + duration(policy.max_age), Signal.MAX_AGE)
    if obs.gpus is None:
        return _keep(Signal.GPU_MISSING, "GPU assignment unknown (no gpu_uuids in spawner state)")
    timeout = policy.gpu_timeout if obs.gpus else policy.timeout
    if timeout <= 0:
        return _keep(Signal.DISABLED, "idle culling is off for this server's policy")
    hub_idle = _since(obs.last_activity or obs.started, now)
    if hub_idle is None:
        return _keep(Signal.HUB, "the hub reports neither activity nor a start time")
    if hub_idle < timeout:
        return _keep(Signal.HUB, f"hub activity {duration(hub_idle)} ago")
    gpu_idle = float("inf")
    for uuid, summary in sorted(obs.gpus.items()):
        verdict = _gpu_idle_for(uuid, summary, policy, timeout, now)
        if isinstance(verdict, Decision):
            return verdict
        gpu_idle = min(gpu_idle, verdict)
    kernel_idle = _kernels_idle_for(obs.kernels, timeout, now)
    if isinstance(kernel_idle, Decision):
        return kernel_idle
    parts = [f"no hub activity for {duration(hub_idle)}"]
    parts.append(
        "kernels idle" if kernel_idle == float("inf") else f"kernels idle {duration(kernel_idle)}"
    )
    if obs.gpus:
        n = len(obs.gpus)
        parts.append(
            f"{n} GPU{'s' if n > 1 else ''} under {policy.gpu_threshold:g}% "
            f"for {duration(gpu_idle)}"
        )
    return Decision(True, f"idle: {', '.join(parts)} (timeout {duration(timeout)})", Signal.IDLE)


@dataclass(frozen=True)
class Deadline:
    """The earliest time the culler would stop a server it keeps now: ``why`` is
    ``"max_age"`` (certain: it runs that long) or ``"idle"`` (if from now on nothing in it
    is active: no hub activity, GPUs under the threshold)."""

    at: datetime
    why: str


def earliest_cull(
    obs: ServerObservation, policy: Policy, now: datetime, *, suspending: bool = False
) -> Deadline | None:
    """When ``obs`` would be culled at the earliest, or None when nothing bounds it (idle
    culling off and no ``max_age``, or its GPUs unread: missing data keeps a server).
    ``suspending``: as :func:`judge`'s, the first idle gap once its kernels were read and
    did the GPU work (unread kernels: the stop's waits, the later time)."""
    if suspending:
        policy = suspend_policy(obs, policy, kernels_unknown=False)
    deadlines: list[Deadline] = []
    if policy.max_age and obs.started is not None:
        deadlines.append(Deadline(obs.started + timedelta(seconds=policy.max_age), "max_age"))
    idle = _idle_deadline(obs, policy, now)
    if idle is not None:
        deadlines.append(Deadline(idle, "idle"))
    return min(deadlines, key=lambda d: d.at) if deadlines else None


def _idle_deadline(obs: ServerObservation, policy: Policy, now: datetime) -> datetime | None:
    if obs.gpus is None:
        return None
    timeout = policy.gpu_timeout if obs.gpus else policy.timeout
    last = obs.last_activity or obs.started
    if timeout <= 0 or last is None:
        return None
    at = last + timedelta(seconds=timeout)  # hub activity
    for s in obs.gpus.values():
        if s is None:
            return None
        since = max(s.observed_since, s.last_active_at or s.observed_since)
        if gpu_held(s, policy) and s.last_busy_at is not None:
            since = max(since, s.last_busy_at)
        at = max(at, since + timedelta(seconds=gpu_required_idle(s, policy, timeout)))
    return max(at, now)


def validate_overrides(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Check ``group_overrides`` (JupyterHub's shape); :class:`ConfigError` names the entry.

    ``{"10-staff": {"groups": ["staff"], "policy_override": {"gpu_timeout": 7200}}}``
    """
    if not isinstance(overrides, Mapping):
        raise ConfigError("group_overrides must be a dict of {key: {groups, policy_override}}")
    checked: dict[str, dict[str, Any]] = {}
    for key, entry in overrides.items():
        where = f"group_overrides[{key!r}]"
        if not isinstance(entry, Mapping) or set(entry) != {"groups", "policy_override"}:
            raise ConfigError(f"{where} must have exactly the keys 'groups' and 'policy_override'")
        groups, override = entry["groups"], entry["policy_override"]
        if isinstance(groups, str) or not all(isinstance(g, str) for g in groups):
            raise ConfigError(f"{where}['groups'] must be a list of group names")
        if not isinstance(override, Mapping):
            raise ConfigError(f"{where}['policy_override'] must be a dict")
        unknown = sorted(set(override) - OVERRIDABLE)
        if unknown:
            raise ConfigError(
                f"{where}: can't override {', '.join(unknown)}; allowed: {sorted(OVERRIDABLE)}"
            )
        try:
            replace(Policy(), **override)
        except (ConfigError, TypeError) as e:
            raise ConfigError(f"{where}: {e}") from None
        checked[str(key)] = {"groups": list(groups), "policy_override": dict(override)}
    return checked


def resolve_policy(
    base: Policy, overrides: Mapping[str, Mapping[str, Any]], groups: Iterable[str]
) -> Policy:
    """Apply every override whose groups meet ``groups``, in sorted key order (later wins),
    as JupyterHub applies ``Spawner.group_overrides``."""
    member = set(groups)
    policy = base
    for key in sorted(overrides):
        entry = overrides[key]
        if member & set(entry["groups"]):
            policy = replace(policy, **entry["policy_override"])
    return policy
