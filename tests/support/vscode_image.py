"""The VS Code test image (images/vscode-test/Dockerfile): the shared test image plus
code-server behind jupyter-server-proxy, installed by images/vscode/install-code-server.sh
as in the framework images.

Built by the test cluster's builder engine (this machine's namespace, which reaches PyPI
and npm's registry; ``--network host`` and the host's CA bundle, as scripts/cluster.sh
builds the shared test image) under a tag of its own, so the shared image keeps its hash.
It is rebuilt only when what it is made of changed (the Dockerfile, the install script,
the shared test image it starts from: the ``jupyterhub-gpu.build`` label), then loaded
onto the nodes that need it (``docker save | docker load``).
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

VSCODE_IMAGE = "jupyterhub-gpu/vscode-test:4.139.1"
DOCKERFILE = REPO / "images" / "vscode-test" / "Dockerfile"
SCRIPTS = REPO / "images" / "vscode"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILDER = STATE / "engines" / "builder" / "docker.sock"
BUILD_LOG = STATE / "build-vscode-test.log"
BUILD_TIMEOUT_S = 1200  # 2 to 4 minutes measured on 2 shared cores (native modules compile)


def _docker(socket: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", f"unix://{socket}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _image_id(socket: Path, image: str) -> str:
    r = _docker(socket, "image", "inspect", "-f", "{{.Id}}", image)
    return r.stdout.strip() if r.returncode == 0 else ""


def build_hash() -> str:
    """What the image is made of: its Dockerfile, images/vscode and the base image's id."""
    digest = hashlib.sha256(DOCKERFILE.read_bytes())
    for path in sorted(p for p in SCRIPTS.rglob("*") if p.is_file()):
        digest.update(path.relative_to(SCRIPTS).as_posix().encode() + b"\0" + path.read_bytes())
    base = _image_id(BUILDER, TEST_IMAGE)
    if not base:
        pytest.fail(f"the builder has no {TEST_IMAGE}: run scripts/cluster.sh up", pytrace=False)
    digest.update(base.encode())
    return digest.hexdigest()[:16]


def _built_as(want: str) -> bool:
    r = _docker(
        BUILDER,
        "image",
        "inspect",
        "-f",
        '{{index .Config.Labels "jupyterhub-gpu.build"}}',
        VSCODE_IMAGE,
    )
    return r.returncode == 0 and r.stdout.strip() == want


def build(timeout_s: float = BUILD_TIMEOUT_S) -> float:
    """Build the image on the builder unless it is up to date; the seconds the build took
    (0.0 when it was up to date). The build's output goes to :data:`BUILD_LOG`."""
    want = build_hash()
    if _built_as(want):
        return 0.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jhgpu-vscode-") as tmp:
        ctx = Path(tmp)
        shutil.copy2(DOCKERFILE, ctx / "Dockerfile")
        shutil.copytree(SCRIPTS, ctx / "vscode")
        shutil.copy2(CA_BUNDLE, ctx / "pip-ca.crt")
        with BUILD_LOG.open("w") as log:
            r = subprocess.run(
                [
                    "docker",
                    "-H",
                    f"unix://{BUILDER}",
                    "build",
                    "--network",
                    "host",
                    "--build-arg",
                    f"BASE_IMAGE={TEST_IMAGE}",
                    "--label",
                    f"jupyterhub-gpu.build={want}",
                    "-t",
                    VSCODE_IMAGE,
                    str(ctx),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
    if r.returncode != 0:
        tail = "\n".join(BUILD_LOG.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"building {VSCODE_IMAGE} failed (exit {r.returncode}):\n{tail}", pytrace=False)
    return time.monotonic() - started


def load_onto(node: Engine) -> None:
    """Give ``node`` the builder's image (``docker save | docker load``) unless it has it."""
    want = _image_id(BUILDER, VSCODE_IMAGE)
    if _image_id(node.socket, VSCODE_IMAGE) == want:
        return
    save = subprocess.Popen(
        ["docker", "-H", f"unix://{BUILDER}", "save", VSCODE_IMAGE], stdout=subprocess.PIPE
    )
    assert save.stdout is not None
    try:
        load = subprocess.run(
            ["docker", "-H", f"unix://{node.socket}", "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        save.stdout.close()
        save.wait(timeout=600)
    if load.returncode != 0 or save.returncode != 0:
        pytest.fail(f"loading {VSCODE_IMAGE} onto {node.name} failed: {load.stderr}", pytrace=False)


def ensure(nodes: Sequence[Engine]) -> float:
    """The image built (if it must be) and on ``nodes``; one session at a time builds it.
    Returns the build's seconds (0.0 when none was needed)."""
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "vscode-image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            seconds = build()
            for node in nodes:
                load_onto(node)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return seconds
