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
import time
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import define_custom_scopes, needs_scope
from tornado import web

from jupyterhub_gpu.core.ssh.census import per_group
from jupyterhub_gpu.errors import BadInput, ConfigError, IdentityError
from jupyterhub_gpu.hub.metrics import SSH_COLLECTOR
from jupyterhub_gpu.hub.runtime import runtime_of
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from jupyterhub_gpu.wire.ssh_sessions import decode_sessions
from jupyterhub_gpu.wire.ssh_target import SSHTarget, encode_target

TARGETS_SCOPE = "custom:gpu-ssh:targets"
SESSIONS_SCOPE = "custom:gpu-ssh:sessions"
SSH_SCOPES: dict[str, dict[str, Any]] = {
    TARGETS_SCOPE: {
        "description": "Where users' SSH logins land: their servers' nodes and containers, "
        "their uid:gid and home (no tokens)."
    },
    SESSIONS_SCOPE: {
        "description": "Report the SSH gateway's open sessions (for the dashboard and the metrics)."
    },
}
#: the largest list of sessions the hub reads (about 200 bytes per session)
MAX_SESSIONS_BODY = 4 * 1024 * 1024
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
    """``GET /hub/api/gpu/ssh/targets/{user}?server=NAME[&login=1]`` (``login=1``: at a
    login, with her keys from LDAP where the site reads them)"""

    @needs_scope(TARGETS_SCOPE)
    async def get(self, name: str) -> None:
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, "No such user.")
        server = self.get_argument("server", "")
        keys = await ldap_keys(self.authenticator, user) if self.get_argument("login", "") else ()
        self.write(json.dumps(encode_target(await ssh_target(user, server, keys))))


def charge_group_of(users: Any) -> Any:
    """``group_of(user, server)`` for :func:`per_group`: the server's charge group (its
    allocation's; ``none`` for a server without one or a user the hub doesn't have)."""
    found: dict[str, Any] = {}

    def group_of(name: str, server: str) -> str:
        if name not in found:
            found[name] = users(name)
        user = found[name]
        spawner = user.spawners.get(server) if user is not None else None
        return str(getattr(spawner, "_charge_group", "") or "none")

    return group_of


class SSHSessionsAPIHandler(APIHandler):
    """``PUT /hub/api/gpu/ssh/sessions``: the gateway's open sessions and forwards (all of
    them: the list replaces the last), for the dashboard and the metrics."""

    @needs_scope(SESSIONS_SCOPE)
    async def put(self) -> None:
        if len(self.request.body) > MAX_SESSIONS_BODY:
            raise web.HTTPError(413, "The list of SSH sessions is too large.")
        try:
            channels, interval = decode_sessions(json.loads(self.request.body or b"null"))
        except (ValueError, BadInput) as e:
            raise web.HTTPError(400, str(e)) from None
        report = runtime_of(self.settings).ssh
        report.groups = per_group(channels, charge_group_of(self.find_user))
        report.channels = tuple(channels)
        report.interval = interval
        report.received = time.monotonic()
        SSH_COLLECTOR.attach(report)
        self.set_status(204)


HANDLERS = [
    (r"/api/gpu/ssh/targets/([^/]+)", SSHTargetAPIHandler),
    (r"/api/gpu/ssh/sessions", SSHSessionsAPIHandler),
]

__all__ = [
    "HANDLERS",
    "SESSIONS_SCOPE",
    "SSH_SCOPES",
    "TARGETS_SCOPE",
    "SSHSessionsAPIHandler",
    "SSHTargetAPIHandler",
    "ldap_keys",
    "ssh_target",
]
