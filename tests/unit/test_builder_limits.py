"""Per-user limits on saved images, and who sees a saved image (pure)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.core.saving.data import LimitReached, SavedImage
from jupyterhub_gpu.core.saving.limits import Limits, check_added_size, check_new_save, size_text

pytestmark = pytest.mark.unit
GIB = 2**30


def image(owner: str, name: str, size: int = GIB, shared_with: str | None = None) -> SavedImage:
    return SavedImage(
        owner=owner,
        name=name,
        base_slug="python-cpu",
        base_image="reg/x:1",
        reference=f"reg/saved/u-{owner}/{name}:t",
        packages=(),
        size_bytes=size,
        created=datetime(2026, 11, 24, tzinfo=timezone.utc),
        shared_with=shared_with,
    )


IMAGES = [image("alice", "a"), image("alice", "b", 3 * GIB), image("bob", "a", 40 * GIB)]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1536 * 2**20, "1.5 GiB"),
        (320 * 2**20, "320 MiB"),
        (50 * GIB, "50 GiB"),
    ],
)
def test_sizes_for_people(n: int, text: str) -> None:
    assert size_text(n) == text


@pytest.mark.parametrize(
    ("owner", "name", "limits", "match"),
    [
        ("alice", "c", Limits(max_images=3), None),
        (
            "alice",
            "c",
            Limits(max_images=2),
            "You have 2 saved images, the most this hub allows is 2",
        ),
        ("alice", "a", Limits(), "already have a saved image named 'a'"),
        (
            "bob",
            "b",
            Limits(max_total_bytes=40 * GIB),
            "take 40 GiB, the most this hub allows is 40 GiB",
        ),
        ("bob", "b", Limits(max_images=None, max_total_bytes=None), None),
        ("carol", "a", Limits(max_images=1), None),  # bob's 'a' is not carol's
    ],
)
def test_a_new_save(owner: str, name: str, limits: Limits, match: str | None) -> None:
    if match is None:
        check_new_save(IMAGES, owner, name, limits)
    else:
        with pytest.raises(LimitReached, match=match):
            check_new_save(IMAGES, owner, name, limits)


@pytest.mark.parametrize(
    ("added", "limits", "match"),
    [
        (GIB, Limits(max_image_bytes=2 * GIB, max_total_bytes=5 * GIB), None),
        (
            3 * GIB,
            Limits(max_image_bytes=2 * GIB),
            "adds 3.0 GiB to its base image, more than the 2.0 GiB",
        ),
        (
            2 * GIB,
            Limits(max_image_bytes=None, max_total_bytes=5 * GIB),
            r"This image \(2.0 GiB\) and your saved images \(4.0 GiB\) "
            r"would take more than the 5.0 GiB",
        ),
        (10**15, Limits(max_image_bytes=None, max_total_bytes=None), None),
    ],
)
def test_the_size_after_the_build(added: int, limits: Limits, match: str | None) -> None:
    if match is None:
        check_added_size(IMAGES, "alice", added, limits)
    else:
        with pytest.raises(LimitReached, match=match) as e:
            check_added_size(IMAGES, "alice", added, limits)
        assert str(e.value).endswith("Nothing was saved.")


@pytest.mark.parametrize(
    ("img", "user", "groups", "visible"),
    [
        (image("alice", "a"), "alice", [], True),
        (image("alice", "a"), "bob", ["lab"], False),
        (image("alice", "a", shared_with="lab"), "bob", ["lab"], True),
        (image("alice", "a", shared_with="lab"), "bob", ["lab2", "la"], False),
        (image("alice", "a", shared_with="lab"), "carol", [], False),
    ],
)
def test_who_sees_a_saved_image(
    img: SavedImage, user: str, groups: list[str], visible: bool
) -> None:
    assert img.visible_to(user, groups) is visible


def test_the_allowance_of_a_new_image_is_the_smaller_of_the_two_limits() -> None:
    from jupyterhub_gpu.core.saving.limits import Allowance, allowance

    limits = Limits(max_image_bytes=20 * GIB, max_total_bytes=50 * GIB)
    assert allowance(IMAGES, "alice", limits) == Allowance(
        20 * GIB, "the limit of 20 GiB a saved image may add"
    )
    assert allowance(IMAGES, "bob", limits) == Allowance(
        10 * GIB, "the 10 GiB left of the 50 GiB your saved images may take"
    )
    assert allowance(IMAGES, "bob", Limits(max_image_bytes=None, max_total_bytes=40 * GIB)) == (
        Allowance(0, "the 0 bytes left of the 40 GiB your saved images may take")
    )
    assert allowance(IMAGES, "bob", Limits(max_image_bytes=None, max_total_bytes=None)) == (
        Allowance(None)
    )
