"""Who a user is inside a container, what their groups allow, and where their home lives.

Pure: the home's checks and creation on disk are :mod:`jupyterhub_gpu.edges.home_dirs`.

The authenticators (LDAP in :mod:`jupyterhub_gpu.hub.auth.ldap`, OAuth through
:mod:`jupyterhub_gpu.hub.auth.oauth`) store the same keys in the encrypted ``auth_state``:

==================  ===========================================================
``uid``             int, the POSIX uid (LDAP ``uidNumber``) the container runs as
``gid``             int, the primary POSIX gid (LDAP ``gidNumber``)
``home_directory``  str or None, the directory service's home (``/home/alice``)
``groups``          list of group names (LDAP ``cn``, or an OAuth claim)
``group_gids``      {group name: gidNumber} for groups that have one
``uid_source``      ``"ldap"``, ``"oauth"`` or ``"fallback"`` (the admin's fallback uid)
==================  ===========================================================

:func:`identity_from_auth_state` turns that into an :class:`Identity`, refusing what must
never run (no uid, root, system uids). :func:`resolve_policy` combines per-group limits;
:func:`map_home` maps a home under the shared storage root without ever leaving it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from jupyterhub_gpu.errors import ConfigError, IdentityError, UnsafePath

__all__ = [
    "MAX_ID",
    "Identity",
    "IdentityError",
    "identity_from_auth_state",
    "identity_required",
    "map_home",
    "parse_id",
    "resolve_identity",
]

#: Largest uid/gid accepted (2**32 - 2; 2**32 - 1 is the kernel's "no id").
MAX_ID = 2**32 - 2


@dataclass(frozen=True)
class Identity:
    """The POSIX identity a user's container runs with."""

    username: str
    uid: int
    gid: int
    groups: tuple[str, ...] = ()
    home_directory: str | None = None
    supplementary_gids: tuple[int, ...] = ()


def parse_id(value: Any) -> int | None:
    """An int uid/gid from auth_state (int, or a decimal string); None when absent/bad."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value.strip())
    return None


def identity_from_auth_state(
    username: str,
    auth_state: Mapping[str, Any] | None,
    *,
    min_uid: int = 1000,
    min_gid: int = 100,
    supplementary_groups: Collection[str] = (),
) -> Identity:
    """Build the container identity of ``username`` from its ``auth_state``.

    ``supplementary_groups`` names the groups whose gid is added as a supplementary group
    of the container process (``"*"`` for every group that has a gid); gids below
    ``min_gid`` and the primary gid are left out. Raises :class:`IdentityError` when there
    is no uid or gid, or when either is below its minimum (root is always refused).
    """
    state = auth_state or {}
    uid = parse_id(state.get("uid"))
    gid = parse_id(state.get("gid"))
    if uid is None:
        raise IdentityError(
            "Your account has no POSIX user id (uidNumber), so the hub cannot run a server "
            "as you. Ask your administrator to add one to your directory entry."
        )
    if gid is None:
        raise IdentityError(
            "Your account has no POSIX group id (gidNumber), so the hub cannot run a server "
            "as you. Ask your administrator to add one to your directory entry."
        )
    if uid == 0 or uid < min_uid or uid > MAX_ID:
        raise IdentityError(
            f"Your account's user id {uid} is reserved for the system (user ids must be "
            f"{min_uid} or more), so the hub will not run a server with it. Ask your "
            "administrator to give your account a regular user id."
        )
    if gid == 0 or gid < min_gid or gid > MAX_ID:
        raise IdentityError(
            f"Your account's group id {gid} is reserved for the system (group ids must be "
            f"{min_gid} or more), so the hub will not run a server with it. Ask your "
            "administrator to give your account a regular group id."
        )
    groups = tuple(g for g in state.get("groups") or () if isinstance(g, str) and g)
    home = state.get("home_directory")
    return Identity(
        username=username,
        uid=uid,
        gid=gid,
        groups=groups,
        home_directory=home if isinstance(home, str) and home else None,
        supplementary_gids=_supplementary_gids(state, gid, min_gid, supplementary_groups),
    )


def identity_required(setting: bool | None, auth_state_enabled: bool) -> bool:
    """Whether a user without a uid/gid in auth_state is refused (True) or runs as the
    fallback uid (False). An explicit ``require_identity`` wins; unset (None), it is
    required whenever the authenticator keeps auth_state: a hub that records identities
    never runs someone silently as the fallback uid."""
    return bool(auth_state_enabled) if setting is None else setting


def resolve_identity(
    username: str,
    auth_state: Mapping[str, Any] | None,
    *,
    required: bool,
    fallback: tuple[int, int],
    hub_groups: Collection[str] = (),
    supplementary_groups: Collection[str] = (),
) -> Identity:
    """The identity a server runs with: from ``auth_state`` when it has a uid, else the
    ``fallback`` (uid, gid) unless ``required``. ``hub_groups`` (JupyterHub's groups of
    the user) are added after the directory's. Raises :class:`IdentityError`.
    """
    if not (auth_state and "uid" in auth_state):
        if required and not auth_state:
            raise IdentityError(
                "The hub has no record of your account's user and group ids from your login "
                "(it keeps them only from a login with a password or your identity provider), "
                "so it cannot run a server as you. Log out and log in again; if this keeps "
                "happening, ask an admin."
            )
        if not required:
            groups = tuple(dict.fromkeys(hub_groups))
            return Identity(username, fallback[0], fallback[1], groups)
    ident = identity_from_auth_state(
        username, auth_state, supplementary_groups=supplementary_groups
    )
    extra = tuple(g for g in dict.fromkeys(hub_groups) if g not in ident.groups)
    return Identity(
        username=ident.username,
        uid=ident.uid,
        gid=ident.gid,
        groups=ident.groups + extra,
        home_directory=ident.home_directory,
        supplementary_gids=ident.supplementary_gids,
    )


def _supplementary_gids(
    state: Mapping[str, Any], gid: int, min_gid: int, wanted: Collection[str]
) -> tuple[int, ...]:
    group_gids = state.get("group_gids") or {}
    if not wanted or not isinstance(group_gids, Mapping):
        return ()
    every = "*" in wanted
    member_of = set(state.get("groups") or ())
    gids: set[int] = set()
    for name, value in group_gids.items():
        if name not in member_of or not (every or name in wanted):
            continue
        g = parse_id(value)
        if g is not None and g != gid and min_gid <= g <= MAX_ID and g != 0:
            gids.add(g)
    return tuple(sorted(gids))


# --------------------------------------------------------------------------- home mapping

_MAX_PATH = 4096


def _check_text(value: str, what: str) -> None:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UnsafePath(f"The {what} contains a control character (such as NUL); refused.")
    if len(value.encode("utf-8", "surrogatepass")) > _MAX_PATH:
        raise UnsafePath(f"The {what} is longer than {_MAX_PATH} bytes; refused.")


def _check_relative(rel: PurePosixPath, what: str, shown: str) -> None:
    if rel.is_absolute():
        raise UnsafePath(f"The {what} {shown!r} must be a relative path; refused.")
    if ".." in rel.parts:
        raise UnsafePath(f"The {what} {shown!r} contains '..'; refused.")
    if not rel.parts:
        raise UnsafePath(f"The {what} {shown!r} names no folder of its own; refused.")


def check_root(shared_root: str | os.PathLike[str]) -> PurePosixPath:
    raw = os.fspath(shared_root)
    root = PurePosixPath(raw)
    if "\x00" in raw or not root.is_absolute() or ".." in root.parts or root == root.parent:
        raise ConfigError(
            f"The shared home root {raw!r} must be an absolute path below '/', without '..'."
        )
    return root


def map_home(
    home_directory: str | None,
    username: str,
    shared_root: str | os.PathLike[str],
    template: str = "{username}",
    *,
    home_prefix: str = "/home",
) -> Path:
    """Where ``username``'s home lives under the shared storage root. No I/O.

    With a ``home_directory`` from the directory service (``/home/alice``), its part below
    ``home_prefix`` is placed under ``shared_root`` (``/mnt/cephfs/home`` gives
    ``/mnt/cephfs/home/alice``). Without one, ``template`` (relative to ``shared_root``;
    ``{username}`` is the only placeholder) gives the path. Raises :class:`UnsafePath` for
    hostile values (``..``, NUL or other control characters, a home outside
    ``home_prefix``, the prefix itself) and :class:`ConfigError` for a bad root, prefix or
    template. Symbolic links are checked by :func:`verify_home_path`, which does I/O.
    """
    root = check_root(shared_root)
    if not isinstance(username, str) or not username:
        raise UnsafePath("The username is empty; refused.")
    _check_text(username, "username")
    if "/" in username or username in {".", ".."}:
        raise UnsafePath(f"The username {username!r} cannot be used as a folder name; refused.")

    if home_directory:
        _check_text(home_directory, "home directory from the directory service")
        home = PurePosixPath(home_directory)
        prefix = PurePosixPath(home_prefix)
        if not prefix.is_absolute() or ".." in prefix.parts:
            raise ConfigError(f"The home prefix {home_prefix!r} must be an absolute path.")
        if not home.is_absolute() or ".." in home.parts:
            raise UnsafePath(
                f"The home directory {home_directory!r} from the directory service must be "
                "an absolute path without '..'; refused."
            )
        try:
            rel = home.relative_to(prefix)
        except ValueError:
            raise UnsafePath(
                f"The home directory {home_directory!r} from the directory service is "
                f"outside {home_prefix}; refused. An administrator must fix the account."
            ) from None
        _check_relative(rel, "home directory", home_directory)
    else:
        rest = template.replace("{username}", "")
        if "{" in rest or "}" in rest:
            raise ConfigError(
                f"The home template {template!r} may only use the placeholder {{username}}."
            )
        filled = template.replace("{username}", username)
        _check_text(filled, "home path made from the template")
        rel = PurePosixPath(filled)
        _check_relative(rel, "home path made from the template", filled)

    result = root / rel
    # belt and braces: the lexical result must lie strictly below the root
    if os.path.commonpath([str(root), os.path.normpath(str(result))]) != str(root):
        raise UnsafePath(f"The home path {str(result)!r} would leave {str(root)!r}; refused.")
    return Path(str(result))
