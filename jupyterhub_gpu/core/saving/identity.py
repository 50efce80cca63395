"""Which images are saved images, whatever they are called, and which of them a node
should no longer hold. Pure (docs/my-images.md).

An engine accepts many spellings of one image: its ID or a short prefix of it, the
registry by host name or by IP address, ``host:443`` for ``host``, ``docker.io/`` for
nothing, a tag or a digest. A string check of the reference a user typed can't know them
all, so the spawner asks the node what the reference *is* (the engine's inspect: tags,
repo digests, labels: a :class:`NodeImage`) and decides here:

- :func:`start_refusal`: a saved image (by its labels, or by a tag or repo digest under
  the saved images' registry and namespace, the registry's host normalized: lower case,
  port 443 dropped, any of its addresses) starts only when the user chose it by its
  ``saved:OWNER/NAME`` slug (which the catalog offers only to those who may see it), and
  then only if it is that image;
- :func:`stale_images`: the saved images a node holds that no record names any more (a
  deleted image, a build a hub left behind), and no container uses, to remove from it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.saving.recipe import LABEL

DEFAULT_PORT = "443"  #: what a registry without a port listens on
_DOCKER_HUB = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})


@dataclass(frozen=True)
class NodeImage:
    """An image as a node's engine describes it (``inspect_image`` or ``images()``)."""

    id: str
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    created: float = 0.0  #: seconds since the epoch

    @classmethod
    def from_engine(cls, info: Mapping[str, Any]) -> NodeImage:
        """From an inspect (``Config.Labels``, ``Created`` as text) or a listing
        (``Labels``, ``Created`` in seconds) answer."""
        labels = info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}
        created = info.get("Created") or 0
        if isinstance(created, str):
            try:  # the engine writes nanoseconds; Python reads microseconds
                created = datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00").timestamp()
            except ValueError:
                created = 0
        return cls(
            id=str(info.get("Id") or ""),
            repo_tags=tuple(t for t in info.get("RepoTags") or () if t and "<none>" not in t),
            repo_digests=tuple(d for d in info.get("RepoDigests") or () if d and "<none>" not in d),
            labels={str(k): str(v) for k, v in dict(labels).items()},
            created=float(created),
        )

    @property
    def references(self) -> tuple[str, ...]:
        return (*self.repo_tags, *self.repo_digests)


@dataclass(frozen=True)
class SavedRegistry:
    """Where saved images live: every spelling of the registry's host (normalized by
    :func:`registry_host`) and the namespace (``jupyterhub-gpu/saved``)."""

    hosts: frozenset[str]
    namespace: str


def registry_host(host: str) -> str:
    """``Registry.Example:443`` -> ``registry.example``; Docker Hub's aliases -> ``docker.io``."""
    host = host.strip().lower()
    if host.endswith(":" + DEFAULT_PORT):
        host = host[: -len(DEFAULT_PORT) - 1]
    return "docker.io" if host in _DOCKER_HUB else host


def saved_registry(registry: str, namespace: str, addresses: Iterable[str] = ()) -> SavedRegistry:
    """The registry ``host[:port]`` as configured, and the same port on each of
    ``addresses`` (what its host name resolves to)."""
    port = registry.partition(":")[2]
    hosts = {registry_host(registry)}
    for address in addresses:
        shown = f"[{address}]" if ":" in address else address  # IPv6 in a reference
        hosts.add(registry_host(f"{shown}:{port}" if port else shown))
    return SavedRegistry(frozenset(h for h in hosts if h), namespace.strip("/").lower())


def repository(reference: str) -> tuple[str, str] | None:
    """``reference``'s (registry host, path) as the engine reads it (tag and digest
    dropped, Docker Hub's ``library/`` added), or ``None`` when it names no repository
    (an image ID)."""
    ref = reference.strip()
    name = ref.split("@", 1)[0]
    slash = name.rfind("/")
    if ":" in name[slash + 1 :]:
        name = name[: name.rfind(":")]
    if not name or name.startswith("sha256:"):
        return None
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        host, path = registry_host(first), rest
    else:
        host, path = "docker.io", name
    if host == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return host, path.lower()


def in_registry(reference: str, registry: SavedRegistry) -> bool:
    """Whether ``reference`` names a repository under the saved images' namespace."""
    found = repository(reference)
    if found is None:
        return False
    host, path = found
    return host in registry.hosts and path.startswith(registry.namespace + "/")


def labelled_as(image: NodeImage) -> tuple[str, str] | None:
    """The (owner, name) a saved image's labels give (:func:`~.recipe.image_labels`)."""
    owner, name = image.labels.get(LABEL + "owner"), image.labels.get(LABEL + "name")
    if owner is None and name is None and LABEL + "format" not in image.labels:
        return None
    return owner or "", name or ""


def is_saved(image: NodeImage, registry: SavedRegistry) -> bool:
    """Whether ``image`` is a saved image: by its labels, or by a name under the registry."""
    return labelled_as(image) is not None or any(in_registry(r, registry) for r in image.references)


def start_refusal(
    requested: str,
    image: NodeImage,
    registry: SavedRegistry,
    chosen: tuple[str, str] | None = None,
) -> str | None:
    """Why the spawn may not start ``image`` (what the node's engine found for
    ``requested``), or ``None`` when it may. ``chosen``: the (owner, name) of the
    ``saved:OWNER/NAME`` slug the user chose (the catalog offered it to them: they may
    see it), or ``None`` for any other choice."""
    if chosen is None:
        if not is_saved(image, registry):
            return None
        return (
            f"The image {requested!r} is a saved image; start it by its name under My "
            "images (image 'saved:OWNER/NAME'), if its owner shares it with you."
        )
    owner, name = chosen
    if labelled_as(image) == (owner, name):
        return None
    return (
        f"The image found for your saved image {name!r} is not that image (its labels "
        "differ); nothing was started. Tell your admin."
    )


def stale_images(
    images: Sequence[NodeImage],
    records: Sequence[SavedImage],
    in_use: Collection[str],
    registry: SavedRegistry,
    now: float,
    grace_s: float,
) -> list[NodeImage]:
    """The saved images of one node to remove: named under the saved images' registry
    (an image known only by labels is left alone: it is no saved image of this hub), used
    by no container (``in_use``: the image IDs of the node's containers, running or not),
    and named by no record (by digest, or, for a record without one, by its tag). An image
    that was built but never pushed or pulled (no repo digest) is a save in progress until
    it is ``grace_s`` old (``created``), then a leftover. ``records`` must be every record
    of the hub's database: a subset would remove images that are still saved."""
    digests = {r.digest for r in records if r.digest}
    tag_refs = {r.reference.strip().lower() for r in records if not r.digest}
    doomed = []
    for image in images:
        mine = [r for r in image.references if in_registry(r, registry)]
        if not mine or image.id in in_use:
            continue
        pinned = [r.rsplit("@", 1)[1] for r in mine if "@" in r]
        if digests.intersection(pinned):
            continue
        if any(r.lower() in tag_refs for r in mine):
            continue
        if not pinned and now - image.created < grace_s:
            continue  # built just now: its save is still pushing
        doomed.append(image)
    return doomed


def saved_references(image: NodeImage, registry: SavedRegistry) -> list[str]:
    """The names to remove from a node for ``image`` (tags first, then digests): removing
    the last one removes the image, unless a container uses it (the engine refuses)."""
    return [r for r in image.references if in_registry(r, registry)]
