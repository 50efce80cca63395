"""Where an image is ready, in words for the spawn form (pure).

"ready on 2 of 3 nodes" says how many of the nodes that can run an image hold it (a
start there takes seconds); where none does, the user learns what a first start costs
("on no node yet: a first start pulls it first, about 6.2 GB on disk"). The size is the
engines' own (``Size`` of their image listing: unpacked, on disk), learnt from any node
that holds or held the image; the download itself is the compressed layers, smaller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.placement import locality
from jupyterhub_gpu.core.progress import size_words


def image_size(image: str, sizes: Mapping[str, int]) -> int | None:
    """The size of the image ``image`` names, if some engine listed it (else ``None``)."""
    found = [sizes[i] for i in locality.wanted(image) if i in sizes]
    return max(found) if found else None


def readiness(image: str, nodes: Sequence[NodeState], sizes: Mapping[str, int]) -> str:
    """Where ``image`` is ready among ``nodes`` (those that can run it), or what a first
    start costs; empty without a node or an image reference to judge."""
    want = locality.wanted(image)
    if not nodes or not want:
        return ""
    ready = sum(1 for n in nodes if locality.holds(n.images, want))
    size = image_size(image, sizes)
    cost = f", about {size_words(size)} on disk" if size else ""
    if ready == len(nodes):
        return f"ready on {ready} of {ready} nodes" if ready > 1 else f"ready on {nodes[0].name}"
    if ready:
        return f"ready on {ready} of {len(nodes)} nodes (elsewhere a first start pulls it{cost})"
    return f"on no node yet: a first start pulls it first{cost}"
