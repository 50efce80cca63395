"""What the services share, and no more.

- :class:`HubService`: the traitlets ``Application`` that the culler and the dashboard
  (services the hub runs) extend: the hub's environment as defaults
  (``$JUPYTERHUB_API_URL``, ``$JUPYTERHUB_API_TOKEN``), a config file under the command
  line, one log format at INFO, steps run every N seconds, and :meth:`HubService.start`,
  which runs the service until SIGINT or SIGTERM and turns a ``ConfigError`` into one
  critical line and exit status 1.
- :func:`stop_signals` and :func:`until_stopped`: SIGINT and SIGTERM handled even when
  the process inherited them ignored (the agent and the usage API use them too).

Only the standard library and traitlets: the node agent imports this module, and a GPU
node's install has no HTTP client library (``setup.cfg``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

from traitlets import Unicode, default
from traitlets.config import Application, Configurable

from jupyterhub_gpu import __version__
from jupyterhub_gpu.errors import ConfigError

#: The hub stops a service with SIGINT, then SIGTERM 10 s later (then SIGKILL).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
LOG_FORMAT = "[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s] %(message)s"
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"

Step = Callable[[], Awaitable[Any]]


@contextlib.contextmanager
def stop_signals(callback: Callable[[], object]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM call ``callback`` on the running loop.

    Both are handled even when inherited as ignored: a hub started with SIGINT ignored (a
    background job, ``nohup``) passes that on to the services it starts, and its shutdown
    then waited for them. On the way out the handlers are removed (the defaults return).
    """
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, callback)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def until_stopped() -> None:
    """Return at the first SIGINT or SIGTERM (:func:`stop_signals`)."""
    stop = asyncio.Event()
    with stop_signals(stop.set):
        await stop.wait()


class HubService(Application):
    """A service the hub runs (a subclass sets ``name``, its traits, :meth:`check_config`
    and :meth:`run`)."""

    version = __version__

    api_url = Unicode(help="The hub API URL. Default: $JUPYTERHUB_API_URL.").tag(config=True)
    api_token = Unicode(
        help="The service's hub token. Default: $JUPYTERHUB_API_TOKEN (never logged)."
    )
    config_file = Unicode("", help="A config file to load (Python, traitlets).").tag(config=True)

    @default("api_url")
    def _api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")

    @default("api_token")
    def _api_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("log_level")
    def _log_level(self) -> int:
        return logging.INFO

    @default("log_format")
    def _log_format(self) -> str:
        return LOG_FORMAT

    @default("log_datefmt")
    def _log_datefmt(self) -> str:
        return LOG_DATEFMT

    def _classes_inc_parents(
        self, classes: Any = None
    ) -> Generator[type[Configurable], None, None]:
        """traitlets' classes for ``--help-all`` and the command line, less this base: its
        traits are listed and set under each service's own name (``--GPUIdleCuller.api_url``,
        ``c.GPUDashboard.config_file``), as before the services shared it."""
        return (c for c in super()._classes_inc_parents(classes) if c is not HubService)

    def initialize(self, argv: Any = None) -> None:
        self.parse_command_line(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
            self.parse_command_line(argv)  # the command line wins over the file

    def check_config(self) -> None:
        """Raise :class:`ConfigError` for a configuration the service can't run with."""

    async def run(self) -> None:
        """The service, until a stop signal (:meth:`every_until_stopped`)."""
        raise NotImplementedError

    async def every(self, seconds: float, step: Step) -> None:
        """``step()`` every ``seconds`` from one start to the next (at once when it took
        longer), forever; an unexpected exception is logged, with its traceback, and the
        loop goes on."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await step()
            except Exception:
                self.log.exception(
                    "Unexpected error in %s; continuing", getattr(step, "__name__", step)
                )
            await asyncio.sleep(max(seconds - (loop.time() - started), 0.0))

    async def every_until_stopped(self, *loops: tuple[float, Step]) -> None:
        """Each ``(seconds, step)`` of ``loops`` side by side (:meth:`every`) until SIGINT or
        SIGTERM (:func:`stop_signals`), then "Stopping" in the log."""
        task = asyncio.current_task()
        assert task is not None
        with stop_signals(task.cancel):
            try:
                await asyncio.gather(*(self.every(seconds, step) for seconds, step in loops))
            except asyncio.CancelledError:
                self.log.info("Stopping")

    def start(self) -> None:
        """:meth:`run` on a new event loop; a :class:`ConfigError` is one critical line in
        the log and exit status 1."""
        try:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(self.run())
        except ConfigError as e:
            self.log.critical("%s", e)
            self.exit(1)
