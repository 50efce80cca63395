"""The pre-puller's decisions: which catalog images each node should hold, and which of
ours it should let go of. Pure functions over plain data (docs/prepull.md).

Zero to JupyterHub pre-pulls every image onto every node; kubelet's image GC removes
images unused by any container, least recently used first, once the disk passes a high
threshold, down to a low one. Here the same two halves are planned per node, within the
admin's disk budget (bytes of *our* images on that node):

- **pulls**: the chosen catalog entries (:func:`choose_entries`) that the node's driver
  and GPUs can run (:func:`~.catalog.compat.image_runs_on`; CPU-only entries anywhere),
  that it does not hold yet, in priority order, as long as they fit the budget. An
  image's size is learnt from any node that holds it; an image of unknown size is pulled
  only while the node is under budget (its size is known at the next round).
- **removals**: while the node is over budget, or to make room for a chosen pull, our
  images that no container uses: first those not chosen, least recently used first. To
  get back under budget, chosen ones go last, least recently used first, and only when
  that brings the node within its budget (images that containers use may keep it over);
  a chosen image is never removed to make room for another one (that would pull and
  remove the same images round after round).

Ours means a catalog image, by reference (its tags or digests against the catalog's
references). :data:`CATALOG_LABEL` (set by ``images/build.py``) proves nothing: anyone
can set it on an image they build, so a labelled image whose reference the catalog does
not list is not ours: it is a custom image.

- **custom images** (:func:`custom`): not ours, not foreign, and either labelled
  :data:`CATALOG_LABEL` (an image taken out of the catalog, or one claiming a catalog
  slug) or named by a reference the catalog's ``allowed_image_patterns`` let users
  spawn from. They have a budget of their own (``custom_budget_bytes``) and never count
  against the catalog's; while they are over it, those no container uses are removed,
  least recently used first, until they are within it (:func:`sweep_custom`).

"Least recently used" (:func:`_lru`): :attr:`HeldImage.last_used` (the runner sets it to
the newest creation time of a container made from the image, or the last time it saw
one, as the engine lists its containers), else the image's ``Created`` (the engine keeps
no last-use time, and its list has no ``LastTagTime``).

Never removed: an image a container (running or stopped) uses; an image a server is
starting from (:attr:`NodeFacts.pinned`: its spawn has placed it on the node but its
container does not exist yet, the image maybe still being pulled); a saved image ("My
images": its own sweep removes those); an image neither ours nor custom (the engine's
other images: the agent's, an admin's). Images that share layers are counted whole: the
budget is an upper bound on what the engine's ``docker system df`` reports.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jupyterhub_gpu.core.catalog.compat import image_runs_on
from jupyterhub_gpu.core.catalog.entries import Catalog, CatalogEntry
from jupyterhub_gpu.core.inventory import NodeInventory

CATALOG_LABEL = "io.jupyterhub-gpu.catalog-slug"  #: set by images/ Dockerfiles
#: labels that make an image one of another part's (saved images, a build's stage 1)
FOREIGN_LABEL_PREFIXES = ("io.jupyterhub-gpu.saved.", "io.jupyterhub-gpu.build-id")
GIB = 1024**3

_MOST_USED = re.compile(r"^most-used:([0-9]+)$")


@dataclass(frozen=True)
class Selection:
    """Which catalog entries to pre-pull: every one, the named slugs, or the ``top`` most
    spawned lately."""

    kind: str  # "all", "list" or "most-used"
    slugs: tuple[str, ...] = ()
    top: int = 0


def parse_selection(value: object) -> Selection:
    """``"all"``, ``"most-used:N"`` or a list of catalog slugs; ``ValueError`` with a
    sentence otherwise."""
    if isinstance(value, str):
        text = value.strip()
        if text == "all":
            return Selection("all")
        found = _MOST_USED.match(text)
        if found and int(found.group(1)) > 0:
            return Selection("most-used", top=int(found.group(1)))
        raise ValueError(
            f"PrePuller.images is {value!r}; write 'all', 'most-used:N' with N at least 1 "
            "(e.g. 'most-used:3'), or a list of catalog slugs."
        )
    if isinstance(value, list | tuple):
        slugs = [s.strip() if isinstance(s, str) else s for s in value]
        bad = [s for s in slugs if not isinstance(s, str) or not s]
        if bad or not slugs:
            raise ValueError(
                f"PrePuller.images is {value!r}; a list must name at least one catalog slug, "
                "each a non-empty string (e.g. ['pytorch-2.8-cuda12.8', 'cpu'])."
            )
        return Selection("list", slugs=tuple(dict.fromkeys(slugs)))
    raise ValueError(
        f"PrePuller.images is {value!r}; write 'all', 'most-used:N' or a list of catalog slugs."
    )


def in_registry(image: str, registry: str) -> bool:
    """Whether the reference ``image`` names an image of ``registry`` (``HOST[:PORT]``)."""
    return image.lower().startswith(registry.lower().rstrip("/") + "/")


def choose_entries(
    catalog: Catalog | Iterable[CatalogEntry],
    selection: Selection,
    spawns: Mapping[str, int] | None = None,
    registry: str = "",
) -> tuple[tuple[CatalogEntry, ...], tuple[str, ...]]:
    """The entries to pre-pull, highest priority first, and the listed slugs the catalog
    lacks. ``spawns``: slug -> spawns lately (for ``most-used``; ties in catalog order).
    Saved and custom entries are never chosen; with ``registry``, only entries whose image
    is in that registry (the site's: the others are not published yet)."""
    entries = [e for e in catalog if not e.custom and not e.saved_from]
    if registry:
        entries = [e for e in entries if in_registry(e.image, registry)]
    if selection.kind == "all":
        return tuple(entries), ()
    if selection.kind == "list":
        by_slug = {e.slug: e for e in entries}
        chosen = tuple(by_slug[s] for s in selection.slugs if s in by_slug)
        return chosen, tuple(s for s in selection.slugs if s not in by_slug)
    counts = spawns or {}
    order = {e.slug: i for i, e in enumerate(entries)}
    used = [e for e in entries if counts.get(e.slug, 0) > 0]
    used.sort(key=lambda e: (-counts[e.slug], order[e.slug]))
    return tuple(used[: selection.top]), ()


@dataclass(frozen=True)
class HeldImage:
    """An image on a node, as its engine lists it.

    ``in_use``: a container (running or stopped) was made from it. ``saved``: a saved
    image (by its labels or its name under the saved images' registry). ``last_used``:
    seconds since the epoch it was last seen in use (0: never, then ``created``)."""

    id: str
    references: tuple[str, ...] = ()
    size: int = 0
    in_use: bool = False
    saved: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    last_used: float = 0.0
    created: float = 0.0


@dataclass(frozen=True)
class NodeFacts:
    """What the planner knows of one node. ``pinned``: references (any spelling) of the
    images servers are starting from there (placed, no container yet): never removed."""

    inventory: NodeInventory
    images: tuple[HeldImage, ...] = ()
    reachable: bool = True
    schedulable: bool = True
    pinned: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.inventory.name


@dataclass(frozen=True)
class Removal:
    image: HeldImage
    why: str  # "not chosen", "least recently used", CUSTOM_LRU


@dataclass(frozen=True)
class NodePlan:
    """One node's round: images to pull (in order), images to remove, and why some
    chosen ones are left out (slug -> sentence)."""

    node: str
    pulls: tuple[CatalogEntry, ...] = ()
    removals: tuple[Removal, ...] = ()
    held: tuple[str, ...] = ()  # chosen slugs the node holds
    skipped: Mapping[str, str] = field(default_factory=dict)
    used_bytes: int = 0  # our images on the node now
    budget_bytes: int = 0
    custom_used_bytes: int = 0  # custom images on the node now
    custom_budget_bytes: int = 0


def normal_reference(reference: str) -> str:
    """``reference`` as an engine names it: lower-case host and path, Docker Hub's
    ``docker.io/library/`` dropped, ``:latest`` when it has no tag and no digest."""
    ref = reference.strip()
    name, at, digest = ref.partition("@")
    slash = name.rfind("/")
    tag = ""
    if ":" in name[slash + 1 :]:
        name, tag = name.rsplit(":", 1)
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/"):
        if name.lower().startswith(prefix):
            name = name[len(prefix) :]
            break
    name = name.lower()
    if at:
        return f"{name}@{digest}"
    return f"{name}:{tag or 'latest'}"


def holds(image: HeldImage, entry: CatalogEntry) -> bool:
    """Whether ``image`` is ``entry``'s image (by tag, or by digest when pinned)."""
    wanted = normal_reference(entry.image)
    return wanted in {normal_reference(r) for r in image.references}


def foreign(image: HeldImage) -> bool:
    """A saved image or a build's: left to the part of the hub that made it."""
    return image.saved or any(k.startswith(p) for k in image.labels for p in FOREIGN_LABEL_PREFIXES)


def _normal_refs(image: HeldImage) -> set[str]:
    return {normal_reference(r) for r in image.references}


def ours(image: HeldImage, catalog_refs: frozenset[str]) -> bool:
    """A catalog image: one of its references is in the catalog (never a saved image's
    or a build's). :data:`CATALOG_LABEL` alone does not make an image ours."""
    return not foreign(image) and bool(_normal_refs(image) & catalog_refs)


def custom(image: HeldImage, catalog_refs: frozenset[str], patterns: Sequence[str] = ()) -> bool:
    """An image users brought: not ours, not foreign, and labelled :data:`CATALOG_LABEL`
    or named by a reference (as listed, or as an engine names it) that one of the
    catalog's ``allowed_image_patterns`` (fnmatch) matches."""
    if foreign(image) or ours(image, catalog_refs):
        return False
    if image.labels.get(CATALOG_LABEL):
        return True
    names = {*image.references, *_normal_refs(image)}
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


def pinned(image: HeldImage, refs: frozenset[str]) -> bool:
    """Whether a server is starting from ``image`` (``refs``: :attr:`NodeFacts.pinned`)."""
    return bool(refs) and bool(_normal_refs(image) & {normal_reference(r) for r in refs})


CUSTOM_LRU = "custom image, least recently used"


def sweep_custom(
    node: NodeFacts,
    catalog_refs: frozenset[str],
    patterns: Sequence[str],
    budget_bytes: int,
) -> tuple[int, tuple[Removal, ...]]:
    """The node's custom images' bytes, and those to remove to bring them within
    ``budget_bytes``: unused (no container, not :attr:`NodeFacts.pinned`), least
    recently used first (see the module's docstring). ``budget_bytes`` <= 0: none."""
    theirs = [i for i in node.images if custom(i, catalog_refs, patterns)]
    used = total = sum(i.size for i in theirs)
    removals: list[Removal] = []
    if budget_bytes <= 0:
        return total, ()
    free = [i for i in theirs if not i.in_use and not pinned(i, node.pinned)]
    for image in sorted(free, key=_lru):
        if used <= budget_bytes:
            break
        removals.append(Removal(image, CUSTOM_LRU))
        used -= image.size
    return total, tuple(removals)


def known_sizes(entries: Sequence[CatalogEntry], nodes: Sequence[NodeFacts]) -> dict[str, int]:
    """slug -> the image's size on a node that holds it (the largest seen)."""
    sizes: dict[str, int] = {}
    for node in nodes:
        for image in node.images:
            for entry in entries:
                if image.size > 0 and holds(image, entry):
                    sizes[entry.slug] = max(sizes.get(entry.slug, 0), image.size)
    return sizes


def _lru(image: HeldImage) -> tuple[float, str]:
    return (image.last_used or image.created, image.id)


def plan_node(
    node: NodeFacts,
    chosen: Sequence[CatalogEntry],
    catalog: Catalog | Iterable[CatalogEntry],
    budget_bytes: int,
    sizes: Mapping[str, int] | None = None,
    custom_budget_bytes: int = 0,
) -> NodePlan:
    """One node's pulls and removals (see the module's docstring). ``budget_bytes`` <= 0
    means no budget: nothing of ours is removed and every chosen image is pulled.
    ``custom_budget_bytes``: the custom images' budget (<= 0: none, none removed); their
    patterns are ``catalog.allowed_image_patterns`` when ``catalog`` is a :class:`Catalog`."""
    sizes = sizes or {}
    patterns = catalog.allowed_image_patterns if isinstance(catalog, Catalog) else ()
    all_entries = [e for e in catalog if not e.custom and not e.saved_from]
    catalog_refs = frozenset(normal_reference(e.image) for e in all_entries)
    chosen_refs = {normal_reference(e.image) for e in chosen}
    mine = [i for i in node.images if ours(i, catalog_refs)]
    custom_used, custom_removals = sweep_custom(node, catalog_refs, patterns, custom_budget_bytes)
    used = sum(i.size for i in mine)
    unlimited = budget_bytes <= 0
    held = [e.slug for e in chosen if any(holds(i, e) for i in node.images)]
    skipped: dict[str, str] = {}
    wanted: list[CatalogEntry] = []
    for entry in chosen:
        if entry.slug in held:
            continue
        ok, reason = image_runs_on(entry, node.inventory)
        if not ok:
            skipped[entry.slug] = reason
        elif not node.schedulable:
            skipped[entry.slug] = f"{node.name}: drained, takes no servers"
        else:
            wanted.append(entry)

    def rank(image: HeldImage) -> int:
        return 1 if not _normal_refs(image) & chosen_refs else 2

    free = sorted(
        (i for i in mine if not i.in_use and not pinned(i, node.pinned)),
        key=lambda i: (rank(i), _lru(i)),
    )
    why = {1: "not chosen", 2: "least recently used"}
    removals: list[Removal] = []

    def remove_until(limit: int, ranks: tuple[int, ...]) -> None:
        nonlocal used
        for image in list(free):
            if used <= limit:
                return
            if rank(image) in ranks:
                free.remove(image)
                removals.append(Removal(image, why[rank(image)]))
                used -= image.size

    if not unlimited and used > budget_bytes:
        remove_until(budget_bytes, (1,))
        chosen_free = sum(i.size for i in free if rank(i) == 2)
        if used - chosen_free <= budget_bytes:  # a chosen one goes only if that is enough
            remove_until(budget_bytes, (2,))
    pulls: list[CatalogEntry] = []
    for entry in wanted:
        size = sizes.get(entry.slug)
        if unlimited:
            pulls.append(entry)
            continue
        if size is None:
            if used < budget_bytes:
                pulls.append(entry)
                used = budget_bytes  # nothing more this round: its size is unknown
            else:
                skipped[entry.slug] = f"{node.name}: over its disk budget"
            continue
        if used + size > budget_bytes:
            removable = sum(i.size for i in free if rank(i) < 2)
            if used - removable + size > budget_bytes:
                skipped[entry.slug] = (
                    f"{node.name}: {size / GIB:.1f} GiB does not fit its disk budget"
                )
                continue
            remove_until(budget_bytes - size, (1,))
        pulls.append(entry)
        used += size
    return NodePlan(
        node=node.name,
        pulls=tuple(pulls),
        removals=(*removals, *custom_removals),
        held=tuple(held),
        skipped=skipped,
        used_bytes=sum(i.size for i in mine),
        budget_bytes=budget_bytes,
        custom_used_bytes=custom_used,
        custom_budget_bytes=custom_budget_bytes,
    )


def plan(
    nodes: Sequence[NodeFacts],
    chosen: Sequence[CatalogEntry],
    catalog: Catalog | Iterable[CatalogEntry],
    budget_bytes: int,
    remembered: Mapping[str, int] | None = None,
    custom_budget_bytes: int = 0,
) -> dict[str, NodePlan]:
    """Every reachable node's plan (an unreachable one is planned at a later round).
    ``remembered``: slug -> size of images pulled before (none of the nodes may hold it
    now); a size seen on a node now wins. ``custom_budget_bytes``: see :func:`plan_node`."""
    entries = catalog if isinstance(catalog, Catalog) else list(catalog)
    sizes = {**(remembered or {}), **known_sizes(list(entries), nodes)}
    return {
        n.name: plan_node(n, chosen, entries, budget_bytes, sizes, custom_budget_bytes)
        for n in nodes
        if n.reachable
    }


__all__ = [
    "CATALOG_LABEL",
    "CUSTOM_LRU",
    "GIB",
    "HeldImage",
    "NodeFacts",
    "NodePlan",
    "Removal",
    "Selection",
    "choose_entries",
    "custom",
    "foreign",
    "holds",
    "in_registry",
    "known_sizes",
    "normal_reference",
    "ours",
    "parse_selection",
    "pinned",
    "plan",
    "plan_node",
    "sweep_custom",
]
