"""Where a user's home lives on the shared filesystem, safely.

``home_host_path`` is pure: it maps a username through a template such as
``/mnt/cephfs/home/{username}`` to a path that can never leave the template's root
(the part before the first ``{``). The username is escaped with ``escapism`` (the
scheme DockerSpawner uses for container names), so ``..``, ``/``, NUL and leading dots
can't survive; the result is still checked lexically against the root.

Creating the home (owner, mode 0700, no symlinks) is
:func:`jupyterhub_gpu.edges.home_dirs.ensure_home`.
"""

from __future__ import annotations

import os
import string
from pathlib import PurePosixPath

from jupyterhub_gpu.errors import ConfigError, UnsafePath

_SAFE_CHARS = set(string.ascii_lowercase + string.digits)


def safe_path_component(name: str) -> str:
    """An injective, path-safe version of ``name``: ``[a-z0-9-]`` only, never empty."""
    if not name:
        raise UnsafePath("An empty username has no home directory.")
    from escapism import escape  # the hub's install: a node's check-node never calls it

    escaped: str = escape(name, safe=_SAFE_CHARS, escape_char="-")
    return escaped.lower()


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
