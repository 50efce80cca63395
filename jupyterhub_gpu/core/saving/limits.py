"""Per-user limits on saved images: how many, how large each, how large together. Pure.

Checked before a save starts (:func:`check_new_save`: the count, and a name the user
already uses), while the hub fetches the wheels and before it sends them anywhere
(:func:`allowance`: what the download and the wheels' unpacked size may reach), and after
the build, when the size is known and before anything is pushed (:func:`check_added_size`).
Messages give the numbers and say what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jupyterhub_gpu.core.saving.data import LimitReached, SavedImage


@dataclass(frozen=True)
class Limits:
    """The admin's limits per user; ``None`` means no limit."""

    max_images: int | None = 5
    max_image_bytes: int | None = 20 * 2**30
    max_total_bytes: int | None = 50 * 2**30


def size_text(n: int) -> str:
    """``1.5 GiB``, ``320 MiB``, ``12 KiB``: sizes for people (binary units)."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            value = n / factor
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} bytes"


def owned(images: Sequence[SavedImage], owner: str) -> list[SavedImage]:
    return [i for i in images if i.owner == owner]


def check_new_save(images: Sequence[SavedImage], owner: str, name: str, limits: Limits) -> None:
    """Raise :class:`LimitReached` when ``owner`` may not start saving ``name`` now."""
    mine = owned(images, owner)
    if any(i.name == name for i in mine):
        raise LimitReached(
            f"You already have a saved image named {name!r}; delete it first or choose "
            "another name."
        )
    if limits.max_images is not None and len(mine) >= limits.max_images:
        raise LimitReached(
            f"You have {len(mine)} saved images, the most this hub allows is "
            f"{limits.max_images}; delete one under My images before saving another."
        )
    used = sum(i.size_bytes for i in mine)
    if limits.max_total_bytes is not None and used >= limits.max_total_bytes:
        raise LimitReached(
            f"Your saved images take {size_text(used)}, the most this hub allows is "
            f"{size_text(limits.max_total_bytes)}; delete one before saving another."
        )


@dataclass(frozen=True)
class Allowance:
    """The most bytes a new saved image of one user may add (``None``: no limit), and
    which limit that is, for sentences: ``"the limit of 20 GiB a saved image may add"``."""

    bytes: int | None
    what: str = "no limit"


def allowance(images: Sequence[SavedImage], owner: str, limits: Limits) -> Allowance:
    """What ``owner``'s next saved image may add: the per-image limit, or what is left of
    the total when that is less. The hub bounds its download and the wheels' unpacked
    size by it (a wheel's files take at least their unpacked size in the image)."""
    per_image = limits.max_image_bytes
    left = None
    if limits.max_total_bytes is not None:
        used = sum(i.size_bytes for i in owned(images, owner))
        left = max(0, limits.max_total_bytes - used)
    if left is not None and (per_image is None or left < per_image):
        total = size_text(limits.max_total_bytes or 0)
        what = f"the {size_text(left)} left of the {total} your saved images may take"
        return Allowance(left, what)
    if per_image is not None:
        return Allowance(per_image, f"the limit of {size_text(per_image)} a saved image may add")
    return Allowance(None)


def check_added_size(images: Sequence[SavedImage], owner: str, added: int, limits: Limits) -> None:
    """Raise :class:`LimitReached` when a new image adding ``added`` bytes to its base
    is over the per-image limit or would put ``owner`` over the total."""
    if limits.max_image_bytes is not None and added > limits.max_image_bytes:
        raise LimitReached(
            f"Your environment adds {size_text(added)} to its base image, more than the "
            f"{size_text(limits.max_image_bytes)} a saved image may add; remove some "
            "packages and save again. Nothing was saved."
        )
    used = sum(i.size_bytes for i in owned(images, owner))
    if limits.max_total_bytes is not None and used + added > limits.max_total_bytes:
        raise LimitReached(
            f"This image ({size_text(added)}) and your saved images ({size_text(used)}) "
            f"would take more than the {size_text(limits.max_total_bytes)} this hub allows; "
            "delete a saved image and save again. Nothing was saved."
        )
