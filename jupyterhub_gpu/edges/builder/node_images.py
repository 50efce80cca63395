"""Saved images on a node's engine: what it holds, what its containers use, and removing
those no record names any more (an edge: blocking docker-py ``APIClient`` calls, run by
the hub in the node's thread pool). The decision is :func:`~jupyterhub_gpu.core.saving.
identity.stale_images`.

An image is removed by its names under the saved images' registry, one at a time and
without force: the engine deletes the image with its last name, and refuses to (409)
when a container, running or stopped, uses it, even one created after the listing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from docker.errors import APIError

from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.saving.identity import (
    NodeImage,
    SavedRegistry,
    saved_references,
    stale_images,
)

log = logging.getLogger(__name__)


def node_images(client: Any) -> list[NodeImage]:
    """The node's images (not the intermediate layers)."""
    return [NodeImage.from_engine(i) for i in client.images()]


def images_in_use(client: Any) -> set[str]:
    """The IDs of the images the node's containers (running or stopped) were made from."""
    return {str(c.get("ImageID") or "") for c in client.containers(all=True)} - {""}


def remove_saved(client: Any, image: NodeImage, registry: SavedRegistry) -> bool:
    """Remove ``image``'s saved names from the node; whether the image is gone."""
    for reference in saved_references(image, registry):
        try:
            client.remove_image(reference)
        except APIError as e:
            if e.status_code == 404:
                continue  # gone with the names of its repository
            if e.status_code == 409:  # a container uses it: removed when that is gone
                return False
            raise
    return True


def sweep_node(
    client: Any,
    records: Sequence[SavedImage],
    registry: SavedRegistry,
    now: float,
    grace_s: float,
) -> list[str]:
    """Remove the node's saved images that no record names and no container uses (see
    :func:`~jupyterhub_gpu.core.saving.identity.stale_images`); the IDs removed."""
    doomed = stale_images(
        node_images(client), records, images_in_use(client), registry, now, grace_s
    )
    removed = []
    for image in doomed:
        try:
            if remove_saved(client, image, registry):
                removed.append(image.id)
        except APIError as e:
            log.warning("Could not remove saved image %s: %s", image.id[:19], e)
    return removed
