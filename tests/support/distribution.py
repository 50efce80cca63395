"""A real Docker registry (Debian's ``docker-registry``: Distribution 2.8) for tests.

It listens on the site address (:data:`~tests.support.cluster.SITE_ADDRESS`, on this
machine's ``lo``), which the nodes' engines reach from their namespaces and trust as an
insecure registry (scripts/cluster.sh starts them with ``--insecure-registry``), on a
free port, with its own configuration and storage folder in a folder of the test, and
``storage.delete.enabled`` (a test may delete what it pushed). Use it as a context
manager (it stops on exit)::

    with Distribution(tmp_path / "registry") as registry:
        engine.push(f"{registry.address}/x/y:1")
        assert registry.tags("x/y") == ["1"]

Every running one leaves a pidfile under :data:`PIDS` with the pid of the process that
started it; :meth:`Distribution.start` first stops the registries whose starter died
(a test session killed before its clean-up). Not the older pull-only fake in
``tests/support/registry.py``: this one takes pushes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from tests.support.cluster import SITE_ADDRESS, STATE

#: Where Debian's ``docker-registry`` package puts the server (scripts/cluster.sh installs it).
REGISTRY_BINARY = "/usr/bin/docker-registry"
#: One pidfile per running test registry: ``<registry pid> <starter pid>``.
PIDS = STATE / "registries"
_NOT_FOUND = ("NAME_UNKNOWN", "MANIFEST_UNKNOWN")


class RegistryError(RuntimeError):
    """The registry answered an API call with an unexpected status."""


def free_port_on(host: str) -> int:
    """A port nothing listens on at ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def kill_stale(folder: Path = PIDS) -> list[int]:
    """Stop the test registries whose starting process is gone; their pids."""
    killed = []
    for pidfile in sorted(folder.glob("*.pid")) if folder.is_dir() else []:
        try:
            pid, owner = (int(x) for x in pidfile.read_text().split())
        except (OSError, ValueError):
            pidfile.unlink(missing_ok=True)
            continue
        if _alive(owner):  # its session still runs (this one, maybe): its registry is in use
            continue
        if _alive(pid) and b"docker-registry" in _cmdline(pid):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        pidfile.unlink(missing_ok=True)
    return killed


def _bcrypt(password: str) -> str:
    """A bcrypt hash for the registry's htpasswd file (the C library's, through Python's
    ``crypt``: no bcrypt package is installed)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@dataclass
class Distribution:
    workdir: Path
    host: str = SITE_ADDRESS
    port: int = 0
    binary: str = field(default_factory=lambda: shutil.which("docker-registry") or REGISTRY_BINARY)
    proc: subprocess.Popen[bytes] | None = None
    #: (user, password): the registry then asks for them (htpasswd, bcrypt), for every call
    credentials: tuple[str, str] | None = None

    @property
    def address(self) -> str:
        """``host:port``: the registry part of an image reference."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    @property
    def pidfile(self) -> Path:
        return PIDS / f"{self.port}.pid"

    # ------------------------------------------------------------------ life cycle
    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.storage)},
                "delete": {"enabled": True},
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {
                "addr": self.address,
                "secret": secrets.token_hex(16),
                "headers": {"X-Content-Type-Options": ["nosniff"]},
            },
        }
        if self.credentials is not None:
            htpasswd = self.workdir / "htpasswd"
            htpasswd.write_text(f"{self.credentials[0]}:{_bcrypt(self.credentials[1])}\n")
            config["auth"] = {"htpasswd": {"realm": "jupyterhub-gpu-test", "path": str(htpasswd)}}
        path = self.workdir / "config.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self, timeout: float = 30) -> Distribution:
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(
                f"no registry server at {self.binary}: install Debian's docker-registry "
                "package (scripts/cluster.sh up does)"
            )
        kill_stale()
        if not self.port:
            self.port = free_port_on(self.host)
        config = self.write_config()
        # a clean environment: REGISTRY_* variables would override the configuration
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", str(config)],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        PIDS.mkdir(parents=True, exist_ok=True)
        self.pidfile.write_text(f"{self.proc.pid} {os.getpid()}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.pidfile.unlink(missing_ok=True)
                raise RuntimeError(
                    f"docker-registry exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                answer = httpx.get(f"{self.url}/v2/", auth=self.credentials, timeout=1)
                if answer.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry not answering in {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.port:
            self.pidfile.unlink(missing_ok=True)

    def __enter__(self) -> Distribution:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no registry log)"

    # ------------------------------------------------------------------ HTTP API v2
    def _get(self, path: str, **headers: str) -> httpx.Response | None:
        """``GET /v2/<path>``: the answer, or ``None`` for the registry's "unknown"."""
        r = httpx.get(f"{self.url}/v2/{path}", headers=headers, auth=self.credentials, timeout=30)
        if r.status_code == 404:
            codes = {e.get("code") for e in r.json().get("errors", [])}
            if codes & set(_NOT_FOUND):
                return None
        if r.status_code != 200:
            raise RegistryError(f"GET /v2/{path}: HTTP {r.status_code}: {r.text[:500]}")
        return r

    def catalog(self) -> list[str]:
        """Every repository the registry holds (``GET /v2/_catalog``)."""
        r = self._get("_catalog?n=1000")
        return sorted(r.json().get("repositories") or []) if r is not None else []

    def tags(self, repository: str) -> list[str]:
        """The tags of ``repository`` (``GET /v2/<repo>/tags/list``); ``[]`` when unknown."""
        r = self._get(f"{repository}/tags/list")
        return sorted(r.json().get("tags") or []) if r is not None else []

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The digest the registry gives ``repository:reference`` (a tag or a digest)."""
        accept = ", ".join(
            (
                "application/vnd.docker.distribution.manifest.v2+json",
                "application/vnd.oci.image.manifest.v1+json",
            )
        )
        r = self._get(f"{repository}/manifests/{reference}", Accept=accept)
        return r.headers.get("Docker-Content-Digest") if r is not None else None

    def delete(self, repository: str, reference: str) -> bool:
        """Delete the manifest of ``repository:reference`` (its tags go with it)."""
        digest = self.manifest_digest(repository, reference)
        if digest is None:
            return False
        r = httpx.delete(
            f"{self.url}/v2/{repository}/manifests/{digest}", auth=self.credentials, timeout=30
        )
        if r.status_code != 202:
            raise RegistryError(f"DELETE {repository}@{digest}: HTTP {r.status_code}: {r.text}")
        return True
