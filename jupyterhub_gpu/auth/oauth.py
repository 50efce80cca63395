"""OAuth / OIDC logins with the same ``auth_state`` identity keys as LDAP.

OAuthenticator (17.x) keeps the provider's user info in ``auth_state["oauth_user"]`` and,
with ``manage_groups``, the user's groups in the auth model. :func:`make_identity_hook`
returns a JupyterHub ``post_auth_hook`` that adds ``uid``, ``gid``, ``home_directory``,
``groups``, ``group_gids`` and ``uid_source`` (see :mod:`jupyterhub_gpu.auth.identity`),
so the spawner and the group policies work the same whichever login is used::

    from jupyterhub_gpu.auth.oauth import make_identity_hook
    c.GenericOAuthenticator.manage_groups = True
    c.GenericOAuthenticator.auth_state_groups_key = "oauth_user.groups"
    c.Authenticator.post_auth_hook = make_identity_hook(
        uid_claim="uidNumber", gid_claim="gidNumber", home_claim="homeDirectory"
    )

A login without a usable uid is refused with the same message as LDAP's, unless
``fallback_uid`` is given. Not yet tested against a real OIDC provider (a later step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tornado import web

from jupyterhub_gpu.auth.identity import IdentityError, identity_from_auth_state, parse_id

__all__ = ["claims_to_identity_state", "make_identity_hook"]

PostAuthHook = Callable[[Any, Any, dict[str, Any]], dict[str, Any]]


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; None when any step is missing."""
    value: Any = data
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _group_names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, Iterable):
        return sorted({g for g in value if isinstance(g, str) and g})
    return []


def claims_to_identity_state(
    user_info: Mapping[str, Any],
    groups: Any,
    *,
    uid_claim: str = "uidNumber",
    gid_claim: str = "gidNumber",
    home_claim: str | None = "homeDirectory",
    fallback_uid: int | None = None,
    fallback_gid: int | None = None,
) -> dict[str, Any]:
    """The identity keys of auth_state from OAuth claims (pure). Claim names may be
    dotted paths into nested claims. Values may be ints or decimal strings."""
    uid = parse_id(_lookup(user_info, uid_claim))
    gid = parse_id(_lookup(user_info, gid_claim))
    source = "oauth"
    if uid is None and fallback_uid is not None:
        uid, source = fallback_uid, "fallback"
    if gid is None and fallback_gid is not None:
        gid = fallback_gid
    home = _lookup(user_info, home_claim) if home_claim else None
    return {
        "uid": uid,
        "gid": gid,
        "uid_source": source,
        "home_directory": home if isinstance(home, str) and home else None,
        "groups": _group_names(groups),
        "group_gids": {},
    }


def make_identity_hook(
    *,
    uid_claim: str = "uidNumber",
    gid_claim: str = "gidNumber",
    home_claim: str | None = "homeDirectory",
    groups_key: str | None = None,
    fallback_uid: int | None = None,
    fallback_gid: int | None = None,
    min_uid: int = 1000,
    min_gid: int = 100,
) -> PostAuthHook:
    """A ``post_auth_hook`` that adds the identity keys to an OAuthenticator's auth_state.

    Groups come from the auth model's ``groups`` (OAuthenticator's ``manage_groups``), or
    from ``groups_key``, a dotted path into auth_state (``"oauth_user.groups"``; for
    Google groups ``"oauth_user.google_groups"``). Raises ``HTTPError(403)`` with a
    message for the user when the identity is unusable (no uid, root, a system uid).
    """

    def hook(authenticator: Any, handler: Any, auth_model: dict[str, Any]) -> dict[str, Any]:
        state = dict(auth_model.get("auth_state") or {})
        user_info = state.get(getattr(authenticator, "user_auth_state_key", "oauth_user"))
        groups = _lookup(state, groups_key) if groups_key else auth_model.get("groups")
        state.update(
            claims_to_identity_state(
                user_info if isinstance(user_info, Mapping) else {},
                groups,
                uid_claim=uid_claim,
                gid_claim=gid_claim,
                home_claim=home_claim,
                fallback_uid=fallback_uid,
                fallback_gid=fallback_gid,
            )
        )
        try:
            identity_from_auth_state(auth_model["name"], state, min_uid=min_uid, min_gid=min_gid)
        except IdentityError as e:
            authenticator.log.warning(
                "OAuth user %r has no usable POSIX identity (%s=%r, %s=%r); login refused.",
                auth_model["name"],
                uid_claim,
                state["uid"],
                gid_claim,
                state["gid"],
            )
            raise web.HTTPError(e.status_code, str(e)) from None
        auth_model["auth_state"] = state
        return auth_model

    return hook
