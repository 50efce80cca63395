"""Where an SSH login lands: the SSH gateway's one question to the hub (docs/ssh.md).

    GET /hub/api/gpu/ssh/targets/{user}?server=NAME   (scope custom:gpu-ssh:targets)

The answer (:mod:`jupyterhub_gpu.wire.ssh_target`) says whether that server runs, on
which node and in which container, the uid:gid the user's containers run as, and her
home on the shared filesystem, where the gateway reads her ``authorized_keys``. It holds
no token: the gateway does not get ``admin:server_state`` (every server's token). Only the
gateway's role has the scope (:func:`jupyterhub_gpu.hub.extensions.configure_ssh`).
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import define_custom_scopes, needs_scope
from tornado import web

from jupyterhub_gpu.errors import ConfigError, IdentityError
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from jupyterhub_gpu.wire.ssh_target import SSHTarget, encode_target

TARGETS_SCOPE = "custom:gpu-ssh:targets"
SSH_SCOPES: dict[str, dict[str, Any]] = {
    TARGETS_SCOPE: {
        "description": "Where users' SSH logins land: their servers' nodes and containers, "
        "their uid:gid and home (no tokens)."
    }
}
define_custom_scopes(SSH_SCOPES)


def _state(spawner: Any) -> str:
    if spawner.pending:
        return "pending"
    if spawner.ready and getattr(spawner, "object_id", ""):
        return "running"
    return "stopped"


async def ldap_keys(authenticator: Any, user: Any) -> tuple[str, ...]:
    """``user``'s SSH keys from LDAP where the site reads them
    (``GPULDAPAuthenticator.ssh_public_key_attribute``), else ()."""
    finder = getattr(authenticator, "ssh_public_keys", None)
    if finder is None or not getattr(authenticator, "ssh_public_key_attribute", ""):
        return ()
    state = await user.get_auth_state() or {}
    dn = state.get("user_dn") if isinstance(state, dict) else None
    return tuple(await finder(user.name, dn if isinstance(dn, str) else None))


async def ssh_target(user: Any, server: str, keys: tuple[str, ...] = ()) -> SSHTarget:
    """``user``'s server ``server`` as the gateway needs it (no I/O but the hub's own
    state: the identity is the spawner's, from auth_state)."""
    exists = server == "" or server in user.orm_user.orm_spawners
    spawner = user.spawners[server] if exists else user.spawner
    uid = gid = None
    home = None
    try:
        ident = await spawner.identity()
        uid, gid = ident.uid, ident.gid
        path = spawner.home_host_path(ident)
        home = str(path) if path is not None else None
    except (AttributeError, IdentityError, ConfigError):
        pass  # not our spawner, or a user the hub would not run: no key is trusted
    state = _state(spawner) if exists else "stopped"
    node: NodeSpec | None = None
    container = ""
    if state == "running":
        try:
            node = spawner.cluster.spec(spawner.node_name)
            container = str(spawner.object_id)
        except (AttributeError, ConfigError):
            state = "stopped"
    last = getattr(getattr(spawner, "orm_spawner", None), "user_options", None) if exists else None
    return SSHTarget(
        user=user.name,
        server=server,
        exists=exists,
        state=state,
        uid=uid,
        gid=gid,
        home=home,
        node=node,
        container=container,
        last_options=dict(last) if isinstance(last, dict) else None,
        keys=keys,
    )


class SSHTargetAPIHandler(APIHandler):
    """``GET /hub/api/gpu/ssh/targets/{user}?server=NAME[&keys=1]`` (``keys=1``: at a
    login, with her keys from LDAP where the site reads them)"""

    @needs_scope(TARGETS_SCOPE)
    async def get(self, name: str) -> None:
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, "No such user.")
        server = self.get_argument("server", "")
        keys = await ldap_keys(self.authenticator, user) if self.get_argument("keys", "") else ()
        self.write(json.dumps(encode_target(await ssh_target(user, server, keys))))


HANDLERS = [(r"/api/gpu/ssh/targets/([^/]+)", SSHTargetAPIHandler)]

__all__ = [
    "HANDLERS",
    "SSH_SCOPES",
    "TARGETS_SCOPE",
    "SSHTargetAPIHandler",
    "ldap_keys",
    "ssh_target",
]
