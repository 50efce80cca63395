"""Deleting a saved image from the registry (an edge: the registry's HTTP API v2).

``DELETE /v2/<repository>/manifests/<digest>`` removes the image's manifest (every tag of
it; a saved image's tag is its own). The registry must allow deletes
(``storage.delete.enabled: true``); its layers are freed by the registry's own garbage
collection (``registry garbage-collect``), which admins run (docs/my-images.md).
"""

from __future__ import annotations

import httpx

from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.edges.builder.build import split_reference
from jupyterhub_gpu.errors import RegistryError

MANIFESTS = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def repository_and_tag(reference: str) -> tuple[str, str]:
    """``host:5000/ns/u-alice/env:tag`` -> (``ns/u-alice/env``, ``tag``): the path the
    registry's API names (the builder's parser, without the registry host)."""
    name, tag = split_reference(reference)
    return name.split("/", 1)[1], tag


def delete_image(
    registry_url: str,
    image: SavedImage,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
) -> None:
    """Remove ``image`` from the registry (with ``auth``, basic authentication); an image
    already gone is not an error."""
    repo, tag = repository_and_tag(image.reference)
    base = f"{registry_url.rstrip('/')}/v2/{repo}/manifests"
    try:
        with httpx.Client(timeout=timeout, trust_env=False, auth=auth) as http:
            digest = image.digest
            if not digest:
                head = http.head(f"{base}/{tag}", headers={"Accept": MANIFESTS})
                if head.status_code == 404:
                    return
                head.raise_for_status()
                digest = head.headers.get("Docker-Content-Digest", "")
            answer = http.delete(f"{base}/{digest}")
    except httpx.HTTPError as e:
        raise RegistryError(
            f"The registry did not answer ({type(e).__name__}); nothing was deleted. "
            "Try again later, or tell your admin."
        ) from None
    if answer.status_code in (200, 202, 404):
        return
    if answer.status_code in (401, 403):
        raise RegistryError(
            "The registry refused the hub's credentials; nothing was deleted. Tell your "
            "admin (SavedImages.registry_username / registry_password)."
        )
    if answer.status_code == 405:
        raise RegistryError(
            "The registry does not allow deleting images; nothing was deleted. Tell your "
            "admin (the registry needs storage.delete.enabled)."
        )
    raise RegistryError(
        f"The registry refused to delete the image (HTTP {answer.status_code}); nothing "
        "was deleted. Try again later, or tell your admin."
    )
