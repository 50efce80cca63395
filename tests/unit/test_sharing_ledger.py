"""Shares in the ledger, the labels and the seal (issue 26): never more shares than the
GPU has, never a share beside a whole hold, and shares found again after a hub crash."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.accounting.report import ReportQuery, report
from jupyterhub_gpu.core.allocation import (
    SHARE_LABEL,
    SHARE_MEMORY_LABEL,
    Allocation,
    containers_from_docker,
    parse_share,
)
from jupyterhub_gpu.core.containers import server_labels
from jupyterhub_gpu.core.snapshot import SHARED
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.hub.ledger import GPULedger
from tests.unit.test_allocation import HUB, KEY, Engine, engine_cluster

pytestmark = pytest.mark.unit

WHEN = datetime(2026, 11, 26, tzinfo=UTC)


def shared_claim(owner: str, share: str = "1/4", gpu: str = "GPU-c0") -> Allocation:
    return Allocation(HUB, owner[0] * 32, owner, "", "node-c", (gpu,), share, 6144)


# -- the ledger ----------------------------------------------------------------------------


def test_the_last_share_goes_to_one_spawn_only() -> None:
    ledger = GPULedger()
    ledger.reserve_share("a/", "n1", "g0", (2, 4))
    ledger.reserve_share("b/", "n1", "g0", (1, 4))
    ledger.reserve_share("c/", "n1", "g0", (1, 4))  # the last share
    with pytest.raises(KeyError, match="0 of 4 shares free, 1 asked"):
        ledger.reserve_share("d/", "n1", "g0", (1, 4))  # the racing spawn is refused
    assert ledger.share_use() == {"g0": 4}
    assert ledger.allocations() == {"g0": SHARED}


def test_shares_and_whole_holds_never_mix() -> None:
    ledger = GPULedger()
    ledger.reserve("w/", "n1", ["g0"])
    with pytest.raises(KeyError, match="held whole by w/"):
        ledger.reserve_share("a/", "n1", "g0", (1, 4))
    ledger.reserve_share("a/", "n1", "g1", (1, 4))
    with pytest.raises(KeyError, match="is shared"):
        ledger.reserve("w/", "n1", ["g1"])
    with pytest.raises(KeyError, match="other shares than 2"):
        ledger.reserve_share("b/", "n1", "g1", (1, 2))


def test_release_orphan_and_charges_of_shares() -> None:
    ledger = GPULedger()
    ledger.reserve_share("a/", "n1", "g0", (1, 4), allocation="A")
    ledger.reserve_share("b/", "n1", "g0", (3, 4), allocation="B")
    assert sorted(ledger.charged_shares()) == [("g0", "a/", 0.25), ("g0", "b/", 0.75)]
    assert ledger.held_by("a/") == ["g0"] and ledger.holders_on("n1") == {"a/", "b/"}
    ledger.orphan("a/")  # its stop could not reach the node: still held, charged to nobody
    assert ledger.share_use() == {"g0": 4}
    assert ledger.charged_shares() == [("g0", "b/", 0.75)]
    assert list(ledger.orphans_on("n1")) == ["A"]
    assert ledger.release("b/") == ["g0"]
    assert ledger.allocations() == {"g0": SHARED}  # the orphan's share still holds it
    assert ledger.release_orphan("A") == ["g0"]
    assert ledger.allocations() == {} and ledger.share_use() == {}


def test_adopting_twice_is_idempotent_and_over_commit_is_a_conflict() -> None:
    ledger = GPULedger()
    assert ledger.adopt_share("a/", "n1", "g0", (3, 4), "A")
    assert ledger.adopt_share("a/", "n1", "g0", (3, 4), "A")  # the next round: same hold
    assert not ledger.adopt_share("b/", "n1", "g0", (2, 4), "B")  # 3 + 2 > 4
    assert ledger.adopt("w/", "n1", ["g0"]) == ["g0"]  # whole on a shared GPU: conflict
    assert ledger.share_use() == {"g0": 3}


# -- labels and seal -----------------------------------------------------------------------


def test_a_share_is_labelled_and_sealed() -> None:
    claim = shared_claim("alice")
    labels = server_labels(claim, "img", WHEN, KEY)
    assert labels[SHARE_LABEL] == "1/4" and labels[SHARE_MEMORY_LABEL] == "6144"
    assert labels["jupyterhub-gpu.gpus"] == "GPU-c0"
    (found,) = containers_from_docker("node-c", [{"Id": "x", "State": "running", "Labels": labels}])
    assert found.shares == (1, 4) and found.share_memory_mib == 6144
    assert found.claim(HUB).sealed_by(KEY, labels["jupyterhub-gpu.seal"])
    # the share is sealed: a container relabelled to a bigger share no longer verifies
    bigger = Allocation(HUB, claim.id, "alice", "", "node-c", ("GPU-c0",), "3/4", 6144)
    assert not bigger.sealed_by(KEY, labels["jupyterhub-gpu.seal"])
    whole = server_labels(Allocation(HUB, "w" * 32, "w", "", "node-c", ("GPU-c1",)), "i", WHEN, KEY)
    assert whole[SHARE_LABEL] == whole[SHARE_MEMORY_LABEL] == ""  # written empty: ours alone


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("1/4", (1, 4)), ("4/4", (4, 4)), ("0/4", None), ("5/4", None), ("a/4", None), ("1", None)],
)
def test_share_labels_are_parsed_strictly(text: str, parsed: tuple[int, int] | None) -> None:
    assert parse_share(text) == parsed


# -- a hub crash ---------------------------------------------------------------------------


def _docker(claim: Allocation, cid: str) -> dict[str, Any]:
    return {"Id": cid, "State": "running", "Labels": server_labels(claim, "img", WHEN, KEY)}


def test_a_restarted_hub_finds_its_shares_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After a crash the ledger is empty: the live servers' share containers are adopted as
    shares (the GPU stays shared, 2 of 4 held), never as whole GPUs and never lost."""
    alice, bob = shared_claim("alice"), shared_claim("bob")
    engine = Engine([_docker(alice, "a"), _docker(bob, "b")])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.place_server("alice/", "node-c", alice.id)  # load_state of both servers
    cluster.ledger.place_server("bob/", "node-c", bob.id)
    asyncio.run(cluster.reconcile())
    assert engine.removed == []
    assert cluster.ledger.allocations() == {"GPU-c0": SHARED}
    assert cluster.ledger.share_use() == {"GPU-c0": 2}
    assert sorted(h.holder for h in cluster.ledger.shares_on("GPU-c0")) == ["alice/", "bob/"]


def test_an_interrupted_share_spawn_is_removed_and_its_share_freed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    alice, bob = shared_claim("alice"), shared_claim("bob", "3/4")
    engine = Engine([_docker(alice, "a"), _docker(bob, "b")])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.place_server("bob/", "node-c", bob.id)  # alice's spawn never finished
    with caplog.at_level(logging.INFO):
        asyncio.run(cluster.reconcile())
    assert engine.removed == ["a"]
    assert cluster.ledger.share_use() == {"GPU-c0": 3}


# -- accounting ----------------------------------------------------------------------------


def test_a_share_is_charged_its_fraction_of_gpu_hours(tmp_path: Path) -> None:
    """A quarter of a GPU held 4 h is 1 GPU-hour, through the store (migration 0004) and
    the report, beside a whole GPU held 1 h."""
    store = AccountingStore(f"sqlite:///{tmp_path / 'acc.sqlite'}")
    store.upgrade()
    start = datetime(2026, 11, 2, 8, tzinfo=UTC)
    quarter = AllocationRecord(
        "q1", "ann", "", "ml", "n1", ("g0",), "RTX", "img", "12.4", started_at=start,
        gpu_fraction=0.25,
    )  # fmt: skip
    whole = AllocationRecord(
        "w1", "bob", "", "ml", "n1", ("g1",), "RTX", "img", "12.4", started_at=start
    )
    assert quarter.gpu_amount == 0.25 and whole.gpu_amount == 1.0
    store.open(quarter)
    store.open(whole)
    store.close("q1", start + timedelta(hours=4), EndReason.STOPPED)
    store.close("w1", start + timedelta(hours=1), EndReason.STOPPED)
    intervals = store.intervals(datetime(2026, 11, 1), datetime(2026, 12, 1))
    assert sorted(i.gpus for i in intervals) == [0.25, 1.0]
    query = ReportQuery(start=datetime(2026, 11, 1), end=datetime(2026, 12, 1), by=("user",))
    rows = report(intervals, query, datetime(2026, 11, 24))
    assert {r.keys: r.gpu_hours_allocated for r in rows} == {("ann",): 1.0, ("bob",): 1.0}
