"""A real JupyterHub process (with its proxy) for integration tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ADMIN_SCOPES = [
    "admin:users",
    "admin:servers",
    "admin:server_state",
    "read:users",
    "access:servers",
    "list:users",
]

#: Append to a hub's extra config so that :meth:`Hub.user_token` may create users' tokens.
TOKEN_ROLE_CONFIG = """
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {"name": "token-maker", "scopes": ["tokens"], "services": ["tester"]}
]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How many times :meth:`Hub.start` starts a hub whose port turned out to be taken.
START_TRIES = 3

# configurable-http-proxy: "listen EADDRINUSE: address already in use 127.0.0.1:59571";
# the hub itself: "OSError: [Errno 98] Address already in use"
_PORT_TAKEN = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)


def port_taken(output: str) -> bool:
    """Whether a hub's output (its own lines and its proxy's, which share the hub's log)
    says that a port it was to listen on was taken.

    The ports are chosen free (:func:`free_port`) and bound later by the hub and its proxy:
    another process can take one in between. That is a reason to start again on new
    ports, not a failure of the test."""
    return _PORT_TAKEN.search(output) is not None


class PortTaken(RuntimeError):
    """One start of a hub failed because a port it was given was taken meanwhile."""


#: The ports a test hub's API may take on the site address: the test cluster's node
#: firewall lets user servers reach these there and nothing else (scripts/cluster.sh).
HUB_API_PORTS = range(20000, 21000)


def free_hub_api_port() -> int:
    """A port of :data:`HUB_API_PORTS` that nothing on this machine listens on."""
    for port in random.sample(HUB_API_PORTS, len(HUB_API_PORTS)):
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {HUB_API_PORTS}")


@dataclass
class Hub:
    """Starts ``jupyterhub`` with a generated config; ``extra_config`` is Python appended to it."""

    workdir: Path
    extra_config: str = ""
    hub_id: str = field(default_factory=lambda: "t" + secrets.token_hex(4))
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = field(default_factory=free_port)
    # fixed for the hub's life, so a restarted hub (same workdir) keeps its addresses: the
    # running single-user servers were told the hub's API URL when they started
    hub_api_port: int = field(default_factory=free_hub_api_port)
    proxy_api_port: int = field(default_factory=free_port)
    # the hub's API where single-user servers on the nodes reach it (tests/support/cluster.py)
    hub_ip: str = "10.250.0.1"
    proc: subprocess.Popen[bytes] | None = None
    # it answered once: servers and tests know its addresses (see :meth:`start`)
    answered: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "hub.log"

    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "jupyterhub_config.py"
        cfg.write_text(
            f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = {self.url!r}
c.JupyterHub.hub_bind_url = "http://{self.hub_ip}:{self.hub_api_port}"
c.JupyterHub.hub_connect_ip = {self.hub_ip!r}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = {str(self.workdir / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{self.workdir / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(self.workdir / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(self.workdir / "hub.pid")!r}
c.JupyterHub.cleanup_servers = False
c.JupyterHub.services = [{{"name": "tester", "api_token": {self.token!r}}}]
c.JupyterHub.load_roles = [{{"name": "tester", "scopes": {ADMIN_SCOPES!r}, "services": ["tester"]}}]
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Spawner.start_timeout = 60
c.Spawner.http_timeout = 60
c.Spawner.debug = False
# the hub's node checks (a probe container per node, docs/nodes.md) are off in test hubs,
# so that the many hubs the suite starts do not each probe every node; the tests of the
# checks turn them on (tests/integration/test_hub_node_check.py)
c.GPUCluster.check_nodes = False
"""
            + self.extra_config
        )
        return cfg

    def start(self, timeout: float = 60, tries: int = START_TRIES) -> Hub:
        """Start the hub and wait until its API answers (``timeout`` s each try).

        A port taken between being chosen and being bound (:func:`port_taken`) costs a
        try: the hub is started again on new ports, at most ``tries`` times in all. Before
        the hub first answered every port is new; a restarted hub keeps its public and
        API ports (its servers and the test know them) and gets a new proxy API port."""
        for attempt in range(1, tries):
            try:
                return self._start_once(timeout)
            except PortTaken:
                self.stop()
                self._new_ports()
                with self.log_path.open("a") as log:
                    log.write(
                        f"[tests/support/hub.py] a port was taken (try {attempt} of {tries}); "
                        f"starting again on ports {self.port} (proxy), {self.hub_api_port} "
                        f"(hub API), {self.proxy_api_port} (proxy API)\n"
                    )
        return self._start_once(timeout)

    def _new_ports(self) -> None:
        if not self.answered:
            self.port, self.hub_api_port = free_port(), free_hub_api_port()
        self.proxy_api_port = free_port()

    def _start_once(self, timeout: float) -> Hub:
        """One start; :class:`PortTaken` if its output says a port was taken."""
        offset = self.log_offset()
        cfg = self.write_config()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(cfg)],
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )

        def failed(why: str) -> RuntimeError:
            written = self.log_since(offset)
            error = PortTaken if port_taken(written) else RuntimeError
            return error(f"{why}:\n{self.log_tail()}")

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise failed(f"hub exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/hub/api/", timeout=1).status_code == 200:
                    self.answered = True
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise failed(f"hub did not answer in {timeout}s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        proxy_pid = self.workdir / "proxy.pid"
        if proxy_pid.exists():
            with contextlib.suppress(OSError, ValueError):
                pid = int(proxy_pid.read_text().strip())
                # a proxy that failed to start left its pid: never signal another process
                if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGTERM)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no hub log)"

    def log_since(self, offset: int) -> str:
        """What the hub's log got past byte ``offset``."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_offset(self) -> int:
        """Where the hub's log ends now: pass it to :meth:`wait_log` as ``after``."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def wait_log(self, pattern: str, after: int, count: int = 1, timeout: float = 60) -> int:
        """Wait until ``count`` whole lines of the hub's log written past byte ``after``
        match the regular expression ``pattern`` (searched in each line, as the hub's own
        output and its managed services' share that log); returns the offset just past the
        last of them. Raises :class:`TimeoutError` with the log's tail after ``timeout`` s.

        This is how a test waits for a product event ("a reconciliation round has finished
        since", "the culler judged again") instead of sleeping "long enough"."""
        regex = re.compile(pattern.encode())
        deadline = time.monotonic() + timeout
        while True:
            found, end = 0, after
            with contextlib.suppress(FileNotFoundError), self.log_path.open("rb") as f:
                f.seek(after)
                written = f.read()
                # whole lines only: the last one may still be being written
                for line in written[: written.rfind(b"\n") + 1].split(b"\n")[:-1]:
                    end += len(line) + 1
                    if regex.search(line):
                        found += 1
                        if found == count:
                            return end
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{found} of {count} hub log line(s) matching {pattern!r} "
                    f"in {timeout}s:\n{self.log_tail()}"
                )
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"hub exited with {self.proc.returncode} while waiting for {pattern!r}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------------ API
    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        return httpx.request(
            method, f"{self.url}/hub/api{path}", headers=headers, timeout=90, **kwargs
        )

    async def aapi(
        self, client: httpx.AsyncClient, method: str, path: str, **kw: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"token {self.token}"}
        return await client.request(method, f"{self.url}/hub/api{path}", headers=headers, **kw)

    def create_user(self, name: str) -> httpx.Response:
        from urllib.parse import quote

        return self.api("POST", f"/users/{quote(name, safe='')}")

    def user_token(self, name: str, expires_in: int = 3600, note: str = "test") -> str:
        """A new API token of user ``name`` (needs :data:`TOKEN_ROLE_CONFIG`)."""
        from urllib.parse import quote

        r = self.api(
            "POST",
            f"/users/{quote(name, safe='')}/tokens",
            json={"expires_in": expires_in, "note": note},
        )
        r.raise_for_status()
        return str(r.json()["token"])

    def user(self, name: str) -> dict[str, Any]:
        from urllib.parse import quote

        r = self.api("GET", f"/users/{quote(name, safe='')}")
        r.raise_for_status()
        return dict(r.json())

    def server(self, name: str, server: str = "") -> dict[str, Any] | None:
        return self.user(name)["servers"].get(server)

    def spawn(
        self, name: str, options: dict[str, Any] | None = None, server: str = ""
    ) -> httpx.Response:
        from urllib.parse import quote

        path = f"/users/{quote(name, safe='')}/server" + (
            f"s/{quote(server, safe='')}" if server else ""
        )
        return self.api("POST", path, content=json.dumps(options or {}))

    def wait_ready(self, name: str, server: str = "", timeout: float = 90) -> dict[str, Any]:
        """Wait until the server is ready; raise with the hub log if it fails or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server(name, server)
            if s and s.get("ready"):
                return s
            if not s or (not s.get("pending") and not s.get("ready")):
                raise RuntimeError(f"server of {name!r} failed to start:\n{self.log_tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"server of {name!r} not ready in {timeout}s:\n{self.log_tail()}")

    def stop_server(self, name: str, server: str = "") -> httpx.Response:
        from urllib.parse import quote

        path = f"/users/{quote(name, safe='')}/server" + (
            f"s/{quote(server, safe='')}" if server else ""
        )
        r = self.api("DELETE", path)
        deadline = time.monotonic() + 60
        while r.status_code == 202 and time.monotonic() < deadline:
            if self.server(name, server) is None:
                break
            time.sleep(0.2)
        return r
