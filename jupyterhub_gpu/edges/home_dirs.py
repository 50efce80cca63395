"""The user's home folder on the shared filesystem, on disk (an edge): checked without
following symbolic links, and created with the user's owner and mode 0700. Where the home
is, and every rule on the path, is the pure :func:`jupyterhub_gpu.core.identity.map_home`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from jupyterhub_gpu.core.identity import check_root
from jupyterhub_gpu.errors import UnsafePath

__all__ = ["ensure_home", "verify_home_path"]


def verify_home_path(path: str | os.PathLike[str], shared_root: str | os.PathLike[str]) -> Path:
    """Check on disk that ``path`` stays under ``shared_root``; returns its real path.

    Every existing component below the root must be a real directory, not a symbolic link
    (a link to another user's home is as bad as a link out). The root itself may be a link
    (an admin's choice). Missing components are fine (the home may not exist yet).
    """
    root = Path(check_root(shared_root))
    target = Path(os.fspath(path))
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise UnsafePath(f"The home path {str(target)!r} is not under {str(root)!r}.") from None
    if ".." in rel.parts:
        raise UnsafePath(f"The home path {str(target)!r} contains '..'; refused.")
    current = root
    for part in rel.parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(
                f"{str(current)!r} is a symbolic link; homes must be real folders under "
                f"{str(root)!r}. An administrator must remove the link."
            )
    real_root = os.path.realpath(root)
    real = os.path.realpath(target)
    if os.path.commonpath([real_root, real]) != real_root or real == real_root:
        raise UnsafePath(f"The home path {str(target)!r} resolves outside {str(root)!r}.")
    return Path(real)


def ensure_home(
    path: str | os.PathLike[str],
    uid: int,
    gid: int,
    mode: int = 0o700,
    *,
    shared_root: str | os.PathLike[str] | None = None,
) -> bool:
    """Create the home folder ``path`` owned by ``uid:gid`` with ``mode`` if it is missing.

    Returns True when it was created, False when a suitable one already existed. Refuses
    (:class:`UnsafePath`) a path that is a symbolic link or not a folder, or an existing
    folder owned by another uid. Its parent must exist. Needs the right to chown (root, or
    a helper that has it); it never runs inside the user's container. With ``shared_root``
    the path is first checked with :func:`verify_home_path`. The folder is created and
    then changed through a file descriptor opened with ``O_NOFOLLOW``, so a link swapped
    in between cannot redirect the chown.
    """
    if isinstance(uid, bool) or isinstance(gid, bool) or uid <= 0 or gid <= 0:
        raise ValueError(f"ensure_home refuses uid {uid}/gid {gid}: never root, never negative")
    target = Path(os.fspath(path))
    if shared_root is not None:
        verify_home_path(target, shared_root)
    try:
        parent_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise UnsafePath(
            f"The folder {str(target.parent)!r} that holds your home does not exist; "
            "an administrator must create it."
        ) from None
    try:
        created = True
        try:
            os.mkdir(target.name, mode, dir_fd=parent_fd)
        except FileExistsError:
            created = False
            if stat.S_ISLNK(os.lstat(target.name, dir_fd=parent_fd).st_mode):
                raise UnsafePath(
                    f"{str(target)!r} is a symbolic link, not a folder; refused."
                ) from None
        try:
            fd = os.open(
                target.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd
            )
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafePath(
                    f"{str(target)!r} is a symbolic link, not a folder; refused."
                ) from None
            if e.errno == errno.ENOTDIR:
                raise UnsafePath(f"{str(target)!r} exists and is not a folder; refused.") from None
            raise
        try:
            if created:
                os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
                return True
            owner = os.fstat(fd).st_uid
            if owner != uid:
                raise UnsafePath(
                    f"The home folder {str(target)!r} belongs to uid {owner}, not to uid "
                    f"{uid}; an administrator must fix its owner."
                )
            return False
        finally:
            os.close(fd)
    finally:
        os.close(parent_fd)
