"""A subprocess bounded in time, output and disk while it runs (an edge: the hub's pip).

What pip downloads and prints comes from the package index, whose content anyone who can
publish there chooses. :func:`run_bounded` therefore never waits for the end to measure:

- output: stdout and stderr (merged) are read as they come by a thread that keeps only
  the last :data:`OUTPUT_KEEP` bytes;
- disk: every :data:`POLL_S` seconds it sums the files under ``watch`` (the caller points
  pip's ``--dest`` and ``TMPDIR`` there, and pip runs with ``--no-cache-dir``), and kills
  the process group as soon as the sum passes ``max_bytes``. pip downloads each file into
  a temporary folder and then copies it to ``--dest``: a file name found twice counts
  once (its larger copy), so a download is counted once however far it got;
- time: the process group is killed at ``deadline`` (a :func:`time.monotonic` value).

The process runs in a new session (its own process group), so the kill reaches whatever
pip started. The caller removes what was left under ``watch``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

OUTPUT_KEEP = 64 * 1024  #: bytes of the output kept (its end)
POLL_S = 0.05  #: seconds between two measures of the folder
_READ = 64 * 1024


@dataclass(frozen=True)
class Ran:
    """How a bounded run ended: ``returncode`` (negative: killed by a signal), the last
    :data:`OUTPUT_KEEP` bytes of its output (decoded, errors replaced), ``over_size``
    when it was killed for passing ``max_bytes`` (``size``: the sum when it was),
    ``timed_out`` when it was killed at its deadline."""

    returncode: int
    output: str
    over_size: bool = False
    timed_out: bool = False
    size: int = 0


class _Tail:
    """Reads a pipe to its end in a thread, keeping its last ``keep`` bytes."""

    def __init__(self, pipe: IO[bytes], keep: int) -> None:
        self._pipe, self._keep = pipe, keep
        self._data = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fd = self._pipe.fileno()
        while chunk := os.read(fd, _READ):
            self._data += chunk
            if len(self._data) > 2 * self._keep:
                del self._data[: -self._keep]

    def text(self, wait_s: float) -> str:
        self._thread.join(wait_s)  # a process outside the group may still hold the pipe
        with contextlib.suppress(OSError):
            self._pipe.close()
        return bytes(self._data[-self._keep :]).decode("utf-8", "replace")


def folder_bytes(root: Path) -> int:
    """The bytes of the regular files under ``root`` (links not followed), each file name
    counted once at its largest size."""
    sizes: dict[str, int] = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):  # removed while we looked
                st = os.lstat(os.path.join(folder, name))
                if stat.S_ISREG(st.st_mode):
                    sizes[name] = max(sizes.get(name, 0), st.st_size)
    return sum(sizes.values())


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_bounded(
    argv: Sequence[str],
    env: Mapping[str, str],
    watch: Path,
    max_bytes: int | None,
    deadline: float,
    keep: int = OUTPUT_KEEP,
) -> Ran:
    """Run ``argv`` (stdin closed) until it exits, ``watch`` holds more than
    ``max_bytes`` (``None``: no bound) or ``deadline`` passes (blocking)."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        start_new_session=True,
    )
    assert proc.stdout is not None
    tail = _Tail(proc.stdout, keep)
    over, timed_out, size = False, False, 0
    try:
        while proc.poll() is None:
            if max_bytes is not None:
                size = folder_bytes(watch)
                if size > max_bytes:
                    over = True
                    break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_S)
    finally:
        if proc.returncode is None:  # stopped by us (or an error): the whole group goes
            _kill(proc)
        proc.wait()
    if not over and max_bytes is not None:
        size = folder_bytes(watch)
        over = size > max_bytes  # grew past the bound between two measures, then exited
    return Ran(proc.returncode, tail.text(2.0), over_size=over, timed_out=timed_out, size=size)
