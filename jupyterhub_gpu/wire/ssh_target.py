"""Where an SSH login lands: the hub's answer to the SSH gateway (docs/ssh.md).

    GET /hub/api/gpu/ssh/targets/{user}?server=NAME   (scope custom:gpu-ssh:targets)
    {"user": "alice", "server": "", "exists": true, "state": "running",
     "uid": 10001, "gid": 5000, "home": "/srv/homes/alice",
     "node": {"name": "gpu-a", "docker_url": "tcp://10.0.0.11:2376", "tls": {...}},
     "container": "4f2c..."}

``exists``: whether that server exists (the default server always does). ``state``:
``running``, ``pending`` (starting or stopping) or ``stopped``. ``uid``/``gid``: the
identity her containers run as (null when the hub refuses her one: then no key is
trusted). ``home``: her home on the hub's shared filesystem (null without one), where her
``~/.ssh/authorized_keys`` is read. ``node`` and ``container`` only while running. The TLS
entries are paths of the hub's client certificate on the hub's machine (the gateway runs
there), never their contents. ``last_options``: the options the
server was last started with (null if never), for a gateway that starts servers.
``keys``: only when asked (``&login=1``, at login) and the site reads keys from LDAP
(``GPULDAPAuthenticator.ssh_public_key_attribute``): her ``sshPublicKey`` values as
text, bounded (:mod:`jupyterhub_gpu.core.ssh.keys`); else absent or empty. A user
who does not exist is a 404.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.ssh.keys import MAX_LDAP_KEY_BYTES, MAX_LDAP_KEYS
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.nodes_file import NodeSpec

STATES = ("running", "pending", "stopped")
_TLS_KEYS = ("ca_cert", "client_cert", "client_key")


@dataclass(frozen=True)
class SSHTarget:
    user: str
    server: str
    exists: bool
    state: str
    uid: int | None = None
    gid: int | None = None
    home: str | None = None
    node: NodeSpec | None = None
    container: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    last_options: Mapping[str, Any] | None = None  # the options of its last start
    keys: tuple[str, ...] = ()  # her public keys from LDAP (sshPublicKey), when asked

    @property
    def running(self) -> bool:
        return self.state == "running" and self.node is not None and bool(self.container)


def encode_target(target: SSHTarget) -> dict[str, Any]:
    node = target.node
    return {
        "user": target.user,
        "server": target.server,
        "exists": target.exists,
        "state": target.state,
        "uid": target.uid,
        "gid": target.gid,
        "home": target.home,
        "node": None
        if node is None
        else {"name": node.name, "docker_url": node.docker_url, "tls": dict(node.tls)},
        "container": target.container,
        "last_options": None if target.last_options is None else dict(target.last_options),
        "keys": list(target.keys),
    }


def _id(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProbeError(f"the hub's SSH target: {key!r} must be a non-negative integer")
    return value


def _str(raw: Mapping[str, Any], key: str, optional: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProbeError(f"the hub's SSH target: {key!r} must be a string")
    return value


def _node(raw: object) -> NodeSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ProbeError("the hub's SSH target: 'node' must be an object")
    tls = raw.get("tls") or {}
    if not isinstance(tls, Mapping) or not all(
        k in _TLS_KEYS and isinstance(v, str) for k, v in tls.items()
    ):
        raise ProbeError(f"the hub's SSH target: 'node.tls' holds only {_TLS_KEYS} paths")
    name, url = _str(raw, "name"), _str(raw, "docker_url")
    assert name is not None and url is not None
    return NodeSpec(name=name, docker_url=url, address="", tls=dict(tls))


def decode_target(raw: object) -> SSHTarget:
    """The hub's answer as an :class:`SSHTarget`; ProbeError naming the field if not one."""
    if not isinstance(raw, Mapping):
        raise ProbeError("the hub's SSH target is not an object")
    state = raw.get("state")
    if state not in STATES:
        raise ProbeError(f"the hub's SSH target: 'state' must be one of {STATES}")
    if not isinstance(raw.get("exists"), bool):
        raise ProbeError("the hub's SSH target: 'exists' must be a boolean")
    return SSHTarget(
        user=_str(raw, "user") or "",
        server=_str(raw, "server") or "",
        exists=bool(raw["exists"]),
        state=str(state),
        uid=_id(raw, "uid"),
        gid=_id(raw, "gid"),
        home=_str(raw, "home", optional=True),
        node=_node(raw.get("node")),
        container=_str(raw, "container", optional=True) or "",
        last_options=_options(raw.get("last_options")),
        keys=_keys(raw.get("keys")),
    )


def _keys(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if (
        not isinstance(raw, list)
        or len(raw) > MAX_LDAP_KEYS
        or not all(isinstance(k, str) and len(k) <= MAX_LDAP_KEY_BYTES for k in raw)
    ):
        raise ProbeError(
            f"the hub's SSH target: 'keys' must be at most {MAX_LDAP_KEYS} strings "
            f"of at most {MAX_LDAP_KEY_BYTES} characters"
        )
    return tuple(raw)


def _options(raw: object) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
        raise ProbeError("the hub's SSH target: 'last_options' must be an object")
    return dict(raw)


__all__ = ["STATES", "SSHTarget", "decode_target", "encode_target"]
