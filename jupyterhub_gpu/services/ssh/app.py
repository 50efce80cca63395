"""``GPUSSHGateway``: the SSH gateway as a hub-managed service (docs/ssh.md), added to a
hub's configuration by :func:`jupyterhub_gpu.hub.extensions.configure_ssh`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime, timezone
from pathlib import Path

import asyncssh
import httpx
from traitlets import Bool, Float, Int, Unicode, default

from jupyterhub_gpu.core.ssh.access import MAX_AUTHORIZED_KEYS_BYTES
from jupyterhub_gpu.core.ssh.activity import ActivityBook
from jupyterhub_gpu.core.ssh.limits import FailureLimiter
from jupyterhub_gpu.edges.ssh_keys import fingerprint, load_or_make_host_key
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.services.base import HubService, until_stopped
from jupyterhub_gpu.services.ssh.hub import HubClient
from jupyterhub_gpu.services.ssh.server import Gate, GatewayServer
from jupyterhub_gpu.services.ssh.session import Sessions

DEFAULT_HOST_KEY = "/var/lib/jupyterhub-gpu/ssh_host_ed25519_key"


class GPUSSHGateway(HubService):
    """SSH into one's own running server."""

    name = "jupyterhub-gpu-ssh"
    description = "SSH gateway into users' servers for jupyterhub-gpu (a hub-managed service)."
    # configure_ssh's config_file= arrives as --config=FILE (without the alias, ignored)
    aliases = {"config": "GPUSSHGateway.config_file"}

    ip = Unicode(
        "127.0.0.1",
        help="""The address to listen on (``0.0.0.0`` for every address). Default:
        127.0.0.1. Only the hub's users should reach it; it never listens on the user
        bridge of a GPU node.""",
    ).tag(config=True)
    port = Int(8022, help="The port to listen on. Default: 8022.").tag(config=True)
    host_key_file = Unicode(
        DEFAULT_HOST_KEY,
        help="""The gateway's host key (ed25519), made on first start with mode 0600 and
        kept: its fingerprint is what users check (``jupyterhub-gpu ssh fingerprint``).""",
    ).tag(config=True)
    hub_url = Unicode(
        help="""The hub's public URL, for the sentences users read ("start it at
        https://hub.example.org/hub/spawn"). Default: $JUPYTERHUB_PUBLIC_HUB_URL without
        its /hub/, else http://127.0.0.1:8000.""",
    ).tag(config=True)
    password_auth = Bool(
        True,
        help="""Accept a JupyterHub API token of the user as the password (its scopes must
        reach the server). False: keys only. LDAP passwords are never accepted.""",
    ).tag(config=True)
    max_failures_per_user = Int(
        5, help="Failed logins per user within failure_window before refusing her logins."
    ).tag(config=True)
    max_failures_per_address = Int(
        20, help="Failed logins per client address within failure_window before refusing it."
    ).tag(config=True)
    failure_window = Float(60.0, help="The failure window, in seconds.").tag(config=True)
    authorized_keys_max_bytes = Int(
        MAX_AUTHORIZED_KEYS_BYTES, help="A larger ~/.ssh/authorized_keys is not read."
    ).tag(config=True)
    login_timeout = Float(30.0, help="Seconds a client has to log in.").tag(config=True)
    activity_interval = Float(
        60.0,
        help="""Input on an SSH session or forwarded connection counts as its server's
        activity for the idle culler: reported to the hub at most once per this many
        seconds per server (0: never reported, so SSH alone does not keep a server).""",
    ).tag(config=True)
    start_servers = Bool(
        False,
        help="""Where a user's default server is stopped, start it with the options of its
        last start and show its progress in the session (the gateway's role then needs
        the scopes ``servers`` and ``read:servers``: configure_ssh(start_servers=True)).
        False: one sentence says where to start it.""",
    ).tag(config=True)
    start_timeout = Float(
        300.0, help="Seconds a session waits for a server it started to be ready."
    ).tag(config=True)
    sessions_interval = Float(
        30.0,
        help="""The open sessions and forwards are sent to the hub (for the dashboard and
        the metrics) when they change and at least this often, in seconds (1-3600); the
        hub forgets a list older than three of these (a gateway that stopped).""",
    ).tag(config=True)
    keepalive_interval = Float(
        30.0, help="Seconds between keepalives to an idle client (0: none)."
    ).tag(config=True)

    @default("hub_url")
    def _hub_url(self) -> str:
        import os

        public = os.environ.get("JUPYTERHUB_PUBLIC_HUB_URL", "")
        return public.rstrip("/").removesuffix("/hub") or "http://127.0.0.1:8000"

    def check_config(self) -> None:
        if not self.api_token:
            raise ConfigError("no hub token: run the SSH gateway as a hub service")
        if not 0 < self.port < 65536:
            raise ConfigError(f"GPUSSHGateway.port must be 1-65535, not {self.port}")
        if not 1 <= self.sessions_interval <= 3600:
            raise ConfigError(
                f"GPUSSHGateway.sessions_interval must be 1-3600 s, not {self.sessions_interval}"
            )

    async def run(self) -> None:
        self.check_config()
        try:
            key = load_or_make_host_key(Path(self.host_key_file))
        except (OSError, ValueError) as e:
            raise ConfigError(f"the SSH host key {self.host_key_file}: {e}") from None
        hub = HubClient(self.api_url, self.api_token)
        window = self.failure_window
        gate = Gate(
            hub=hub,
            log=self.log,
            password_auth=self.password_auth,
            keys_max_bytes=self.authorized_keys_max_bytes,
            by_user=FailureLimiter(self.max_failures_per_user, window),
            by_address=FailureLimiter(self.max_failures_per_address, window),
        )
        book = ActivityBook(self.activity_interval) if self.activity_interval > 0 else None
        sessions = Sessions(gate, self.hub_url, book, self.start_servers, self.start_timeout)
        acceptor = await asyncssh.create_server(
            lambda: GatewayServer(gate, sessions.forward, sessions.new_process),
            self.ip,
            self.port,
            server_host_keys=[key],
            encoding=None,
            line_editor=False,
            allow_pty=True,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            login_timeout=self.login_timeout,
            keepalive_interval=self.keepalive_interval,
        )
        self.log.info("SSH gateway on %s:%d, host key %s", self.ip, self.port, fingerprint(key))
        reporting = (
            asyncio.create_task(self._report(hub, book, self.activity_interval))
            if book is not None
            else None
        )
        counting = asyncio.create_task(self._report_sessions(hub, sessions))
        try:
            await until_stopped()
        finally:
            self.log.info("Stopping")
            if reporting is not None:
                reporting.cancel()
            counting.cancel()
            acceptor.close()
            await acceptor.wait_closed()
            sessions.close()
            with contextlib.suppress(httpx.HTTPError):  # nothing is open any more
                await hub.sessions([], self.sessions_interval)
            await hub.aclose()

    async def _report_sessions(self, hub: HubClient, sessions: Sessions) -> None:
        """The open sessions and forwards to the hub: when they change, else every
        ``sessions_interval`` (the hub then knows the list is current)."""
        interval = self.sessions_interval
        warned = False
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(sessions.changed.wait(), timeout=interval)
            sessions.changed.clear()
            try:
                await hub.sessions(sessions.census.channels(), interval)
            except httpx.HTTPError as e:
                if not warned:
                    self.log.warning("The hub did not take the SSH sessions (%s)", e)
                    warned = True
                await asyncio.sleep(1.0)  # not a busy loop while the hub is down
                sessions.changed.set()  # try again
                continue
            warned = False

    async def _report(self, hub: HubClient, book: ActivityBook, interval: float) -> None:
        """Send the servers' SSH activity to the hub (a second at most after it is due)."""
        warned = False
        while True:
            await asyncio.sleep(min(1.0, interval))
            for user, server, at in book.due(time.time()):
                stamp = datetime.fromtimestamp(at, timezone.utc)
                try:
                    await hub.activity(user, server, stamp)
                except httpx.HTTPError as e:
                    if not warned:
                        self.log.warning("The hub did not take SSH activity (%s)", e)
                        warned = True
                    continue
                self.log.debug("SSH activity of %s/%s sent", user, server)


def main(argv: list[str] | None = None) -> None:
    GPUSSHGateway.launch_instance(argv)
