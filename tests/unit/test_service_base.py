"""The services' shared base (``services/base.py``): the hub's environment as defaults, the
config file under the command line, the options each service lists, the periodic loop
and the stop signals."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

from jupyterhub_gpu.services.base import HubService, stop_signals, until_stopped
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from jupyterhub_gpu.services.dashboard.app import GPUDashboard
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("service", [GPUIdleCuller, GPUDashboard])
def test_the_hubs_environment_and_one_log_format_are_the_defaults(
    service: type[HubService], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub.test:8081/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
    app = service()
    assert (app.api_url, app.api_token) == ("http://hub.test:8081/hub/api", "service-token")
    assert app.log_level == logging.INFO and app.log_format.startswith("[%(levelname)1.1s")
    monkeypatch.delenv("JUPYTERHUB_API_URL")
    assert service().api_url == "http://127.0.0.1:8081/hub/api"


@pytest.mark.parametrize("service", [GPUIdleCuller, GPUDashboard])
def test_help_lists_each_services_own_options_and_no_section_for_the_base(
    service: type[HubService],
) -> None:
    app = service()
    text = "\n".join(app.emit_help(classes=True))
    name = service.__name__
    for option in ("api_url", "config_file", "log_level"):
        assert f"--{name}.{option}=" in text, option
    assert "--HubService." not in text and "HubService(Application)" not in text
    assert "The hub API URL. Default: $JUPYTERHUB_API_URL." in text


def test_the_command_line_wins_over_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "culler_config.py"
    config.write_text("c.GPUIdleCuller.interval = 5\nc.GPUIdleCuller.timeout = 60\n")
    culler = GPUIdleCuller()
    culler.initialize([f"--config={config}", "--interval=7", "--url=http://hub.test/hub/api"])
    assert (culler.interval, culler.timeout) == (7.0, 60.0)
    assert culler.api_url == "http://hub.test/hub/api"


async def test_every_logs_an_unexpected_error_and_goes_on() -> None:
    app = GPUIdleCuller()
    records: list[logging.LogRecord] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Recorder()
    app.log.addHandler(handler)
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        if calls == 3:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await app.every(0.0, flaky)
    assert calls == 3
    app.log.removeHandler(handler)
    (error,) = [r for r in records if r.levelno == logging.ERROR]
    assert error.getMessage() == "Unexpected error in flaky; continuing" and error.exc_info


async def test_sigint_stops_even_when_inherited_ignored() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a hub run in the background
    try:
        waiting = asyncio.ensure_future(until_stopped())
        await asyncio.sleep(0)  # the handlers are in place
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(waiting, 5)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # removed again
        called: list[str] = []
        with stop_signals(lambda: called.append("stop")):
            os.kill(os.getpid(), signal.SIGTERM)
            await wait_until_async(lambda: called, 5, "the SIGTERM handler to run")
        assert called == ["stop"] and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)
