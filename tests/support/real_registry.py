"""The registry the real framework images are pushed to and pulled from (hand-run
benchmarks only: benchmarks/real_images.py and benchmarks/time_to_lab.py).

One storage folder, two real registry processes (Debian's ``docker-registry``,
:class:`~tests.support.distribution.Distribution`) on the same port:

- ``127.0.0.1:PORT`` takes the pushes from the builder engine (this machine's namespace).
  Docker trusts a registry on 127.0.0.0/8 over plain HTTP by default; the builder is
  started without ``--insecure-registry`` for the site address, so it can't push there.
- ``10.250.0.1:PORT`` (the site address) serves the nodes' pulls: their engines reach it
  from their namespaces and trust it as an insecure registry (scripts/cluster.sh).

A registry stores a repository without its host, so ``127.0.0.1:PORT/jupyterhub-gpu/x:1``
pushed through one is ``10.250.0.1:PORT/jupyterhub-gpu/x:1`` through the other. The storage
is kept between runs (under ``$JHGPU_STATE/real-images``), so a benchmark reuses a push.
TEST ONLY: no authentication.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.cluster import SITE_ADDRESS, STATE
from tests.support.distribution import PIDS, Distribution

#: Where the registry keeps its blobs, kept between runs.
ROOT = STATE / "real-images"
#: The fixed port of both addresses (a fixed reference: nodes keep the image's name).
PORT = 5052
PUSH_HOST = "127.0.0.1"


@dataclass
class SharedStorageDistribution(Distribution):
    """A :class:`Distribution` whose storage is ``shared`` (not its own folder) and whose
    pidfile names its host too (two of them share a port)."""

    shared: Path = ROOT / "storage"

    @property
    def storage(self) -> Path:
        return self.shared

    @property
    def pidfile(self) -> Path:
        return PIDS / f"{self.host}-{self.port}.pid"


def answers(address: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://{address}/v2/", timeout=2).status_code == 200
    return False


@dataclass(frozen=True)
class RealRegistry:
    """The two addresses of the real images' registry."""

    port: int = PORT

    @property
    def push_address(self) -> str:
        return f"{PUSH_HOST}:{self.port}"

    @property
    def pull_address(self) -> str:
        return f"{SITE_ADDRESS}:{self.port}"

    def pull_reference(self, image: str) -> str:
        """``image`` (a catalog reference without registry) as the nodes pull it."""
        return f"{self.pull_address}/{image}"

    def push_reference(self, image: str) -> str:
        return f"{self.push_address}/{image}"

    def manifest_digest(self, image: str) -> str | None:
        """The digest the registry serves for ``image`` (``name:tag``), or None."""
        name, _, tag = image.rpartition(":")
        accept = ", ".join(
            (
                "application/vnd.docker.distribution.manifest.v2+json",
                "application/vnd.oci.image.manifest.v1+json",
            )
        )
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.head(
                f"http://{self.pull_address}/v2/{name}/manifests/{tag}",
                headers={"Accept": accept},
                timeout=5,
            )
            if r.status_code == 200:
                return r.headers.get("Docker-Content-Digest")
        return None


@contextlib.contextmanager
def real_registry(port: int = PORT, keep: bool = False) -> Iterator[RealRegistry]:
    """Both registry processes, started unless they already answer (a previous run kept
    them); stopped on exit unless ``keep`` or they were already running."""
    started: list[SharedStorageDistribution] = []
    reg = RealRegistry(port)
    (ROOT / "storage").mkdir(parents=True, exist_ok=True)
    try:
        for host in (PUSH_HOST, SITE_ADDRESS):
            if answers(f"{host}:{port}"):
                continue
            d = SharedStorageDistribution(ROOT / f"registry-{host}", host=host, port=port)
            d.start()
            started.append(d)
        yield reg
    finally:
        if not keep:
            for d in started:
                d.stop()
