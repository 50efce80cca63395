"""Image locality: which nodes already hold the image a server wants. Pure.

An engine knows one image by several names: its ID (``sha256:<64 hex>``), each tag
(``repo:tag``) and each repo digest (``repo@sha256:...``), and it accepts several spellings
of each (``python`` for ``docker.io/library/python:latest``, a registry's host in any
case, ``host:443`` for ``host``). Both sides are brought to one spelling here, an
*identity*:

- ``host/path:tag`` for a tag (``latest`` when a reference names neither tag nor digest),
- ``host/path@sha256:...`` for a repo digest (a reference with a tag *and* a digest is
  its digest: the engine resolves it by digest, the tag is only a note),
- ``sha256:<hex>`` for an image ID,

with the host and path normalised as the saved images' rules do it
(:func:`jupyterhub_gpu.core.saving.identity.repository`: Docker Hub's aliases are
``docker.io``, ``library/`` added, lower case, port 443 dropped).

:func:`wanted` gives the identities of the reference a spawn will run (a catalog entry's
``image``; for a saved image its ``repo@digest``), :func:`held` those of an engine's image
listing (docker-py ``images()``: ``Id``, ``RepoTags``, ``RepoDigests``). A node *holds*
the image when the two share an identity: the spawner's ``inspect_image`` then finds it
and nothing is pulled. :func:`cpu_node` is the placement of a server without GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from jupyterhub_gpu.core.placement.request import NoFit, Placement, PlacementRequest
from jupyterhub_gpu.core.saving.identity import repository
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

_HEX64 = re.compile(r"[0-9a-f]{64}")
_NONE = "<none>"

#: the sentence of a server without GPUs that no node can take
NO_NODE = (
    "No node can take a new server right now (all drained or unreachable). "
    "Try again in a few minutes or ask an admin."
)


def identity(reference: str) -> str | None:
    """The one spelling of ``reference`` (see the module's docstring); ``None`` for an
    empty or unreadable one (``<none>:<none>``, a short ID prefix is read as a name)."""
    ref = reference.strip()
    if not ref or _NONE in ref:
        return None
    low = ref.lower()
    if low.startswith("sha256:") and _HEX64.fullmatch(low[7:]):
        return low
    if _HEX64.fullmatch(low):
        return f"sha256:{low}"
    name, at, digest = ref.partition("@")
    found = repository(name)
    if found is None:
        return None
    host, path = found
    if at:
        digest = digest.strip().lower()
        return f"{host}/{path}@{digest}" if digest else None
    last = name.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else "latest"
    return f"{host}/{path}:{tag}" if tag else None


def wanted(reference: str) -> frozenset[str]:
    """The identities of the image a spawn of ``reference`` runs (empty: unknown)."""
    found = identity(reference)
    return frozenset() if found is None else frozenset({found})


def held(listing: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every identity of the images of one engine's listing (docker-py ``images()``, the
    Engine API's ``GET /images/json``: ``Id``, ``RepoTags``, ``RepoDigests``, the last two
    ``null`` or ``<none>`` for untagged images). Entries that are not mappings are skipped."""
    found: set[str] = set()
    for image in listing:
        if not isinstance(image, Mapping):
            continue
        names = [image.get("Id")]
        names += list(image.get("RepoTags") or ())
        names += list(image.get("RepoDigests") or ())
        for name in names:
            if isinstance(name, str):
                one = identity(name)
                if one is not None:
                    found.add(one)
    return frozenset(found)


def sizes(listing: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """identity -> the image's size in bytes (``Size``: on disk, unpacked), for every
    identity of every image of one engine's listing (as :func:`held` reads it)."""
    found: dict[str, int] = {}
    for image in listing:
        if not isinstance(image, Mapping):
            continue
        size = image.get("Size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            continue
        for one in held([image]):
            found[one] = max(found.get(one, 0), size)
    return found


def holds(images: frozenset[str], want: frozenset[str]) -> bool:
    """Whether a node holding ``images`` has the image named by ``want``."""
    return bool(want) and not want.isdisjoint(images)


def cpu_node(
    snapshot: ClusterSnapshot, request: PlacementRequest, servers_on: Mapping[str, int]
) -> Placement | NoFit:
    """The node for a server without GPUs (``request.gpu_count == 0``).

    Among the nodes that take new servers (schedulable and reachable): one that holds the
    image first (no pull: the start takes seconds, not minutes), then the one with the
    fewest servers (``servers_on``, GPU or not), then by name. Locality goes first because
    a CPU server reserves nothing placement must keep: the only trade is that servers of
    one image gather on the nodes that hold it, until a pull (or the pre-puller) puts it
    on others. Without a holder (or an image) this is the fewest-servers rule alone.
    """
    ready = [n for n in snapshot.nodes if n.schedulable and n.reachable]
    if not ready:
        return NoFit(NO_NODE)
    want = request.image
    best = min(
        ready,
        key=lambda n: (not holds(n.images, want), servers_on.get(n.name, 0), n.name),
    )
    return Placement(best.name, ())
