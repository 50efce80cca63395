"""Which images a user may start, and what a node's image must not be: the catalog with
the saved images they may start ("My images"), a saved image's registry reference
refused, an image carrying a label the hub writes on containers refused (issue 30), and
a saved image started other than by its name refused.

The decisions are pure (``core/saving``, ``core/containers``); these read the saved
images' service (:class:`~.saves.MyImages`) and say it in a user's sentence.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.containers import reserved_label_refusal
from jupyterhub_gpu.core.identity import Identity
from jupyterhub_gpu.core.saving.entries import Unlisted, is_saved_slug, saved_entries, with_saved
from jupyterhub_gpu.core.saving.identity import NodeImage, in_registry, start_refusal
from jupyterhub_gpu.errors import InvalidRequest, NodeError, UserFacingError
from jupyterhub_gpu.hub.saves import MyImages


async def user_catalog(
    catalog: Catalog, saves: MyImages | None, ident: Identity, wanted: Any = None
) -> tuple[Catalog, tuple[Unlisted, ...]]:
    """The catalog with the saved images ``ident`` may start, and those they see but can't
    start. Without the database the catalog alone, unless ``wanted`` (the
    spawn's image option) is a saved image: then the user is told why it can't start."""
    if saves is None or saves.cluster.recorder is None:
        return catalog, ()
    try:
        images = await saves.images()
    except UserFacingError:
        if is_saved_slug(wanted):
            raise
        return catalog, ()
    entries, unlisted = saved_entries(catalog, images, ident.username, ident.groups)
    return with_saved(catalog, entries), unlisted


async def refuse_saved_reference(saves: MyImages, reference: str) -> None:
    """A saved image is started by its name (``saved:owner/name``), which checks who may:
    never by its registry reference through an admin's image patterns. This refuses a
    reference under the registry before placing (any spelling of its host the hub knows);
    :func:`saved_refusal` then asks the node what the image is."""
    if saves.settings.enabled and in_registry(reference, await saves.registry()):
        raise InvalidRequest(
            f"The image {reference!r} is a saved image; start it by its name under My "
            "images (image 'saved:OWNER/NAME'), if its owner shares it with you."
        )


def check_labels(image: str, info: dict[str, Any], log: logging.Logger, holder: str) -> None:
    """Refuse an image that carries a label the hub writes on containers (issue 30:
    :func:`~jupyterhub_gpu.core.containers.reserved_label_refusal`)."""
    refusal = reserved_label_refusal(image, (info.get("Config") or {}).get("Labels"))
    if refusal is not None:
        log.warning("%s: image %s refused: %s", holder, image[:200], refusal)
        raise InvalidRequest(refusal)


async def check_image(
    saves: MyImages,
    image: str,
    info: dict[str, Any],
    choice: tuple[str, str] | None,
    log: logging.Logger,
    holder: str,
    untag: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """What ``image`` is on the node (``info``) must carry none of the hub's labels, and a
    saved image must have been chosen by its name (``choice``); ``untag``: remove an image
    this spawn pulled for nothing (a node that fails to is left as it is)."""
    check_labels(image, info, log, holder)
    found = await saved_refusal(saves, image, info, choice)
    if found is None:
        return
    refusal, image_id = found
    log.warning("%s asked for saved image %s as %r: refused", holder, image_id[:19], image)
    if untag is not None:
        with contextlib.suppress(NodeError):
            await untag()
    raise InvalidRequest(refusal)


async def saved_refusal(
    saves: MyImages, image: str, info: dict[str, Any], choice: tuple[str, str] | None
) -> tuple[str, str] | None:
    """Why ``image`` (what it is on the node: ``info``, the engine's inspect) may not start
    unless the user chose it by its slug (``choice``: (owner, name)), with the image's id;
    None when it may (core.saving.identity)."""
    if not saves.settings.enabled:
        return None
    found = NodeImage.from_engine(info)
    refusal = start_refusal(image, found, await saves.registry(), choice)
    return None if refusal is None else (refusal, found.id)


__all__ = [
    "check_image",
    "check_labels",
    "refuse_saved_reference",
    "saved_refusal",
    "user_catalog",
]
