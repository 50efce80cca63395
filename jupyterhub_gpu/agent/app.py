"""The node agent: one small service per GPU host that reads the GPUs and serves them.

Run it as ``python -m jupyterhub_gpu.agent`` or ``services/gpu-agent.py``; see
``docs/agent.md`` for the systemd unit. Configuration is traitlets: command-line flags
(``--port``, ``--ip``, ``--probe``, ``--inventory``, ``--node``, ``--poll-interval``,
``--token-file``) or a Python config file (``--config``, ``c.GPUAgent.port = ...``).
The token comes from ``$JUPYTERHUB_GPU_AGENT_TOKEN`` or ``--token-file``; without one
the agent refuses to start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

from tornado.httpserver import HTTPServer
from traitlets import Enum, Float, Integer, Unicode, default, validate
from traitlets.config import Application

from ..errors import ConfigError, GPUHubError
from ..inventory.probe import make_probe
from .handlers import make_web_app
from .metrics import make_registry
from .poller import SnapshotPoller

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
            f"no agent token: set ${TOKEN_ENV} or --token-file FILE "
            "(make one with: openssl rand -hex 32); the agent never runs open"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"the agent token from {source} is too short: use at least {MIN_TOKEN_LENGTH} "
            "random characters (openssl rand -hex 32)"
        )
    return token


class GPUAgent(Application):
    name = "jupyterhub-gpu-agent"
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
        help=f"""File holding the agent token (chmod 600), read when ${TOKEN_ENV} is not
        set. The hub sends it as ``Authorization: token <token>``.""",
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
        "config": "GPUAgent.config_file",
        "log-level": "Application.log_level",
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
        self._token = read_token(os.environ, self.token_file)
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
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        web_app = make_web_app(self._token, self.poller, make_registry(self.poller))
        server = HTTPServer(web_app)
        server.listen(self.port, address=self.ip)
        self.log.info(
            "serving on http://%s:%d (poll every %gs)", self.ip, self.port, self.poll_interval
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        polling = asyncio.create_task(self.poller.run())
        try:
            await stop.wait()
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
