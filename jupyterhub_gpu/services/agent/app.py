"""The node agent: one small service per GPU host that reads the GPUs and serves them.

Run it as ``python -m jupyterhub_gpu.services.agent`` or ``services/gpu-agent.py``; see
``docs/agent.md`` for the systemd unit. Configuration is traitlets: command-line flags
(``--port``, ``--ip``, ``--probe``, ``--inventory``, ``--node``, ``--poll-interval``,
``--token-file``, ``--certfile``, ``--keyfile``) or a Python config file (``--config``,
``c.GPUAgent.port = ...``). The token is this node's own token (derived from the hub's
site secret, :mod:`jupyterhub_gpu.core.tokens`), from ``$JUPYTERHUB_GPU_AGENT_TOKEN``
or ``--token-file``; without one the agent refuses to start. ``--print-token --node NAME
--site-secret-file FILE`` prints a node's token (run it where the site secret is).
With ``--certfile``/``--keyfile`` the agent serves HTTPS.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import stat
import sys
from pathlib import Path
from typing import Any

from tornado.httpserver import HTTPServer
from traitlets import Bool, Enum, Float, Integer, Unicode, default, validate
from traitlets.config import Application

from jupyterhub_gpu import __version__
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.edges.probe import make_probe
from jupyterhub_gpu.errors import ConfigError, GPUHubError
from jupyterhub_gpu.services.agent.handlers import make_web_app
from jupyterhub_gpu.services.agent.metrics import make_registry
from jupyterhub_gpu.services.agent.poller import SnapshotPoller
from jupyterhub_gpu.services.base import until_stopped

TOKEN_ENV = "JUPYTERHUB_GPU_AGENT_TOKEN"
MIN_TOKEN_LENGTH = 16


def read_token(environ: dict[str, str] | os._Environ[str], token_file: str) -> str:
    """The agent token: ``$JUPYTERHUB_GPU_AGENT_TOKEN`` first, else the token file."""
    token = environ.get(TOKEN_ENV, "").strip()
    source = f"${TOKEN_ENV}"
    if not token and token_file:
        path = Path(token_file)
        try:
            token = path.read_text().strip()
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the agent token ({e.strerror})") from None
        source = str(path)
        if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logging.getLogger(__name__).warning(
                "%s can be read by other users; make it chmod 600", path
            )
    if not token:
        raise ConfigError(
            f"no agent token: set ${TOKEN_ENV} or --token-file FILE to this node's token "
            "(print it where the hub's site secret is: python -m jupyterhub_gpu.services.agent "
            "--print-token --node NAME --site-secret-file FILE); the agent never runs open"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"the agent token from {source} is too short: use at least {MIN_TOKEN_LENGTH} "
            "random characters (this node's token from --print-token)"
        )
    return token


def make_ssl_context(certfile: str, keyfile: str) -> ssl.SSLContext | None:
    """The agent's TLS server context (TLS 1.2 or newer), or ``None`` for plain HTTP."""
    if not certfile and not keyfile:
        return None
    if not (certfile and keyfile):
        raise ConfigError("--certfile and --keyfile go together: give both, or neither")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"cannot load the TLS certificate {certfile} with key {keyfile}: {e}"
        ) from None
    return context


def print_node_token(node: str, site_secret_file: str) -> str:
    """``--print-token``: the token of ``node``, derived from the site secret in a file."""
    if not node or not site_secret_file:
        raise ConfigError("--print-token needs --node NAME and --site-secret-file FILE")
    try:
        secret = Path(site_secret_file).read_text()
    except OSError as e:
        raise ConfigError(
            f"{site_secret_file}: cannot read the site secret ({e.strerror})"
        ) from None
    try:
        return node_token(secret, node)
    except ValueError as e:
        raise ConfigError(f"{site_secret_file}: {e}") from None


class GPUAgent(Application):
    name = "jupyterhub-gpu-agent"
    version = __version__
    description = "Serve this host's GPUs (NVML or a declared inventory) to jupyterhub-gpu."

    port = Integer(9450, config=True, help="TCP port to listen on (default 9450).")
    ip = Unicode(
        "127.0.0.1",
        config=True,
        help="""Address to listen on (default 127.0.0.1). Set the address the hub reaches
        this host on, e.g. ``--ip 10.0.0.12``; ``0.0.0.0`` listens everywhere.""",
    )
    probe = Enum(
        ["auto", "nvml", "declared"],
        "auto",
        config=True,
        help="""Where the GPUs come from: ``nvml`` (the NVIDIA driver), ``declared`` (the
        ``--inventory`` file; live values can then be set through the API), or ``auto``
        (NVML when a driver answers, else the file). Default: auto.""",
    )
    inventory = Unicode(
        "",
        config=True,
        help="Declared inventory YAML (see docs/agent.md); needed for --probe declared.",
    )
    node = Unicode(
        "",
        config=True,
        help="""This node's name, as in the hub's nodes configuration. Default: the host
        name (NVML) or the only node of the inventory file.""",
    )
    poll_interval = Float(
        2.0, config=True, help="Seconds between GPU readings (default 2; 0.1 to 300)."
    )
    token_file = Unicode(
        "",
        config=True,
        help=f"""File holding this node's agent token (chmod 600), read when ${TOKEN_ENV}
        is not set. The hub sends it as ``Authorization: token <token>``; it is
        HMAC-SHA256(site secret, node name), printed by ``--print-token``.""",
    )
    certfile = Unicode(
        "",
        config=True,
        help="""TLS certificate (PEM, with any intermediates) to serve HTTPS; needs
        ``--keyfile``. The hub verifies it (``c.AgentClient.ca_cert``, an ``https://``
        agent_url); its subjectAltName must hold the host or IP of that URL. Default '':
        plain HTTP.""",
    )
    keyfile = Unicode("", config=True, help="The TLS certificate's private key (PEM, chmod 600).")
    print_token = Bool(
        False,
        config=True,
        help="""Print the agent token of ``--node`` derived from the site secret in
        ``--site-secret-file``, and exit (no GPUs are read, nothing listens).""",
    )
    site_secret_file = Unicode(
        "",
        config=True,
        help="""For ``--print-token`` only: a file with the hub's site secret (the hub's
        ``GPUCluster.agent_token``). The agent itself never needs it.""",
    )
    config_file = Unicode("", config=True, help="A Python config file (c.GPUAgent.port = ...).")

    aliases = {
        "port": "GPUAgent.port",
        "ip": "GPUAgent.ip",
        "probe": "GPUAgent.probe",
        "inventory": "GPUAgent.inventory",
        "node": "GPUAgent.node",
        "poll-interval": "GPUAgent.poll_interval",
        "token-file": "GPUAgent.token_file",
        "certfile": "GPUAgent.certfile",
        "keyfile": "GPUAgent.keyfile",
        "site-secret-file": "GPUAgent.site_secret_file",
        "config": "GPUAgent.config_file",
        "log-level": "Application.log_level",
    }
    flags = {
        "print-token": (
            {"GPUAgent": {"print_token": True}},
            "Print the token of --node from --site-secret-file, and exit.",
        )
    }

    @default("log_level")
    def _default_log_level(self) -> int:
        return logging.INFO

    @validate("poll_interval")
    def _check_interval(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not 0.1 <= value <= 300:
            raise ConfigError(f"--poll-interval must be 0.1 to 300 seconds, got {value}")
        return value

    @validate("port")
    def _check_port(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if not 1 <= value <= 65535:
            raise ConfigError(f"--port must be 1 to 65535, got {value}")
        return value

    def initialize(self, argv: list[str] | None = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
        self._wire_logging()
        if self.print_token:
            return  # start() prints the token; nothing else is needed
        self._token = read_token(os.environ, self.token_file)
        self._ssl = make_ssl_context(self.certfile, self.keyfile)
        if self.probe == "declared" and not self.inventory:
            raise ConfigError("--probe declared needs --inventory FILE")
        probe = make_probe(self.probe, self.inventory or None, self.node or None)
        self.poller = SnapshotPoller(probe, self.poll_interval)
        snapshot = self.poller.read_now()  # a bad inventory or node name fails start-up
        self.log.info(
            "node %s (%s probe): driver %s, %d GPU(s)",
            snapshot.inventory.name,
            type(probe).__name__,
            snapshot.inventory.driver_version,
            len(snapshot.inventory.gpus),
        )
        for g in snapshot.inventory.gpus:
            self.log.info("  GPU %d %s %s %d MiB", g.index, g.uuid, g.model, g.memory_mib)

    def _wire_logging(self) -> None:
        """Send the package's and tornado's logs through the application's handler."""
        for name in ("jupyterhub_gpu", "tornado"):
            logger = logging.getLogger(name)
            logger.propagate = True
            logger.parent = self.log
            logger.setLevel(self.log.level)

    def start(self) -> None:
        if self.print_token:
            print(print_node_token(self.node, self.site_secret_file))
            return
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        web_app = make_web_app(self._token, self.poller, make_registry(self.poller))
        server = HTTPServer(web_app, ssl_options=self._ssl)
        server.listen(self.port, address=self.ip)
        scheme = "https" if self._ssl else "http"
        self.log.info(
            "serving on %s://%s:%d (poll every %gs)", scheme, self.ip, self.port, self.poll_interval
        )
        polling = asyncio.create_task(self.poller.run())
        try:
            await until_stopped()  # SIGTERM or SIGINT
        finally:
            self.log.info("stopping")
            server.stop()
            polling.cancel()
            self.poller.close()


def main(argv: list[str] | None = None) -> None:
    app = GPUAgent()
    try:
        app.initialize(argv)
        app.start()
    except GPUHubError as e:
        app.log.critical("%s", e)
        sys.exit(2)
