"""The JupyterLab-extension test image (images/lab-test/Dockerfile): the shared test image
plus jupyterhub-gpu's prebuilt JupyterLab extension (images/lab), copied where
JupyterLab finds prebuilt extensions.

The extension is a few kilobytes of files and needs no network, so the image is built
by the engine of each node that runs it, on the shared test image it already has (one
layer; a second or two), under a tag of its own (the shared image keeps its hash). It
is rebuilt only when what it is made of changed (the Dockerfile, images/lab, the base
image's id: the ``jupyterhub-gpu.build`` label).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.cluster import REPO, STATE, TEST_IMAGE, Engine

LAB_IMAGE = "jupyterhub-gpu/lab-test:1"
DOCKERFILE = REPO / "images" / "lab-test" / "Dockerfile"
EXTENSION = REPO / "images" / "lab"


def _docker(socket: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", f"unix://{socket}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _inspect(socket: Path, image: str, template: str) -> str:
    r = _docker(socket, "image", "inspect", "-f", template, image)
    return r.stdout.strip() if r.returncode == 0 else ""


def build_hash(node: Engine) -> str:
    """What the image is made of on ``node``: its Dockerfile, images/lab, the base's id."""
    digest = hashlib.sha256(DOCKERFILE.read_bytes())
    for path in sorted(p for p in EXTENSION.rglob("*") if p.is_file()):
        digest.update(path.relative_to(EXTENSION).as_posix().encode() + b"\0" + path.read_bytes())
    base = _inspect(node.socket, TEST_IMAGE, "{{.Id}}")
    if not base:
        pytest.fail(f"{node.name} has no {TEST_IMAGE}: run scripts/cluster.sh up", pytrace=False)
    digest.update(base.encode())
    return digest.hexdigest()[:16]


def build_on(node: Engine) -> float:
    """Build the image on ``node`` unless it is up to date there; the seconds it took."""
    want = build_hash(node)
    if _inspect(node.socket, LAB_IMAGE, '{{index .Config.Labels "jupyterhub-gpu.build"}}') == want:
        return 0.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jhgpu-lab-") as tmp:
        ctx = Path(tmp)
        shutil.copy2(DOCKERFILE, ctx / "Dockerfile")
        shutil.copytree(EXTENSION, ctx, dirs_exist_ok=True)
        r = _docker(
            node.socket,
            "build",
            "-q",
            "--network",
            "none",
            "--build-arg",
            f"BASE_IMAGE={TEST_IMAGE}",
            "--label",
            f"jupyterhub-gpu.build={want}",
            "-t",
            LAB_IMAGE,
            str(ctx),
            timeout=300,
        )
    if r.returncode != 0:
        pytest.fail(f"building {LAB_IMAGE} on {node.name} failed:\n{r.stderr}", pytrace=False)
    return time.monotonic() - started


def ensure(nodes: Sequence[Engine]) -> float:
    """The image on ``nodes`` (built where it must be; one session at a time). Returns the
    seconds the builds took (0.0 when none was needed)."""
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "lab-image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return sum(build_on(node) for node in nodes)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
