"""Who gets in: asyncssh's server callbacks for one connection.

A login's keys are the user's ``~/.ssh/authorized_keys`` (read as sshd's StrictModes
would, :mod:`jupyterhub_gpu.edges.ssh_keys`), handed to asyncssh, which checks the
signature and applies the keys' options. The password, where the site allows it, is a
hub API token of that user whose scopes reach the server. Failures are counted per user
and per address (:class:`~jupyterhub_gpu.core.ssh.limits.FailureLimiter`): a connection
that ends without logging in is one failure, each wrong token one more. Nothing said to
the client tells an unknown user from a wrong key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import httpx

from jupyterhub_gpu.core.ssh.access import token_grants_server
from jupyterhub_gpu.core.ssh.limits import FailureLimiter
from jupyterhub_gpu.core.ssh.logins import Login, login_candidates
from jupyterhub_gpu.core.ssh.sessions import refused_line
from jupyterhub_gpu.edges.ssh_keys import (
    KeysRefused,
    ldap_key_lines,
    parse_authorized_keys,
    read_authorized_keys,
)
from jupyterhub_gpu.errors import BadInput, ProbeError
from jupyterhub_gpu.services.ssh.hub import HubClient
from jupyterhub_gpu.wire.ssh_target import SSHTarget

#: opens a forwarded connection for a connection (:meth:`.session.Sessions.forward`)
Forwarder = Callable[["GatewayServer", str, int], Awaitable[Any]]

#: at most this many readings of a dotted login are asked of the hub
MAX_CANDIDATES = 4


@dataclass
class Gate:
    """What every connection shares: the hub, the limits, the site's choices."""

    hub: HubClient
    log: logging.Logger
    password_auth: bool = True
    keys_max_bytes: int = 64 * 1024
    by_user: FailureLimiter = field(default_factory=FailureLimiter)
    by_address: FailureLimiter = field(default_factory=lambda: FailureLimiter(max_failures=20))

    def blocked(self, user: str | None, address: str) -> bool:
        now = time.monotonic()
        if self.by_address.blocked(("addr", address), now):
            return True
        return user is not None and self.by_user.blocked(("user", user), now)

    def failed(self, user: str | None, address: str) -> None:
        now = time.monotonic()
        self.by_address.failed(("addr", address), now)
        if user is not None:
            self.by_user.failed(("user", user), now)

    async def resolve(self, name: str) -> tuple[Login, SSHTarget] | None:
        """The first reading of login ``name`` whose user the hub knows, and its target."""
        for login in login_candidates(name)[:MAX_CANDIDATES]:
            target = await self.hub.target(login, keys=True)
            if target is not None:
                return login, target
        return None


class GatewayServer(asyncssh.SSHServer):
    """One client connection's authentication (asyncssh makes one per connection)."""

    def __init__(
        self,
        gate: Gate,
        forward: Forwarder | None = None,
        new_session: Callable[[], Any] | None = None,
    ) -> None:
        self.gate = gate
        self.forward = forward
        self.new_session = new_session
        self.sessions_open = 0  # sessions (shell, command, sftp) open on this connection
        self.forwards_open = 0  # direct-tcpip channels open on this connection
        self.landing: Any = None  # where forwards run (session.Landing), asked once
        self.refused_remote = False  # a -R was refused: said once in the next session
        self.told_remote = False
        self.conn: asyncssh.SSHServerConnection | None = None
        self.peer_host = "?"
        self.peer = "?"
        self.name = ""  # the login as typed
        self.login: Login | None = None
        self.blocked = False
        self.auth = ""  # "publickey" or "token" once in
        self.why = "no key or token accepted"

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername") or ("?", 0)
        self.peer_host, self.peer = str(peer[0]), f"{peer[0]}:{peer[1]}"

    def connection_lost(self, exc: Exception | None) -> None:
        if self.name and not self.auth:
            self.gate.failed(self.login.user if self.login else None, self.peer_host)
            self.gate.log.info("%s", refused_line(self.name, self.peer, self.why))

    async def begin_auth(self, username: str) -> bool:
        self.name = username
        gate = self.gate
        if gate.blocked(None, self.peer_host):
            self.blocked, self.why = True, "too many failed attempts from this address"
            return True
        try:
            found = await gate.resolve(username)
        except BadInput:
            self.why = "not a user name"
            return True
        except (httpx.HTTPError, ProbeError) as e:
            self.why = f"the hub did not answer ({type(e).__name__})"
            return True
        if found is None:
            self.why = "no such user"
            return True
        self.login, target = found
        if gate.blocked(self.login.user, self.peer_host):
            self.blocked, self.why = True, "too many failed attempts for this user"
            return True
        await self._trust_keys(target)
        return True

    async def _trust_keys(self, target: SSHTarget) -> None:
        """Her ``authorized_keys`` (where her home has a trusted one) and her keys from
        LDAP (where the hub sent some), together."""
        if target.uid is None or self.conn is None:
            self.why = "the hub gives this user no identity: no key is read"
            return
        text, why = "", "the hub gives this user no home"
        if target.home:
            loop = asyncio.get_running_loop()
            try:
                text = await loop.run_in_executor(
                    None, read_authorized_keys, Path(target.home), target.uid,
                    self.gate.keys_max_bytes,
                )  # fmt: skip
            except KeysRefused as e:
                why = str(e)
        lines, skipped = ldap_key_lines(target.keys)
        for bad in skipped:
            self.gate.log.warning("SSH key from LDAP skipped: user=%s %s", target.user, bad)
        try:
            self.conn.set_authorized_keys(parse_authorized_keys("\n".join([text, *lines])))
        except KeysRefused as e:
            self.why = f"no key trusted: {why if not text else e}"

    def public_key_auth_supported(self) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return self.gate.password_auth

    async def validate_password(self, username: str, password: str) -> bool:
        login = self.login
        if self.blocked or login is None or not self.gate.password_auth:
            self.gate.failed(login.user if login else None, self.peer_host)
            return False
        try:
            owner = await self.gate.hub.token_owner(password)
        except (httpx.HTTPError, ProbeError) as e:
            self.why = f"the hub did not answer ({type(e).__name__})"
            return False
        ok = (
            owner is not None
            and owner.user == login.user
            and token_grants_server(owner.scopes, login.user, login.server)
        )
        if not ok:
            self.why = "a password that is not a token of this user for this server"
            self.gate.failed(login.user, self.peer_host)
            return False
        self.auth = "token"
        return True

    def auth_completed(self) -> None:
        self.auth = self.auth or "publickey"

    def session_requested(self) -> Any:
        """A session channel (shell, command, sftp): :meth:`.session.Sessions.new_process`."""
        return self.new_session() if self.new_session is not None else False

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Any:
        """``ssh -L`` (a ``direct-tcpip`` channel): carried from inside her container."""
        if self.forward is None or self.login is None:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "forwarding is not available"
            )
        return self.forward(self, dest_host, dest_port)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        """``ssh -R``: refused (its sentence comes in the next session)."""
        self.refused_remote = True
        self.gate.log.info(
            "SSH remote forwarding refused: user=%s from=%s",
            self.login.user if self.login else "?",
            self.peer,
        )
        return False

    def unix_connection_requested(self, dest_path: str) -> Any:
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
            "forwarding to a unix socket is not available; forward a TCP port",
        )

    def unix_server_requested(self, listen_path: str) -> bool:
        self.refused_remote = True
        return False


def server_of(process: Any) -> GatewayServer:
    """The :class:`GatewayServer` of a session's connection."""
    conn = process.get_extra_info("connection")
    owner = conn.get_owner()
    assert isinstance(owner, GatewayServer)
    return owner


__all__ = ["Gate", "GatewayServer", "server_of"]
