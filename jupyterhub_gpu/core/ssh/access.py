"""Who may open a session, decided over plain data.

- :func:`strict_modes`: whether a user's ``authorized_keys`` may be trusted, as OpenSSH's
  sshd decides with ``StrictModes yes`` (``auth.c``'s ``secure_filename``): the file, its
  ``.ssh`` folder and the home each owned by the user or by root and writable by no one
  else, the file a regular file within a size bound. The caller gives what ``fstat`` said
  of each, opened without following a symlink (:mod:`jupyterhub_gpu.edges.ssh_keys`).
- :func:`token_grants_server`: whether a hub API token's scopes, as the hub's
  ``/hub/api/user`` lists them, let its owner use a given server.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass

#: the default bound on an authorized_keys file (OpenSSH has none; 64 KiB is ~100 keys)
MAX_AUTHORIZED_KEYS_BYTES = 64 * 1024


@dataclass(frozen=True)
class PathFacts:
    """What ``fstat`` said of one opened path (``name`` is only for the sentence)."""

    name: str
    uid: int
    mode: int  # st_mode: type and permission bits
    size: int = 0


def strict_modes(
    uid: int,
    home: PathFacts,
    ssh_dir: PathFacts,
    keys: PathFacts,
    max_bytes: int = MAX_AUTHORIZED_KEYS_BYTES,
) -> str | None:
    """None when ``keys`` may be trusted for ``uid``, else one sentence saying why not
    (for the gateway's log and the user's docs; never shown to a client)."""
    for facts, want_dir in ((home, True), (ssh_dir, True), (keys, False)):
        kind_ok = stat.S_ISDIR(facts.mode) if want_dir else stat.S_ISREG(facts.mode)
        if not kind_ok:
            kind = "a folder" if want_dir else "a regular file"
            return f"{facts.name} is not {kind}"
        if facts.uid not in (uid, 0):
            return f"{facts.name} is owned by uid {facts.uid}, not by the user ({uid}) or root"
        if facts.mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (
                f"{facts.name} is writable by its group or by everyone "
                f"(mode {stat.S_IMODE(facts.mode):04o}): chmod go-w it"
            )
    if keys.size > max_bytes:
        return f"{keys.name} is larger than {max_bytes} bytes"
    return None


def token_grants_server(scopes: Iterable[str], user: str, server: str) -> bool:
    """Whether a token with ``scopes`` may use ``user``'s server ``server`` ("" the
    default): ``access:servers`` for all servers, for the user, or for that server."""
    wanted = {
        "access:servers",
        f"access:servers!user={user}",
        f"access:servers!server={user}/{server}",
    }
    return any(s in wanted for s in scopes)


__all__ = ["MAX_AUTHORIZED_KEYS_BYTES", "PathFacts", "strict_modes", "token_grants_server"]
