"""The test hub's start (tests/support/hub.py): a port chosen free and taken by another
process before the hub or its proxy bound it costs a retry on new ports, not the test.
Checked on the hub's and the proxy's real messages, and with a stand-in for
``python -m jupyterhub`` (no hub, no proxy)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.support.hub import START_TRIES, Hub, PortTaken, port_taken

pytestmark = pytest.mark.unit

# configurable-http-proxy, as in the CI run that failed (its API port was taken)
PROXY_TAKEN = """\
[E 2025-01-20 10:00:01.123 JupyterHub proxy:771] Proxy failed to start with exit code 1
11:00:01.100 [ConfigProxy] error: Uncaught Exception: listen EADDRINUSE: address already \
in use 127.0.0.1:59571
Error: listen EADDRINUSE: address already in use 127.0.0.1:59571
    at Server.setupListenHandle [as _listen2] (node:net:1872:16)
"""
# the hub's own API port
HUB_TAKEN = """\
[E 2025-01-20 10:00:01.123 JupyterHub app:3917] Failed to bind hub to http://10.250.0.1:20123/hub/
    self.http_server.listen(port, address=ip)
OSError: [Errno 98] Address already in use
"""
OTHER_FAILURE = """\
[C 2025-01-20 10:00:01.123 JupyterHub app:3390] Failed to load the catalog:
images[1] (demo-cuda11).cuda_version: 'eleven' is not a version
"""


@pytest.mark.parametrize(("output", "taken"), [
    (PROXY_TAKEN, True), (HUB_TAKEN, True), (OTHER_FAILURE, False), ("", False),
])  # fmt: skip
def test_a_taken_port_is_told_apart_from_other_failures(output: str, taken: bool) -> None:
    assert port_taken(output) is taken


# ``python -m jupyterhub -f CONFIG`` as the test hub runs it: it reads its public port from
# the config; the first FAKE_TAKEN starts fail as the proxy does on a taken port, the
# others answer the hub's API; FAKE_TAKEN=broken fails for another reason
FAKE_HUB = """
import http.server, os, re, sys
from pathlib import Path

config = Path(sys.argv[sys.argv.index("-f") + 1]).read_text()
port = int(re.search(r"bind_url = 'http://127.0.0.1:(\\d+)'", config)[1])
with open("starts", "a") as f:
    f.write(f"{port}\\n")
starts = len(Path("starts").read_text().split())
mode = os.environ["FAKE_TAKEN"]
if mode == "broken":
    print("Failed to load the catalog", flush=True)
    sys.exit(1)
if starts <= int(mode):
    print(f"Error: listen EADDRINUSE: address already in use 127.0.0.1:{port}", flush=True)
    sys.exit(1)


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")


http.server.HTTPServer(("127.0.0.1", port), Answer).serve_forever()
"""


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "fake" / "jupyterhub"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(textwrap.dedent(FAKE_HUB))
    path = os.pathsep.join(filter(None, [str(package.parent), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return tmp_path / "hub"


def starts(hub: Hub) -> list[int]:
    """The public port of each start, in order."""
    return [int(p) for p in (hub.workdir / "starts").read_text().split()]


def test_a_taken_port_costs_a_retry_on_new_ports(
    fake_hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TAKEN", str(START_TRIES - 1))
    hub = Hub(fake_hub)
    first = (hub.port, hub.hub_api_port, hub.proxy_api_port)
    try:
        hub.start(timeout=20)
        assert hub.answered and len(starts(hub)) == START_TRIES
        assert starts(hub)[-1] == hub.port and (hub.port, hub.hub_api_port) != first[:2]
        assert hub.log_path.read_text().count("a port was taken (try") == START_TRIES - 1
    finally:
        hub.stop()

    # a restart keeps the ports its servers and the test know: only the proxy's API moves
    (hub.workdir / "starts").unlink()
    monkeypatch.setenv("FAKE_TAKEN", "1")
    known, proxy_api = (hub.port, hub.hub_api_port), hub.proxy_api_port
    try:
        hub.start(timeout=20)
        assert starts(hub) == [known[0], known[0]]
        assert (hub.port, hub.hub_api_port) == known and hub.proxy_api_port != proxy_api
    finally:
        hub.stop()


def test_the_retries_are_bounded(fake_hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TAKEN", "99")
    hub = Hub(fake_hub)
    with pytest.raises(PortTaken, match="address already in use"):
        hub.start(timeout=20, tries=2)
    assert len(starts(hub)) == 2 and not hub.answered


def test_another_failure_is_not_retried(fake_hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TAKEN", "broken")
    hub = Hub(fake_hub)
    with pytest.raises(RuntimeError, match="hub exited with 1") as info:
        hub.start(timeout=20)
    assert not isinstance(info.value, PortTaken) and len(starts(hub)) == 1
