"""Where a user's home lives on the shared filesystem, safely.

``home_host_path`` is pure: it maps a username through a template such as
``/mnt/cephfs/home/{username}`` to a path that can never leave the template's root
(the part before the first ``{``). The username is escaped with ``escapism`` (the
scheme DockerSpawner uses for container names), so ``..``, ``/``, NUL and leading dots
can't survive; the result is still checked lexically against the root.

``ensure_home`` does the I/O: it creates a missing home with the user's owner and mode
0700 (run by the hub, never by the user's container) and refuses symlinks and homes
whose real path leaves the root.
"""

from __future__ import annotations

import os
import string
from pathlib import Path, PurePosixPath

from escapism import escape

from .errors import ConfigError, UnsafePath

_SAFE_CHARS = set(string.ascii_lowercase + string.digits)


def safe_path_component(name: str) -> str:
    """An injective, path-safe version of ``name``: ``[a-z0-9-]`` only, never empty."""
    if not name:
        raise UnsafePath("An empty username has no home directory.")
    return escape(name, safe=_SAFE_CHARS, escape_char="-").lower()


def template_root(template: str) -> PurePosixPath:
    """The fixed folder a home template can't leave: everything before its first field."""
    if "{username}" not in template:
        raise ConfigError(f"home template {template!r} must contain '{{username}}'")
    head = template.split("{", 1)[0]
    root = PurePosixPath(head if head.endswith("/") else os.path.dirname(head) or "/")
    if not root.is_absolute() or ".." in root.parts or str(root) == "/":
        raise ConfigError(
            f"home template {template!r} must start with an absolute folder other than '/', "
            "e.g. '/mnt/cephfs/home/{username}'"
        )
    return root


def home_host_path(template: str, username: str) -> PurePosixPath:
    """The user's home on the node's shared filesystem, for ``template``."""
    root = template_root(template)
    path = PurePosixPath(template.format(username=safe_path_component(username)))
    if ".." in path.parts or root not in path.parents:
        raise UnsafePath(f"The home path for {username!r} would leave {root}.")
    return path


def ensure_home(path: PurePosixPath, root: PurePosixPath, uid: int, gid: int) -> None:
    """Create ``path`` (mode 0700, owned by uid:gid) if missing; refuse unsafe homes."""
    if uid == 0:
        raise UnsafePath("Refusing to create a home owned by root.")
    p = Path(path)
    if p.is_symlink():
        raise UnsafePath(f"The home {path} is a symbolic link; an admin must replace it.")
    real_root = Path(root).resolve()
    real = p.resolve()
    if real_root not in real.parents:
        raise UnsafePath(f"The home {path} resolves outside {root}; an admin must fix it.")
    if not p.exists():
        p.mkdir(mode=0o700, parents=False, exist_ok=True)
        os.chown(p, uid, gid)
        os.chmod(p, 0o700)
