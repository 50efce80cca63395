"""The VS Code test image (images/vscode-test/Dockerfile): the shared test image plus
code-server behind jupyter-server-proxy, installed by images/vscode/install-code-server.sh
as in the framework images.

Built by the test cluster's builder engine (this machine's namespace, which reaches PyPI
and npm's registry; ``--network host`` and the host's CA bundle, as scripts/cluster.sh
builds the shared test image) under a tag of its own, so the shared image keeps its hash.
It is rebuilt only when what it is made of changed (the Dockerfile, the install script,
the shared test image it starts from: tests/support/engine_image.py), then loaded onto
the nodes that need it (``docker save | docker load``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.cluster import REPO, STATE, Engine
from tests.support.engine_image import EngineImage, image_id

VSCODE_IMAGE = "jupyterhub-gpu/vscode-test:4.139.1"
DOCKERFILE = REPO / "images" / "vscode-test" / "Dockerfile"
SCRIPTS = REPO / "images" / "vscode"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILDER = STATE / "engines" / "builder" / "docker.sock"
BUILD_LOG = STATE / "build-vscode-test.log"
BUILD_TIMEOUT_S = 1200  # 2 to 4 minutes measured on 2 shared cores (native modules compile)
IMAGE = EngineImage(
    tag=VSCODE_IMAGE,
    dockerfile=DOCKERFILE,
    folder=SCRIPTS,
    into="vscode",
    network="host",
    timeout_s=BUILD_TIMEOUT_S,
    log=BUILD_LOG,
    lock=STATE / "vscode-image.lock",
    extra=((CA_BUNDLE, "pip-ca.crt"),),
)


def build() -> float:
    """Build the image on the builder unless it is up to date; the seconds the build took
    (0.0 when it was up to date). The build's output goes to :data:`BUILD_LOG`."""
    return IMAGE.build(BUILDER, "the builder")


def load_onto(node: Engine) -> None:
    """Give ``node`` the builder's image (``docker save | docker load``) unless it has it."""
    want = image_id(BUILDER, VSCODE_IMAGE)
    if image_id(node.socket, VSCODE_IMAGE) == want:
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
    with IMAGE.locked():
        seconds = build()
        for node in nodes:
            load_onto(node)
    return seconds
