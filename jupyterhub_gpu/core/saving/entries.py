"""Saved images as spawn-form choices: "My images" (docs/my-images.md). Pure.

A saved image is offered as a catalog entry of its own, made from the catalog entry it
was built on: the same CUDA version, driver minimum, compute-capability range and groups,
so placement keeps every rule of the catalog; only the slug (``saved:<owner>/<name>``),
the name shown and the image reference (pinned by digest) differ. An image whose base
left the catalog can't be placed safely (nothing says which drivers it needs): it is
listed with that reason and can still be deleted.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from jupyterhub_gpu.core.catalog.entries import Catalog, CatalogEntry
from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.saving.limits import size_text
from jupyterhub_gpu.core.words import moment

PREFIX = "saved:"


def saved_slug(owner: str, name: str) -> str:
    """The spawn option ``image`` that chooses ``owner``'s saved image ``name``."""
    return f"{PREFIX}{owner}/{name}"


def is_saved_slug(slug: object) -> bool:
    return isinstance(slug, str) and slug.startswith(PREFIX)


@dataclass(frozen=True)
class Unlisted:
    """A saved image the user can see but not start, and why."""

    slug: str
    display_name: str
    reason: str


def visible(images: Sequence[SavedImage], user: str, groups: Collection[str]) -> list[SavedImage]:
    """The saved images ``user`` may see and start: their own first, then those shared
    with one of ``groups``, each by name."""
    own = [i for i in images if i.owner == user]
    shared = [i for i in images if i.owner != user and i.visible_to(user, groups)]
    return sorted(own, key=lambda i: i.name) + sorted(shared, key=lambda i: (i.owner, i.name))


def display_name(image: SavedImage, user: str, base: str) -> str:
    who = "" if image.owner == user else f", {image.owner}'s"
    return f"My image: {image.name}{who} (from {base})"


def describe(image: SavedImage) -> str:
    names = [p.split(":", 1)[-1] for p in image.packages]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    when = moment(image.created.timestamp())  # the form shows it in the reader's zone
    return f"Saved {when}, adds {size_text(image.size_bytes)}: {shown or 'no packages'}."


def saved_entries(
    catalog: Catalog, images: Sequence[SavedImage], user: str, groups: Collection[str]
) -> tuple[tuple[CatalogEntry, ...], tuple[Unlisted, ...]]:
    """The catalog entries of the saved images ``user`` may start, and those they see
    but can't start (their base left the catalog, or its groups exclude them)."""
    entries: list[CatalogEntry] = []
    unlisted: list[Unlisted] = []
    for image in visible(images, user, groups):
        slug = saved_slug(image.owner, image.name)
        base = catalog.get(image.base_slug)
        if base is None or base.custom:
            unlisted.append(
                Unlisted(
                    slug,
                    display_name(image, user, image.base_slug),
                    f"its base image {image.base_slug!r} is no longer in the catalog, so the "
                    "hub can't tell which nodes can run it; delete it under My images, or "
                    "ask your admin",
                )
            )
            continue
        if not base.allowed_for(groups):
            unlisted.append(
                Unlisted(
                    slug,
                    display_name(image, user, base.display_name),
                    f"its base image {base.display_name} is not available to your groups",
                )
            )
            continue
        entries.append(
            replace(
                base,
                slug=slug,
                display_name=display_name(image, user, base.display_name),
                image=image.pinned,
                description=describe(image),
                build=None,
                saved_from=base.slug,
                saved_at=image.created.timestamp(),
            )
        )
    return tuple(entries), tuple(unlisted)


def with_saved(catalog: Catalog, entries: Sequence[CatalogEntry]) -> Catalog:
    """``catalog`` with ``entries`` after its own (what the form and validation use)."""
    return replace(catalog, entries=(*catalog.entries, *entries))


def base_of(catalog: Catalog, slug: str) -> CatalogEntry | None:
    """The catalog entry a server's image option stands on (itself, or a saved image's
    base), for saving again from a server that runs a saved image."""
    entry = catalog.get(slug)
    if entry is None:
        return None
    return catalog.get(entry.saved_from) if entry.saved_from else entry
