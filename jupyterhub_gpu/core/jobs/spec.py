"""A job request and its checks: one sentence per bad input, nothing half-done.

The resources (image, GPUs, share, CPUs, memory, charge group) are the spawn form's
options and go through :func:`~jupyterhub_gpu.core.form.validation.validate_options`,
so a job obeys the same catalog, bounds and sharing rules as a server; what is a job's
own is checked here: the command, its name, the time limit, the array, the working
directory, and how many jobs the user may have waiting. Every byte a user sends is
bounded (:data:`MAX_COMMAND_BYTES`, :data:`MAX_NAME_CHARS`, ...).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.errors import InvalidRequest

MAX_COMMAND_ARGS = 512
MAX_COMMAND_BYTES = 32 * 1024  # the whole command line, UTF-8
MAX_NAME_CHARS = 64
MAX_WORKDIR_CHARS = 1024
MAX_ARRAY_SPEC_CHARS = 64
MAX_TIME_CHARS = 32
#: the keys of a submit request (anything else is refused by name)
REQUEST_KEYS = ("command", "name", "time", "array", "requeue", "workdir", "options")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class JobSettings:
    """The site's rules for jobs (``c.GPUJobs``, hub/jobs.py, has them as traits)."""

    default_time_s: float = 4 * 3600.0
    max_time_s: float = 7 * 86400.0
    grace_s: float = 120.0
    output_limit_bytes: int = 100 * 1024 * 1024
    max_queued_per_user: int = 100
    max_array: int = 1000
    lost_after_s: float = 600.0  # a job whose node answers no more is lost after this


@dataclass(frozen=True)
class ArraySpec:
    """``0-99%8``: the task indices and how many may run at once (None: no limit)."""

    indices: tuple[int, ...]
    limit: int | None = None

    def text(self) -> str:
        lo, hi = self.indices[0], self.indices[-1]
        span = (
            f"{lo}-{hi}"
            if list(self.indices) == list(range(lo, hi + 1))
            else ",".join(map(str, self.indices))
        )
        return f"{span}%{self.limit}" if self.limit else span


@dataclass(frozen=True)
class JobRequest:
    """What a user asked for, as the API's JSON decodes it (still unchecked)."""

    command: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)  # validate_options' input
    name: str = ""
    time: str = ""  # "4h", "90m", "1:30:00"; "" for the site's default
    array: str = ""  # "0-99%8"; "" for one job
    requeue: bool = False
    workdir: str = ""  # in the home; "" for the home itself


@dataclass(frozen=True)
class JobSpec:
    """A checked request: what the hub stores and runs."""

    command: tuple[str, ...]
    name: str
    time_limit_s: float
    array: ArraySpec | None
    requeue: bool
    workdir: str  # the absolute path in the container (inside the home)


def _bad(text: str) -> InvalidRequest:
    return InvalidRequest(text)


_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+)\s*(d|h|min|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in ``4h``, ``90m``, ``1h30m``, ``2d``, ``45s``, Slurm's ``1:30:00``
    (H:MM:SS) or ``30:00`` (MM:SS), or a bare number of minutes (Slurm's ``--time=30``);
    InvalidRequest with one sentence otherwise."""
    raw = text.strip().lower()
    if len(raw) > MAX_TIME_CHARS or not raw:
        raise _bad("The time limit must be like 4h, 90m, 1h30m, 2d or 1:30:00.")
    if raw.isdigit():
        seconds = int(raw) * 60
    elif re.fullmatch(r"\d+(:\d{1,2}){1,2}", raw):
        parts = [int(p) for p in raw.split(":")]
        if any(p >= 60 for p in parts[1:]):
            raise _bad("The time limit must be like 1:30:00 (minutes and seconds under 60).")
        if len(parts) == 2:
            parts = [0, *parts]
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:
        pos = 0
        seconds = 0
        for m in _PART.finditer(raw.replace(" ", "")):
            if m.start() != pos:
                break
            seconds += int(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(raw.replace(" ", "")) or pos == 0:
            raise _bad("The time limit must be like 4h, 90m, 1h30m, 2d or 1:30:00.")
    if seconds <= 0:
        raise _bad("The time limit must be more than 0 seconds.")
    return float(seconds)


_RANGE = re.compile(r"^(\d{1,7})(?:-(\d{1,7})(?::(\d{1,7}))?)?$")


def parse_array(text: str, max_tasks: int) -> ArraySpec:
    """The one parser of ``--array``: ``0-99``, ``0-99%8``, ``1,3,5``, ``0-20:5``, ``7``
    (Slurm's forms). InvalidRequest with one sentence when malformed or over
    ``max_tasks`` tasks."""
    raw = text.strip()
    if not raw or len(raw) > MAX_ARRAY_SPEC_CHARS:
        raise _bad(
            f"The array must be like 0-99 or 0-99%8 (at most {MAX_ARRAY_SPEC_CHARS} characters)."
        )
    spec, _, limit_text = raw.partition("%")
    limit: int | None = None
    if limit_text:
        if not limit_text.isdigit() or int(limit_text) < 1:
            raise _bad("After % comes how many tasks may run at once, a number from 1 up.")
        limit = int(limit_text)
    indices: set[int] = set()
    for part in spec.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise _bad(f"The array part {part.strip()[:20]!r} must be like 7, 0-99 or 0-20:5.")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise _bad(f"The array range {part.strip()[:20]} must go up (like 0-99).")
        if (hi - lo) // step + 1 + len(indices) > max_tasks:
            raise _bad(f"An array may have at most {max_tasks} tasks on this hub.")
        indices.update(range(lo, hi + 1, step))
    if len(indices) > max_tasks:
        raise _bad(f"An array may have at most {max_tasks} tasks on this hub.")
    return ArraySpec(tuple(sorted(indices)), limit)


def check_command(command: Sequence[object]) -> tuple[str, ...]:
    """The command as a tuple of strings, bounded; one sentence when empty or too long."""
    if not isinstance(command, (list, tuple)) or not command:
        raise _bad("Give the command to run after --, for example: -- python train.py.")
    if len(command) > MAX_COMMAND_ARGS:
        raise _bad(f"The command may have at most {MAX_COMMAND_ARGS} words.")
    if not all(isinstance(a, str) for a in command):
        raise _bad("Every word of the command must be text.")
    words = tuple(str(a) for a in command)
    if not words[0].strip():
        raise _bad("Give the command to run after --, for example: -- python train.py.")
    if sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in words) > MAX_COMMAND_BYTES:
        raise _bad(
            f"The command is longer than {MAX_COMMAND_BYTES // 1024} KiB; put it in a script "
            "in your home and run that."
        )
    if any("\x00" in a for a in words):
        raise _bad("The command may not contain a NUL character.")
    return words


def check_workdir(workdir: str, home: str) -> str:
    """The working directory in the container: ``home`` for "", else ``workdir`` (absolute,
    or relative to the home) normalised, which must stay inside ``home``."""
    if len(workdir) > MAX_WORKDIR_CHARS or "\x00" in workdir:
        raise _bad(
            f"The working directory must be a path of at most {MAX_WORKDIR_CHARS} characters."
        )
    if not workdir.strip():
        return home
    raw = workdir.strip()
    if raw == "~" or raw.startswith("~/"):
        raw = raw[2:] if raw.startswith("~/") else ""
    path = posixpath.normpath(posixpath.join(home, raw))
    if path != home and not path.startswith(home.rstrip("/") + "/"):
        raise _bad(f"The working directory must be inside your home ({home}).")
    return path


def check_name(name: object, command: Sequence[str]) -> str:
    """The job's name (default: the command's first word's base name), bounded."""
    if name in ("", None):
        base = posixpath.basename(command[0]) if command else "job"
        cleaned = re.sub(r"[^A-Za-z0-9._+-]", "_", base)[:MAX_NAME_CHARS].lstrip("._+-")
        return cleaned or "job"
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not NAME_RE.match(name):
        raise _bad(
            f"A job's name is 1 to {MAX_NAME_CHARS} letters, digits, dots, dashes, plus "
            "signs or underscores, starting with a letter or digit."
        )
    return name


def validate_job(
    request: JobRequest, settings: JobSettings, *, queued_now: int, home: str
) -> JobSpec:
    """Check ``request`` for a user who has ``queued_now`` jobs waiting and whose home is
    ``home`` in the container; the resources are :func:`validate_options`' (the hub
    calls both before anything is stored)."""
    command = check_command(request.command)
    name = check_name(request.name, command)
    limit = parse_duration(request.time) if request.time else settings.default_time_s
    if limit > settings.max_time_s:
        raise _bad(
            f"The time limit {duration(limit)} is over this hub's maximum of "
            f"{duration(settings.max_time_s)}; ask for less, and save checkpoints to go on "
            "in a next job."
        )
    array = parse_array(request.array, settings.max_array) if request.array else None
    adding = len(array.indices) if array else 1
    if queued_now + adding > settings.max_queued_per_user:
        raise _bad(
            f"You may have at most {settings.max_queued_per_user} jobs waiting; you have "
            f"{queued_now}, and this adds {adding}. Wait for some to start, or cancel some."
        )
    if not isinstance(request.requeue, bool):
        raise _bad("requeue must be true or false.")
    workdir = check_workdir(request.workdir, home)
    return JobSpec(command, name, limit, array, request.requeue, workdir)


def request_from_json(raw: object) -> JobRequest:
    """A :class:`JobRequest` from the API's decoded JSON (wire/jobs.py calls it); one
    sentence for a key that is not one of :data:`REQUEST_KEYS` or a value of the wrong
    kind."""
    if not isinstance(raw, Mapping):
        raise _bad("A job must be a JSON object with a command.")
    unknown = sorted(str(k)[:40] for k in raw if k not in REQUEST_KEYS)
    if unknown:
        raise _bad(f"Unknown job field {unknown[0]!r}; the fields are {', '.join(REQUEST_KEYS)}.")
    command = raw.get("command")
    if not isinstance(command, list):
        raise _bad("Give the command to run after --, for example: -- python train.py.")
    options = raw.get("options", {})
    if not isinstance(options, Mapping):
        raise _bad("The job's options must be a JSON object (image, gpu_count, ...).")
    texts = {}
    bounds = {"name": MAX_NAME_CHARS, "time": MAX_TIME_CHARS, "array": MAX_ARRAY_SPEC_CHARS,
              "workdir": MAX_WORKDIR_CHARS}  # fmt: skip
    for key, bound in bounds.items():
        value = raw.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise _bad(f"The job's {key} must be text.")
        if len(value) > bound:
            raise _bad(f"The job's {key} may have at most {bound} characters.")
        texts[key] = value
    requeue = raw.get("requeue", False)
    if not isinstance(requeue, bool):
        raise _bad("requeue must be true or false.")
    return JobRequest(
        command=tuple(check_command(command)),
        options=dict(options),
        requeue=requeue,
        **texts,
    )
