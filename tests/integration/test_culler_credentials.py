"""No token of ours reaches a user's server (issue 10, item 4), for real.

alice's home holds a ``~/.jupyter/jupyter_server_config.py`` that records the headers of
every request her single-user server receives, as any user may write. A real hub runs
the real culler as its service, with the fewest scopes (no ``access:servers``) and in dry
run so that the servers stay up; it reads alice's kernels once her server has been idle
for its timeout. Then:

- every token alice's server received (``Authorization`` header or ``?token=``) is her
  server's own, the one the hub gave it (role ``server``), and the culler's reads carried
  it;
- that token opens alice's server and nothing else: bob's server through the proxy, the
  hub's user list, bob's server's deletion and alice's own token list all answer 403.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import Hub
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TIMEOUT = 20.0  # the culler reads a server's kernels once it has been idle this long
INTERVAL = 3.0
CPU = {"image": "demo-cpu", "gpu_count": 0, "mem_gib": 1, "cpu": 0.5}
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
UID, GID = 1000, 100  # GPUDockerSpawner.default_uid/default_gid (the dummy login has none)
CULLER_SCOPES = ["list:users", "read:servers", "admin:server_state", "delete:servers"]
TOKEN_HEADER = re.compile(r"^(?:token|bearer)\s+(\S+)\s*$", re.IGNORECASE)

#: What a user may put in her home: her server records every request it gets.
RECORDER = """
import json, os
import tornado.web

_LOG = os.path.join(os.path.expanduser("~"), "headers.jsonl")
_init = tornado.web.RequestHandler.__init__


def _record(self, application, request, **kwargs):
    entry = {"method": request.method, "uri": request.uri,
             "headers": [[k, v] for k, v in request.headers.get_all()]}
    with open(_LOG, "a") as f:
        f.write(json.dumps(entry) + "\\n")
    _init(self, application, request, **kwargs)


tornado.web.RequestHandler.__init__ = _record
"""


def plant_recorder(home: Path) -> Path:
    """alice's home with the recorder, as the spawner would accept it (hers, 0700)."""
    config = home / ".jupyter" / "jupyter_server_config.py"
    config.parent.mkdir(parents=True)
    config.write_text(RECORDER)
    for path in (home, config.parent):
        os.chown(path, UID, GID)
        path.chmod(0o700)
    os.chown(config, UID, GID)
    config.chmod(0o644)
    return home / "headers.jsonl"


def culler_config(work: Path) -> str:
    """The culler as a hub service in dry run, with a role lacking ``access:servers``."""
    work.mkdir(parents=True, exist_ok=True)
    settings = work / "culler_config.py"
    settings.write_text(
        f"""
c.GPUIdleCuller.timeout = {TIMEOUT}
c.GPUIdleCuller.gpu_timeout = {TIMEOUT}
c.GPUIdleCuller.interval = {INTERVAL}
c.GPUIdleCuller.dry_run = True
c.GPUIdleCuller.warn_before = 0  # "Would cull" at the timeout, not a warning ahead of it
c.GPUIdleCuller.notes_file = ""
c.GPUIdleCuller.state_file = {str(work / "state.json")!r}
"""
    )
    return f"""
import sys
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
c.JupyterHub.services.append({{
    "name": "gpu-culler",
    "command": [sys.executable, "-m", "jupyterhub_gpu.services.culler", "--config={settings}",
                "--log-level=DEBUG", "--GPUIdleCuller.proxy_url=" + c.JupyterHub.bind_url],
}})
c.JupyterHub.load_roles.append(
    {{"name": "gpu-culler", "scopes": {CULLER_SCOPES!r}, "services": ["gpu-culler"]}}
)
"""


def spawn(hub: Hub, user: str) -> None:
    hub.create_user(user)
    r = hub.spawn(user, CPU)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, timeout=240)


def wait_for_log(hub: Hub, pattern: str, timeout: float) -> str:
    """The first line of the hub's log (the culler logs there) matching ``pattern``."""
    regex = re.compile(pattern)

    def first_line() -> str | None:
        lines = hub.log_path.read_text(errors="replace").splitlines()
        return next((line for line in lines if regex.search(line)), None)

    return wait_until(
        first_line,
        timeout,
        f"a hub log line matching {pattern!r}",
        interval=0.5,
        details=lambda: hub.log_tail(80),
    )


def tokens_received(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(uri, token) for every token a request carried, in a header or the query."""
    found = []
    for r in records:
        for name, value in r["headers"]:
            if name.lower() == "authorization":
                m = TOKEN_HEADER.match(value)
                found.append((r["uri"], m.group(1) if m else value))
        for token in parse_qs(urlsplit(r["uri"]).query).get("token", []):
            found.append((r["uri"], token))
    return found


def test_the_culler_sends_a_server_only_its_own_token(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    node = engines[0]
    headers_log = plant_recorder(tmp_path / "homes" / "alice")
    hub = make_hub(
        [node], [gpu_inventory(node.name, "dddddddd", [RTX])], culler_config(tmp_path / "culler")
    )
    spawn(hub, "alice")
    spawn(hub, "bob")

    # a full round that read alice's kernels and status: only then can it judge her idle
    wait_for_log(hub, r"GPUIdleCuller\] Would cull alice \(dry run\): idle: ", 4 * TIMEOUT + 120)
    assert headers_log.exists(), "the recorder in alice's home did not run"
    records = [json.loads(line) for line in headers_log.read_text().splitlines()]
    own = hub.server("alice")
    assert own and own["ready"], "the dry run stopped alice's server"
    token = own["state"]["server_token"]

    # the token is the one the hub gave alice's server: role "server", nothing more
    r = httpx.get(f"{hub.url}/hub/api/user", headers={"Authorization": f"token {token}"})
    assert r.status_code == 200, r.text
    model = r.json()
    assert model["name"] == "alice"
    assert "access:servers!server=alice/" in model["scopes"]
    # (expanded: users:activity brings read:users:activity, :name, :groups) all bound to her
    unbound = [s for s in model["scopes"] if not s.endswith(("!user=alice", "!server=alice/"))]
    assert not unbound, model["scopes"]

    # what alice's server received: the culler's reads, with her server's token, and no other
    reads = [r for r in records if urlsplit(r["uri"]).path.endswith(("/api/kernels", "/api/status"))
             and "no_track_activity=1" in r["uri"]]  # fmt: skip
    assert {urlsplit(r["uri"]).path for r in reads} == {
        "/user/alice/api/kernels",
        "/user/alice/api/status",
    }, records
    received = tokens_received(records)
    assert received, "no request carried a token: the culler never read alice's server"
    assert {t for _, t in received} == {token}, [uri for uri, t in received if t != token]

    # and that token opens nothing alice's server could not already open
    auth = {"Authorization": f"token {token}"}
    with httpx.Client(base_url=hub.url, headers=auth, timeout=30) as client:
        assert client.get("/user/alice/api/status").status_code == 200  # it is a live token
        assert client.get("/user/bob/api/status").status_code == 403
        assert client.get("/hub/api/users").status_code == 403
        assert client.get("/hub/api/users/alice/tokens").status_code == 403
        assert client.delete("/hub/api/users/bob/server").status_code == 403
    bob = hub.server("bob")
    assert bob and bob["ready"], "bob's server was stopped with alice's server's token"
