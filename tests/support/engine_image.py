"""A small test image built by one of the test cluster's Docker engines on the shared test
image, under a tag of its own (the shared image keeps its hash), and rebuilt only when
what it is made of changed: its Dockerfile, a folder of files, the base image's id (the
``jupyterhub-gpu.build`` label on the image). One session at a time builds it (a lock
under the cluster's state folder). tests/support/lab_image.py and vscode_image.py are two.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cluster import TEST_IMAGE

BUILD_LABEL = "jupyterhub-gpu.build"


def docker(socket: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", f"unix://{socket}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def inspect(socket: Path, image: str, template: str) -> str:
    """``docker image inspect -f template`` of ``image`` on the engine; '' if it has none."""
    r = docker(socket, "image", "inspect", "-f", template, image)
    return r.stdout.strip() if r.returncode == 0 else ""


def image_id(socket: Path, image: str) -> str:
    return inspect(socket, image, "{{.Id}}")


@dataclass(frozen=True)
class EngineImage:
    """How one test image is built: ``folder`` is hashed and copied into the build's
    context at ``into`` ('' for its root), ``extra`` files copied too (not hashed: the
    host's CA bundle); the build runs on ``network``, its output in ``log``."""

    tag: str
    dockerfile: Path
    folder: Path
    into: str
    network: str
    timeout_s: float
    log: Path
    lock: Path
    extra: tuple[tuple[Path, str], ...] = ()
    base: str = TEST_IMAGE

    def build_hash(self, socket: Path, where: str) -> str:
        """What the image is made of on the engine at ``socket``: the Dockerfile, the
        folder's files, the base image's id there."""
        digest = hashlib.sha256(self.dockerfile.read_bytes())
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            name = path.relative_to(self.folder).as_posix().encode()
            digest.update(name + b"\0" + path.read_bytes())
        base = image_id(socket, self.base)
        if not base:
            pytest.fail(f"{where} has no {self.base}: run scripts/cluster.sh up", pytrace=False)
        digest.update(base.encode())
        return digest.hexdigest()[:16]

    def build(self, socket: Path, where: str) -> float:
        """Build the image on the engine at ``socket`` (``where``, for messages) unless it
        is up to date there; the seconds the build took (0.0 when none was needed)."""
        want = self.build_hash(socket, where)
        if inspect(socket, self.tag, f'{{{{index .Config.Labels "{BUILD_LABEL}"}}}}') == want:
            return 0.0
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="jhgpu-image-") as tmp:
            ctx = Path(tmp)
            shutil.copy2(self.dockerfile, ctx / "Dockerfile")
            shutil.copytree(self.folder, ctx / self.into, dirs_exist_ok=True)
            for path, name in self.extra:
                shutil.copy2(path, ctx / name)
            argv = ["docker", "-H", f"unix://{socket}", "build", "--network", self.network,
                    "--build-arg", f"BASE_IMAGE={self.base}", "--label", f"{BUILD_LABEL}={want}",
                    "-t", self.tag, str(ctx)]  # fmt: skip
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("w") as log:
                r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                                   timeout=self.timeout_s, check=False)  # fmt: skip
        if r.returncode != 0:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(
                f"building {self.tag} on {where} failed (exit {r.returncode}):\n{tail}",
                pytrace=False,
            )
        return time.monotonic() - started

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One test session at a time builds (and loads) this image."""
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        with self.lock.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
