"""Reconciliation's decision is pure (core/reconciliation.py): a node's listing and its
holds as plain data in, what to adopt as orphans and what to free out."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.allocation import LabelledContainer
from jupyterhub_gpu.core.holds import Hold, NodeHolds
from jupyterhub_gpu.core.reconciliation import sort_listing, to_free

pytestmark = pytest.mark.unit

NODE = "gpu-a"


def _c(cid: str, holder: str, gpus: tuple[str, ...], running: bool = True) -> LabelledContainer:
    return LabelledContainer(NODE, cid * 32, holder, gpus, running, allocation=f"al-{cid}")


def test_a_listing_is_split_into_running_kept_and_stopped() -> None:
    found = [_c("a1", "alice/", ("GPU-a",)), _c("b1", "bob/", ("GPU-b",), running=False)]
    listing = sort_listing(found, hub_id="h", key=None, live=set(), pending=set())
    assert [c.holder for c in listing.running] == ["alice/"]
    assert listing.kept == listing.running and listing.doomed == ()  # no seal: never doomed
    assert listing.stopped == {"b1" * 32}


def test_what_no_container_backs_is_freed_and_nothing_newer_or_pending() -> None:
    old, new = 10.0, 30.0
    holds = NodeHolds(
        gpus=(
            ("GPU-a", Hold("alice/", NODE, since=old)),
            ("GPU-b", Hold("alice/", NODE, since=old)),  # extra: her labels list only a
            ("GPU-c", Hold("gone/", NODE, since=old)),  # stale: no container
            ("GPU-d", Hold("late/", NODE, since=new)),  # taken after the listing began
            ("GPU-e", Hold("spawning/", NODE, since=old)),  # a spawn in progress
            ("GPU-f", Hold("x/", NODE, since=old, allocation="al-o1", orphaned=True)),
            ("GPU-g", Hold("y/", NODE, since=old, allocation="al-o2", orphaned=True)),
        ),
        servers=(Hold("cpu-only/", NODE, since=old),),  # stale too: a server, no GPUs
    )
    found = [_c("a1", "alice/", ("GPU-a",)), _c("o2", "y/", ("GPU-g",))]
    listing = sort_listing(found, hub_id="h", key=None, live=set(), pending={"spawning/"})
    frees = to_free(listing, holds, pending={"spawning/"}, latest=20.0)
    assert [(c.holder, extra) for c, extra in frees.extra] == [("alice/", ("GPU-b",))]
    assert frees.stale == ("cpu-only/", "gone/")
    assert [h.key for h in frees.gone] == ["al-o1"]  # al-o2's container still runs


def test_the_holds_questions_filter_by_time_and_orphans() -> None:
    holds = NodeHolds(
        gpus=(
            ("GPU-a", Hold("a/", NODE, since=1.0)),
            ("GPU-b", Hold("a/", NODE, since=9.0)),
            ("GPU-c", Hold("b/", NODE, since=1.0, orphaned=True, allocation="k")),
        ),
        orphans=(Hold("c/", NODE, since=1.0, orphaned=True, allocation="m"),),
    )
    assert holds.held_on("a/", 5.0) == ["GPU-a"]
    assert holds.holders(5.0) == {"a/"}
    assert set(holds.orphans_by_key(5.0)) == {"k", "m"}
    assert holds.orphans_by_key(0.5) == {}
