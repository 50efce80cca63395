"""The dashboard's list of batch jobs (pure; issue 32): one row per job (or array task)
with its state, GPUs, time, whether the viewer may cancel it, and the last lines of its
output, bounded and cleaned (the page escapes them; here they lose terminal escapes and
control characters, and are cut to a few lines of bounded width).

The jobs come from the hub's job API read with the viewer's own token, so what is here is
already only what the viewer may see (a user's own jobs; an admin's: everyone's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from typing import Protocol

from jupyterhub_gpu.core.words import UTC, duration, gpus, zoned_clock

#: at most this many rows (the most recent first, as the hub lists them)
MAX_ROWS = 50
#: the output's last lines shown for the first rows only (each is one hub request)
TAIL_ROWS = 8
TAIL_LINES = 5
TAIL_WIDTH = 200
#: what is read of the end of an output file for its last lines
TAIL_BYTES = 4096

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

STATE_LABELS: Mapping[str, str] = {
    "queued": "queued",
    "starting": "starting",
    "running": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
    "timed_out": "timed out",
    "preempted": "preempted",
    "lost": "lost",
}
ACTIVE_STATES = frozenset({"queued", "starting", "running"})


class JobLike(Protocol):
    """What a row needs of a job (the hub's :class:`~jupyterhub_gpu.wire.jobs.JobView`)."""

    @property
    def id(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def sentence(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def share(self) -> str: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def submitted_at(self) -> float: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def exit_code(self) -> int | None: ...


@dataclass(frozen=True)
class JobRow:
    id: str
    user: str  # shown to admins (whose list has everyone's)
    name: str
    state: str  # the API's value (a CSS class, the tests)
    state_label: str
    gpus: str  # "2 GPUs", "share 1/4 of a GPU", "no GPU"
    time: str  # "ran 12 min", "running for 3 min (since 14:02 CET)", "waiting since ..."
    sentence: str  # the hub's one sentence (which state, when, where, why)
    can_cancel: bool
    output: tuple[str, ...]  # the last lines of its output ("" list: none shown)


def last_lines(
    data: str, cut: bool, lines: int = TAIL_LINES, width: int = TAIL_WIDTH
) -> tuple[str, ...]:
    """The last ``lines`` lines of the end of an output (``cut``: ``data`` is not the
    file's beginning, so its first line is partial and dropped). A progress bar redrawn
    with carriage returns shows as its last drawing; terminal escapes and control
    characters go; each line at most ``width`` characters (a cut one ends with "…");
    blank lines at the end are left out."""
    parts = data.replace("\r\n", "\n").split("\n")
    if cut and len(parts) > 1:
        parts = parts[1:]
    out: list[str] = []
    for part in parts:
        shown = part.rsplit("\r", 1)[-1]
        shown = _CONTROL.sub("", _ESCAPES.sub("", shown.replace("\t", "    "))).rstrip()
        if len(shown) > width:
            shown = shown[: width - 1] + "…"
        out.append(shown)
    while out and not out[-1]:
        out.pop()
    return tuple(out[-lines:]) if lines > 0 else ()


def _gpus(job: JobLike) -> str:
    if job.share:
        return f"share {job.share} of a GPU"
    if job.gpus <= 0:
        return "no GPU"
    return gpus(job.gpus)


def _time(job: JobLike, now: float, tz: tzinfo) -> str:
    def at(t: float) -> str:
        return zoned_clock(t, now, tz)

    if job.state == "queued":
        return f"waiting since {at(job.submitted_at)} ({duration(now - job.submitted_at)})"
    if job.state in ("starting", "running") and job.started_at is not None:
        return f"{job.state} since {at(job.started_at)} ({duration(now - job.started_at)})"
    if job.state in ("starting", "running"):
        return f"{job.state} since {at(job.submitted_at)}"
    if job.ended_at is not None and job.started_at is not None:
        return f"ended {at(job.ended_at)}, ran {duration(job.ended_at - job.started_at)}"
    if job.ended_at is not None:
        return f"ended {at(job.ended_at)}, never ran"
    return f"submitted {at(job.submitted_at)}"


def state_label(job: JobLike) -> str:
    label = STATE_LABELS.get(job.state, job.state)
    if job.state == "failed" and job.exit_code is not None:
        return f"{label} (exit code {job.exit_code})"
    return label


def job_rows(
    jobs: Sequence[JobLike],
    tails: Mapping[str, tuple[str, ...]],
    viewer: str,
    admin: bool,
    now: float,
    tz: tzinfo = UTC,
) -> list[JobRow]:
    """The rows of the dashboard's job list, at most :data:`MAX_ROWS` (``jobs`` as the
    hub lists them, newest first). ``tails``: the last output lines by job id. A job may
    be cancelled from the page while it is queued, starting or running, by its owner or
    an admin."""
    rows = []
    for job in jobs[:MAX_ROWS]:
        mine = job.user == viewer
        rows.append(
            JobRow(
                id=job.id,
                user=job.user,
                name=job.name,
                state=job.state,
                state_label=state_label(job),
                gpus=_gpus(job),
                time=_time(job, now, tz),
                sentence=job.sentence,
                can_cancel=job.state in ACTIVE_STATES and (mine or admin),
                output=tails.get(job.id, ()),
            )
        )
    return rows


def tail_ids(jobs: Sequence[JobLike]) -> list[str]:
    """Whose output's end the page shows: the first :data:`TAIL_ROWS` jobs that may have
    written any (not those still waiting for their first start)."""
    out = [j.id for j in jobs[:MAX_ROWS] if not (j.state == "queued" and j.started_at is None)]
    return out[:TAIL_ROWS]
