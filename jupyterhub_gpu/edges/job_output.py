"""A job's output file read for ``job logs`` (issue 32): ``HOME/jobs/ID/output.log`` on
the shared home, written by the job's container as the user.

The user owns every folder under their home and could put a symlink where the hub looks
(``~/jobs/7 -> /etc``); so each step is opened relative to the one before without
following a symlink (``O_NOFOLLOW``), the file must be a regular file owned by the job's
uid, and at most ``max_bytes`` are read from ``offset``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

OUTPUT_NAME = "output.log"


def read_output(
    home: Path, job_id: str, uid: int, offset: int, max_bytes: int, tail: bool = False
) -> bytes:
    """Up to ``max_bytes`` of the job's output from ``offset`` (b"" when there is none
    yet, or when what is there is not the job's own regular file); ``tail``: the last
    ``max_bytes`` instead (``offset`` unused)."""
    if "/" in job_id or job_id in ("", ".", ".."):
        return b""
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fds: list[int] = []
    try:
        fds.append(os.open(home, flags_dir))
        fds.append(os.open("jobs", flags_dir, dir_fd=fds[-1]))
        fds.append(os.open(job_id, flags_dir, dir_fd=fds[-1]))
        fds.append(
            os.open(OUTPUT_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1])
        )
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return b""
        if tail:
            offset = max(0, st.st_size - max(0, max_bytes))
        return os.pread(fds[-1], max(0, max_bytes), max(0, offset))
    except OSError:
        return b""
    finally:
        for fd in reversed(fds):
            os.close(fd)
