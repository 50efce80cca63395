"""The notebooks a user had open in JupyterLab, read from their home (an edge).

The home is the user's: every folder on the way (``.jupyter/lab/workspaces``) is opened
without following a symbolic link (``O_NOFOLLOW`` at each step, relative to the one
before), so a link can't lead the hub to another user's files; each file is opened the
same way, only regular files, at most :data:`~jupyterhub_gpu.wire.lab_workspace.MAX_FILE`
bytes of each, at most :data:`MAX_FILES` files (the newest first). Anything unreadable
is no notebooks, never an error.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from jupyterhub_gpu.wire.lab_workspace import MAX_FILE, MAX_NOTEBOOKS, decode_open_notebooks

WORKSPACES = (".jupyter", "lab", "workspaces")
SUFFIX = ".jupyterlab-workspace"
MAX_FILES = 5
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _read(dir_fd: int, name: str) -> tuple[float, bytes] | None:
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return st.st_mtime, os.read(fd, MAX_FILE)
    except OSError:
        return None
    finally:
        os.close(fd)


def open_notebooks(home: Path) -> tuple[str, ...]:
    """The notebooks open in the user's JupyterLab workspaces under ``home`` (the newest
    workspace's first), at most :data:`~jupyterhub_gpu.wire.lab_workspace.MAX_NOTEBOOKS`."""
    fds: list[int] = []
    try:
        fd = os.open(home, _DIR)
        fds.append(fd)
        for part in WORKSPACES:
            fd = os.open(part, _DIR, dir_fd=fd)
            fds.append(fd)
        names = [n for n in os.listdir(fd) if n.endswith(SUFFIX)][: 10 * MAX_FILES]
        files = [r for r in (_read(fd, n) for n in names) if r is not None]
    except OSError:
        return ()
    finally:
        for opened in fds:
            with contextlib.suppress(OSError):
                os.close(opened)
    found: list[str] = []
    for _, text in sorted(files, key=lambda r: -r[0])[:MAX_FILES]:
        for path in decode_open_notebooks(text):
            if path not in found:
                found.append(path)
    return tuple(found[:MAX_NOTEBOOKS])
