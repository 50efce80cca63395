"""OAuth / OIDC logins with the same ``auth_state`` identity keys as LDAP.

OAuthenticator (17.x) keeps the provider's user info in ``auth_state["oauth_user"]`` and,
with ``manage_groups``, the user's groups in the auth model. Two JupyterHub hooks add
``uid``, ``gid``, ``home_directory``, ``groups``, ``group_gids`` and ``uid_source`` (see
:mod:`jupyterhub_gpu.core.identity`) from the claims, so the spawner and the group
policies work the same whichever login is used:

- :func:`make_identity_hook`, a ``post_auth_hook``: at login, and refuses a login without
  a usable uid with the same message as LDAP's (unless ``fallback_uid`` is given);
- :func:`make_reconcile_hook`, a ``reconcile_auth_state_hook``: at login **and at every
  refresh**. OAuthenticator rebuilds auth_state from the provider before each spawn and
  every ``auth_refresh_age``, without ``post_auth_hook``; without this hook the identity
  keys vanish at the first spawn.

::

    from jupyterhub_gpu.hub.auth.oauth import make_identity_hook, make_reconcile_hook
    c.GenericOAuthenticator.manage_groups = True
    c.GenericOAuthenticator.auth_state_groups_key = "oauth_user.groups"
    identity = dict(uid_claim="uidNumber", gid_claim="gidNumber", home_claim="homeDirectory")
    c.Authenticator.post_auth_hook = make_identity_hook(**identity)
    c.Authenticator.reconcile_auth_state_hook = make_reconcile_hook(**identity)

Tested against a local OpenID Connect provider (tests/integration/test_oauth.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tornado import web

from jupyterhub_gpu.core.identity import IdentityError, identity_from_auth_state, parse_id

__all__ = ["claims_to_identity_state", "make_identity_hook", "make_reconcile_hook"]

PostAuthHook = Callable[[Any, Any, dict[str, Any]], dict[str, Any]]
ReconcileHook = Callable[[Any, dict[str, Any], dict[str, Any] | None], dict[str, Any] | None]


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


class _IdentityClaims:
    """The shared settings of :func:`make_identity_hook` and :func:`make_reconcile_hook`."""

    def __init__(
        self,
        *,
        uid_claim: str,
        gid_claim: str,
        home_claim: str | None,
        groups_key: str | None,
        fallback_uid: int | None,
        fallback_gid: int | None,
        min_uid: int,
        min_gid: int,
    ) -> None:
        self.uid_claim = uid_claim
        self.gid_claim = gid_claim
        self.home_claim = home_claim
        self.groups_key = groups_key
        self.fallback_uid = fallback_uid
        self.fallback_gid = fallback_gid
        self.min_uid = min_uid
        self.min_gid = min_gid

    def state(self, authenticator: Any, auth_model: Mapping[str, Any]) -> dict[str, Any]:
        """The model's auth_state with the identity keys added from its claims and groups."""
        state = dict(auth_model.get("auth_state") or {})
        user_info = state.get(getattr(authenticator, "user_auth_state_key", "oauth_user"))
        groups = _lookup(state, self.groups_key) if self.groups_key else auth_model.get("groups")
        state.update(
            claims_to_identity_state(
                user_info if isinstance(user_info, Mapping) else {},
                groups,
                uid_claim=self.uid_claim,
                gid_claim=self.gid_claim,
                home_claim=self.home_claim,
                fallback_uid=self.fallback_uid,
                fallback_gid=self.fallback_gid,
            )
        )
        return state

    def refusal(self, name: str, state: Mapping[str, Any]) -> IdentityError | None:
        try:
            identity_from_auth_state(name, state, min_uid=self.min_uid, min_gid=self.min_gid)
        except IdentityError as e:
            return e
        return None

    def describe(self, state: Mapping[str, Any]) -> str:
        return f"{self.uid_claim}={state['uid']!r}, {self.gid_claim}={state['gid']!r}"


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

    JupyterHub runs ``post_auth_hook`` at login only; OAuthenticator replaces auth_state
    at every refresh (before each spawn and every ``auth_refresh_age``), so configure
    :func:`make_reconcile_hook` with the same arguments as well.
    """
    claims = _IdentityClaims(
        uid_claim=uid_claim,
        gid_claim=gid_claim,
        home_claim=home_claim,
        groups_key=groups_key,
        fallback_uid=fallback_uid,
        fallback_gid=fallback_gid,
        min_uid=min_uid,
        min_gid=min_gid,
    )

    def hook(authenticator: Any, handler: Any, auth_model: dict[str, Any]) -> dict[str, Any]:
        state = claims.state(authenticator, auth_model)
        refusal = claims.refusal(auth_model["name"], state)
        if refusal is not None:
            authenticator.log.warning(
                "OAuth user %r has no usable POSIX identity (%s); login refused.",
                auth_model["name"],
                claims.describe(state),
            )
            raise web.HTTPError(refusal.status_code, str(refusal))
        auth_model["auth_state"] = state
        return auth_model

    return hook


def make_reconcile_hook(
    *,
    uid_claim: str = "uidNumber",
    gid_claim: str = "gidNumber",
    home_claim: str | None = "homeDirectory",
    groups_key: str | None = None,
    fallback_uid: int | None = None,
    fallback_gid: int | None = None,
    min_uid: int = 1000,
    min_gid: int = 100,
) -> ReconcileHook:
    """A ``reconcile_auth_state_hook`` (JupyterHub 6.1) that adds the identity keys to the
    auth_state of every login **and every refresh**.

    OAuthenticator refreshes a user's auth_state from the provider before each spawn
    (``refresh_pre_spawn`` is on with auth_state) and every ``auth_refresh_age`` seconds;
    JupyterHub does not run ``post_auth_hook`` then, so without this hook the refreshed
    auth_state has no uid and the spawner refuses the user (or, with
    ``require_identity = False``, runs them as ``default_uid``). The identity always comes
    from the fresh claims: a uid removed at the provider is gone after the next refresh
    (the keys stay, with ``uid`` None, so the spawner refuses with the usual message). It
    never refuses a refresh itself; :func:`make_identity_hook` refuses at login.
    """
    claims = _IdentityClaims(
        uid_claim=uid_claim,
        gid_claim=gid_claim,
        home_claim=home_claim,
        groups_key=groups_key,
        fallback_uid=fallback_uid,
        fallback_gid=fallback_gid,
        min_uid=min_uid,
        min_gid=min_gid,
    )

    def hook(
        authenticator: Any, auth_model: dict[str, Any], existing: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        if auth_model.get("auth_state") is None:
            return None  # auth_state disabled or not given: nothing to add
        state = claims.state(authenticator, auth_model)
        if claims.refusal(auth_model["name"], state) is not None:
            authenticator.log.warning(
                "OAuth user %r has no usable POSIX identity any more (%s); "
                "their servers will not start.",
                auth_model["name"],
                claims.describe(state),
            )
        return state

    return hook
