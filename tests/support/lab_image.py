"""The JupyterLab-extension test image (images/lab-test/Dockerfile): the shared test image
plus jupyterhub-gpu's prebuilt JupyterLab extension (images/lab), copied where
JupyterLab finds prebuilt extensions.

The extension is a few kilobytes of files and needs no network, so the image is built
by the engine of each node that runs it, on the shared test image it already has (one
layer; a second or two), under a tag of its own (the shared image keeps its hash). It
is rebuilt only when what it is made of changed (the Dockerfile, images/lab, the base
image's id: tests/support/engine_image.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.cluster import REPO, STATE, Engine
from tests.support.engine_image import EngineImage

LAB_IMAGE = "jupyterhub-gpu/lab-test:1"
DOCKERFILE = REPO / "images" / "lab-test" / "Dockerfile"
EXTENSION = REPO / "images" / "lab"
IMAGE = EngineImage(
    tag=LAB_IMAGE,
    dockerfile=DOCKERFILE,
    folder=EXTENSION,
    into="",
    network="none",
    timeout_s=300,
    log=STATE / "build-lab-test.log",
    lock=STATE / "lab-image.lock",
)


def ensure(nodes: Sequence[Engine]) -> float:
    """The image on ``nodes`` (built where it must be; one session at a time). Returns the
    seconds the builds took (0.0 when none was needed)."""
    with IMAGE.locked():
        return sum(IMAGE.build(node.socket, node.name) for node in nodes)
