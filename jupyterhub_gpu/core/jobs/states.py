"""A job's states, what ends it, its time limit, and which tasks of an array may start.

States (issue 32): queued, starting, running, then one end: succeeded, failed (with its
exit code), cancelled, timed_out, preempted, lost. A ``--requeue`` job that was preempted
or lost goes back to queued (``restarts`` counts up). Each state has one sentence for
``job show`` (:func:`describe`).

Stopping is Slurm's: SIGTERM, then SIGKILL once ``grace`` seconds have passed
(:func:`stop_step`); a time limit, a cancel and a preemption all stop that way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import tzinfo
from typing import Literal

from jupyterhub_gpu.core.words import UTC, duration, zoned_clock


class JobState(str, enum.Enum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    PREEMPTED = "preempted"
    LOST = "lost"

    @property
    def active(self) -> bool:
        return self in ACTIVE

    @property
    def placed(self) -> bool:
        """Holds a node (and maybe GPUs): starting or running."""
        return self in (JobState.STARTING, JobState.RUNNING)


ACTIVE = frozenset({JobState.QUEUED, JobState.STARTING, JobState.RUNNING})
ENDED = frozenset(set(JobState) - ACTIVE)

#: why a placed job is being stopped (the end it gets once its container is gone)
StopCause = Literal["cancel", "time", "preempt"]
_END_OF: Mapping[str, JobState] = {
    "cancel": JobState.CANCELLED,
    "time": JobState.TIMED_OUT,
    "preempt": JobState.PREEMPTED,
}


def ended_state(exit_code: int, stopping: StopCause | None) -> JobState:
    """The end of a job whose container exited with ``exit_code``: what the hub was
    stopping it for wins (a cancelled job that exits 0 on SIGTERM is cancelled), else 0
    is success and anything else a failure."""
    if stopping is not None:
        return _END_OF[stopping]
    return JobState.SUCCEEDED if exit_code == 0 else JobState.FAILED


def after_end(state: JobState, requeue: bool) -> JobState:
    """A ``--requeue`` job preempted or lost goes back to the queue; others stay ended."""
    if requeue and state in (JobState.PREEMPTED, JobState.LOST):
        return JobState.QUEUED
    return state


Step = Literal["term", "kill"]


@dataclass(frozen=True)
class StopClock:
    """When the hub began stopping a job (epoch s) and when it sent SIGTERM (None: not yet)."""

    since: float
    term_sent: float | None = None


def limit_reached(now: float, running_since: float | None, limit_s: float) -> bool:
    """Has a job that runs since ``running_since`` reached its time limit?"""
    return running_since is not None and now - running_since >= limit_s


def stop_step(now: float, clock: StopClock, grace_s: float) -> Step | None:
    """What to send now to a job being stopped: SIGTERM first, SIGKILL once ``grace_s``
    has passed since the SIGTERM, else nothing."""
    if clock.term_sent is None:
        return "term"
    if now - clock.term_sent >= grace_s:
        return "kill"
    return None


def startable_tasks(waiting: Iterable[int], running: int, limit: int | None) -> list[int]:
    """Which waiting tasks of one array may start (in index order), ``running`` of its
    tasks being placed and ``limit`` the ``%`` of ``--array`` (None: all)."""
    order = sorted(waiting)
    if limit is None:
        return order
    return order[: max(limit - running, 0)]


@dataclass(frozen=True)
class JobFacts:
    """What :func:`describe` needs of a job (plain data; times in epoch seconds)."""

    state: JobState
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    node: str = ""
    gpus: int = 0
    exit_code: int | None = None
    time_limit_s: float = 0.0
    reason: str = ""  # the queue's or the refusal's sentence
    restarts: int = 0


def describe(job: JobFacts, now: float, tz: tzinfo = UTC) -> str:
    """One sentence (two at most) for ``job show``: which state, when, where, why."""

    def at(t: float | None) -> str:
        return zoned_clock(t if t is not None else now, now, tz)

    where = f" on node {job.node}" if job.node else ""
    gpus = f" with {job.gpus} GPU{'s' if job.gpus != 1 else ''}" if job.gpus else ""
    again = f" (restart {job.restarts})" if job.restarts else ""
    s = job.state
    if s is JobState.QUEUED:
        why = f" {job.reason}" if job.reason else ""
        return f"Waiting for its turn since {at(job.submitted_at)}{again}.{why}"
    if s is JobState.STARTING:
        return f"Starting{where}{gpus} since {at(job.started_at)}{again}."
    if s is JobState.RUNNING:
        ran = duration(now - (job.started_at or now))
        left = duration(max(job.time_limit_s - (now - (job.started_at or now)), 0))
        since = at(job.started_at)
        return f"Running{where}{gpus} since {since} ({ran}; {left} left of its limit){again}."
    ended = at(job.ended_at)
    if s is JobState.SUCCEEDED:
        return f"Succeeded at {ended}{where} (exit code 0)."
    if s is JobState.FAILED:
        code = job.exit_code if job.exit_code is not None else "unknown"
        why = f" {job.reason}" if job.reason else " See its output for why."
        return f"Failed at {ended}{where} with exit code {code}.{why}"
    if s is JobState.CANCELLED:
        return f"Cancelled at {ended}{where}."
    if s is JobState.TIMED_OUT:
        return (
            f"Stopped at {ended}{where}: it reached its time limit of "
            f"{duration(job.time_limit_s)} (SIGTERM, then SIGKILL after the grace)."
        )
    if s is JobState.PREEMPTED:
        return (
            f"Preempted at {ended}{where}: a reservation for another group began on its "
            "GPUs; submit it again with --requeue to have it go back to the queue."
        )
    return (
        f"Lost at {ended}{where}: its node stopped answering or its container was "
        "gone; submit it again (with --requeue it goes back to the queue by itself)."
    )
