"""Names and paths made from a username and a server name, and the limits they must fit. Pure.

A server's container name (DockerSpawner's ``name_template``, e.g.
``jupyter-{username}--{servername}``), its home on the shared filesystem
(``home_template``) and its home inside the container (``home_container_path``) all
carry the escaped username. Escaping (``escapism``, as DockerSpawner does it) keeps
``[a-z0-9]`` and writes every other byte as ``-xx``: a capital letter takes 3
characters, an accented letter 6, an emoji 12. The limits that apply:

- a path component is at most 255 bytes (Linux ``NAME_MAX``), a path at most 4095
  (``PATH_MAX`` less the NUL): past them ``mkdir`` fails with ``ENAMETOOLONG``;
- Docker sets no maximum on container names (moby ``daemon/names.go`` only checks the
  characters), but a name over 63 characters is not a valid DNS label, so the engine's
  DNS on a user-defined network can't resolve it (moby#37971); the hub never resolves
  container names, and caps them at 255 (:data:`CONTAINER_NAME_MAX`) so that each also
  fits as a folder name (DockerSpawner's named volumes are folders of the engine).

:func:`check_name_lengths` refuses a name that would break one of them before anything
is created, saying whose name (user or server) is too long and the most that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from jupyterhub_gpu.errors import NameTooLong

NAME_MAX = 255  #: bytes in one path component (Linux)
PATH_MAX = 4095  #: bytes in a path, without the terminating NUL (Linux PATH_MAX 4096)
CONTAINER_NAME_MAX = 255  #: characters in a container name (our cap; Docker sets none)

CONTAINER_NAME = "container name"
PATH = "path"

#: ``render(username, server_name)`` -> the (kind, text) pairs made from them, where kind
#: is :data:`CONTAINER_NAME` or :data:`PATH`.
Render = Callable[[str, str], Iterable[tuple[str, str]]]


def _fits(kind: str, text: str) -> bool:
    if kind == CONTAINER_NAME:
        return len(text) <= CONTAINER_NAME_MAX
    raw = text.encode("utf-8", "surrogatepass")
    parts = PurePosixPath(text).parts
    return len(raw) <= PATH_MAX and all(
        len(p.encode("utf-8", "surrogatepass")) <= NAME_MAX for p in parts
    )


def names_fit(render: Render, username: str, server: str) -> bool:
    """Whether every name and path made from ``username`` and ``server`` fits its limit."""
    return all(_fits(kind, text) for kind, text in render(username, server))


def _longest(fits: Callable[[int], bool], upper: int) -> int:
    """The largest n in [0, upper] with ``fits(n)`` (``fits`` is monotonic, ``fits(0)``)."""
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def check_name_lengths(
    render: Render,
    username: str,
    server: str = "",
    escape: Callable[[str], str] | None = None,
) -> None:
    """Raise :class:`NameTooLong` when a name or path made from ``username`` and
    ``server`` would not fit; the message says how long the name is and the most that
    fits (in plain lower-case letters and digits, which escaping leaves as they are).

    ``escape`` (DockerSpawner's) only serves the message: how long the name becomes.
    """
    if names_fit(render, username, server):
        return
    if not names_fit(render, username, ""):
        most = _longest(lambda n: n == 0 or names_fit(render, "u" * n, ""), PATH_MAX)
        if most == 0:
            raise NameTooLong(
                "This hub's container and folder names are too long for any username; "
                "tell an admin (name_template, home_template or home_container_path)."
            )
        grown = len(escape(username)) if escape else len(username)
        how = (
            f" ({grown} once made safe for container and folder names, where characters "
            "other than a-z and 0-9 take 3 or more)"
            if grown != len(username)
            else ""
        )
        raise NameTooLong(
            f"Your username is {len(username)} characters{how}; this hub's containers allow "
            f"at most {most}. Ask an admin."
        )
    most = _longest(lambda n: n == 0 or names_fit(render, username, "s" * n), PATH_MAX)
    raise NameTooLong(
        f"The server name is {len(server)} characters; with your username this hub's "
        f"containers allow at most {most}. Choose a shorter name."
    )
